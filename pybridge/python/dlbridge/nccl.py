"""NCCL communicators shared with Go ranks, PyTorch and CuPy.

A Python rank that has only PyTorch joins the same NCCL communicator as Go
ranks (package github.com/dlbridge/dlbridge/nccl) and CuPy ranks
(cupy.cuda.nccl.NcclCommunicator). Tensors come in through DLPack
(dlbridge.from_dlpack: no copy); the work runs on the caller's stream, the
current stream of the tensors' framework (PyTorch's, CuPy's) unless
``stream=`` names one, after the writes pending on the tensors, and its
results are left pending on that stream: the host never waits::

    import torch, dlbridge.nccl as nccl
    world = nccl.from_env()              # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK
    comm = world.comm
    x = torch.ones(4, device="cuda:%d" % world.local_rank)
    comm.all_reduce(x)                   # queued on torch's current stream
    comm.finalize(); world.close()

With a unique id handed around by other means, as CuPy does it::

    uid = nccl.get_unique_id()           # on one rank; 128 bytes
    comm = nccl.Communicator(nranks, uid, rank)

A failure of a communicator (a rank that died or hangs: every wait has a
deadline) raises NCCLError, naming the operation and the ranks that did not
come (NCCLTimeoutError, also a TimeoutError, when a deadline passed); the
communicator is aborted, and the survivors of a World go on with
World.rebuild().
"""

import datetime
import json
import os

from . import _lib

_core = _lib._core

__all__ = [
    "Communicator",
    "NCCLError",
    "NCCLTimeoutError",
    "World",
    "from_env",
    "get_unique_id",
    "REDUCE_OPS",
]

# Operation kinds, as pybridge/nccl.go numbers them.
_ALL_REDUCE, _BROADCAST, _REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _SEND, _RECV = range(7)

# The reductions (ncclRedOp_t's numbers, which cupy.cuda.nccl.NCCL_SUM... are).
REDUCE_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_OP_ALIASES = {"product": "prod", "mean": "avg"}

_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "DLBRIDGE_NCCL_TIMEOUT",
        "DLBRIDGE_NCCL_PORT", "TORCHELASTIC_USE_AGENT_STORE")


class NCCLError(RuntimeError):
    """A communicator failed: ``op`` is the operation ("all_reduce",
    "init", "rendezvous", ...), ``missing`` the ranks known not to have
    come, ``rank`` and ``size`` this rank and the communicator's size (-1:
    not known), ``seq`` the operation's number on the communicator,
    ``timeout`` the deadline in seconds that passed (None: another cause).
    The communicator is aborted."""

    def __init__(self, message, op="", missing=(), rank=-1, size=-1, seq=0, timeout=None):
        super().__init__(message)
        self.op = op
        self.missing = list(missing)
        self.rank = rank
        self.size = size
        self.seq = seq
        self.timeout = timeout


class NCCLTimeoutError(NCCLError, TimeoutError):
    """An NCCLError whose cause is a deadline that passed."""


def _failure(e):
    """The NCCLError for an exception a dlb_nccl_ call just raised on this
    thread, or None when it was no failure of a communicator."""
    desc = _core.dlb_nccl_last_failure()
    if not desc:
        return None
    f = json.loads(desc)
    t = f.get("timeout") or 0
    cls = NCCLTimeoutError if t or isinstance(e, TimeoutError) else NCCLError
    return cls(f["message"], op=f["op"], missing=f.get("missing") or (), rank=f["rank"], size=f["size"],
               seq=f["seq"], timeout=t if t > 0 else None)


def _call(fn, *args):
    """fn(*args), a failure of a communicator raised as NCCLError."""
    try:
        return fn(*args)
    except (RuntimeError, TimeoutError) as e:
        err = _failure(e)
        if err is None:
            raise
        raise err from None


def _timeout_ms(timeout):
    """A timeout (seconds, or a datetime.timedelta as torch.distributed
    takes it; None: the default) in milliseconds, 0 for the default."""
    if timeout is None:
        return 0
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError("dlbridge.nccl: timeout must be seconds (int or float) or a timedelta, not %s"
                        % type(timeout).__name__)
    if not timeout > 0:
        raise ValueError("dlbridge.nccl: timeout %r: must be positive seconds" % (timeout,))
    return max(1, int(round(timeout * 1000)))


