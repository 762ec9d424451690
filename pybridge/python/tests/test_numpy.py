"""Zero-copy exchange with NumPy (1.24 in CI: legacy capsules only, and
from_dlpack arrays are read-only there; NumPy 2 on the GPU machine)."""

import gc
import sys

import pytest

import dlbridge

np = pytest.importorskip("numpy")

NP_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "float32", "float64", "complex64", "complex128"]


def _numpy_dlpack_supports(dtype):
    try:
        np.from_dlpack(np.zeros(1, dtype=dtype))
        return True
    except (BufferError, RuntimeError, TypeError):
        return False


def _sample(dtype, n=6):
    return (np.arange(n) % 2 == 1) if dtype == "bool" else np.arange(n).astype(dtype)


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_go_to_numpy_via_array_interface(dtype):
    t = dlbridge.zeros((2, 3), dtype=dtype)
    a = np.asarray(t)
    assert a.dtype == np.dtype(dtype) and a.shape == (2, 3)
    assert a.ctypes.data == t.data_ptr()
    a[...] = 1  # NumPy writes, Go sees
    assert t.sum() == 6
    t.fill_(0)  # Go writes, NumPy sees
    assert not a.any()


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_go_to_numpy_via_dlpack(dtype):
    if not _numpy_dlpack_supports(dtype):
        pytest.skip("NumPy %s cannot take %s through DLPack" % (np.__version__, dtype))
    t = dlbridge.zeros((2, 3), dtype=dtype)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype) and a.shape == (2, 3)
    assert a.ctypes.data == t.data_ptr()
    t.fill_(1)
    assert a.sum() == 6
    if a.flags.writeable:  # NumPy >= 1.25 gives writeable arrays
        a[...] = 0
        assert t.sum() == 0


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_numpy_to_go(dtype):
    a = _sample(dtype)
    t = dlbridge.asarray(a)  # DLPack, or the array interface where NumPy refuses DLPack
    assert t.dtype == dtype and t.shape == (6,)
    assert t.data_ptr() == a.ctypes.data
    assert t.tolist() == a.tolist()
    t.fill_(1)  # Go writes, NumPy sees
    assert (a == 1).all()
    a[...] = 0  # NumPy writes, Go sees
    assert t.sum() == 0


@pytest.mark.parametrize("dtype", [d for d in NP_DTYPES if d != "bool"])
def test_numpy_to_go_via_dlpack(dtype):
    a = _sample(dtype)
    t = dlbridge.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    assert t.tolist() == a.tolist()


