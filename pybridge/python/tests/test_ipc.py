"""dlbridge.ipc across real processes: a Go producer (internal/ipcproducer,
built with CGO_ENABLED=0) and Python consumers, Python to Python, leases,
a killed consumer, a slow producer, and multiprocessing pickling by
handle. Against the fake driver (make pytest-fakecuda) its IPC pools and
events are shared memory between the processes; on a GPU machine the real
driver's. The Go producer is DLBRIDGE_IPC_PRODUCER, or built here with go.
"""

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys

import numpy
import pytest

import dlbridge
import dlbridge.ipc

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
CONSUMER = os.path.join(HERE, "ipc_consumer.py")


def _repo_root():
    d = HERE
    while True:
        if os.path.exists(os.path.join(d, "go.mod")) and os.path.isdir(os.path.join(d, "internal", "ipcproducer")):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


@pytest.fixture(scope="module")
def producer(tmp_path_factory):
    exe = os.environ.get("DLBRIDGE_IPC_PRODUCER")
    if exe:
        return exe
    go, root = shutil.which("go"), _repo_root()
    if go is None or root is None:
        pytest.skip("needs go and the repository (or DLBRIDGE_IPC_PRODUCER) for the Go producer")
    exe = str(tmp_path_factory.mktemp("ipc") / "ipcproducer")
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run([go, "build", "-o", exe, "./internal/ipcproducer"], cwd=root, env=env, check=True)
    return exe


def _start(args, env=None, stdin=None):
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, stdin=stdin,
                            env=dict(os.environ, **(env or {})))


def _line(p, prefix):
    line = p.stdout.readline()
    assert line.startswith(prefix), "got %r, want %r..." % (line, prefix)
    return line.split()[1:]


def _consumer(mode, sock, n, env=None, stdin=None):
    return _start([sys.executable, CONSUMER, mode, sock, str(n)], env, stdin)


def _run_go(producer, sock, consumer_mode, n, window=8, producer_env=None, kill=False, consumer_env=None):
    # The fake aborts a Go producer that frees a block a consumer still
    # maps (the driver's rule: importers free first), unless a control
    # drops that order on purpose.
    env = dict({"FAKECUDA_IPC_STRICT": "1"}, **(producer_env or {}))
    prod = _start([producer, "-sock", sock, "-n", str(n), "-elems", "1024", "-window", str(window)], env)
    base = int(_line(prod, "baseline")[0])
    cons = _consumer(consumer_mode, sock, n, consumer_env)
    try:
        if kill:
            held = int(_line(cons, "holding")[0])
            assert held > 0
            cons.send_signal(signal.SIGKILL)
            cons.wait(60)
            out = None
        else:
            out = cons.stdout.read()
            assert cons.wait(120) == 0, out
        sent = int(_line(prod, "sent")[0])
        used, live = map(int, _line(prod, "final"))
        assert prod.wait(60) == 0
    finally:
        for p in (prod, cons):
            if p.poll() is None:
                p.kill()
                p.wait()
    return base, sent, used, live, out


def test_go_producer_python_consumer(producer, tmp_path):
    """1,000 tensors from a CGO_ENABLED=0 Go process, each checked in
    Python; every lease comes back: the pool returns to its baseline."""
    base, sent, used, live, out = _run_go(producer, str(tmp_path / "s"), "check", 1000)
    assert sent == 1000
    assert "ok 1000" in out
    assert (used, live) == (base, 0)


def test_killed_consumer_gives_leases_back(producer, tmp_path):
    """A consumer killed while it holds tensors: the producer's pool
    returns to its baseline all the same."""
    base, sent, used, live, _ = _run_go(producer, str(tmp_path / "s"), "hold", 500, window=64, kill=True)
    assert sent >= 50
    assert (used, live) == (base, 0)


