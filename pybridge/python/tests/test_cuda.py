"""CUDA exchanges (skipped without a CUDA device): dlbridge's own CUDA
tensors, PyTorch, CuPy, JAX, Numba and cuda.core, through DLPack and the
CUDA Array Interface, stream ordering, and a soak."""

import gc
import os
import struct

import pytest

import dlbridge
from dlbridge import _tensor

pytestmark = pytest.mark.gpu

F32_ONE = struct.unpack("<I", struct.pack("<f", 1.0))[0]
F32_SEVEN = struct.unpack("<I", struct.pack("<f", 7.0))[0]


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch %s has no CUDA" % torch.__version__)
    return torch


class CAIOnly:
    """Exposes nothing but another object's __cuda_array_interface__."""

    def __init__(self, obj):
        self.obj = obj
        self.__cuda_array_interface__ = obj.__cuda_array_interface__


def test_own_cuda_tensors():
    g = dlbridge.arange(10, dtype="float32", device="cuda")
    assert g.device == "cuda:0" and g.__dlpack_device__() == (2, 0)
    assert g.sum() == 45.0
    g.fill_(2)
    assert g.sum() == 20.0
    z = dlbridge.zeros((3, 4), dtype="float64", device="cuda:0")
    assert z.sum() == 0
    z[:, 1].fill_(1)  # strided: the elements only, by the strided-copy kernel
    assert z.sum() == 3
    assert z.to("cpu").tolist() == [[0, 1, 0, 0]] * 3
    h = dlbridge.arange(6, dtype="int32")
    d = h.to("cuda")
    assert d.device == "cuda:0" and d.sum() == 15
    d.copy_(dlbridge.arange(6, dtype="float64"))  # converting host -> device
    assert d.to("cpu").tolist() == [0, 1, 2, 3, 4, 5]
    cai = g.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"][0] == g.data_ptr() and cai["typestr"] == "<f4"
    assert not hasattr(g, "__array_interface__")
    assert not hasattr(h, "__cuda_array_interface__")
    e = dlbridge.zeros((0, 3), device="cuda")
    assert e.sum() == 0 and e.__cuda_array_interface__["data"][0] == 0


def test_dlpack_to_cpu_copies():
    g = dlbridge.arange(4, dtype="float32", device="cuda")
    c = dlbridge.from_dlpack(g, device="cpu")
    assert c.device == "cpu" and c.tolist() == [0, 1, 2, 3]
    with pytest.raises(BufferError, match="copy=False"):
        dlbridge.from_dlpack(g, device="cpu", copy=False)
    cap = g.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    back = dlbridge.from_dlpack(cap)
    assert back.device == "cpu" and back.is_copy


@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "int64", "uint8", "float16", "bfloat16",
                                   "float32", "float64", "complex64", "complex128"])
def test_torch_cuda_both_ways(dtype):
    torch = _torch_cuda()
    g = dlbridge.zeros((4, 5), dtype=dtype, device="cuda")
    x = torch.from_dlpack(g)
    assert x.device.type == "cuda" and x.data_ptr() == g.data_ptr() and x.dtype == getattr(torch, dtype)
    x.fill_(1)
    assert dlbridge.from_dlpack(x).sum() == 20  # torch orders its fill before our stream
    y = torch.zeros(4, 5, dtype=getattr(torch, dtype), device="cuda")
    u = dlbridge.from_dlpack(y)
    assert u.data_ptr() == y.data_ptr() and u.device == "cuda:0"
    u.fill_(1)
    assert bool((y == 1).all().item())
    v = dlbridge.from_dlpack(y.t())
    assert v.strides == tuple(y.t().stride()) and v.data_ptr() == y.data_ptr()


def test_torch_cai_both_ways():
    torch = _torch_cuda()
    g = dlbridge.arange(8, dtype="float32", device="cuda")
    x = torch.as_tensor(g, device="cuda")  # __cuda_array_interface__
    assert x.data_ptr() == g.data_ptr()
    y = torch.arange(8.0, device="cuda")
    u = dlbridge.asarray(CAIOnly(y))
    assert u.data_ptr() == y.data_ptr() and u.sum() == 28.0
    u.fill_(1)
    assert y.sum().item() == 8.0


