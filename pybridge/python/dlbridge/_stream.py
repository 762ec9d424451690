"""CUDA streams and events, named as in PyTorch, and the one reading of
every ``stream=`` argument of dlbridge (as_stream_handle, stream_facts):
what it means is decided in Go.

A dlbridge.Stream is a non-blocking CUDA stream of the device's primary
context, the context PyTorch, CuPy, JAX and Numba use, so its handle works
in those libraries too (``torch.cuda.ExternalStream(s.cuda_stream)``,
``cupy.cuda.ExternalStream(s.cuda_stream)``) and it speaks cuda.core's
``__cuda_stream__`` protocol. Go holds the stream; Python holds a handle.
"""

import operator

from . import _convert as C
from . import _lib

_U64_LIMIT = 2**64
_I32_MAX = 2**31 - 1

_core = _lib._core


def _handle_int(value, what):
    """value as a CUstream handle: an integer (operator.index: no bool, no
    float) with 0 <= value < 2**64, checked by the border's one converter."""
    return C.integer(value, what, C.UINT64)


def as_stream_handle(obj):
    """The raw CUstream handle that a stream argument names.

    None gives 0, which dlbridge reads as "dlbridge's own work stream" of the
    device at hand. Otherwise, in this order: an object with cuda.core's
    ``__cuda_stream__`` protocol (returns ``(0, handle)``; dlbridge.Stream has
    it), a PyTorch stream (``.cuda_stream``), a CuPy stream (``.ptr``), or an
    integer handle (``operator.index``: bools and floats are refused). Every
    handle must satisfy 0 <= handle < 2**64; the CUDA constants 1 (legacy
    default stream) and 2 (per-thread default stream) are handles too.
    """
    if obj is None:
        return 0
    proto = getattr(type(obj), "__cuda_stream__", None)
    if proto is not None:
        got = obj.__cuda_stream__
        got = got() if callable(got) else got  # a method; early cuda.core had a property
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError("dlbridge: %s.__cuda_stream__() must return (version, handle), got %r"
                            % (type(obj).__name__, got))
        version, h = got
        if version != 0:
            raise ValueError("dlbridge: %s.__cuda_stream__() has protocol version %r; version 0 is supported"
                             % (type(obj).__name__, version))
        return _handle_int(h, "%s.__cuda_stream__()[1]" % type(obj).__name__)
    if type(obj).__name__.endswith("Stream"):
        # torch.cuda.Stream / ExternalStream name the handle cuda_stream;
        # cupy.cuda.Stream / ExternalStream name it ptr.
        for attr in ("cuda_stream", "ptr"):
            h = getattr(obj, attr, None)
            if h is not None:
                return _handle_int(h, "%s.%s" % (type(obj).__name__, attr))
    if not C.is_integer(obj):
        raise TypeError(
            "dlbridge: stream must be None, an int CUstream handle, an object with __cuda_stream__, "
            "or a torch/cupy stream; got %s (%s)" % (C.show(obj), type(obj).__name__))
    return _handle_int(obj, "stream")


def stream_facts(obj):
    """(handle, device) of a stream= that is not None: the facts Go's stream
    policy (pybridge.PlanStream) decides from. device is the CUDA device the
    object names, -1 for a bare integer handle (Go asks the driver)."""
    return as_stream_handle(obj), _stream_device(obj, -1)


def _stream_device(obj, default):
    """The CUDA device ordinal a stream argument says it is on, or default
    (bare integer handles and None say nothing)."""
    if obj is None or isinstance(obj, int):
        return default
    if isinstance(obj, Stream):
        return obj._dev
    dev = getattr(obj, "device_id", None)  # cupy
    if isinstance(dev, int) and not isinstance(dev, bool):
        return dev
    dev = getattr(obj, "device", None)
    if dev is not None:
        idx = getattr(dev, "index", None)  # torch.device
        if isinstance(idx, int):
            return idx
        idx = getattr(dev, "device_id", None)  # cuda.core Device
        if isinstance(idx, int):
            return idx
    return default


def _device_ordinal(device):
    """The ordinal of a CUDA device given as an int, "cuda", "cuda:N", a
    (2, N) DLPack pair or a torch.device."""
    if device is None:
        return 0
    if isinstance(device, bool):
        raise TypeError("dlbridge: device must be an int or 'cuda:N', not a bool")
    if hasattr(device, "__index__"):
        n = operator.index(device)
    elif isinstance(device, tuple) and len(device) == 2:
        if operator.index(device[0]) != _lib.CUDA:
            raise ValueError("dlbridge: device %r is not a CUDA device" % (device,))
        n = operator.index(device[1])
    else:
        code, n = C.device(device)  # the one parser of device names
        if code != _lib.CUDA:
            raise ValueError("dlbridge: streams live on CUDA devices; got device %r (want 'cuda' or 'cuda:N')"
                             % (device,))
    if not 0 <= n <= _I32_MAX:
        raise ValueError("dlbridge: device %d is out of range (0 <= device < 2**31)" % n)
    return n