def test_slow_producer_never_read_early(producer, fake_driver, tmp_path):
    """The producer's writes run late (the fake runs its stream 200 ms after
    each ready record): the consumer still sees every value, while direct
    reads that skip the wait see the memory before the write."""
    base, sent, used, live, out = _run_go(producer, str(tmp_path / "s"), "early", 5, window=1,
                                          producer_env={"FAKECUDA_IPC_DELAY_MS": "200"})
    assert "ok 5" in out
    assert "early 0" in out, out
    assert (used, live) == (base, 0)


@pytest.mark.parametrize("round", range(50))
def test_consumer_close_unmaps_first(producer, fake_driver, tmp_path, round):
    """The slow-producer case again, 50 times, with the consumer's unmaps
    made slow (FAKECUDA_IPC_UNMAP_DELAY_MS): the consumer closes right
    after its last release while the producer trims. Its unmaps must run
    before the producer frees (the fake aborts the producer otherwise,
    FAKECUDA_IPC_STRICT): the importer unmaps, and finishes, before its
    side of the connection ends."""
    base, sent, used, live, out = _run_go(producer, str(tmp_path / "s"), "early", 2, window=1,
                                          producer_env={"FAKECUDA_IPC_DELAY_MS": "20"},
                                          consumer_env={"FAKECUDA_IPC_UNMAP_DELAY_MS": "50"})
    assert "ok 2" in out
    assert (used, live) == (base, 0)


@pytest.mark.parametrize("skip_waits", [False, True], ids=["waits", "control"])
def test_slow_consumer_reads_before_the_free(producer, fake_driver, tmp_path, skip_waits):
    """The "done" direction: the consumer copies each tensor on the tensor's
    stream and closes it at once; its stream runs 300 ms later (the fake's
    delay), after the Go producer got the lease back and allocated the next
    tensor, which takes the freed block over on the same stream. The copies
    read right because the producer's free, and so its next write, wait for
    the consumer's done event on the GPU. The control drops the producer's
    waits for other processes (FAKECUDA_IPC_SKIP_WAITS): the late copies
    then read the next tensor's values or freed memory."""
    sock = str(tmp_path / "s")
    n = 3
    prod = _start([producer, "-sock", sock, "-n", str(n), "-elems", "16384", "-window", "1"],
                  # The control frees before the consumer's unmap on purpose:
                  # the fake's check of that order only reports it.
                  {"FAKECUDA_IPC_SKIP_WAITS": "1", "FAKECUDA_IPC_STRICT": "0"} if skip_waits else None)
    try:
        base = int(_line(prod, "baseline")[0])
        cons = _consumer("slow", sock, n, {"FAKECUDA_IPC_DELAY_MS": "300"})
        got = _line(cons, "read")
        assert cons.wait(60) == 0
        assert int(_line(prod, "sent")[0]) == n
        used, live = map(int, _line(prod, "final"))
        assert prod.wait(60) == 0
    finally:
        for p in (prod,) + ((cons,) if "cons" in locals() else ()):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert (used, live) == (base, 0)
    want = [str(i + 1) for i in range(n)]
    if skip_waits:
        assert got != want, "without the producer's waits the late copies still read right: the fake reused nothing early"
    else:
        assert got == want, "the late copies read %s: the producer's free did not wait for the done event" % got


def _py_producer(sock, n, ready):
    pool = dlbridge.ipc.Pool(0, 64 << 20)
    ln = dlbridge.ipc.listen(sock)
    ready.set()
    conn = ln.accept()
    for i in range(n):
        t = pool.empty((n + 1, 3), "uint32")
        t.fill_(i + 1)
        conn.send(t, pool)
        t.close()
    while conn.leases:
        pass
    conn.close()
    return pool