def test_torch_stream_ordering_on_import():
    """torch's fill is still running on its own stream when we import."""
    torch = _torch_cuda()
    n = 1 << 20
    x = torch.zeros(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the write
        x.fill_(7.0)
        t = dlbridge.from_dlpack(x)  # __dlpack__(stream=ours): event record + wait
    assert t.sum() == 7.0 * n


def test_torch_stream_ordering_on_export():
    """Our slow write is still running when torch takes the tensor on a
    stream of its own (non-blocking: no implicit sync with ours)."""
    torch = _torch_cuda()
    n = 1 << 20
    g = dlbridge.zeros(n, dtype="float32", device="cuda")
    _tensor._debug_spin_write(g, F32_SEVEN, 0.2)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.from_dlpack(g)  # consumer stream s waits for our event
        total = x.sum()
    s.synchronize()
    assert total.item() == 7.0 * n


def test_cai_stream_ordering_on_import():
    """A CuPy kernel still spinning on a non-blocking stream when we take the
    array through __cuda_array_interface__ v3 (its 'stream' entry)."""
    cupy = pytest.importorskip("cupy")
    spin_fill = cupy.RawKernel(r"""
    extern "C" __global__ void spin_fill(float* p, long long n, float v, long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
             i += (long long)gridDim.x * blockDim.x) p[i] = v;
    }""", "spin_fill")
    n = 1 << 20
    a = cupy.zeros(n, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        spin_fill((64,), (256,), (a, cupy.int64(n), cupy.float32(1.0), cupy.int64(200_000_000)))
        cai = a.__cuda_array_interface__
        t = dlbridge.asarray(CAIOnly(a))
    assert cai.get("stream") in (None, s.ptr)
    assert t.sum() == float(n)


def test_cupy_both_ways():
    cupy = pytest.importorskip("cupy")
    g = dlbridge.arange(16, dtype="float32", device="cuda")
    c = cupy.from_dlpack(g)
    assert c.data.ptr == g.data_ptr()
    d = cupy.asarray(g)  # CAI
    assert d.data.ptr == g.data_ptr()
    c *= 2
    assert g.sum() == 240.0
    e = cupy.arange(12, dtype=cupy.int64).reshape(3, 4)
    u = dlbridge.from_dlpack(e)
    assert u.data_ptr() == e.data.ptr and u.shape == (3, 4)
    u.fill_(3)
    assert int(e.sum()) == 36
    w = dlbridge.asarray(CAIOnly(e[:, ::2]))
    assert w.strides == (4, 2) and w.data_ptr() == e.data.ptr


def test_jax_both_ways():
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        pytest.skip("jax has no GPU backend")
    import jax.numpy as jnp

    g = dlbridge.arange(8, dtype="float32", device="cuda")
    j = jax.dlpack.from_dlpack(g)
    assert float(j.sum()) == 28.0
    ja = jnp.arange(6, dtype=jnp.float32) + 1
    t = dlbridge.from_dlpack(ja)
    assert t.device == "cuda:0" and t.sum() == 21.0
    assert t.data_ptr() == ja.unsafe_buffer_pointer()


def test_numba_cai_both_ways():
    pytest.importorskip("numba")
    from numba import cuda as ncuda

    g = dlbridge.arange(8, dtype="float32", device="cuda")
    d = ncuda.as_cuda_array(g)
    assert d.device_ctypes_pointer.value == g.data_ptr()
    n = ncuda.to_device(bytearray(16))
    t = dlbridge.asarray(n)
    assert t.data_ptr() == n.device_ctypes_pointer.value and t.sum() == 0


def test_cuda_core_strided_memory_view():
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        try:
            from cuda.core.experimental.utils import StridedMemoryView
        except ImportError:
            pytest.skip("cuda.core is not installed")
    g = dlbridge.zeros((4, 6), dtype="float32", device="cuda")[:, ::2]
    v = StridedMemoryView(g, stream_ptr=-1)
    assert v.ptr == g.data_ptr() and tuple(v.shape) == (4, 3)
    assert tuple(v.strides) == (6, 2) or tuple(v.strides) == (24, 8)


def test_soak_memory_is_flat(stats):
    torch = _torch_cuda()
    import resource

    n = int(os.environ.get("DLBRIDGE_SOAK", "100000"))
    g = dlbridge.zeros(1 << 10, dtype="float32", device="cuda")
    h = dlbridge.zeros(1 << 10, dtype="float32")
    x = torch.ones(1 << 10, device="cuda")

    def round_trip():
        torch.from_dlpack(g)
        dlbridge.from_dlpack(x).close()
        torch.from_dlpack(h)

    for _ in range(1000):  # warm up allocator caches
        round_trip()
    before = stats()
    gpu_before = torch.cuda.memory_allocated()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(n):
        round_trip()
    after = stats()
    assert after["live_tensors"] == before["live_tensors"]
    assert after["live_exports"] == before["live_exports"]
    assert after["deleter_calls"] - before["deleter_calls"] == 2 * n
    assert torch.cuda.memory_allocated() == gpu_before
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown_kib < 64 * 1024, "RSS grew by %d KiB over %d exchanges" % (grown_kib, n)


def test_import_leaves_the_default_stream_alone():
    """Importing from a producer on a side stream makes only our own
    (non-blocking) work stream wait: torch's default stream stays idle."""
    torch = _torch_cuda()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)
        x.fill_(3.0)
        t = dlbridge.from_dlpack(x)
    assert torch.cuda.default_stream().query(), "the default stream waits for the producer's side stream"
    assert not s.query()
    assert t.sum() == 3.0 * (1 << 20)


def test_own_work_orders_after_a_busy_default_stream():
    """A tensor imported earlier and then written in place by torch on its
    default (legacy) stream: dlbridge's later copies and reads see the
    write. The work stream skips the legacy-stream wait only when a query
    says that stream is idle; here it is busy, so the wait must happen."""
    torch = _torch_cuda()
    import numpy as np

    x = torch.zeros(1 << 20, device="cuda")
    g = dlbridge.from_dlpack(x)
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)  # default stream: busy for a while
    x.fill_(3.0)
    assert not torch.cuda.default_stream().query()
    assert bool((np.from_dlpack(g.to("cpu")) == 3.0).all())
    torch.cuda._sleep(100_000_000)
    x.fill_(5.0)
    dst = dlbridge.empty(1 << 20, device="cuda")
    dst.copy_(g)
    assert dst.sum() == 5.0 * (1 << 20)