def _op(op):
    """A reduction by name ("sum", torch.distributed.ReduceOp.SUM, ...) or
    NCCL number (cupy.cuda.nccl.NCCL_SUM)."""
    if isinstance(op, int) and not isinstance(op, bool):
        if op in REDUCE_OPS.values():
            return op
        raise ValueError("dlbridge.nccl: reduction %d: want one of %s" % (op, sorted(REDUCE_OPS.values())))
    name = getattr(op, "name", None) or str(op)
    key = name.rpartition(".")[2].lower()
    key = _OP_ALIASES.get(key, key)
    if key not in REDUCE_OPS:
        raise ValueError("dlbridge.nccl: reduction %r: want one of %s" % (op, ", ".join(REDUCE_OPS)))
    return REDUCE_OPS[key]


def _tensor(obj, name):
    """obj as a dlbridge.Tensor, through DLPack without a copy (None: None)."""
    if obj is None:
        return None
    from ._tensor import Tensor, from_dlpack
    if isinstance(obj, Tensor):
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise TypeError("dlbridge.nccl: %s must be a tensor with __dlpack__ (torch, CuPy, dlbridge), not %s"
                        % (name, type(obj).__name__))
    return from_dlpack(obj)


def _stream(stream):
    """stream= as the facts Go's stream policy (pybridge.PlanStream) decides
    from: (given, handle, device); None: (0, 0, -1), the tensors' current
    stream. Go refuses a stream of another device than the communicator's."""
    if stream is None:
        return 0, 0, -1
    from ._stream import stream_facts
    return (1,) + stream_facts(stream)


def get_unique_id():
    """A new NCCL unique id (ncclGetUniqueId), 128 bytes: hand it to every
    rank of the communicator (cupy.cuda.nccl.NcclCommunicator takes it too)."""
    return bytes.fromhex(_call(_core.dlb_nccl_unique_id))


def _id_hex(unique_id):
    """A unique id as 256 hex digits: bytes of 128, or the tuple of 128
    ints that cupy.cuda.nccl.get_unique_id() gives (signed chars)."""
    if isinstance(unique_id, (bytes, bytearray, memoryview)):
        b = bytes(unique_id)
    else:
        try:
            b = bytes(v & 0xFF for v in unique_id)
        except TypeError:
            raise TypeError("dlbridge.nccl: unique_id must be 128 bytes or a tuple of 128 ints, not %s"
                            % type(unique_id).__name__) from None
    if len(b) != 128:
        raise ValueError("dlbridge.nccl: unique_id has %d bytes; an NCCL unique id has 128" % len(b))
    return b.hex()


class _Closing:
    """Closed once: with-blocks and garbage collection close it, as the
    handles of dlbridge.ipc are."""

    _h = 0

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", 0):
            try:
                self.close()
            except Exception:  # interpreter shutdown
                pass