def test_python_to_python(tmp_path):
    """A Python producer and a Python consumer process; leases all back."""
    import threading

    sock = str(tmp_path / "s")
    ready = threading.Event()
    result = {}
    th = threading.Thread(target=lambda: result.update(pool=_py_producer(sock, 50, ready)))
    th.start()
    ready.wait(30)
    cons = _consumer("check", sock, 50)
    out = cons.stdout.read()
    assert cons.wait(60) == 0, out
    th.join(60)
    pool = result["pool"]
    dlbridge.synchronize(0)
    assert pool.usage()[2] == 0
    pool.close()


def test_recycled_allocations_and_trim(tmp_path):
    """Tensors of one size sent one after another (each given back before
    the next): the consumer maps one allocation once, the pool caches it;
    trim() makes the consumer unmap it and brings the pool back to its
    baseline."""
    import threading

    sock = str(tmp_path / "s")
    pool = dlbridge.ipc.Pool(0, 16 << 20)
    dlbridge.synchronize(0)
    base = pool.usage()[1]
    ln = dlbridge.ipc.listen(sock)
    got = {}
    th = threading.Thread(target=lambda: got.update(conn=ln.accept()))
    th.start()
    n = 10
    cons = _consumer("recycle", sock, n, stdin=subprocess.PIPE)
    try:
        th.join(30)
        conn = got["conn"]
        ptrs = set()
        for i in range(n):
            # Two shapes of one byte size: the cache goes by size.
            t = pool.empty((16, 3) if i % 2 else (3, 16), "uint32")
            t.fill_(i + 1)
            ptrs.add(t.data_ptr())
            conn.send(t, pool)
            t.close()
            _eventually("the lease back", lambda: conn.leases == 0)
        assert len(ptrs) == 1, "the allocations were not reused: %d addresses" % len(ptrs)
        assert _line(cons, "imports") == ["1", "1"]
        assert pool.cached == (1, 16 * 3 * 4)
        assert _live(pool) == 0
        pool.trim()
        dlbridge.synchronize(0)
        assert pool.cached == (0, 0)
        assert pool.usage()[1] == base
        cons.stdin.write("\n")
        cons.stdin.flush()
        assert _line(cons, "mapped") == ["0"]
        cons.stdin.close()
        assert cons.wait(60) == 0
        conn.close()
    finally:
        _reap(cons)
        ln.close()
        pool.close()


def test_send_refuses_other_memory(driver, tmp_path):
    """Memory that is not an IPC pool's is refused with BufferError;
    Pool.copy_in makes a copy that can go. (Receiving in the same process
    works on the fake driver only: the real one opens no interprocess event
    of its own process.)"""
    sock = str(tmp_path / "s")
    pool = dlbridge.ipc.Pool(0, 1 << 20)
    ln = dlbridge.ipc.listen(sock)
    peer = dlbridge.ipc.connect(sock)
    conn = ln.accept()
    t = dlbridge.zeros(4, device="cuda:0")
    with pytest.raises(BufferError, match="not allocated from this IPC pool"):
        conn.send(t, pool)
    c = pool.copy_in(t)
    if dlbridge.cuda_device_count() > 1:
        # A stream of another device is refused before anything is sent,
        # as a stream object and as a bare handle (Go asks the driver).
        s1 = dlbridge.Stream(device=1)
        for st in (s1, s1.cuda_stream):
            with pytest.raises(ValueError, match="stream= is a stream of cuda:1, but this send runs on cuda:0"):
                conn.send(c, pool, stream=st)
    conn.send(c, pool)
    if driver.fake:
        got = peer.recv()
        assert numpy.from_dlpack(got.to("cpu")).tolist() == [0, 0, 0, 0]
        got.close()
    c.close()
    peer.close()
    conn.close()
    with pytest.raises(EOFError):
        _closed_recv(ln, sock)
    ln.close()
    pool.close()
    with pytest.raises(ValueError):
        pool.empty(3)


def _closed_recv(ln, sock):
    c = dlbridge.ipc.connect(sock)
    s = ln.accept()
    s.close()
    c.recv()


# ---- dlbridge.ipc.serve ----

