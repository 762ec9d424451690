"""Stream ordering and the CUDA methods against the fake driver of
testdata/fakecuda, so that they are checked on machines without a GPU.

The driver is loaded once per process, so each test runs a script in a new
Python process with DLBRIDGE_LIBCUDA pointing at the fake (built here with
gcc). The fake runs work queued on a stream only when something waits for
it: a reader that is not ordered after a write reads stale data, always.
Its ordering log lists every event record and stream wait, so the tests
also check that the right waits are issued, and no more."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

def _fake_source():
    """testdata/fakecuda/fakecuda.c of the checkout these tests are in (or
    DLBRIDGE_FAKECUDA_SRC)."""
    env = os.environ.get("DLBRIDGE_FAKECUDA_SRC")
    if env:
        return env
    d = os.path.dirname(os.path.abspath(__file__))
    while True:
        src = os.path.join(d, "testdata", "fakecuda", "fakecuda.c")
        if os.path.exists(src):
            return src
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


FAKE_SRC = _fake_source()


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None or FAKE_SRC is None:
        pytest.skip("gcc and testdata/fakecuda/fakecuda.c are needed to build the fake CUDA driver")
    out = str(tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1")
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-ffp-contract=off", "-o", out, FAKE_SRC, "-lpthread"],
                   check=True)
    return out


# Runs first in every script: the fake's controls through ctypes (the same
# library instance the Go side loaded), streams of the fake, reads.
PRELUDE = r'''
import ctypes, os, struct
import dlbridge
from dlbridge import _lib
assert dlbridge.cuda_available() and dlbridge.cuda_device_count() == 2
fake = ctypes.CDLL(os.environ["DLBRIDGE_LIBCUDA"])
fake.fakecuda_order_log.restype = ctypes.c_int
fake.fakecuda_guard_hits.restype = ctypes.c_long
vp, u64 = ctypes.c_void_p, ctypes.c_uint64
ctx = vp()
assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert fake.cuCtxSetCurrent(ctx) == 0
WORK = _lib._core.dlb_work_stream(0)
NAMES = {WORK: "work", 1: "legacy", 2: "per-thread"}

def new_stream(name):
    s = vp()
    assert fake.cuStreamCreateWithPriority(ctypes.byref(s), 1, 0) == 0
    NAMES[s.value] = name
    return s.value

def reset():
    fake.fakecuda_reset_calls()

def log():
    buf = (ctypes.c_ulonglong * 768)()
    n = fake.fakecuda_order_log(buf, 256)
    name = lambda h: NAMES.get(h, hex(h))
    out = []
    for i in range(min(n, 256)):
        kind, s, on = buf[3 * i], buf[3 * i + 1], buf[3 * i + 2]
        out.append("r " + name(s) if kind == ord("r") else "w %s<-%s" % (name(s), name(on)))
    return out

def read_f32(t, stream):
    """What a consumer on stream reads: a copy on that stream, then a sync."""
    n = t.size
    buf = (ctypes.c_float * n)()
    assert fake.cuMemcpyDtoHAsync_v2(buf, u64(t.data_ptr()), ctypes.c_size_t(4 * n), vp(stream)) == 0
    assert fake.cuStreamSynchronize(vp(stream)) == 0
    return sorted(set(buf))

def slow_write(t, value, stream):
    """A foreign producer's write of float32 value into t, queued on its own
    stream with the driver (dlbridge knows nothing of it; the fake runs it
    only when something waits for it)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    assert fake.cuMemsetD32Async(u64(t.data_ptr()), ctypes.c_uint(bits), ctypes.c_size_t(t.size), vp(stream)) == 0

class Producer:
    """A tensor written on the producer's stream, handed out as torch does:
    __dlpack__(stream=s) makes s wait for the producer's stream (an event),
    then exports without further synchronization."""
    def __init__(self, t, stream):
        self.t, self.stream = t, stream
    def __dlpack_device__(self):
        return self.t.__dlpack_device__()
    def __dlpack__(self, stream=None, **kw):
        if stream not in (None, -1) and stream != self.stream:
            ev = vp()
            assert fake.cuEventCreate(ctypes.byref(ev), 2) == 0
            assert fake.cuEventRecord(ev, vp(self.stream)) == 0
            assert fake.cuStreamWaitEvent(vp(stream), ev, 0) == 0
        return self.t.__dlpack__(stream=-1, **kw)

class CAIOnly:
    def __init__(self, t):
        self.t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__

