"""dlbridge.ipc: CUDA tensors shared between processes on one node by
handle, without copies, ordered on the GPU both ways, with leases.

A producer allocates from an IPC pool (a stream-ordered pool of one device
created for POSIX file-descriptor handles, separate from the default pool,
with a size limit) and sends tensors over a Unix domain socket; the pool's
file descriptor travels once per peer (SCM_RIGHTS), then small descriptors.
The consumer's ``recv`` returns a dlbridge Tensor over the producer's memory:
hand it to PyTorch or CuPy with ``torch.from_dlpack(t)`` / ``cupy.from_dlpack(t)``
(no copy; their stream waits for the producer's "ready" event on the GPU).
Closing it (``t.close()``, or when it is collected) gives the lease back; the
producer's free waits, on the GPU, for the consumer's work queued until
then. A consumer that dies gives its leases back::

    # producer                                # consumer
    pool = dlbridge.ipc.Pool(0, 1 << 30)      conn = dlbridge.ipc.connect(path)
    ln = dlbridge.ipc.listen(path)            t = conn.recv()
    conn = ln.accept()                        x = torch.from_dlpack(t)
    t = pool.zeros((1024, 1024), "float32")   ...
    conn.send(t)                              del x; t.close()

Under multiprocessing's 'spawn' and 'forkserver' start methods a CUDA
Tensor pickles by handle (as torch.multiprocessing does): memory dlbridge
allocated (an IPC pool's, or any other dlbridge CUDA tensor's) is shared
in place, other CUDA memory (another library's) is first copied (on the
device) into this process's sharing pool. ``set_sharing_strategy("value")`` makes
them pickle by value again, as plain ``pickle`` always does. The Go API
behind this is package zerocopy/ipc; docs/ipc.md has the design.
"""

import atexit
import os
import tempfile
import threading
import weakref

from . import _lib
from ._tensor import Tensor, _dtype_bytes

_core = _lib._core

_ENDED = "dlbridge.ipc: the connection ended"


def _path(path):
    path = os.fspath(path)
    if isinstance(path, str):
        path = path.encode()
    return path


class _Object:
    """A handle of the library's IPC table, closed once."""

    _h = 0

    def close(self):
        h, self._h = self._h, 0
        if h:
            _core.dlb_ipc_close(h)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _live(self):
        if not self._h:
            raise ValueError("dlbridge.ipc: %s is closed" % type(self).__name__)
        return self._h


class Pool(_Object):
    """An IPC memory pool on CUDA device ``device`` that reserves at most
    ``limit`` bytes. Tensors allocated from it can be sent to other
    processes. Once this process closed a tensor and every peer gave its
    lease back, its memory is cached while a peer keeps it mapped: the next
    tensor of exactly that size takes it again, and the peer maps nothing
    new. ``trim()`` frees the cache (as ``torch.cuda.empty_cache()`` does);
    so do an allocation that needs the room and the peers' connections
    ending."""

    def __init__(self, device=0, limit=1 << 30):
        if hasattr(device, "index"):  # torch.device / "cuda:N" objects
            device = device.index or 0
        elif isinstance(device, str):
            device = int(device.split(":")[1]) if ":" in device else 0
        self.device = int(device)
        self._h = _core.dlb_ipc_pool_new(self.device, int(limit))

    def empty(self, shape, dtype="float32"):
        """An uninitialized C-contiguous tensor from the pool."""
        return self._alloc(shape, dtype, 0)

    def zeros(self, shape, dtype="float32"):
        """A zero-filled C-contiguous tensor from the pool."""
        return self._alloc(shape, dtype, 1)

    def _alloc(self, shape, dtype, zero):
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        return _core.dlb_ipc_pool_empty(self._live(), _dtype_bytes(dtype), len(dims), dims, zero)

    def copy_in(self, t):
        """A copy of tensor t (any device; DLPack objects too) in the pool:
        the explicit way to share memory allocated elsewhere."""
        if not isinstance(t, Tensor):
            from ._tensor import from_dlpack

            t = from_dlpack(t)
        return _core.dlb_ipc_pool_copy_in(self._live(), t._handle())

    def usage(self):
        """(reserved bytes, used bytes, live allocations). Used bytes
        include the cached allocations until ``trim()``; live allocations
        do not count them."""
        return _core.dlb_ipc_pool_usage(self._live())

    def trim(self):
        """Free the cached allocations: each peer that maps one unmaps it
        first. Returns once they are freed (the GIL is released meanwhile);
        TimeoutError names the peers that did not answer in time
        (``set_timeout``), whose allocations are freed once they answer or
        go away."""
        _core.dlb_ipc_pool_trim(self._live())

    def set_timeout(self, seconds):
        """How long trim, close and an allocation at the limit wait for
        peers to answer (2 s by default; 0: the default)."""
        _core.dlb_ipc_pool_set_timeout(self._live(), int(float(seconds) * 1000))

    @property
    def cached(self):
        """(cached allocations, their bytes)."""
        return _core.dlb_ipc_pool_cached(self._live())