def _sender(n):
    """A serve() handler: n tensors, tensor i filled with i+1, then return."""
    def handler(conn, pool):
        for i in range(n):
            t = pool.empty((n + 1, 3), "uint32")
            t.fill_(i + 1)
            conn.send(t, pool)
            t.close()
    return handler


def _eventually(what, cond, timeout=30.0):
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)


def _live(pool):
    dlbridge.synchronize(pool.device)  # the frees queued so far run
    return pool.usage()[2]


def _serve_threads():
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("dlbridge.ipc.serve")]


def _expect_ok(p, n):
    out = p.stdout.read()
    assert p.wait(60) == 0, out
    assert "ok %d" % n in out, out


def _all_back(pool, srv):
    _eventually("the leases back", lambda: _live(pool) == 0)
    _eventually("the peers' connections dropped", lambda: srv.connections == 0)


def _reap(*procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_serve_leases_outlive_the_handler(tmp_path):
    """serve() hands each peer to the handler; after the handler returned
    the connection stays, so the tensors each consumer holds keep their
    memory until it gives them back (two consumers, one after the other,
    both holding); then the pool is back at its baseline."""
    import gc

    pool = dlbridge.ipc.Pool(0, 16 << 20)
    sock = str(tmp_path / "s")
    with dlbridge.ipc.serve(sock, pool, _sender(5)) as srv:
        assert isinstance(srv, dlbridge.ipc.Listener) and srv.path == sock
        conss = []
        try:
            for _ in range(2):
                c = _consumer("wait", sock, 5, stdin=subprocess.PIPE)
                conss.append(c)
                assert _line(c, "holding") == ["5"]
            gc.collect()
            assert _live(pool) == 10, "a consumer's leases ended while it held the tensors"
            assert srv.connections == 2
            for c in conss:
                c.stdin.write("go\n")
                c.stdin.flush()
                _expect_ok(c, 5)
        finally:
            _reap(*conss)
        _all_back(pool, srv)
    pool.close()


def test_serve_several_consumers(tmp_path):
    """Three consumer processes at once, each served by a handler thread of
    its own, each checks every value; every lease comes back."""
    pool = dlbridge.ipc.Pool(0, 32 << 20)
    sock = str(tmp_path / "s")
    srv = dlbridge.ipc.serve(sock, pool, _sender(20))
    conss = [_consumer("check", sock, 20) for _ in range(3)]
    try:
        for c in conss:
            _expect_ok(c, 20)
    finally:
        _reap(*conss)
    _all_back(pool, srv)
    srv.close()
    pool.close()


def test_serve_killed_consumer_gives_leases_back(tmp_path):
    """A consumer killed while it holds tensors: its leases end, the pool
    returns to its baseline, serve goes on serving the next peer."""
    pool = dlbridge.ipc.Pool(0, 32 << 20)
    sock = str(tmp_path / "s")
    srv = dlbridge.ipc.serve(sock, pool, _sender(30))
    cons = _consumer("hold", sock, 30)
    try:
        assert int(_line(cons, "holding")[0]) == 3
        # The others' releases may still be on their way.
        _eventually("only the held tensors live", lambda: _live(pool) == 3)
        cons.send_signal(signal.SIGKILL)
        cons.wait(60)
    finally:
        _reap(cons)
    _all_back(pool, srv)
    nxt = _consumer("check", sock, 30)
    try:
        _expect_ok(nxt, 30)
    finally:
        _reap(nxt)
    srv.close()
    pool.close()


def _violations():
    """The fake driver's count of this process's frees of IPC blocks that
    ran while another live process mapped them (0 on a real driver)."""
    import ctypes

    path = os.environ.get("DLBRIDGE_LIBCUDA")
    if not path:
        return 0
    f = getattr(ctypes.CDLL(path), "fakecuda_ipc_violations", None)
    return int(f()) if f is not None else 0


def test_serve_close_stops_cleanly(tmp_path):
    """close() stops serving without taking memory from live consumers: a
    consumer waiting in recv gets EOFError; the tensors of one that still
    holds some stay live and right until it gives them back (its recv
    raises EOFError meanwhile), or until it is killed; then the pool is
    back at its baseline, and no free ran while a consumer mapped the
    block. serve's threads are joined, the socket is removed and the path
    can be served again."""
    pool = dlbridge.ipc.Pool(0, 32 << 20)
    sock = str(tmp_path / "s")
    before = len(_serve_threads())
    early = _violations()
    served = []

    def handler(conn, pool):
        _sender(30)(conn, pool)
        served.append(conn)

    srv = dlbridge.ipc.serve(sock, pool, handler)
    waiter = _consumer("check", sock, 31)  # waits in recv for a 31st tensor
    giver = holder = None
    try:
        _eventually("the waiter's tensors back", lambda: len(served) == 1 and _live(pool) == 0)
        giver = _consumer("give", sock, 30, stdin=subprocess.PIPE)
        assert int(_line(giver, "holding")[0]) == 3
        holder = _consumer("hold", sock, 30)
        assert int(_line(holder, "holding")[0]) == 3
        # The others' releases may still be on their way.
        _eventually("only the held tensors live", lambda: _live(pool) == 6)
        assert srv.connections == 3
        srv.close()
        out = waiter.stdout.read()
        assert waiter.wait(60) == 0, out  # its recv raised EOFError
        assert "wrong" not in out
        # The consumers that hold tensors keep them.
        import time

        time.sleep(0.2)
        assert _live(pool) == 6
        assert holder.poll() is None and giver.poll() is None
        holder.kill()
        holder.wait(60)
        _eventually("the killed holder's tensors back", lambda: _live(pool) == 3)
        giver.stdin.write("\n")
        giver.stdin.flush()
        assert _line(giver, "recv") == ["EOF"]
        assert _line(giver, "released") == ["3"]  # each still right
        assert giver.wait(60) == 0
        _eventually("the leases back", lambda: _live(pool) == 0)
        assert _violations() == early
    finally:
        _reap(*[p for p in (giver, holder, waiter) if p is not None])
    assert len(_serve_threads()) == before
    assert srv.connections == 0
    assert not os.path.exists(sock)
    srv.close()  # again: nothing to do
    with pytest.raises(ValueError):
        dlbridge.ipc.connect(sock)
    dlbridge.ipc.serve(sock, pool, _sender(0)).close()
    pool.close()


def test_serve_handler_errors_are_reported_and_serving_goes_on(tmp_path, monkeypatch):
    """An exception in a handler reaches threading.excepthook; the peer
    keeps what it was sent, and the next peer is served."""
    import threading

    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda a: seen.append(a.exc_type))
    calls = []

    def handler(conn, pool):
        calls.append(conn)
        _sender(1)(conn, pool)
        if len(calls) == 1:
            raise KeyError("the handler's own bug")

    pool = dlbridge.ipc.Pool(0, 16 << 20)
    sock = str(tmp_path / "s")
    with dlbridge.ipc.serve(sock, pool, handler):
        for _ in range(2):
            c = _consumer("check", sock, 1)
            try:
                _expect_ok(c, 1)
            finally:
                _reap(c)
    assert seen == [KeyError]
    _eventually("the leases back", lambda: _live(pool) == 0)
    pool.close()