class Stream:
    """A CUDA stream made by dlbridge: ``dlbridge.Stream(device=0, *, priority=0)``.

    Non-blocking (no implicit ordering with the legacy default stream),
    created in Go on the device's primary context; lower priority numbers
    are more urgent (the driver clamps to the device's range). Pass it as
    ``stream=`` to dlbridge, or to other libraries through
    ``__cuda_stream__`` or its integer ``cuda_stream``.

    When the object is collected its stream is destroyed without waiting:
    work already queued on it still runs to completion (cuStreamDestroy
    frees the stream afterwards), so dropping a Stream never cuts work short.
    """

    __slots__ = ("_h", "_raw", "_dev", "__weakref__")

    def __init__(self, device=0, *, priority=0):
        self._h = 0
        dev = _device_ordinal(device)
        self._h, self._raw = _core.dlb_stream_new(dev, priority)  # the binding checks priority
        self._dev = dev

    def _live(self):
        h = self._h
        if not h:
            raise ValueError("dlbridge: the stream is closed")
        return h

    def __cuda_stream__(self):
        """cuda.core's stream protocol: (version 0, the CUstream handle)."""
        self._live()
        return (0, self._raw)

    @property
    def cuda_stream(self):
        """The CUstream handle as an int (PyTorch's name)."""
        self._live()
        return self._raw

    handle = cuda_stream

    @property
    def device(self):
        """"cuda:N"."""
        return "cuda:%d" % self._dev

    @property
    def device_id(self):
        return self._dev

    @property
    def priority(self):
        return _core.dlb_stream_priority(self._live())

    def synchronize(self):
        """Block until the work queued on this stream is done."""
        _core.dlb_stream_synchronize(self._live())

    def query(self):
        """Whether the work queued on this stream is done (never blocks)."""
        return bool(_core.dlb_stream_query(self._live()))

    def wait_stream(self, stream):
        """Make future work on this stream wait for the work queued so far on
        stream (any stream argument; None: dlbridge's work stream of this
        device; a bare integer handle is taken to be on this stream's
        device). The host does not block."""
        self._live()
        h = as_stream_handle(stream)
        _core.dlb_stream_wait(self._raw, self._dev, h, _stream_device(stream, self._dev))

    def wait_event(self, event):
        """Make future work on this stream wait for event's recorded work."""
        event.wait(self)

    def record_event(self, event=None):
        """Record event (a new Event when None) on this stream; returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def _close(self):
        h, self._h = self._h, 0
        if h:
            _core.dlb_stream_close(h)

    def __del__(self):
        try:
            self._close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __eq__(self, other):
        if isinstance(other, Stream):
            return self._raw == other._raw and self._dev == other._dev
        return NotImplemented

    def __hash__(self):
        return hash((self._raw, self._dev))

    def __repr__(self):
        return "dlbridge.Stream(device=%s, cuda_stream=%#x%s)" % (
            self.device, self._raw, "" if self._h else ", closed")


class Event:
    """A CUDA event: ``dlbridge.Event(*, enable_timing=False)``.

    As in PyTorch, the driver's event is made when it is first recorded, on
    the device of that stream; it cannot be recorded on another device
    later. Before its first record, query() is True and synchronize() and
    wait() do nothing.
    """

    __slots__ = ("_h", "_timing", "__weakref__")

    def __init__(self, *, enable_timing=False):
        self._h = 0
        self._timing = bool(enable_timing)
        self._h = _core.dlb_event_new(int(self._timing))

    def _live(self):
        h = self._h
        if not h:
            raise ValueError("dlbridge: the event is closed")
        return h

    @property
    def enable_timing(self):
        return self._timing

    @property
    def device(self):
        """"cuda:N" once recorded, else None."""
        d = _core.dlb_event_device(self._live())
        return None if d < 0 else "cuda:%d" % d

    def record(self, stream=None):
        """Capture the work queued so far on stream (any stream argument;
        None: dlbridge's work stream). A bare integer handle is taken to be
        on the event's device (cuda:0 for its first record)."""
        h = self._live()
        _core.dlb_event_record(h, as_stream_handle(stream), _stream_device(stream, -1))

    def synchronize(self):
        """Block until the recorded work is done."""
        _core.dlb_event_synchronize(self._live())

    def query(self):
        """Whether the recorded work is done (never blocks)."""
        return bool(_core.dlb_event_query(self._live()))

    def wait(self, stream=None):
        """Make future work on stream (None: dlbridge's work stream) wait for
        the recorded work; the host does not block."""
        h = self._live()
        _core.dlb_event_wait(h, as_stream_handle(stream), _stream_device(stream, -1))

    def elapsed_time(self, end_event):
        """Milliseconds of GPU time from this event to end_event; both made
        with enable_timing=True, recorded, and completed."""
        if not isinstance(end_event, Event):
            raise TypeError("dlbridge: elapsed_time needs a dlbridge.Event, got %s" % type(end_event).__name__)
        return _core.dlb_event_elapsed(self._live(), end_event._live())

    def _close(self):
        h, self._h = self._h, 0
        if h:
            _core.dlb_event_close(h)

    def __del__(self):
        try:
            self._close()
        except Exception:
            pass

    def __repr__(self):
        return "dlbridge.Event(enable_timing=%s%s)" % (self._timing, "" if self._h else ", closed")


def synchronize(device=None):
    """Block until all work on a CUDA device is done, of every stream and
    every library sharing its primary context (cuCtxSynchronize). device is
    an int, "cuda:N" or a torch.device; None means cuda:0 (dlbridge keeps
    no current device; PyTorch's default current device is 0 too)."""
    _core.dlb_synchronize(_device_ordinal(device))


def _live_counts():
    """(open stream handles, open event handles), for leak tests."""
    return _core.dlb_stream_stats()
