"""dlbridge on its own: constructors, layout, Go-side operations, views,
errors, and the buffer protocol (no NumPy or PyTorch needed)."""

import array
import gc

import pytest

import dlbridge

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_zeros_fill_sum(dtype):
    with dlbridge.zeros((2, 3), dtype=dtype) as t:
        assert t.shape == (2, 3)
        assert t.strides == (3, 1)
        assert t.dtype == dtype
        assert t.device == "cpu"
        assert t.ndim == 2 and t.size == 6 and len(t) == 2
        assert t.data_ptr() != 0
        assert not t.readonly
        assert t.sum() == 0
        t.fill_(1)
        assert t.sum() == 6
        assert t.tolist() == [[1, 1, 1], [1, 1, 1]]


def test_sum_types():
    assert dlbridge.arange(5, dtype="int64").sum() == 10
    assert isinstance(dlbridge.arange(5, dtype="int32").sum(), int)
    assert isinstance(dlbridge.arange(5, dtype="float32").sum(), float)
    assert dlbridge.zeros(3, dtype="complex64").fill_(1 + 2j).sum() == 3 + 6j
    assert dlbridge.zeros(4, dtype="bool").fill_(True).sum() == 4
    big = dlbridge.zeros(2, dtype="int64").fill_(2**62)
    assert big.sum() == -(2**63)  # wraps at 64 bits like NumPy
    assert dlbridge.zeros(2, dtype="uint64").fill_(2**64 - 1).tolist() == [2**64 - 1] * 2


def test_float16_bfloat16_rounding():
    assert dlbridge.zeros(1, dtype="float16").fill_(1 / 3).tolist() == [0.333251953125]
    assert dlbridge.zeros(1, dtype="bfloat16").fill_(1 / 3).tolist() == [0.333984375]
    assert dlbridge.zeros(1, dtype="float16").fill_(1e6).tolist() == [float("inf")]


def test_arange_default_int64():
    t = dlbridge.arange(4)
    assert t.dtype == "int64"
    assert t.tolist() == [0, 1, 2, 3]


def test_dtype_spellings():
    assert dlbridge.zeros(1, dtype="f32").dtype == "float32"
    assert dlbridge.zeros(1, dtype=float).dtype == "float64"
    assert dlbridge.zeros(1, dtype="torch.bfloat16").dtype == "bfloat16"
    assert dlbridge.empty(1, dtype="float8_e4m3fn").dtype == "float8_e4m3fn"


def test_zero_d_and_zero_size():
    t = dlbridge.zeros((), dtype="float64")
    assert t.shape == () and t.strides == () and t.size == 1
    t.fill_(2.5)
    assert t.sum() == 2.5 and t.tolist() == 2.5 and t.item() == 2.5
    e = dlbridge.zeros((3, 0, 2))
    assert e.size == 0 and e.sum() == 0 and e.tolist() == [[], [], []]
    e.fill_(1)  # nothing to write
    assert e[1:].shape == (2, 0, 2)


def test_slicing_is_zero_copy():
    t = dlbridge.arange(12, dtype="int32")
    m = t[2:10:3]
    assert m.shape == (3,) and m.strides == (3,)
    assert m.data_ptr() == t.data_ptr() + 2 * 4
    assert m.tolist() == [2, 5, 8]
    m.fill_(-1)
    assert t.tolist() == [0, 1, -1, 3, 4, -1, 6, 7, -1, 9, 10, 11]
    r = t[::-1]
    assert r.strides == (-1,) and r.tolist()[0] == 11
    assert t[-1].shape == () and t[-1].item() == 11
    assert t[None, 3:5].shape == (1, 2)
    assert t[...].shape == (12,)
    assert t[100:].shape == (0,)