class CAIOn:
    """What a producer that wrote t on stream reports through CAI v3."""
    def __init__(self, t, stream):
        self.__cuda_array_interface__ = dict(t.__cuda_array_interface__, stream=stream)
'''


# Runs last in every script: tensors the script dropped are freed, and no
# driver call may have named a destroyed stream (the real driver crashes).
EPILOGUE = r'''
import gc
gc.collect()
fake.fakecuda_stale_stream_uses.restype = ctypes.c_long
assert fake.fakecuda_stale_stream_uses() == 0, "a driver call named a destroyed stream"
print('SCRIPT-OK')
'''


def run(fake_lib, body):
    env = dict(os.environ, DLBRIDGE_LIBCUDA=fake_lib, FAKECUDA_DEVICES="2")
    env.pop("DLBRIDGE_GPU", None)
    script = PRELUDE + textwrap.dedent(body) + EPILOGUE
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "SCRIPT-OK" in r.stdout, "script failed:\n%s\n%s" % (r.stdout, r.stderr)


def test_chain_orders_every_hop(fake_lib):
    """producer (own stream) -> dlbridge (DLPack, stream=work) -> dlbridge
    (second hop) -> CAI -> consumers on their own streams: every consumer
    reads the producer's data; one event per pending write, one wait per
    consumer stream; the default stream never waits."""
    run(fake_lib, r'''
    prod, cons, cons2 = new_stream("prod"), new_stream("cons"), new_stream("cons2")
    x = dlbridge.zeros(1024, dtype="float32", device="cuda")
    x.copy_(x)  # settle: nothing pending before the chain
    slow_write(x, 7.0, prod)
    reset()
    t1 = dlbridge.from_dlpack(Producer(x, prod))  # __dlpack__(stream=work): work waits for prod
    assert t1._stream == WORK, hex(t1._stream)
    t2 = dlbridge.from_dlpack(t1)               # dlbridge -> dlbridge, pending on work already
    t3 = dlbridge.asarray(CAIOnly(t2))          # CAI: its stream entry, no wait at import
    assert t3._stream == WORK
    assert log() == ["r prod", "w work<-prod"], log()
    assert "legacy" not in " ".join(log())      # importing never makes the default stream wait
    cap = t3.__dlpack__(stream=cons, max_version=(1, 3))
    cap2 = t3.__dlpack__(stream=cons2, max_version=(1, 3))
    cap3 = t3[:512].__dlpack__(stream=cons2, max_version=(1, 3))  # a view: same write, ordered already
    assert log() == ["r prod", "w work<-prod", "r work", "w cons<-work", "w cons2<-work"], log()
    assert read_f32(t3, cons) == [7.0] and read_f32(t3, cons2) == [7.0]
    ''')


def test_chain_fails_without_the_handshake(fake_lib):
    """The same chain with the producer's ordering skipped (stream=-1)
    reads stale data: the check above can fail."""
    run(fake_lib, r'''
    prod, cons = new_stream("prod"), new_stream("cons")
    x = dlbridge.zeros(1024, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 7.0, prod)
    t = dlbridge.from_dlpack(x.__dlpack__(stream=-1, max_version=(1, 3)))  # no handshake
    assert read_f32(t, cons) == [0.0], "the consumer saw the write without any ordering"
    ''')


def test_cupy_like_producer_has_nothing_to_order(fake_lib):
    """A CuPy array (here a stand-in: its type's module is cupy, and a fake
    cupy package names the current stream) is asked for
    __dlpack__(stream=<CuPy's current stream>): the
    producer records no event, the import is pending on that stream, and a
    consumer is ordered after it. On another device than CuPy's
    current one the producer orders before our work stream."""
    run(fake_lib, r"""
    import sys, types
    prod, cons = new_stream("prod"), new_stream("cons")
    cupy = types.ModuleType("cupy"); cupy.cuda = types.ModuleType("cupy.cuda")
    current_device = [0]
    cupy.cuda.runtime = types.SimpleNamespace(getDevice=lambda: current_device[0])
    cupy.cuda.stream = types.SimpleNamespace(get_current_stream_ptr=lambda: prod)
    sys.modules.update({"cupy": cupy, "cupy.cuda": cupy.cuda})
    class CupyLike(Producer):
        pass
    CupyLike.__module__ = "cupy._core.core"
    x = dlbridge.zeros(1024, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 7.0, prod)
    reset()
    t = dlbridge.from_dlpack(CupyLike(x, prod))
    assert t._stream == prod and log() == [], (hex(t._stream), log())
    cap = t.__dlpack__(stream=cons, max_version=(1, 3))  # the consumer's handshake
    assert log() == ["r prod", "w cons<-prod"], log()
    assert read_f32(t, cons) == [7.0]
    current_device[0] = 1  # the array is not on CuPy's current device
    reset()
    t2 = dlbridge.from_dlpack(CupyLike(x, prod))
    assert t2._stream == WORK and log() == ["r prod", "w work<-prod"], log()
    """)


def test_torch_like_producer_has_nothing_to_order(fake_lib):
    """A PyTorch tensor without the C exchange API (PyTorch before 2.11; here a
    stand-in whose type's module is torch, and a fake torch whose
    _C._cuda_getCurrentRawStream names the current stream per device) is
    asked for __dlpack__(stream=<its current stream>): no event, the import
    is pending on that stream (the legacy default stream where PyTorch's
    current stream is its default one, raw handle 0), and a consumer is
    ordered after it. A per-thread default stream (2) leaves the import to
    our work stream, before which the producer orders its writes."""
    run(fake_lib, r"""
    import sys, types
    prod, cons = new_stream("prod"), new_stream("cons")
    current = {0: prod, 1: 0}
    torch = types.ModuleType("torch")
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: current[d])
    sys.modules["torch"] = torch
    asked = []
    class TorchLike(Producer):
        def __dlpack__(self, stream=None, **kw):
            asked.append(stream)
            return Producer.__dlpack__(self, stream=stream, **kw)
    TorchLike.__module__ = "torch"
    x = dlbridge.zeros(1024, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 7.0, prod)
    reset()
    t = dlbridge.from_dlpack(TorchLike(x, prod))
    assert asked == [prod] and t._stream == prod and log() == [], (asked, hex(t._stream), log())
    cap = t.__dlpack__(stream=cons, max_version=(1, 3))  # the consumer's handshake
    assert log() == ["r prod", "w cons<-prod"], log()
    assert read_f32(t, cons) == [7.0]
    current[0] = 0  # PyTorch's default stream: the legacy one, DLPack's 1
    reset()
    t2 = dlbridge.from_dlpack(TorchLike(x, 1))
    assert asked[-1] == 1 and t2._stream == 1 and log() == [], (asked, hex(t2._stream), log())
    current[0] = 2  # a per-thread default stream: our work stream, as for any producer
    reset()
    t3 = dlbridge.from_dlpack(TorchLike(x, prod))
    assert asked[-1] == WORK and t3._stream == WORK and log() == ["r prod", "w work<-prod"], log()
    """)


def test_copy_between_private_device_tensors_stays_in_flight(fake_lib):
    """copy_ between device tensors that only dlbridge can reach stays in
    flight (PyTorch's cost: no synchronization) and is not ordered after
    the legacy default stream (no other library can reach either tensor),
    and every way out of
    dlbridge makes it complete again: a live export, a view, data_ptr,
    the CUDA array interface, memory dlbridge did not allocate. Readers
    through dlbridge see the copied data either way."""
    run(fake_lib, r"""
    import numpy as np
    def fresh():
        t = dlbridge.arange(256, dtype="float32", device="cuda")
        dlbridge.synchronize(0)
        return t
    src, dst = fresh(), dlbridge.zeros(256, dtype="float32", device="cuda")
    dlbridge.synchronize(0)
    fake.fakecuda_calls.restype = ctypes.c_long
    queries = lambda: fake.fakecuda_calls(b"cuStreamQuery")  # noqa: E731
    n = queries()
    dst.copy_(src)
    assert dst._stream == WORK, "a copy between private tensors should stay in flight"
    assert queries() == n, "no other library can reach private memory: no legacy-stream query"
    assert float(np.from_dlpack(dst.to("cpu")).sum()) == sum(range(256))  # ordered after it
    cap = dst.__dlpack__(max_version=(1, 3))  # a live export: someone else can read dst
    dst.copy_(src)
    assert dst._stream == 0, "copy_ into an exported tensor must be complete on return"
    del cap
    dst.copy_(src)
    assert dst._stream == WORK, "the export is gone: private again"
    view = dst[:128]
    dst.copy_(src)
    assert dst._stream == 0, "a view holds the memory too"
    view.close()
    s2 = fresh()
    s2.data_ptr()  # the address went out: s2 may be written behind dlbridge's back
    dst.copy_(s2)
    assert dst._stream == 0
    d2 = dlbridge.zeros(256, dtype="float32", device="cuda")
    d2.__cuda_array_interface__
    n = queries()
    d2.copy_(src)
    assert d2._stream == 0
    assert queries() > n, "d2's address went out: ordered after the legacy stream"
    d3 = dlbridge.zeros(256, dtype="float32", device="cuda")
    d3.copy_(src, non_blocking=True)
    assert d3._stream == WORK
    alias = dlbridge.from_pointer(dst.data_ptr(), (256,), "float32", device="cuda:0", owner=dst)
    alias.copy_(src)
    assert alias._stream == 0, "memory dlbridge did not allocate: complete on return"
    """)


def test_write_through_a_view_orders_every_view(fake_lib):
    """A write left in flight through one view (copy_ with non_blocking) is
    pending on the memory: an export of the parent or of another view, and
    the parent's CUDA array interface, order the consumer after it."""
    run(fake_lib, r"""
    import numpy as np
    cons = new_stream("cons")
    t = dlbridge.zeros(256, dtype="float32", device="cuda")
    src = dlbridge.arange(128, dtype="float32", device="cuda")
    np.from_dlpack(t.to("cpu")); np.from_dlpack(src.to("cpu"))
    t.copy_(t)  # settle: nothing pending on t, as each object knows
    assert t._stream == 0
    head, tail = t[:128], t[128:]
    reset()
    head.copy_(src, non_blocking=True)
    assert head._stream == WORK
    # the C base's cached stream follows the memory (_core.c's writes_epoch)
    assert t._stream == WORK and tail._stream == WORK, (t._stream, tail._stream)
    assert t.__cuda_array_interface__["stream"] == WORK
    cap = t.__dlpack__(stream=cons, max_version=(1, 3))
    assert "w cons<-work" in log(), log()
    assert read_f32(t, cons) == sorted(set(range(128)) | {0}), read_f32(t, cons)[:4]
    """)


def test_cai_import_from_a_side_stream(fake_lib):
    """CAI v3 import: the producer's stream is the pending write; a copy
    made by dlbridge orders after it, and the legacy stream never waits."""
    run(fake_lib, r'''
    side = new_stream("side")
    x = dlbridge.zeros(256, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 3.0, side)
    reset()
    t = dlbridge.asarray(CAIOn(x, side))
    assert t._stream == side and log() == []
    assert t.sum() == 3.0 * 256
    assert "w work<-side" in log() and not any(e.startswith("w legacy") for e in log()), log()
    ''')


def test_copy_from_numpy_to_a_device(fake_lib):
    """copy_ of NumPy arrays in any layout into device tensors (the buffer
    path of the extension) lands exactly,
    complete on return, on the stream given."""
    run(fake_lib, r'''
    import numpy as np
    base = np.arange(24 * 10, dtype=np.float64).reshape(24, 10)
    for a in (base, base[::2, 1::3], base[::-1], base.T, base.astype(np.float32), np.array(7.0)):
        for dtype in ("float32", "float64", "int32"):
            g = dlbridge.zeros(a.shape, dtype=dtype, device="cuda")
            g.copy_(a)
            assert np.array_equal(np.from_dlpack(g.to("cpu")), a.astype(dtype)), (a.shape, dtype)
    s = new_stream("s")
    g = dlbridge.zeros((10, 24), dtype="float64", device="cuda")
    g.copy_(base.T, stream=s)
    assert np.array_equal(np.from_dlpack(g.to("cpu")), base.T)
    # Into a tensor only dlbridge can reach the copy may stay in flight (the
    # array is done with: the driver staged it); once the tensor's address
    # is out, copy_ is complete on return.
    a = np.arange(4096, dtype=np.float32)
    g = dlbridge.zeros(4096, device="cuda")
    g.copy_(a)
    a[:] = -1  # the copy must not see this
    assert g._stream in (0, WORK) and g.sum() == float(np.arange(4096).sum())
    g.data_ptr()
    g.copy_(a)
    assert g._stream == 0 and g.sum() == -4096.0
    ''')


def test_copy_to_and_streams(fake_lib):
    """copy_ and to with stream objects of every kind, non_blocking, cuda:1,
    cuda_host, pin_memory and is_pinned, and the pools in debug_stats."""
    run(fake_lib, r'''
    import numpy as np
    s = new_stream("s")
    class TorchLikeStream:  cuda_stream = s
    class CupyLikeStream:   ptr = s
    class CoreLike:
        def __cuda_stream__(self): return (0, s)
    a = np.arange(4096, dtype=np.float32)
    for st in (None, s, TorchLikeStream(), CupyLikeStream(), CoreLike()):
        g = dlbridge.empty(4096, device="cuda")
        g.data_ptr()  # its address is out: a blocking copy_ is complete on return
        g.copy_(a, stream=st)
        assert g._stream == 0 and g.sum() == float(a.sum())   # complete on return
        g.copy_(a * 2, stream=st, non_blocking=True)
        assert g.sum() == 2 * float(a.sum())                  # dlbridge's readers wait
    g = dlbridge.empty(4096, device="cuda")
    g.data_ptr()
    g.copy_(a, stream=None, non_blocking=True)
    assert g._stream == WORK                                         # None: dlbridge's work stream
    g.copy_(a, stream=0, non_blocking=True)
    assert g._stream == 1 and g.sum() == float(a.sum())              # 0 is CUDA's NULL stream
    for bad in (True, "s", object()):
        try:
            g.copy_(a, stream=bad)
        except TypeError:
            pass
        else:
            raise AssertionError("stream %r accepted" % (bad,))
    # A stream of another device is refused before Go queues anything on
    # it, also as a bare integer handle, whose device Go asks the driver.
    s1 = dlbridge.Stream(device=1)
    g = dlbridge.empty(4096, device="cuda")
    for call in (lambda: g.copy_(a, stream=s1), lambda: g.to("cpu", stream=s1),
                 lambda: g.copy_(dlbridge.empty(4096, device="cuda"), stream=s1),
                 lambda: g.copy_(a, stream=s1.cuda_stream), lambda: g.to("cpu", stream=s1.cuda_stream),
                 lambda: g.copy_(dlbridge.empty(4096, device="cuda"), stream=s1.cuda_stream)):
        try:
            call()
        except ValueError as e:
            assert "stream= is a stream of cuda:1, but this copy runs on cuda:0" in str(e), e
        else:
            raise AssertionError("a cuda:1 stream was accepted for a cuda:0 copy")
    g.copy_(a)
    assert g.to("cuda:1", stream=s1).sum() == float(a.sum())  # a peer copy may run on either device's stream
    g = dlbridge.arange(1 << 16, dtype="float32", device="cuda")
    h = g.to("cpu")
    assert h.device == "cpu" and h.is_pinned() and np.array_equal(np.from_dlpack(h), np.arange(1 << 16, dtype=np.float32))
    st = dlbridge.debug_stats()
    assert st["pinned_pool"]["in_use"] >= 1 << 18 and st["pinned_pool"]["limit"] == 4 << 30, st
    assert st["device_pool"][0]["used"] >= 1 << 18, st
    del h
    import gc; gc.collect()
    assert dlbridge.debug_stats()["pinned_pool"]["cached"] >= 1 << 18
    g1 = g.to("cuda:1", stream=None)
    assert g1.device == "cuda:1" and g1.sum() == g.sum()
    pinned = dlbridge.zeros(16, dtype="int32", device="cuda_host")
    assert pinned.device == "cuda_host:0" and pinned.is_pinned() and pinned.sum() == 0
    assert dlbridge.arange(5, device="cuda_host").tolist() == [0, 1, 2, 3, 4]
    p = dlbridge.arange(8, dtype="float64").pin_memory()
    assert p.device == "cpu" and p.is_pinned() and p.tolist() == list(range(8))
    assert p.pin_memory() is p and not dlbridge.arange(3).is_pinned()
    c = g.cuda(1, non_blocking=True)
    assert c.device == "cuda:1" and c.to("cpu").tolist()[-1] == 65535.0
    dlbridge.set_pinned_pool_limit(0)
    h = g.to("cpu")
    assert not h.is_pinned() and dlbridge.debug_stats()["pinned_pool"]["cached"] == 0
    try:
        dlbridge.set_pinned_pool_limit(-1)
    except ValueError:
        pass
    else:
        raise AssertionError("negative limit accepted")
    ''')


def test_strided_writes_leave_the_gaps(fake_lib):
    """fill_, copy_ and converting copy_ into every other column of a device
    matrix write no byte of the other columns (the fake counts writes to
    guarded bytes)."""
    run(fake_lib, r'''
    import numpy as np
    m = dlbridge.zeros((64, 256), dtype="float32", device="cuda")
    assert m.sum() == 0  # the zeroing has run
    mask = (ctypes.c_ubyte * (4 * 64 * 256))(*([0] * 4 + [1] * 4) * (64 * 128))
    fake.fakecuda_guard(u64(m.data_ptr()), ctypes.c_size_t(len(mask)), mask)
    v = m[:, ::2]
    v.fill_(5)
    v.copy_(np.full((64, 128), 9, dtype=np.float32))
    v.copy_(np.full((64, 128), 11, dtype=np.float64))
    v.copy_(np.full((64, 128), 13, dtype=np.int16))
    assert fake.fakecuda_guard_hits() == 0, fake.fakecuda_guard_hits()
    fake.fakecuda_guard(u64(0), ctypes.c_size_t(0), None)
    a = np.from_dlpack(m.to("cpu"))
    assert (a[:, ::2] == 13).all() and (a[:, 1::2] == 0).all()
    ''')


def test_default_stream_does_not_wait_for_imports(fake_lib):
    """What torch.cuda.default_stream().query() checks on a GPU: importing
    from a producer on a side stream queues nothing on the legacy stream."""
    run(fake_lib, r'''
    side = new_stream("side")
    x = dlbridge.zeros(64, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 1.0, side)
    reset()
    for _ in range(3):
        dlbridge.from_dlpack(Producer(x, side))
    assert all("legacy" not in e for e in log()), log()
    assert fake.cuStreamQuery(vp(1)) == 0  # the legacy stream has nothing queued
    ''')


def test_cai_import_then_dlbridge_import(fake_lib):
    """A tensor imported through CAI (pending on the producer's stream) and
    imported again by dlbridge: the second import orders after the first."""
    run(fake_lib, r'''
    side, cons = new_stream("side"), new_stream("cons")
    x = dlbridge.zeros(256, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 4.0, side)
    t = dlbridge.asarray(CAIOn(x, side))
    u = dlbridge.from_dlpack(t)
    cap = u.__dlpack__(stream=cons, max_version=(1, 3))
    assert read_f32(u, cons) == [4.0], read_f32(u, cons)
    ''')


def test_exchange_api_consumer_of_a_cai_import(fake_lib):
    """A consumer of the DLPack 1.3 C exchange API (as tvm-ffi is) takes a
    CAI-imported tensor: managed_tensor_from_py_object_no_sync, then it
    waits for current_work_stream, then reads."""
    run(fake_lib, r'''
    side, cons = new_stream("side"), new_stream("cons")
    x = dlbridge.zeros(256, dtype="float32", device="cuda")
    x.copy_(x)
    slow_write(x, 6.0, side)
    t = dlbridge.asarray(CAIOn(x, side))
    class Hdr(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev", vp)]
    class API(ctypes.Structure):
        _fields_ = [("hdr", Hdr), ("alloc", vp), ("from_py", vp), ("to_py", vp), ("dltensor", vp), ("stream", vp)]
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = vp, [ctypes.py_object, ctypes.c_char_p]
    api = API.from_address(get(type(t).__dlpack_c_exchange_api__, b"dlpack_exchange_api"))
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(vp))(api.from_py)
    work = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(vp))(api.stream)
    mt, s, ev = vp(), vp(), vp()
    assert from_py(t, ctypes.byref(mt)) == 0 and work(2, 0, ctypes.byref(s)) == 0
    assert fake.cuEventCreate(ctypes.byref(ev), 2) == 0
    assert fake.cuEventRecord(ev, s) == 0 and fake.cuStreamWaitEvent(vp(cons), ev, 0) == 0
    got = read_f32(t, cons)
    ctypes.CFUNCTYPE(None, vp)(vp.from_address(mt.value + 16).value)(mt)  # the deleter
    assert got == [6.0], got
    ''')


def test_free_after_the_consumer_stream_is_destroyed(fake_lib):
    """A tensor exported to consumers' streams (DLPack stream=, copy_ on
    theirs) is freed after those streams are destroyed: the free waits for
    the marked uses and names no destroyed stream (on the H100 the chain
    matrix crashed in cuEventRecord on one)."""
    run(fake_lib, r'''
    import numpy as np
    g = dlbridge.arange(1 << 12, dtype="float32", device="cuda")
    c1, c2 = new_stream("c1"), new_stream("c2")
    cap = g.__dlpack__(stream=c1)
    del cap
    g.copy_(np.ones(1 << 12, dtype=np.float32), stream=c2, non_blocking=True)
    assert g.sum() == float(1 << 12)
    for s in (c1, c2):
        assert fake.cuStreamSynchronize(vp(s)) == 0
        assert fake.cuStreamDestroy_v2(vp(s)) == 0
    del g
    ''')
