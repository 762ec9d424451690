"""Zero-copy exchange with PyTorch on the CPU (1.13 in CI: legacy capsules
only, no bool through DLPack)."""

import gc

import pytest

import dlbridge

torch = pytest.importorskip("torch")
from torch.utils import dlpack as torch_dlpack  # noqa: E402

TORCH_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                "float32", "float64", "complex64", "complex128"]


def _torch_dlpack_supports(dtype):
    try:
        torch.from_dlpack(torch.zeros(1, dtype=getattr(torch, dtype)))
        return True
    except (BufferError, RuntimeError, TypeError):
        return False


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_go_to_torch(dtype):
    if not _torch_dlpack_supports(dtype):
        pytest.skip("torch %s cannot take %s through DLPack" % (torch.__version__, dtype))
    t = dlbridge.zeros((2, 3), dtype=dtype)
    x = torch.from_dlpack(t)
    assert x.dtype == getattr(torch, dtype) and tuple(x.shape) == (2, 3)
    assert x.data_ptr() == t.data_ptr()
    x.fill_(1)  # torch writes, Go sees
    assert t.sum() == 6
    t.fill_(0)  # Go writes, torch sees
    assert bool((x == 0).all())


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_to_go(dtype):
    x = torch.zeros(6, dtype=getattr(torch, dtype))
    t = dlbridge.asarray(x)  # DLPack, or NumPy's view of it where torch refuses DLPack (bool)
    assert t.dtype == dtype and t.shape == (6,)
    assert t.data_ptr() == x.data_ptr()
    t.fill_(1)  # Go writes, torch sees
    assert x.sum().item() == 6
    x.zero_()  # torch writes, Go sees
    assert t.sum() == 0


def test_non_contiguous_both_ways():
    base = torch.arange(24.0).reshape(4, 6)
    for view in (base[::2, 1::2], base.t(), base[1:3, 2:5].t()):
        t = dlbridge.from_dlpack(view)
        assert t.strides == tuple(view.stride())
        assert t.data_ptr() == view.data_ptr()
        assert t.tolist() == view.tolist()
    dlbridge.from_dlpack(base[::2, 1::2]).fill_(-1)
    assert (base[::2, 1::2] == -1).all() and base[1, 1] == 7
    m = dlbridge.arange(24, dtype="float32")
    for view in (m[::2], m[3:9]):
        x = torch.from_dlpack(view)
        assert x.stride() == view.strides and x.data_ptr() == view.data_ptr()
        assert x.tolist() == view.tolist()
    g = dlbridge.zeros((4, 6), dtype="float32")
    x = torch.from_dlpack(g.T)
    assert x.stride() == (1, 6) and not x.is_contiguous()


def test_zero_d_and_zero_size():
    for shape in ((), (0,), (3, 0)):
        t = dlbridge.zeros(shape, dtype="float32")
        assert tuple(torch.from_dlpack(t).shape) == shape
        u = dlbridge.from_dlpack(torch.zeros(shape))
        assert u.shape == shape and u.sum() == 0
    assert torch.from_dlpack(dlbridge.zeros((), dtype="int64").fill_(9)).item() == 9


def test_raw_capsules():
    x = torch.arange(4.0)
    cap = torch_dlpack.to_dlpack(x)
    t = dlbridge.from_dlpack(cap)
    assert t.data_ptr() == x.data_ptr() and t.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="already consumed"):
        dlbridge.from_dlpack(cap)
    ours = dlbridge.arange(3, dtype="float64").__dlpack__()
    y = torch_dlpack.from_dlpack(ours)
    assert y.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="already consumed"):
        dlbridge.from_dlpack(ours)  # torch renamed it


def test_torch_releases_go_memory(stats):
    before = stats()
    t = dlbridge.arange(5, dtype="float32")
    x = torch.from_dlpack(t)
    y = x[1:]  # a torch view shares the DLPack storage
    t.close()
    del x
    gc.collect()
    assert y.tolist() == [1, 2, 3, 4]
    assert stats()["live_exports"] == before["live_exports"] + 1
    del y
    s = stats()
    assert s["live_exports"] == before["live_exports"]
    assert s["deleter_calls"] == before["deleter_calls"] + 1


def test_go_keeps_torch_memory_alive():
    x = torch.arange(1000.0)
    t = dlbridge.from_dlpack(x)
    ptr = x.data_ptr()
    del x
    gc.collect()
    assert t.data_ptr() == ptr and t.sum() == 499500.0
    t.close()


def test_roundtrip_torch_go_torch():
    x = torch.arange(6, dtype=torch.int32)
    y = torch.from_dlpack(dlbridge.from_dlpack(x))
    assert y.data_ptr() == x.data_ptr()
    y[0] = 100
    assert x[0].item() == 100


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_where_torch_has_it(dtype):
    tdt = getattr(torch, dtype, None)
    if tdt is None:
        pytest.skip("torch %s has no %s" % (torch.__version__, dtype))
    t = dlbridge.zeros(4, dtype=dtype)
    try:
        x = torch.from_dlpack(t)
    except (RuntimeError, BufferError, TypeError) as e:
        pytest.skip("torch %s takes no %s through DLPack: %s" % (torch.__version__, dtype, e))
    assert x.dtype == tdt and x.data_ptr() == t.data_ptr()
    x.fill_(1.0)
    back = dlbridge.from_dlpack(x)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()