def test_serve_bad_input(tmp_path):
    """Bad arguments are refused at once, naming what was wrong."""
    pool = dlbridge.ipc.Pool(0, 1 << 20)
    sock = str(tmp_path / "s")
    with pytest.raises(TypeError, match="handler must be callable"):
        dlbridge.ipc.serve(sock, pool, "not a function")
    with pytest.raises(TypeError, match="pool must be a dlbridge.ipc.Pool"):
        dlbridge.ipc.serve(sock, 0, _sender(1))
    with pytest.raises(TypeError, match="path must be"):
        dlbridge.ipc.serve(None, pool, _sender(1))
    with pytest.raises(TypeError, match="path must be"):
        dlbridge.ipc.serve(3, pool, _sender(1))
    with pytest.raises(ValueError, match="no such file or directory"):
        dlbridge.ipc.serve(str(tmp_path / "missing" / "s"), pool, _sender(1))
    with pytest.raises(ValueError, match="longer than the 107"):
        dlbridge.ipc.serve(str(tmp_path / ("x" * 200)), pool, _sender(1))
    with dlbridge.ipc.serve(sock, pool, _sender(1)) as srv:
        with pytest.raises(ValueError, match="address already in use"):
            dlbridge.ipc.serve(sock, pool, _sender(1))
        with pytest.raises(RuntimeError, match="accepts its peers itself"):
            srv.accept()
    assert not os.path.exists(sock) and _serve_threads() == []
    pool.close()
    with pytest.raises(ValueError, match="Pool is closed"):
        dlbridge.ipc.serve(sock, pool, _sender(1))
    assert not os.path.exists(sock)