def test_2d_views():
    z = dlbridge.zeros((2, 3), dtype="float32")
    z[0].copy_(dlbridge.arange(3, dtype="int64"))  # int64 -> float32
    assert z[0].tolist() == [0, 1, 2]
    zt = z.T
    assert zt.shape == (3, 2) and zt.strides == (1, 3)
    assert not zt.is_contiguous()
    assert zt.data_ptr() == z.data_ptr()
    assert zt[1, 0].item() == 1
    assert z.transpose(0, 1).strides == (1, 3)
    assert z.permute(1, 0).shape == (3, 2)
    col = z[:, 1]
    assert col.strides == (3,) and col.tolist() == [1, 0]
    col.fill_(9)
    assert z.tolist() == [[0, 9, 2], [0, 9, 0]]
    z[1, 2] = 5
    z[0] = 7
    assert z.tolist() == [[7, 7, 7], [0, 9, 5]]


def test_copy_and_to():
    src = dlbridge.arange(6, dtype="float64")
    dst = dlbridge.empty(6, dtype="int16")
    dst.copy_(src)
    assert dst.tolist() == [0, 1, 2, 3, 4, 5]
    c = src.to("cpu", copy=True)
    assert c.data_ptr() != src.data_ptr() and c.tolist() == src.tolist()
    assert src.to("cpu") is src
    # An overlapping copy behaves as if the source were read first.
    r = dlbridge.arange(5, dtype="int32")
    r.copy_(r[::-1])
    assert r.tolist() == [4, 3, 2, 1, 0]
    # Strided and converting: float32 into a transposed complex128 view.
    src = dlbridge.zeros((3, 2), dtype="float32")
    src[:, 0] = 1
    src[:, 1] = 2
    t = dlbridge.zeros((2, 3), dtype="complex128")
    t.T.copy_(src)
    assert t.tolist() == [[1, 1, 1], [2, 2, 2]]


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: dlbridge.zeros(3, dtype="float33"), TypeError, "float33"),
        (lambda: dlbridge.zeros(3, dtype="quaternion"), TypeError, "unknown dtype"),
        (lambda: dlbridge.zeros((2, -1)), ValueError, "shape[1]=-1 out of range"),
        (lambda: dlbridge.zeros(3, device="tpu"), ValueError, "unknown device"),
        (lambda: dlbridge.zeros(3, device="cpu:1"), ValueError, "cpu"),
        (lambda: dlbridge.zeros((1,) * 65), ValueError, "at most 64"),
        (lambda: dlbridge.arange(-1), ValueError, "n must be >= 0"),
        (lambda: dlbridge.arange(3)[5], IndexError, "out of bounds"),
        (lambda: dlbridge.arange(3)[0, 0], IndexError, "too many indices"),
        (lambda: dlbridge.arange(3)[1.5], TypeError, "valid indices"),
        (lambda: dlbridge.arange(3)[::0], ValueError, "step cannot be zero"),
        (lambda: dlbridge.zeros(3).fill_("x"), TypeError, "number"),
        (lambda: dlbridge.zeros(3).copy_(dlbridge.zeros(4)), ValueError,
         "dlbridge: copy_: argument self: want [4] writable; got float32 [3] C/F cpu writable: shape[0] (3 != 4)"),
        (lambda: dlbridge.empty(2, dtype="float8_e4m3fn").sum(), TypeError, "does not support dtype"),
        (lambda: dlbridge.zeros((2, 2)).transpose(0, 5), IndexError, "out of range"),
        (lambda: dlbridge.zeros((2, 2)).permute(0, 0), ValueError, "twice"),
        (lambda: dlbridge.zeros(3).to("cuda:7"), BufferError, "cuda"),
        (lambda: dlbridge.asarray(object()), TypeError, "supports none of"),
        (lambda: dlbridge.from_dlpack(42), TypeError, "no __dlpack__"),
    ],
)
def test_errors(call, exc, words):
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value)


def test_closed_tensor():
    t = dlbridge.zeros(3)
    v = t[1:]
    t.close()
    t.close()  # idempotent
    assert t.closed
    with pytest.raises(ValueError, match="closed"):
        t.sum()
    with pytest.raises(ValueError, match="closed"):
        t.__dlpack__()
    # The view keeps the memory: still usable.
    assert v.fill_(1).sum() == 2