class Communicator(_Closing):
    """One rank of an NCCL communicator on one CUDA device.

    ``Communicator(nranks, unique_id, rank, device=None, timeout=None)``
    joins as ``cupy.cuda.nccl.NcclCommunicator(nranks, unique_id, rank)``
    does, on ``device`` (default: torch's current device when PyTorch is
    imported, else CuPy's, else 0), waiting at most ``timeout`` seconds for
    the other ranks. Every operation of the communicator waits at most that
    long too.

    Operations take tensors of PyTorch, CuPy or dlbridge (anything with
    ``__dlpack__``), contiguous, on the communicator's device; ``stream=``
    (a torch or CuPy stream, a dlbridge.Stream, a CUstream handle) picks
    the stream, else the tensors' framework's current stream. They return
    at once, with the work queued. On a stream= other than the framework's
    current one, keep the tensors alive until that stream has run them (the
    framework's allocator reuses freed memory in the order of its own
    stream: torch's Tensor.record_stream rule).
    """

    def __init__(self, nranks, unique_id, rank, device=None, timeout=None):
        self._h = 0
        dev = _default_device() if device is None else _device(device)
        self._adopt(_call(_core.dlb_nccl_init_rank, _id_hex(unique_id), nranks, rank, dev, _timeout_ms(timeout)))

    @classmethod
    def _wrap(cls, handle):
        c = cls.__new__(cls)
        c._adopt(handle)
        return c

    def _adopt(self, handle):
        self._h = handle
        self.rank, self.size, self.device, ms, _ = _core.dlb_nccl_comm_info(handle)
        self.timeout = ms / 1000.0

    def _live(self):
        h = self._h
        if not h:
            raise ValueError("dlbridge.nccl: the communicator is closed")
        return h

    # CuPy's names.
    def rank_id(self):
        return self.rank

    def device_id(self):
        return self.device

    def _run(self, kind, dst, src, op=0, root=0, stream=None):
        d = _tensor(dst, "output")
        s = d if src is dst else _tensor(src, "input")
        _call(_core.dlb_nccl_collective, self._live(), kind, d._handle() if d is not None else 0,
              s._handle() if s is not None else 0, op, root, *_stream(stream))

    def all_reduce(self, tensor, op="sum", *, output=None, stream=None):
        """Reduces ``tensor`` over all ranks with ``op`` into ``output``
        (default: ``tensor``, in place, as torch.distributed.all_reduce)."""
        self._run(_ALL_REDUCE, tensor if output is None else output, tensor, _op(op), 0, stream)

    def broadcast(self, tensor, src=0, *, output=None, stream=None):
        """Copies rank ``src``'s ``tensor`` into every rank's ``output``
        (default: ``tensor``, in place)."""
        self._run(_BROADCAST, tensor if output is None else output, tensor, 0, src, stream)

    def reduce(self, tensor, dst=0, op="sum", *, output=None, stream=None):
        """Reduces ``tensor`` over all ranks with ``op`` into rank ``dst``'s
        ``output`` (default: ``tensor``, in place; left alone elsewhere)."""
        out = tensor if output is None else output
        self._run(_REDUCE, out if self.rank == dst else None, tensor, _op(op), dst, stream)

    def all_gather(self, output, input, *, stream=None):
        """Gathers every rank's ``input`` into ``output``, rank by rank
        (torch.distributed.all_gather_into_tensor)."""
        self._run(_ALL_GATHER, output, input, 0, 0, stream)

    def reduce_scatter(self, output, input, op="sum", *, stream=None):
        """Reduces ``input`` over all ranks and leaves this rank's block in
        ``output`` (torch.distributed.reduce_scatter_tensor)."""
        self._run(_REDUCE_SCATTER, output, input, _op(op), 0, stream)

    def send(self, tensor, peer, *, stream=None):
        """Sends ``tensor`` to rank ``peer``, which receives it with recv."""
        self._run(_SEND, None, tensor, 0, peer, stream)

    def recv(self, tensor, peer, *, stream=None):
        """Receives into ``tensor`` from rank ``peer``."""
        self._run(_RECV, tensor, None, 0, peer, stream)

    def all_to_all(self, output, input, *, stream=None):
        """Sends block j of ``input`` to rank j and receives rank j's block
        into block j of ``output`` (both split into ``size`` blocks along
        their first dimension; torch.distributed.all_to_all_single)."""
        d, s = _tensor(output, "output"), _tensor(input, "input")
        _call(_core.dlb_nccl_all_to_all, self._live(), d._handle(), s._handle(), *_stream(stream))

    def split(self, color, key=None):
        """A communicator of the ranks of this one that pass the same
        ``color``, numbered by ``key`` (default: their rank here), as
        ncclCommSplit; every rank calls it. ``color`` None or -1 joins
        none and gives None."""
        color = -1 if color is None else color
        h = _call(_core.dlb_nccl_split, self._live(), color, self.rank if key is None else key)
        return Communicator._wrap(h) if h else None

    def group(self):
        """A context manager whose send, recv and collectives of this
        communicator run as one NCCL group when it exits (as
        torch.distributed.batch_isend_irecv), so that exchanges in a ring
        cannot deadlock on their order::

            with comm.group() as g:
                g.send(x, (comm.rank + 1) % comm.size)
                g.recv(y, (comm.rank - 1) % comm.size)
        """
        return _Group(self)

    def wait(self):
        """Blocks until every operation issued so far has completed, or
        raises the communicator's failure (for tests and shutdown:
        operations never need it)."""
        _call(_core.dlb_nccl_wait, self._live())

    def async_error(self):
        """The communicator's failure as an NCCLError, or None while it is
        healthy (ncclCommGetAsyncError)."""
        msg = _core.dlb_nccl_async_error(self._live())
        if not msg:
            return None
        return _failure(None) or NCCLError(msg)

    def abort(self):
        """Aborts the communicator (ncclCommAbort): work in flight ends
        without its results; the other ranks' operations fail by their
        deadline at the latest."""
        _core.dlb_nccl_abort(self._live())

    def finalize(self):
        """Flushes the queued work and frees the communicator
        (ncclCommFinalize, ncclCommDestroy); every rank calls it."""
        _call(_core.dlb_nccl_finalize, self._live())

    def close(self):
        """Forgets the communicator, aborting it unless it was finalized."""
        h, self._h = self._h, 0
        if h:
            _core.dlb_nccl_comm_close(h)

    def __repr__(self):
        state = "closed" if not self._h else "cuda:%d" % self.device
        return "<dlbridge.nccl.Communicator rank %d of %d, %s>" % (self.rank, self.size, state)