# ---- multiprocessing: CUDA tensors pickle by handle ----

def _child_check_and_write(t, q):
    import numpy

    q.put(numpy.from_dlpack(t.to("cpu")).tolist())
    t.fill_(7)
    dlbridge.synchronize(0)
    t.close()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_pickle_by_handle_shares_memory(method):
    """Under spawn and forkserver a tensor of an IPC pool reaches the worker
    by handle: what the worker writes, the parent reads."""
    pool = dlbridge.ipc.Pool(0, 16 << 20)
    t = pool.zeros(5, "float32")
    t.fill_(3)
    ctx = multiprocessing.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_child_check_and_write, args=(t, q))
    p.start()
    assert q.get(timeout=120) == [3.0] * 5
    p.join(120)
    assert p.exitcode == 0
    assert numpy.from_dlpack(t.to("cpu")).tolist() == [7.0] * 5


def _child_write_window(t, window, q):
    import numpy

    q.put(numpy.from_dlpack(t.to("cpu")).tolist())
    window.fill_(7)
    dlbridge.synchronize(0)
    window.close()
    t.close()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_pickle_plain_cuda_tensor_shares_in_place(method):
    """Any CUDA tensor dlbridge allocated (dlbridge.zeros here, no IPC pool)
    reaches the worker by handle, in place, as torch.multiprocessing shares
    CUDA tensors: the worker's write to a slice is seen by the parent in
    the parent's tensor, and only there."""
    t = dlbridge.zeros(5, device="cuda:0")
    t.fill_(3)
    ctx = multiprocessing.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_child_write_window, args=(t, t[1:3], q))
    p.start()
    assert q.get(timeout=120) == [3.0] * 5
    p.join(120)
    assert p.exitcode == 0
    assert numpy.from_dlpack(t.to("cpu")).tolist() == [3.0, 7.0, 7.0, 3.0, 3.0]
    t.close()


class _CAIOnly:
    """Memory that reaches dlbridge from elsewhere: a producer that shows
    only __cuda_array_interface__."""

    def __init__(self, t):
        self.t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


def test_pickle_other_cuda_memory_and_by_value():
    """Memory dlbridge did not allocate goes by handle to a copy (the
    parent's tensor is untouched by the worker); asked for "value",
    tensors go by value, dlbridge's own too."""
    ctx = multiprocessing.get_context("spawn")
    own = dlbridge.zeros(4, device="cuda:0")
    own.fill_(2)
    foreign = dlbridge.asarray(_CAIOnly(own))
    for strategy, t in (("handle", foreign), ("value", own), ("value", foreign)):
        dlbridge.ipc.set_sharing_strategy(strategy)
        try:
            q = ctx.Queue()
            p = ctx.Process(target=_child_check_and_write, args=(t, q))
            p.start()
            assert q.get(timeout=120) == [2.0] * 4
            p.join(120)
            assert p.exitcode == 0
        finally:
            dlbridge.ipc.set_sharing_strategy("handle")
        assert numpy.from_dlpack(own.to("cpu")).tolist() == [2.0] * 4, (strategy, t)
    with pytest.raises(ValueError):
        dlbridge.ipc.set_sharing_strategy("bytes")


