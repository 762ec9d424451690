"""dlbridge.from_pointer over host memory (everywhere) and CUDA memory from
the driver through ctypes, as cudaMalloc users have it (fake driver in CI,
the real one on the GPU machine)."""

import ctypes
import gc
import re
import struct
import threading
import weakref

import numpy
import pytest

import dlbridge

N = 1024


class Calls(list):
    """A deleter that records its calls."""

    def __call__(self, ptr):
        self.append(ptr)


def _host(n=12):
    a = numpy.arange(n, dtype=numpy.float32)
    return a, a.ctypes.data


def test_host_pointer_shares_memory():
    a, p = _host()
    t = dlbridge.from_pointer(p, (3, 4), "float32", device="cpu", owner=a)
    assert t.device == "cpu" and t.shape == (3, 4) and t.data_ptr() == p
    assert t.tolist() == a.reshape(3, 4).tolist()
    t.fill_(5)
    assert (a == 5).all()
    b = numpy.from_dlpack(t)
    assert b.ctypes.data == p


def test_host_pointer_strides_in_elements():
    a, p = _host()
    t = dlbridge.from_pointer(p, (4, 3), numpy.float32, device="cpu", strides=(1, 4), owner=a)
    assert t.tolist() == a.reshape(3, 4).T.tolist()
    r = dlbridge.from_pointer(p, (6,), "float32", device="cpu", strides=(2,), readonly=True, owner=a)
    assert r.readonly and r.tolist() == a[::2].tolist()
    with pytest.raises((ValueError, BufferError), match="read-only"):
        r.fill_(1)


@pytest.mark.parametrize("ptr", [
    lambda p: ctypes.c_void_p(p),
    lambda p: numpy.uint64(p),
    lambda p: type("DeviceAllocation", (), {"__int__": lambda self: p})(),  # PyCUDA-like
])
def test_pointer_kinds(ptr):
    a, p = _host()
    t = dlbridge.from_pointer(ptr(p), (12,), "float32", device="cpu", owner=a)
    assert t.data_ptr() == p


def test_owner_kept_until_last_view_and_export(stats):
    a, p = _host()
    ref = weakref.ref(a)
    calls = Calls()
    t = dlbridge.from_pointer(p, (12,), "float32", device="cpu", owner=a, deleter=calls)
    del a
    v = t[2:]
    exported = numpy.from_dlpack(t)
    t.close()
    v.close()
    gc.collect()
    assert ref() is not None and calls == []
    assert exported[0] == 0.0 and exported[11] == 11.0  # still readable
    del exported
    gc.collect()
    assert ref() is None and calls == [p]


def test_deleter_from_another_thread():
    a, p = _host()
    calls = Calls()
    t = dlbridge.from_pointer(p, (12,), "float32", device="cpu", owner=a, deleter=calls)
    th = threading.Thread(target=t.close)
    th.start()
    th.join()
    assert calls == [p]


def test_deleter_only():
    buf = ctypes.create_string_buffer(64)
    p = ctypes.addressof(buf)
    calls = Calls()
    t = dlbridge.from_pointer(p, (16,), "int32", device="cpu", deleter=calls)
    t.fill_(3)
    assert struct.unpack("<16i", buf.raw) == (3,) * 16
    del t
    gc.collect()
    assert calls == [p]


def test_empty_tensor_may_have_null_pointer():
    t = dlbridge.from_pointer(0, (0, 3), "float32", device="cpu")
    assert t.shape == (0, 3) and t.sum() == 0


@pytest.mark.parametrize("ptr, exc, match", [
    (True, TypeError, "not a bool"),
    ("0x10", TypeError, "integer address, got str"),
    (1.5, TypeError, "integer address, got float"),
    (-1, ValueError, r"ptr = -1 is out of range \(0 <= ptr < 2\*\*64\)"),
    (2**64, ValueError, "out of range"),
])
def test_bad_pointer_calls_nothing(ptr, exc, match):
    calls = Calls()
    with pytest.raises(exc, match=match):
        dlbridge.from_pointer(ptr, (1,), "float32", device="cpu", deleter=calls)
    assert calls == []