class Connection(_Object):
    """One end of a connection: either side may send and receive."""

    def __init__(self, h):
        self._h = h
        _live_conns.add(self)

    def send(self, tensor, pool=None, stream=None):
        """Send ``tensor`` (memory of ``pool``; None: the pool of this process
        that holds it, which for any tensor dlbridge allocated on a device
        is that device's own) to the peer, to be used after
        the work queued on ``stream`` (a handle, ``__cuda_stream__`` object
        or torch/CuPy stream; None: the tensor's pending write). BufferError
        for memory that is not the pool's (see Pool.copy_in)."""
        from ._stream import stream_facts

        has, h, d = (0, 0, -1) if stream is None else (1,) + stream_facts(stream)  # Go decides what they mean
        _core.dlb_ipc_send(self._live(), pool._live() if pool is not None else 0, tensor._handle(), has, h, d)

    def recv(self):
        """The next tensor the peer sent (a view of the peer's memory, no
        copy). EOFError once the peer closed the connection or died."""
        try:
            return _core.dlb_ipc_recv(self._live())
        except BufferError as e:
            if str(e).startswith(_ENDED):
                raise EOFError(str(e)) from None
            raise

    def claim(self, token):
        """The tensor a Server offered under ``token``."""
        return _core.dlb_ipc_claim(self._live(), int(token))

    def set_timeout(self, answer=None, recv=None):
        """Deadlines in seconds (0: none; None: unchanged): ``answer`` for
        each write to the peer and each wait for its answer (send, claim,
        close; 60 s unless set), ``recv`` for recv's wait for a tensor (none
        unless set). A wait past its deadline raises TimeoutError naming
        the peer and the operation."""

        def ms(v):
            return -1 if v is None else int(float(v) * 1000)

        _core.dlb_ipc_set_timeout(self._live(), ms(answer), ms(recv))

    @property
    def leases(self):
        """Tensors sent over this connection that the peer still holds."""
        return _core.dlb_ipc_leases(self._live())

    @property
    def mapped(self):
        """The peer's allocations this side keeps mapped (those of tensors
        received, kept after they are closed until the peer retires them)."""
        return self._mapped()[0]

    @property
    def imports(self):
        """The peer's allocations mapped over this connection so far (a
        tensor of an allocation already mapped adds none)."""
        return self._mapped()[1]

    def _mapped(self):
        return _core.dlb_ipc_mapped(self._live())


class Listener(_Object):
    """Listens on a Unix socket path for peers."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._h = _core.dlb_ipc_listen(_path(path))

    def accept(self):
        """Wait for the next peer (the GIL is released meanwhile)."""
        return Connection(_core.dlb_ipc_accept(self._live()))


_live_conns = weakref.WeakSet()


@atexit.register
def _close_at_exit():
    # At interpreter exit (after KeyboardInterrupt too) each connection
    # closes while the process still runs: what it maps of its peers'
    # memory is unmapped before the peer sees its end, as the driver wants
    # (a peer may free once it does).
    for c in list(_live_conns):
        try:
            c.close()
        except Exception:
            pass


def listen(path):
    """A Listener on the Unix socket ``path``."""
    return Listener(path)


def connect(path):
    """A Connection to the Listener or Server at ``path``."""
    return Connection(_core.dlb_ipc_dial(_path(path)))


class Server(_Object):
    """Offers tensors that other processes claim by token
    (Connection.claim): each claim is a lease of its own."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._h = _core.dlb_ipc_serve(_path(path))

    def offer(self, tensor, pool=None, ttl=300.0, uses=0):
        """Offer ``tensor`` (memory of ``pool``; None: the pool of this
        process that holds it) for ``ttl`` seconds, ``uses`` claims (0: any
        number); returns the token."""
        ph = pool._live() if pool is not None else 0
        return _core.dlb_ipc_offer(self._live(), ph, tensor._handle(), int(ttl * 1000), int(uses))