@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_torch_consumer_slow_producer(producer, tmp_path, framework):
    """Go producer -> Python consumer -> torch (or CuPy) on a stream of its
    own, through DLPack, with a producer kernel that spins 20 ms before it
    writes each tensor: every value the framework reads is the written one."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("needs torch with CUDA")
    else:
        cupy = pytest.importorskip("cupy")
        try:
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # CuPy without a usable device raises its own error type
            pytest.skip("needs CuPy with a CUDA device: %s" % e)
    sock = str(tmp_path / "s")
    prod = _start([producer, "-sock", sock, "-n", "20", "-elems", str(1 << 20), "-window", "2", "-spin", "20ms"])
    base = int(_line(prod, "baseline")[0])
    cons = _consumer(framework, sock, 20)
    out = cons.stdout.read()
    assert cons.wait(120) == 0, out
    assert "ok 20" in out
    assert int(_line(prod, "sent")[0]) == 20
    used, live = map(int, _line(prod, "final"))
    assert prod.wait(60) == 0
    assert (used, live) == (base, 0)


def test_stopped_peer_send_deadline_and_close(fake_driver, tmp_path):
    """A peer that never reads (a stopped consumer): sends fail with
    TimeoutError at their deadline once its socket's buffer is full, naming
    the peer and the operation, and Serving.close(timeout=2) returns in
    about 2 s, not when the peer wakes."""
    import socket
    import threading
    import time

    sock = str(tmp_path / "s")
    pool = dlbridge.ipc.Pool(0, 64 << 20)
    got = []
    done = threading.Event()

    def handler(conn, pool):
        conn.set_timeout(answer=0.5)
        t = pool.zeros((16,), "uint32")
        try:
            for _ in range(100000):
                conn.send(t)
        except TimeoutError as e:
            got.append(e)
        finally:
            done.set()

    srv = dlbridge.ipc.serve(sock, pool, handler)
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        peer.connect(sock)
        assert done.wait(30), "the handler's sends never ended"
        assert got, "no TimeoutError from sends to a peer that never reads"
        msg = str(got[0])
        assert "sending a tensor" in msg and "peer process %d" % os.getpid() in msg, msg
        t0 = time.monotonic()
        srv.close(timeout=2)
        took = time.monotonic() - t0
        assert took < 4, "Serving.close(timeout=2) took %.1f s" % took
    finally:
        peer.close()
        pool.close()


def test_socket_modes(fake_driver, tmp_path):
    """Sockets are 0600 whatever the umask; the pickling server's sits in a
    private 0700 folder."""
    import stat

    old = os.umask(0)
    try:
        with dlbridge.ipc.listen(str(tmp_path / "s")) as ln:
            assert stat.S_IMODE(os.stat(ln.path).st_mode) == 0o600
        server, _ = dlbridge.ipc._sharing(0)
        assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(server.path)).st_mode) == 0o700
    finally:
        os.umask(old)


def test_listen_refuses_live_datagram_socket(tmp_path):
    """A live datagram socket at the path is refused, not unlinked."""
    import socket

    path = str(tmp_path / "d")
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    d.bind(path)
    try:
        with pytest.raises(ValueError, match="live socket"):
            dlbridge.ipc.listen(path)
        assert os.path.exists(path)
    finally:
        d.close()


def test_claim_from_silent_server_times_out(tmp_path):
    """A server that accepts and never answers: claim (what unpickling
    calls) raises TimeoutError at the connection's deadline, naming the
    operation and the peer, instead of waiting for ever."""
    import socket
    import time

    path = str(tmp_path / "silent")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(1)
    try:
        conn = dlbridge.ipc.connect(path)
        peer, _ = srv.accept()
        conn.set_timeout(answer=0.3)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=r"Claim\(5\) with peer process %d" % os.getpid()):
            conn.claim(5)
        assert time.monotonic() - t0 < 5
        conn.close()
        peer.close()
    finally:
        srv.close()


_EMFILE_SERVER = r"""
import os, resource, socket, sys, time
import numpy
import dlbridge, dlbridge.ipc