def test_non_contiguous_numpy_to_go():
    base = np.arange(24.0).reshape(4, 6)
    for view in (base[::2, 1::2], base.T, base[:, ::-2], base[1:3, 2:5].T):
        t = dlbridge.asarray(view)
        assert t.strides == tuple(s // 8 for s in view.strides)
        assert t.data_ptr() == view.__array_interface__["data"][0]
        assert t.tolist() == view.tolist()
    v = base[::2, 1::2]
    dlbridge.from_dlpack(v).fill_(-1)
    assert (base[::2, 1::2] == -1).all() and base[1, 1] == 7


def test_non_contiguous_go_to_numpy():
    t = dlbridge.arange(24, dtype="float32")
    m = dlbridge.zeros((4, 6), dtype="float32")
    for i in range(4):
        m[i].copy_(t[i * 6:(i + 1) * 6])
    for view in (m[::2, 1::2], m.T, m[:, ::-2], m[1:3, 2:5].T):
        a = np.asarray(view)
        assert a.strides == tuple(s * 4 for s in view.strides)
        assert a.ctypes.data == view.data_ptr()
        assert a.tolist() == view.tolist()
        if all(s >= 0 for s in view.strides):
            b = np.from_dlpack(view)
            assert b.ctypes.data == view.data_ptr() and b.tolist() == view.tolist()


def test_zero_d_and_zero_size():
    for shape in ((), (0,), (3, 0), (0, 2, 2)):
        t = dlbridge.zeros(shape, dtype="float64")
        assert np.from_dlpack(t).shape == shape
        assert np.asarray(t).shape == shape
        a = np.zeros(shape)
        u = dlbridge.from_dlpack(a)
        assert u.shape == shape and u.sum() == 0
    s = dlbridge.zeros((), dtype="int32").fill_(7)
    assert np.asarray(s)[()] == 7 and np.from_dlpack(s)[()] == 7


def test_readonly_numpy():
    a = np.arange(3.0)
    a.flags.writeable = False
    t = dlbridge.asarray(a)
    assert t.readonly and t.data_ptr() == a.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        t.fill_(1)
    b = np.asarray(t)
    assert not b.flags.writeable
    c = np.from_dlpack(t) if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else None
    if c is not None:
        assert not c.flags.writeable


def test_numpy_keeps_go_memory_alive(stats):
    before = stats()
    t = dlbridge.arange(4, dtype="int64")
    a = np.from_dlpack(t)
    b = np.asarray(t)
    ptr = t.data_ptr()
    t.close()
    del t
    gc.collect()
    assert a.tolist() == [0, 1, 2, 3] and b.ctypes.data == ptr
    assert stats()["live_exports"] == before["live_exports"] + 1
    del a
    s = stats()
    assert s["live_exports"] == before["live_exports"]
    assert s["deleter_calls"] == before["deleter_calls"] + 1
    assert b.tolist() == [0, 1, 2, 3]
    del b
    assert stats()["live_tensors"] == before["live_tensors"]


def test_go_keeps_numpy_memory_alive():
    a = np.arange(5.0)
    rc = sys.getrefcount(a)
    t = dlbridge.from_dlpack(a)
    assert sys.getrefcount(a) > rc
    u = t[1:]
    t.close()
    assert sys.getrefcount(a) > rc  # the view still holds it
    u.close()
    assert sys.getrefcount(a) == rc  # NumPy's deleter ran, with the GIL
    i = dlbridge.asarray(a.T)  # array interface: holds a reference too
    del i
    gc.collect()
    assert sys.getrefcount(a) == rc


def test_roundtrip_numpy_go_numpy():
    a = np.arange(6, dtype=np.int32)
    back = np.asarray(dlbridge.asarray(a))
    assert back.ctypes.data == a.ctypes.data
    back[0] = 100
    assert a[0] == 100


def _layouts(dtype):
    """NumPy arrays of one dtype in the layouts copy_ meets: contiguous,
    sliced, reversed, transposed, 0-d, empty, read-only."""
    base = _sample(dtype, 24).reshape(4, 6)
    ro = base.copy()
    ro.flags.writeable = False
    return {"contiguous": base, "every_other": base[:, ::2], "reversed": base[::-1, ::-3],
            "transposed": base.T, "0-d": np.array(base[1, 2]), "empty": base[:0], "read-only": ro}


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_copy_from_numpy_takes_the_buffer_and_matches(dtype):
    # Tensor.copy_(ndarray) reads the array through the buffer protocol in
    # one call (the extension's copy_host), not through a DLPack import:
    # every layout lands exactly as NumPy's own assignment puts it, also
    # converted into another dtype.
    core = dlbridge._lib._core
    for name, a in _layouts(dtype).items():
        for dst_dtype in (dtype, "float64"):
            if dtype.startswith("complex") and dst_dtype == "float64":
                continue  # a complex source needs a complex destination
            dst = dlbridge.zeros(a.shape, dtype=dst_dtype)
            assert dst.copy_(a) is dst
            want = np.zeros(a.shape, dtype=dst_dtype)
            want[...] = a
            assert np.array_equal(np.asarray(dst), want), (name, dst_dtype)
            again = dlbridge.zeros(a.shape, dtype=dst_dtype)  # the buffer path took it, not asarray
            assert core.copy_host(again, a, None) is None, name
            assert np.array_equal(np.asarray(again), want), (name, dst_dtype)


def test_copy_from_numpy_leaves_the_unusual_to_asarray():
    # What the buffer path does not take goes the general way, which has
    # the error messages: a subclass, another byte order, a dtype without a
    # dlbridge counterpart, a non-array buffer.
    copy_host = dlbridge._lib._core.copy_host
    dst = dlbridge.zeros(6, dtype="float32")

    class Sub(np.ndarray):
        pass

    swapped = np.arange(6, dtype=">f4")
    for src in (np.arange(6, dtype=np.float32).view(Sub), swapped, bytearray(24),
                np.zeros(6, dtype="datetime64[s]"), np.zeros(6, dtype=np.longdouble)):
        assert copy_host(dst, src, None) is NotImplemented, type(src)
    with pytest.raises(TypeError, match="big-endian"):  # asarray's message
        dst.copy_(swapped)
    dst.copy_(np.arange(6, dtype=np.float32).view(Sub))  # a subclass goes through asarray
    assert np.array_equal(np.asarray(dst), np.arange(6, dtype=np.float32))
    with pytest.raises(ValueError, match=r"copy_.*shape"):
        dst.copy_(np.zeros(5, dtype=np.float32))
    with pytest.raises((TypeError, ValueError, BufferError)):
        dst.copy_(np.zeros(6, dtype="datetime64[s]"))
    ro = dlbridge.asarray(np.zeros(6, dtype=np.float32))
    ro_np = np.zeros(6, dtype=np.float32)
    ro_np.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dlbridge.asarray(ro_np).copy_(np.ones(6, dtype=np.float32))
    ro.copy_(np.ones(6, dtype=np.float32))
    assert ro.sum() == 6