class Serving(Listener):
    """What ``serve`` returns: a Listener whose peers are accepted and
    handled in threads. ``close()`` (or leaving a ``with`` block) stops
    serving: no new peers, every connection closed (a peer's recv raises
    EOFError; the tensors it still holds keep their memory until it gives
    them back or dies), the threads joined."""

    def __init__(self, path, pool, handler, daemon):
        super().__init__(path)
        self.pool = pool
        self._handler = handler
        self._daemon = daemon
        self._lock = threading.Lock()
        self._conns = set()
        self._threads = set()
        self._closing = False
        self._accepter = threading.Thread(target=self._accept_loop, daemon=daemon,
                                          name="dlbridge.ipc.serve %s" % self.path)
        self._accepter.start()

    @property
    def connections(self):
        """The peers connected now (a peer that closed or died is gone)."""
        with self._lock:
            return len(self._conns)

    def accept(self):
        raise RuntimeError("dlbridge.ipc: serve() accepts its peers itself; use listen() to accept them by hand")

    def _accept_loop(self):
        while True:
            try:
                c = Listener.accept(self)  # this class's accept refuses callers
            except (RuntimeError, ValueError):  # closed
                return
            with self._lock:
                if self._closing:
                    c.close()
                    return
                self._conns.add(c)
                th = threading.Thread(target=self._serve_one, args=(c,), daemon=self._daemon,
                                      name="dlbridge.ipc.serve peer")
                self._threads.add(th)
            th.start()

    def _serve_one(self, c):
        try:
            self._handler(c, self.pool)
        finally:
            # The handler is done, the peer may not be: the connection stays
            # open (its leases with it) until the peer closes or dies, or
            # serving stops. What the peer sends meanwhile goes back.
            try:
                while True:
                    c.recv().close()
            except (EOFError, ValueError, BufferError, RuntimeError, TimeoutError):
                pass
            with self._lock:
                if c in self._conns:
                    self._conns.discard(c)
                    c.close()
                self._threads.discard(threading.current_thread())

    def close(self, timeout=10.0):
        """Stop serving; wait up to ``timeout`` seconds in all (None: for
        ever) for the connections to close and the handlers to return.
        Handlers still running then go on in their threads."""
        import time

        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))

        def left():
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        with self._lock:
            self._closing = True
        super().close()  # the accept loop ends
        if self._accepter is not threading.current_thread():
            self._accepter.join(left())
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
            threads = [t for t in self._threads if t is not threading.current_thread()]
        # A handler's recv raises EOFError; the tensors a peer still holds
        # keep their memory until it gives them back or dies (the
        # connection stays open in the background until then). Each
        # close may wait (2 s at most) for its peer's answers to retires:
        # side by side, so that frozen peers do not add up.
        closers = [threading.Thread(target=c.close, daemon=True) for c in conns]
        for t in closers:
            t.start()
        for t in closers:
            t.join(left())
        for t in threads:
            t.join(left())


def serve(path, pool, handler, daemon=True):
    """Accept peers on the Unix socket ``path`` in a thread and call
    ``handler(conn, pool)`` for each in a thread of its own. The connection
    stays open after the handler returns, until the peer closes it or dies,
    so that the tensors sent keep their memory for as long as the peer
    holds them. Returns a Serving (a Listener): ``close()`` stops serving.
    Threads are daemon threads unless ``daemon`` is False."""
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("dlbridge.ipc.serve: path must be a str, bytes or os.PathLike socket path, not %s"
                        % type(path).__name__)
    if pool is not None and not isinstance(pool, Pool):
        raise TypeError("dlbridge.ipc.serve: pool must be a dlbridge.ipc.Pool or None, not %s" % type(pool).__name__)
    if pool is not None:
        pool._live()  # ValueError for a closed pool
    if not callable(handler):
        raise TypeError("dlbridge.ipc.serve: handler must be callable as handler(conn, pool), not %s"
                        % type(handler).__name__)
    return Serving(path, pool, handler, bool(daemon))


# ------------------------------------------------------------- pickling

_strategy = os.environ.get("DLBRIDGE_IPC_SHARING", "handle")
_share_lock = threading.Lock()
_share = {}  # device -> (server, pool), made on the first pickle
_conns = {}  # socket path -> Connection, in the unpickling process
_OFFER_TTL = float(os.environ.get("DLBRIDGE_IPC_OFFER_TTL", "300"))
_POOL_LIMIT = int(os.environ.get("DLBRIDGE_IPC_POOL_LIMIT", str(16 << 30)))


def set_sharing_strategy(strategy):
    """How multiprocessing pickles CUDA tensors: "handle" (the default:
    the other process maps the same memory) or "value" (their bytes)."""
    global _strategy
    if strategy not in ("handle", "value"):
        raise ValueError("dlbridge.ipc: sharing strategy %r: want 'handle' or 'value'" % (strategy,))
    _strategy = strategy


def get_sharing_strategy():
    return _strategy


def _sharing(device):
    with _share_lock:
        got = _share.get(device)
        if got is None:
            # A private 0700 folder (mkdtemp), so that no other user reaches
            # the socket, whatever the umask and the temp folder's mode.
            path = os.path.join(tempfile.mkdtemp(prefix="dlbridge-%d-" % os.getpid()), "s")
            got = (Server(path), Pool(device, _POOL_LIMIT))
            _share[device] = got
        return got


def _reduce_for_process(t):
    from . import _reduce

    dev = t.device
    if _strategy == "value" or not dev.startswith("cuda"):
        return _reduce(t)
    try:
        server, pool = _sharing(int(dev.split(":")[1]))
        try:
            token = server.offer(t, None, _OFFER_TTL, 1)  # memory dlbridge allocated: in place
        except BufferError:  # other memory: one copy on the device, into the sharing pool
            with pool.copy_in(t) as c:
                token = server.offer(c, pool, _OFFER_TTL, 1)
    except (BufferError, RuntimeError, OSError, ValueError):
        return _reduce(t)  # IPC not possible here: by value
    return _rebuild_shared, (server.path, token)


def _rebuild_shared(path, token):
    with _share_lock:
        c = _conns.get(path)
        if c is None:
            c = _conns[path] = connect(path)
    return c.claim(token)


def _register():
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(Tensor, _reduce_for_process)


_register()