def test_deleter_must_be_callable():
    with pytest.raises(TypeError, match="deleter must be callable"):
        dlbridge.from_pointer(16, (1,), "float32", device="cpu", deleter=3)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"shape": (4,), "ptr": 0}, ValueError, "NULL for 4 elements"),
    ({"strides": (1,)}, ValueError, "1 strides for 2 dimensions"),
    ({"strides": (1.0, 2)}, TypeError, "strides must be a sequence of ints"),
    ({"shape": (-1, 2)}, ValueError, r"shape\[0\]=-1 out of range"),
    ({"dtype": "float31"}, TypeError, "float31"),
    ({"device": "rocm:0"}, ValueError, "only cpu, cuda:N, cuda_host and cuda_managed"),
    ({"device": "cpu:1"}, ValueError, "the host is 'cpu'"),
    ({"stream": 5}, ValueError, "stream= was given for host memory"),
    ({"stream": -5}, ValueError, r"stream=-5 out of range for uint64"),
])
def test_rejected_wrap_runs_deleter_once(kwargs, exc, match):
    a, p = _host()
    calls = Calls()
    args = {"ptr": p, "shape": (3, 4), "dtype": "float32", "device": "cpu", "owner": a, "deleter": calls}
    args.update(kwargs)
    ptr = args.pop("ptr")
    shape = args.pop("shape")
    dtype = args.pop("dtype")
    with pytest.raises(exc, match=match):
        dlbridge.from_pointer(ptr, shape, dtype, **args)
    assert calls == [ptr]


def test_cuda_pointer_without_driver():
    if dlbridge.cuda_available():
        pytest.skip("a CUDA device is present")
    calls = Calls()
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        dlbridge.from_pointer(0x1000, (4,), "float32", deleter=calls)
    assert calls == [0x1000]


# ---- CUDA memory (fake driver in CI, real driver on the GPU machine) ----

gpu = pytest.mark.gpu


class Freer:
    """A deleter that frees device memory through the driver and counts."""

    def __init__(self, driver, device=0):
        self.driver, self.device, self.calls = driver, device, []

    def __call__(self, ptr):
        self.calls.append(ptr)
        self.driver.free(ptr, self.device)


@gpu
def test_cuda_malloc_pointer(driver):
    p = driver.alloc(4 * N)
    free = Freer(driver)
    t = dlbridge.from_pointer(p, (N,), "float32", deleter=free)
    assert t.device == "cuda:0" and t.data_ptr() == p
    t.fill_(2)
    assert t.sum() == 2.0 * N
    assert t.to("cpu").tolist()[:3] == [2.0, 2.0, 2.0]
    assert driver.read(p, 8, 1) == struct.pack("<2f", 2.0, 2.0)
    v = t[10:20]
    cai = v.__cuda_array_interface__
    assert cai["data"][0] == p + 40
    del t
    gc.collect()
    assert free.calls == []  # v still uses the memory
    del v, cai
    gc.collect()
    assert free.calls == [p]


@gpu
def test_interior_pointer_and_negative_strides(driver):
    p = driver.alloc(4 * N)
    try:
        t = dlbridge.from_pointer(p + 16, (N - 4,), "float32")
        assert t.shape == (N - 4,)
        r = dlbridge.from_pointer(p + 4 * (N - 1), (N,), "float32", strides=(-1,))
        assert r.shape == (N,)
        del t, r
    finally:
        gc.collect()
        driver.free(p)


def _bounds(msg):
    """The allocation bounds an error names, as ints."""
    m = re.search(r"allocation \[(0x[0-9a-f]+), (0x[0-9a-f]+)\+(\d+)\)", msg)
    assert m, msg
    return int(m.group(1), 16), int(m.group(3))


@gpu
def test_verify_names_bounds_and_overrun(driver):
    p = driver.alloc(4096)
    free = Freer(driver)
    with pytest.raises(ValueError, match=r"ends 4 bytes past the allocation") as e:
        dlbridge.from_pointer(p, (1025,), "float32", deleter=free)
    base, size = _bounds(str(e.value))
    assert base <= p and p + 4096 <= base + size  # the driver may round up; ours was 4096
    assert free.calls == [p]  # rejected: the deleter ran, once


@gpu
def test_verify_starts_before(driver):
    p = driver.alloc(4096)
    try:
        with pytest.raises(ValueError, match=r"starts 12 bytes before the allocation"):
            dlbridge.from_pointer(p, (4,), "float32", strides=(-1,))
        with pytest.raises(ValueError, match="knows no allocation"):
            dlbridge.from_pointer(p + (1 << 40), (4,), "float32")
        dlbridge.from_pointer(p, (1025,), "float32", verify=False).close()  # unchecked: accepted
    finally:
        driver.free(p)


@gpu
def test_verify_device_kinds(driver):
    p = driver.alloc(4096)
    h = driver.alloc_host(4096)
    try:
        with pytest.raises(ValueError, match="is device memory of cuda:0, not host memory"):
            dlbridge.from_pointer(p, (4,), "float32", device="cpu")
        with pytest.raises(ValueError, match="claims pinned host memory"):
            dlbridge.from_pointer(p, (4,), "float32", device="cuda_host")
        with pytest.raises(ValueError, match="claims cuda:0 but the driver says"):
            dlbridge.from_pointer(h, (4,), "float32", device="cuda:0")
        pinned = dlbridge.from_pointer(h, (4,), "float32", device="cuda_host")
        assert pinned.device == "cuda_host:0"
        n = dlbridge.cuda_device_count()
        with pytest.raises(ValueError, match="there are %d CUDA devices" % n):
            dlbridge.from_pointer(p, (4,), "float32", device="cuda:%d" % n)
        del pinned
    finally:
        gc.collect()
        driver.free(p)
        driver.free_host(h)