def test_no_cuda_means_clear_errors():
    if dlbridge.cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        dlbridge.zeros(3, device="cuda")


def test_buffer_protocol_import_is_zero_copy():
    a = array.array("d", [1.0, 2.0, 3.0])
    t = dlbridge.asarray(a)
    assert t.dtype == "float64" and t.shape == (3,)
    assert t.data_ptr() == a.buffer_info()[0]
    t.fill_(4)
    assert a.tolist() == [4.0, 4.0, 4.0]
    a[1] = 7
    assert t.sum() == 15.0

    b = bytearray(b"\x01\x02\x03")
    tb = dlbridge.asarray(b)
    assert tb.dtype == "uint8" and tb.tolist() == [1, 2, 3]
    tb[0] = 9
    assert b[0] == 9

    ro = dlbridge.asarray(b"abc")
    assert ro.readonly and ro.tolist() == [97, 98, 99]
    with pytest.raises(ValueError, match="read-only"):
        ro.fill_(0)

    m = memoryview(bytearray(24)).cast("i", (2, 3))
    tm = dlbridge.asarray(m)
    assert tm.shape == (2, 3) and tm.dtype == "int32"
    nc = dlbridge.asarray(memoryview(array.array("h", range(10)))[::3])
    assert nc.strides == (3,) and nc.tolist() == [0, 3, 6, 9]


def test_buffer_keeps_owner_alive(stats):
    a = array.array("f", [1, 2])
    t = dlbridge.asarray(a)
    with pytest.raises(BufferError):
        a.append(3.0)  # the export pins the array's buffer
    del a
    gc.collect()
    assert t.tolist() == [1.0, 2.0]
    t.close()


def test_memoryview_export():
    t = dlbridge.arange(6, dtype="int32")
    mv = t.memoryview()
    assert mv.format == "i" and mv.shape == (6,)
    mv[2] = 42
    assert t[2].item() == 42
    t.fill_(1)
    assert mv.tolist() == [1] * 6
    t.close()  # the memoryview's pin keeps the memory
    assert mv.tolist() == [1] * 6
    with pytest.raises(BufferError, match="contiguous"):
        dlbridge.zeros((2, 2)).T.memoryview()
    back = dlbridge.asarray(dlbridge.zeros((2, 3)).memoryview())
    assert back.shape == (2, 3)


def test_handles_are_released(stats):
    before = stats()
    ts = [dlbridge.zeros((4, 4)) for _ in range(10)]
    views = [t[1:, ::2].T for t in ts]
    assert stats()["live_tensors"] == before["live_tensors"] + 20
    del ts, views
    assert stats()["live_tensors"] == before["live_tensors"]


def test_own_roundtrip_through_dlpack(stats):
    before = stats()
    t = dlbridge.arange(5, dtype="float32")
    u = dlbridge.from_dlpack(t)
    assert u.data_ptr() == t.data_ptr()
    assert stats()["live_exports"] == before["live_exports"] + 1
    u.fill_(3)
    assert t.sum() == 15
    u.close()
    after = stats()
    assert after["live_exports"] == before["live_exports"]
    assert after["deleter_calls"] == before["deleter_calls"] + 1


def test_threads_share_tensors(stats):
    import threading

    before = stats()
    base = dlbridge.zeros((64,), dtype="int64")
    errors = []

    def work(k):
        try:
            for i in range(300):
                v = base[k::8]
                u = dlbridge.from_dlpack(v.__dlpack__(max_version=(1, 0)))
                u.fill_(k)
                assert u.sum() == 8 * k
                u.close()
                v.close()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert base.sum() == 8 * sum(range(8))
    base.close()
    s = stats()
    assert s["live_tensors"] == before["live_tensors"]
    assert s["live_exports"] == before["live_exports"]
