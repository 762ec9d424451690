"""A Python rank of the mixed NCCL jobs of test_nccl.py: joined from the
environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) with
Go ranks, it runs one of the scenarios that the Go ranks run
(nccl/rank_test.go, the nccl package's test binary started with
NCCL_TEST_SCENARIO), operation for operation in the same order and with
the same data, and checks every result:

    python nccl_rank.py ops|kill|hang|example|pair|api

Tensors are PyTorch CUDA tensors where torch has CUDA (the GPU machine),
else dlbridge tensors made from NumPy arrays on the (fake) CUDA device.
Prints "rank R ok" and exits 0, or says what went wrong and exits 1.
"""

import gc
import os
import signal
import sys
import time

import numpy

import dlbridge
import dlbridge.nccl as nccl


class DlbridgeTensors:
    """dlbridge tensors on the CUDA device, from NumPy."""

    name = "dlbridge"

    def __init__(self, dev):
        self.dev = "cuda:%d" % dev

    def tensor(self, values, dtype, shape=None):
        if dtype == "bfloat16":  # NumPy has none: every test value is one number
            assert len(set(values)) == 1
            return dlbridge.empty((len(values),), "bfloat16", self.dev).fill_(values[0])
        a = numpy.array(values, dtype=dtype)
        return dlbridge.asarray(a if shape is None else a.reshape(shape)).to(self.dev)

    def empty(self, n, dtype):
        return dlbridge.zeros((n,), dtype, self.dev)

    def host(self, t):
        return t.to("cpu").tolist()


class TorchTensors:
    """PyTorch CUDA tensors, on torch's current stream."""

    name = "torch"

    def __init__(self, dev):
        import torch
        self.torch = torch
        torch.cuda.set_device(dev)
        self.dev = torch.device("cuda", dev)

    def tensor(self, values, dtype, shape=None):
        t = self.torch.tensor(values, dtype=getattr(self.torch, dtype), device=self.dev)
        return t if shape is None else t.reshape(shape)

    def empty(self, n, dtype):
        return self.torch.zeros(n, dtype=getattr(self.torch, dtype), device=self.dev)

    def host(self, t):
        return t.tolist()  # on torch's current stream, after the operation


def backend(dev):
    try:
        import torch
        if torch.cuda.is_available():
            return TorchTensors(dev)
    except ImportError:
        pass
    return DlbridgeTensors(dev)