@gpu
def test_verify_wrong_device(driver):
    if dlbridge.cuda_device_count() < 2:
        pytest.skip("needs two CUDA devices (FAKECUDA_DEVICES=2 with the fake)")
    p = driver.alloc(4096, device=1)
    try:
        with pytest.raises(ValueError, match="claims cuda:0 but the memory is on cuda:1"):
            dlbridge.from_pointer(p, (4,), "float32", device="cuda:0")
        t = dlbridge.from_pointer(p, (4,), "float32", device="cuda:1")
        assert t.device == "cuda:1"
        del t
    finally:
        gc.collect()
        driver.free(p, device=1)


def _pending_write(driver, stream_arg):
    """Queue a write of 7s on a dlbridge.Stream, wrap the memory with
    stream=stream_arg(s), export it to a consumer stream and read there."""
    p = driver.alloc(4 * N)
    try:
        driver.memset32(p, 0, N, 1)
        dlbridge.synchronize()
        s = dlbridge.Stream()
        driver.memset32(p, 7, N, s.cuda_stream)
        t = dlbridge.from_pointer(p, (N,), "uint32", stream=stream_arg(s))
        consumer = dlbridge.Stream()
        cap = t.__dlpack__(stream=consumer.cuda_stream)
        got = driver.read(p, 4 * N, consumer.cuda_stream)
        s.synchronize()
        del cap, t
        return got
    finally:
        gc.collect()
        driver.free(p)


@gpu
@pytest.mark.parametrize("arg", [lambda s: s, lambda s: s.cuda_stream], ids=["Stream", "int"])
def test_stream_marks_a_pending_write(driver, arg):
    assert _pending_write(driver, arg) == struct.pack("<I", 7) * N


@gpu
def test_pending_write_control_on_the_fake(fake_driver):
    """Without stream= nothing orders the consumer after the write: the fake
    driver shows the stale bytes, so the test above can fail."""
    assert _pending_write(fake_driver, lambda s: None) == b"\0" * (4 * N)


@gpu
def test_stream_is_reported(driver):
    p = driver.alloc(4 * N)
    try:
        s = dlbridge.Stream()
        t = dlbridge.from_pointer(p, (N,), "float32", stream=s)
        assert t.__cuda_array_interface__["stream"] == s.cuda_stream
        w = dlbridge.from_pointer(p, (N,), "float32", stream=0)  # dlbridge's work stream
        assert w.__cuda_array_interface__["stream"] == dlbridge._lib._core.dlb_work_stream(0)
        u = dlbridge.from_pointer(p, (N,), "float32")
        assert u.__cuda_array_interface__["stream"] is None
        s.synchronize()
        del t, w, u
    finally:
        gc.collect()
        driver.free(p)


@gpu
def test_pointers_from_other_libraries():
    """The libraries users get raw pointers from, where installed."""
    got = []
    try:
        import torch
        if torch.cuda.is_available():
            x = torch.full((N,), 3.0, device="cuda")
            torch.cuda.synchronize()
            t = dlbridge.from_pointer(x.data_ptr(), (N,), "float32", owner=x)
            assert t.sum() == 3.0 * N
            got.append("torch")
    except ImportError:
        pass
    try:
        import cupy
        p = cupy.cuda.runtime.malloc(4 * N)  # cudaMalloc
        cupy.cuda.runtime.memset(p, 0, 4 * N)
        freed = []
        t = dlbridge.from_pointer(p, (N,), "int32", deleter=lambda q: (freed.append(q), cupy.cuda.runtime.free(q)))
        t.fill_(4)
        assert t.sum() == 4 * N
        del t
        gc.collect()
        assert freed == [p]
        got.append("cupy")
    except ImportError:
        pass
    try:
        from numba import cuda as ncuda
        d = ncuda.to_device(numpy.full(N, 5, dtype=numpy.int32))
        t = dlbridge.from_pointer(d.device_ctypes_pointer.value, (N,), "int32", owner=d)
        assert t.sum() == 5 * N
        got.append("numba")
    except ImportError:
        pass
    try:
        from cuda.bindings import driver as cu
        err, p = cu.cuMemAlloc(4 * N)
        assert err == cu.CUresult.CUDA_SUCCESS
        t = dlbridge.from_pointer(p, (N,), "uint8", deleter=lambda q: cu.cuMemFree(q))
        t.fill_(1)
        assert t.sum() == N
        got.append("cuda-python")
    except ImportError:
        pass
    if not got:
        pytest.skip("none of torch (with CUDA), cupy, numba, cuda-python is installed")