def test_peer_copy_orders_after_the_source_devices_default_stream():
    """A copy from cuda:1 into cuda:0 on dlbridge's work stream waits for
    what torch queued on cuda:1's default (legacy) stream, not only for
    cuda:0's (on two H200s it read the value from before torch's write)."""
    torch = _torch_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    x = torch.zeros(1 << 20, device="cuda:1")
    g = dlbridge.from_dlpack(x)
    torch.cuda.synchronize(1)
    with torch.cuda.device(1):
        torch.cuda._sleep(100_000_000)  # cuda:1's default stream: busy for a while
        x.fill_(5.0)
        assert not torch.cuda.default_stream(1).query()
    dst = dlbridge.empty(1 << 20, device="cuda:0")
    dst.copy_(g)
    assert dst.sum() == 5.0 * (1 << 20)


@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize("path", ["dlpack", "cai"])
def test_chain_torch_to_dlbridge_to_torch(hops, path):
    """A slow torch producer on a side stream -> dlbridge (one or two hops)
    -> a torch consumer on another non-blocking stream: the consumer reads
    the producer's data. torch's own __cuda_array_interface__ is version 2
    and names no stream (no consumer can order after it), so the CAI path
    gets the v3 dictionary a producer such as CuPy gives: its stream too."""
    torch = _torch_cuda()
    n = 1 << 20
    for _ in range(3):
        x = torch.zeros(n, device="cuda")
        torch.cuda.synchronize()
        prod, cons = torch.cuda.Stream(), torch.cuda.Stream()
        with torch.cuda.stream(prod):
            torch.cuda._sleep(100_000_000)
            x.fill_(5.0)
            if path == "dlpack":
                t = dlbridge.from_dlpack(x)
            else:
                o = CAIOnly(x)
                o.__cuda_array_interface__ = dict(o.__cuda_array_interface__, version=3, stream=prod.cuda_stream)
                t = dlbridge.asarray(o)
        for _ in range(hops - 1):
            t = dlbridge.from_dlpack(t)
        with torch.cuda.stream(cons):
            y = torch.from_dlpack(t)
            total = y.sum()
        cons.synchronize()
        assert total.item() == 5.0 * n


def test_strided_write_leaves_gaps_another_stream_writes():
    """Writes through dlbridge into every other column never touch the other
    columns, which a torch stream writes meanwhile."""
    torch = _torch_cuda()
    import numpy as np

    m = torch.zeros(256, 4096, device="cuda")
    torch.cuda.synchronize()
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        torch.cuda._sleep(20_000_000)
        m[:, 1::2].fill_(7.0)
    v = dlbridge.from_dlpack(m)[:, ::2]
    v.fill_(5)
    v.copy_(np.full((256, 2048), 9, dtype=np.float32))
    v.copy_(np.full((256, 2048), 11, dtype=np.float64))
    other.synchronize()
    torch.cuda.synchronize()
    assert bool((m[:, 1::2] == 7).all()) and bool((m[:, ::2] == 11).all())


def test_copy_on_a_torch_stream():
    """copy_(stream=torch stream, non_blocking=True): torch work queued on
    that stream afterwards sees the data."""
    torch = _torch_cuda()
    import numpy as np

    a = np.arange(1 << 20, dtype=np.float32)
    g = dlbridge.empty(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    g.copy_(a, stream=s, non_blocking=True)
    x = torch.from_dlpack(g)
    with torch.cuda.stream(s):
        total = x.double().sum()
    s.synchronize()
    assert total.item() == float(a.astype(np.float64).sum())
    h = g.to("cpu")
    assert h.is_pinned() and np.array_equal(np.from_dlpack(h), a)