class _Group:
    """Operations gathered for one NCCL group (Communicator.group)."""

    def __init__(self, comm):
        self._comm = comm
        self._b = 0

    def __enter__(self):
        self._b = _core.dlb_nccl_batch_new()
        return self

    def __exit__(self, exc_type, *exc):
        b, self._b = self._b, 0
        if exc_type is not None:
            _core.dlb_nccl_batch_close(b)
        else:
            _call(_core.dlb_nccl_batch_launch, b)

    def _add(self, kind, dst, src, op=0, root=0, stream=None):
        if not self._b:
            raise ValueError("dlbridge.nccl: add operations inside `with comm.group() as g:`")
        d = _tensor(dst, "output")
        s = d if src is dst else _tensor(src, "input")
        # Go borrows the tensors' memory until the group launches.
        _call(_core.dlb_nccl_batch_add, self._b, self._comm._live(), kind, d._handle() if d is not None else 0,
              s._handle() if s is not None else 0, op, root, *_stream(stream))

    def send(self, tensor, peer, *, stream=None):
        self._add(_SEND, None, tensor, 0, peer, stream)

    def recv(self, tensor, peer, *, stream=None):
        self._add(_RECV, tensor, None, 0, peer, stream)

    def all_reduce(self, tensor, op="sum", *, output=None, stream=None):
        self._add(_ALL_REDUCE, tensor if output is None else output, tensor, _op(op), 0, stream)

    def broadcast(self, tensor, src=0, *, output=None, stream=None):
        self._add(_BROADCAST, tensor if output is None else output, tensor, 0, src, stream)


class World(_Closing):
    """This process's place in a job started as torchrun starts one (see
    from_env): ``rank``, ``size``, ``local_rank``, the communicator of all
    its ranks (``comm``), and the control plane of the rendezvous, which
    learns when a rank exits."""

    def __init__(self, handle, comm):
        self._h = handle
        self.comm = Communicator._wrap(comm)
        info = self._info()
        self.rank, self.size, self.local_rank = info["rank"], info["size"], info["local_rank"]

    def _info(self):
        if not self._h:
            raise ValueError("dlbridge.nccl: the world is closed")
        return json.loads(_core.dlb_nccl_world_info(self._h))

    @property
    def members(self):
        """The job ranks (RANK) of the current communicator's ranks."""
        return self._info()["members"]

    @property
    def dead(self):
        """The job ranks known to be gone."""
        return self._info()["dead"]

    def rebuild(self):
        """Aborts the communicator and builds one of the ranks still alive
        (every survivor calls it, after an operation failed); returns it,
        as ``comm`` is from then on."""
        old = self.comm
        if not self._h:
            raise ValueError("dlbridge.nccl: the world is closed")
        h = _call(_core.dlb_nccl_world_rebuild, self._h)
        self.comm = Communicator._wrap(h)
        old.close()
        return self.comm

    def close(self):
        """Leaves the job (finalize the communicator first for a clean end;
        an open one is aborted)."""
        self.comm.close()
        h, self._h = self._h, 0
        if h:
            _core.dlb_nccl_world_close(h)

    def __repr__(self):
        return "<dlbridge.nccl.World rank %d of %d>" % (self.rank, self.size)


def from_env(timeout=None, device=None):
    """Joins the job that MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and
    LOCAL_RANK describe (as torchrun sets them; torch.distributed's
    init_process_group with the env:// method), with Go ranks and other
    Python ranks alike: rank 0 hands the unique id to the others over TCP
    within the deadline (``timeout`` seconds or a timedelta; default
    DLBRIDGE_NCCL_TIMEOUT, else 10 minutes). The device is LOCAL_RANK
    unless ``device`` says otherwise. Where another server holds
    MASTER_PORT (torchrun's agent store, torch.distributed's TCPStore),
    DLBRIDGE_NCCL_PORT gives dlbridge's rendezvous a port of its own, the
    same on every rank; under torchrun it is required."""
    env = "\n".join("%s=%s" % (k, os.environ[k]) for k in _ENV if k in os.environ)
    dev = -1 if device is None else _device(device)
    w, c = _call(_core.dlb_nccl_join, env, dev, _timeout_ms(timeout))
    return World(w, c)


def _device(device):
    from ._stream import _device_ordinal
    return _device_ordinal(device)


def _default_device():
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            return cupy.cuda.runtime.getDevice()
        except Exception:
            pass
    return 0