def check(what, got, want):
    if list(got) != list(want):
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def ops(world, B):
    """scenarioOps of nccl/rank_test.go."""
    c = world.comm
    r, n, k = c.rank, c.size, 6

    src, dst = B.tensor([10 * r + i for i in range(k)], "float32"), B.empty(k, "float32")
    c.all_reduce(src, output=dst)
    check("all_reduce sum", B.host(dst), [10 * n * (n - 1) // 2 + n * i for i in range(k)])
    isrc, idst = B.tensor([(r * 7 + i) % n for i in range(k)], "int32"), B.empty(k, "int32")
    c.all_reduce(isrc, "max", output=idst)
    check("all_reduce max", B.host(idst), [n - 1] * k)
    inplace = B.tensor([r + 1] * k, "int64")
    c.all_reduce(inplace, "prod")
    fact = 1
    for q in range(1, n + 1):
        fact *= q
    check("all_reduce prod in place", B.host(inplace), [fact] * k)

    h = B.tensor([r + 0.5] * k, "float16")
    c.all_reduce(h)
    check("all_reduce float16", B.host(h), [n * n / 2] * k)
    b = B.tensor([2.0 * r] * k, "bfloat16")
    c.all_reduce(b, "max")
    check("all_reduce bfloat16 max", B.host(b), [2.0 * (n - 1)] * k)
    u = B.tensor([200 - r + i for i in range(k)], "uint8")
    c.all_reduce(u, "min")
    check("all_reduce uint8 min", B.host(u), [200 - (n - 1) + i for i in range(k)])

    bc = B.tensor([100 * r + i for i in range(k)], "float32")
    c.broadcast(bc, 1)
    check("broadcast", B.host(bc), [100 + i for i in range(k)])

    dsrc, ddst = B.tensor([4.0 * r] * k, "float64"), B.empty(k, "float64")
    c.reduce(dsrc, 2 % n, "avg", output=ddst)
    if r == 2 % n:
        check("reduce avg", B.host(ddst), [4 * n * (n - 1) / 2 / n] * k)

    gsrc, gdst = B.tensor([10 * r + i for i in range(2)], "int32"), B.empty(2 * n, "int32")
    c.all_gather(gdst, gsrc)
    check("all_gather", B.host(gdst), [10 * (i // 2) + i % 2 for i in range(2 * n)])
    rsrc, rdst = B.tensor([i + r for i in range(2 * n)], "int32"), B.empty(2, "int32")
    c.reduce_scatter(rdst, rsrc)
    check("reduce_scatter", B.host(rdst), [n * (2 * r + i) + n * (n - 1) // 2 for i in range(2)])

    nxt, prev = (r + 1) % n, (r - 1) % n
    out, inp = B.tensor([1000 * r + i for i in range(3)], "float32"), B.empty(3, "float32")
    with c.group() as g:
        g.send(out, nxt)
        g.recv(inp, prev)
    check("send/recv ring", B.host(inp), [1000 * prev + i for i in range(3)])

    asrc, adst = B.tensor([100 * r + i // 2 for i in range(2 * n)], "int64"), B.empty(2 * n, "int64")
    c.all_to_all(adst, asrc)
    check("all_to_all", B.host(adst), [100 * (i // 2) + r for i in range(2 * n)])

    sub = c.split(r % 2, r)
    one = B.tensor([r], "int32")
    sub.all_reduce(one)
    check("split all_reduce", B.host(one), [sum(range(r % 2, n, 2))])
    if (sub.rank, sub.size) != (r // 2, (n + 1 - r % 2) // 2):
        raise AssertionError("split: rank %d of %d, want %d of %d" % (sub.rank, sub.size, r // 2, (n + 1 - r % 2) // 2))
    sub.finalize()
    c.wait()
    c.finalize()


def kill(world, B):
    """scenarioKill: the last rank is killed once the communicator is up;
    the others' next all-reduce fails within the deadline naming it, and
    they go on with a communicator of the survivors."""
    c = world.comm
    if world.rank == world.size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    v = B.tensor([1, 2], "float32")
    start = time.monotonic()
    try:
        c.all_reduce(v)
        c.wait()
    except nccl.NCCLError as e:
        err = e
    else:
        raise AssertionError("all_reduce with a dead rank succeeded")
    took = time.monotonic() - start
    # A rank still in its initialization when the last one died fails
    # that call, and the all-reduce reports it (scenarioKill says so too).
    if err.op not in ("all_reduce", "init") or err.missing != [world.size - 1]:
        raise AssertionError("all_reduce with a dead rank: %s: op %r, missing %r; want all_reduce (or init), [%d]"
                             % (err, err.op, err.missing, world.size - 1))
    print("expected failure:", type(err).__name__, err, flush=True)
    # The fake, as NCCL over NVLink once connected, never sees the rank exit:
    # the control plane ends the wait (nccl.ErrPeerGone), as in the Go ranks.
    fake = os.environ.get("DLBRIDGE_GPU") != "1" and os.environ.get("FAKENCCL_PEER_CHECK") != "1"
    if fake and "a rank of the communicator exited" not in str(err):
        raise AssertionError("NCCL does not see the rank exit: the control plane must end the wait: %r" % err)
    if took > c.timeout / 2:
        raise AssertionError("the failure took %.1f s: a rank known gone must end the wait at once, not near "
                             "the timeout %.1f s" % (took, c.timeout))
    try:
        c.all_reduce(v)
    except nccl.NCCLError:
        pass
    else:
        raise AssertionError("an operation on the failed communicator succeeded")
    nc = world.rebuild()
    if (nc.size, nc.rank) != (world.size - 1, world.rank):
        raise AssertionError("rebuilt: rank %d of %d, want %d of %d" % (nc.rank, nc.size, world.rank, world.size - 1))
    x = B.tensor([world.rank], "float32")
    nc.all_reduce(x)
    m = world.size - 1
    check("all_reduce after rebuild", B.host(x), [m * (m - 1) / 2])
    nc.finalize()


def hang(world, B):
    """scenarioHang: the last rank stays alive but never comes; the others
    fail by the deadline, with a TimeoutError that names it."""
    c = world.comm
    if world.rank == world.size - 1:
        time.sleep(3 * c.timeout)
        return
    v = B.tensor([1], "int32")
    try:
        c.all_reduce(v)
        c.wait()
    except nccl.NCCLTimeoutError as e:
        err = e
    else:
        raise AssertionError("all_reduce with a hung rank did not time out")
    if not isinstance(err, TimeoutError) or err.missing != [world.size - 1] or "alive, issued 0 operations" not in str(err):
        raise AssertionError("all_reduce with a hung rank: %r (missing %r): want a timeout naming rank %d, alive"
                             % (err, err.missing, world.size - 1))
    print("expected failure:", type(err).__name__, err, flush=True)
    time.sleep(3)  # stay in the job until the other survivors asked about it


def expect(exc, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        if text not in str(e):
            raise AssertionError("%s: %r does not say %r" % (fn.__name__, e, text))
        return e
    raise AssertionError("%s%r: no %s" % (fn.__name__, args, exc.__name__))


def api():
    """One rank alone: the checks of arguments and of the life cycle."""
    dev = int(os.environ.get("LOCAL_RANK", "0"))
    B = backend(dev)
    uid = nccl.get_unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128, uid
    expect(ValueError, "has 127 bytes", nccl.Communicator, 1, uid[:127], 0, dev)
    expect(TypeError, "unique_id must be", nccl.Communicator, 1, 3.5, 0, dev)
    expect(ValueError, "want 0 <= rank < nranks", nccl.Communicator, 1, uid, 1, dev)
    expect(ValueError, "timeout", nccl.Communicator, 1, uid, 0, dev, -1)
    # CuPy's form of an id: a tuple of 128 signed chars.
    cupy_form = tuple(b - 256 if b > 127 else b for b in uid)
    c = nccl.Communicator(1, cupy_form, 0, dev, timeout=30)
    assert (c.rank, c.size, c.device, c.rank_id(), c.device_id()) == (0, 1, dev, 0, dev), c
    assert c.timeout == 30.0
    x = B.tensor([1.0, 2.0, 3.0], "float32")
    expect(ValueError, "reduction 'bogus'", c.all_reduce, x, "bogus")
    expect(ValueError, "reduction 9", c.all_reduce, x, 9)
    expect(ValueError, "dst has 2 elements, src 3", c.all_reduce, x, output=B.empty(2, "float32"))
    expect(TypeError, "dtype", c.all_reduce, x, output=B.empty(3, "int32"))
    expect(ValueError, "root 1 outside [0, 1)", c.broadcast, x, 1)
    expect(ValueError, "peer 5 outside [0, 1)", c.send, x, 5)
    expect(TypeError, "__dlpack__", c.all_reduce, [1.0, 2.0])
    expect(TypeError, "device", c.all_reduce, numpy.zeros(3, numpy.float32))
    if dlbridge.cuda_device_count() > 1:
        other = dlbridge.Stream(device=1 - min(dev, 1))
        want = "stream= is a stream of cuda:%d, but this dlbridge.nccl.all_reduce runs on cuda:%d" % (1 - min(dev, 1), dev)
        expect(ValueError, want, c.all_reduce, x, stream=other)
        # A bare handle says no device: Go's stream policy asks the driver.
        expect(ValueError, want, c.all_reduce, x, stream=other.cuda_stream)
        with c.group() as g:
            expect(ValueError, want.replace("all_reduce", "send"), g.send, x, 0, stream=other.cuda_stream)
    s = dlbridge.Stream(device=dev)
    c.all_reduce(x, "max", stream=s)
    s.synchronize()
    check("all_reduce of one rank", B.host(x), [1.0, 2.0, 3.0])

    class Foreign:  # a producer that is no dlbridge tensor: the group's add imports it for itself
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    with c.group() as g:
        g.all_reduce(Foreign(x), "sum")
        gc.collect()  # the add's import is gone before the group launches
    dlbridge.synchronize(dev)
    check("a group over an imported tensor", B.host(x), [1.0, 2.0, 3.0])
    assert c.async_error() is None
    c.abort()
    e = expect(nccl.NCCLError, "aborted", c.all_reduce, x)
    assert e.op == "all_reduce" and isinstance(c.async_error(), nccl.NCCLError), (e.op, c.async_error())
    c.close()
    expect(ValueError, "closed", c.all_reduce, x)
    c.close()  # a second close does nothing
    assert nccl._core.dlb_nccl_live() == 0, nccl._core.dlb_nccl_live()
    print("api ok", flush=True)


def slow(torch, x, values, side):
    """Writes values into x on stream side after a kernel that spins for
    about 50 ms (a slow producer): a reader not ordered after it reads what
    x held before."""
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        x.copy_(torch.tensor(values, dtype=x.dtype).to(x.device, non_blocking=True))


def example(world, B):
    """The exchanges of examples/nccl (its Go program is the other rank),
    each input written by a slow producer on a side stream: the all-reduce
    runs on that stream (torch's current one there); the ring's sends and
    receives on another stream, ordered after the producer by dlbridge."""
    torch = B.torch
    c = world.comm
    r, n = c.rank, c.size
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(2, device=B.dev)
    slow(torch, x, [r + 1.0, r + 1.0], side)
    with torch.cuda.stream(side):
        c.all_reduce(x)  # on torch's current stream: side
    side.synchronize()
    check("all_reduce after a slow producer", x.tolist(), [n * (n + 1) / 2] * 2)
    out, into = torch.zeros(2, device=B.dev), torch.zeros(2, device=B.dev)
    slow(torch, out, [100.0 * r, 100.0 * r + 1], side)
    with torch.cuda.stream(side):
        t_out = dlbridge.from_dlpack(out)  # pending on side, where the producer wrote
    with c.group() as g:
        g.send(t_out, (r + 1) % n, stream=other)  # other waits for side on the GPU
        g.recv(into, (r - 1) % n, stream=other)
    other.synchronize()
    prev = (r - 1) % n
    check("ring after a slow producer", into.tolist(), [100.0 * prev, 100.0 * prev + 1])
    c.finalize()


def pair():
    """Two Python ranks of one communicator, one of them CuPy's
    NcclCommunicator (NCCL_PAIR_LIB=cupy), with a unique id that rank 0
    makes (with dlbridge or CuPy, NCCL_PAIR_ID=dlbridge|cupy) and hands
    over in the file NCCL_PAIR_FILE."""
    rank, lib = int(os.environ["RANK"]), os.environ["NCCL_PAIR_LIB"]
    path, maker = os.environ["NCCL_PAIR_FILE"], os.environ["NCCL_PAIR_ID"]
    if rank == 0:
        if maker == "cupy":
            from cupy.cuda import nccl as cnccl
            uid = bytes(b & 0xFF for b in cnccl.get_unique_id())
        else:
            uid = nccl.get_unique_id()
        with open(path + ".tmp", "wb") as f:
            f.write(uid)
        os.rename(path + ".tmp", path)
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise AssertionError("no unique id in %s" % path)
            time.sleep(0.01)
        with open(path, "rb") as f:
            uid = f.read()
    n, k = 2, 1 << 20
    if lib == "cupy":
        import cupy
        from cupy.cuda import nccl as cnccl
        cupy.cuda.Device(rank).use()
        try:  # CuPy 13 and later take the id as bytes, earlier ones as a tuple of signed chars
            comm = cnccl.NcclCommunicator(n, uid, rank)
        except TypeError:
            comm = cnccl.NcclCommunicator(n, tuple(b - 256 if b > 127 else b for b in uid), rank)
        s = cupy.cuda.Stream(non_blocking=True)
        x = cupy.full(k, rank + 1, dtype=cupy.float32)
        comm.allReduce(x.data.ptr, x.data.ptr, k, cnccl.NCCL_FLOAT32, cnccl.NCCL_SUM, s.ptr)
        b = cupy.full(k, 7 * rank, dtype=cupy.float32)
        comm.broadcast(b.data.ptr, b.data.ptr, k, cnccl.NCCL_FLOAT32, 1, s.ptr)
        out, into = cupy.full(k, 10.0 * rank, dtype=cupy.float32), cupy.zeros(k, dtype=cupy.float32)
        cnccl.groupStart()
        comm.send(out.data.ptr, k, cnccl.NCCL_FLOAT32, 1 - rank, s.ptr)
        comm.recv(into.data.ptr, k, cnccl.NCCL_FLOAT32, 1 - rank, s.ptr)
        cnccl.groupEnd()
        s.synchronize()
        got = [float(x[0]), float(x[-1]), float(b[0]), float(b[-1]), float(into[0]), float(into[-1])]
        comm.destroy()
    else:
        import torch
        torch.cuda.set_device(rank)
        c = nccl.Communicator(n, uid, rank, device=rank, timeout=60)
        side = torch.cuda.Stream()
        x = torch.zeros(k, device="cuda")
        slow(torch, x, [rank + 1.0] * k, side)
        with torch.cuda.stream(side):
            c.all_reduce(x)
            b = torch.full((k,), 7.0 * rank, device="cuda")
            c.broadcast(b, 1)
            out, into = torch.full((k,), 10.0 * rank, device="cuda"), torch.zeros(k, device="cuda")
            with c.group() as g:
                g.send(out, 1 - rank)
                g.recv(into, 1 - rank)
        side.synchronize()
        got = [x[0].item(), x[-1].item(), b[0].item(), b[-1].item(), into[0].item(), into[-1].item()]
        c.finalize()
    check("%s rank %d" % (lib, rank), got, [3.0, 3.0, 7.0, 7.0, 10.0 * (1 - rank), 10.0 * (1 - rank)])
    print("rank %d ok (%s)" % (rank, lib), flush=True)


SCENARIOS = {"ops": ops, "kill": kill, "hang": hang, "example": example}


def main():
    if sys.argv[1] == "api":
        return api()
    if sys.argv[1] == "pair":
        return pair()
    scenario = SCENARIOS[sys.argv[1]]
    world = nccl.from_env()
    B = backend(world.comm.device)
    try:
        scenario(world, B)
    except Exception as e:
        print("rank %d %s (%s tensors): %s: %s" % (world.rank, sys.argv[1], B.name, type(e).__name__, e),
              file=sys.stderr, flush=True)
        os._exit(1)
    world.close()
    print("rank %d ok" % world.rank, flush=True)


if __name__ == "__main__":
    main()