sock = sys.argv[1]
pool = dlbridge.ipc.Pool(0, 16 << 20)


def handler(conn, pool):
    t = pool.zeros((4,), "uint32")
    t.fill_(7)
    try:
        conn.send(t)
    except Exception:
        pass  # a peer of the bursts, gone already
    t.close()


srv = dlbridge.ipc.serve(sock, pool, handler)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))
refused = 0
for burst in range(3):
    peers = []
    for i in range(400):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:  # this process is out of descriptors too
            refused += 1
            continue
        try:
            s.connect(sock)
        except OSError:
            s.close()
            refused += 1
            continue
        peers.append(s)
    time.sleep(0.3)
    for s in peers:
        s.close()
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("refused", refused, flush=True)
time.sleep(0.5)
c = dlbridge.ipc.connect(sock)
c.set_timeout(answer=10, recv=10)
t = c.recv()
print("got", int(numpy.from_dlpack(t.to("cpu"))[0]), flush=True)
t.close()
c.close()
srv.close(timeout=5)
"""


def test_serve_outlives_emfile(fake_driver, tmp_path):
    """serve() under a low RLIMIT_NOFILE and three bursts of 400 peers:
    accepts that fail with EMFILE are waited out, and once descriptors are
    free again a new peer is served."""
    script = tmp_path / "emfile_server.py"
    script.write_text(_EMFILE_SERVER)
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "s")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "got 7" in p.stdout, p.stdout + p.stderr[-3000:]
    assert "refused 0" not in p.stdout, "the bursts never ran this process out of descriptors"


def test_trim_with_stopped_peer_times_out(fake_driver, tmp_path):
    """A consumer stopped (SIGSTOP) while it keeps a cached allocation
    mapped: Pool.trim raises TimeoutError at the pool's deadline, naming
    that consumer's process, and frees nothing it still maps; once the
    consumer runs again, trim frees it."""
    import time

    sock = str(tmp_path / "s")
    pool = dlbridge.ipc.Pool(0, 16 << 20)
    pool.set_timeout(0.5)
    ln = dlbridge.ipc.listen(sock)
    cons = _consumer("recycle", sock, 1, stdin=subprocess.PIPE)
    try:
        conn = ln.accept()
        t = pool.empty((4,), "uint32")
        t.fill_(1)
        conn.send(t, pool)
        t.close()
        assert _line(cons, "imports") == ["1", "1"]
        deadline = time.monotonic() + 30
        while conn.leases and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.cached[0] == 1
        cons.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="peer process %d" % cons.pid):
            pool.trim()
        assert time.monotonic() - t0 < 5
        cons.send_signal(signal.SIGCONT)
        # The consumer's reader handles the retire the trim sent beside its
        # main thread, which answers stdin: ask until it has (or 30 s).
        deadline = time.monotonic() + 30
        while True:
            cons.stdin.write("\n")
            cons.stdin.flush()
            got = _line(cons, "mapped")
            if got == ["0"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got == ["0"]
        conn.close()
        cons.stdin.close()
        assert cons.wait(60) == 0
    finally:
        if cons.poll() is None:
            cons.send_signal(signal.SIGCONT)
            cons.kill()
            cons.wait()
        ln.close()
        pool.close()
