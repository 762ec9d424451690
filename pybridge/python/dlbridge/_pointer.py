"""dlbridge.from_pointer: a tensor over memory at a raw address."""

import ctypes
import operator

from . import _convert as C
from . import _lib, _tensor
from ._lib import CPU, CUDA, CUDA_HOST, CUDA_MANAGED
from ._stream import as_stream_handle

_U64_LIMIT = 2**64

class _Keeper:
    """Holds owner and calls deleter(ptr) once, when Go drops the last
    reference to it (the last view and export of the memory are gone), or
    at once when from_pointer fails."""

    __slots__ = ("ptr", "owner", "deleter")

    def __init__(self, ptr, owner, deleter):
        self.ptr, self.owner, self.deleter = ptr, owner, deleter

    def release(self):
        d, self.deleter = self.deleter, None
        self.owner = None
        if d is not None:
            d(self.ptr)

    def __del__(self):
        self.release()


def _address(ptr):
    """ptr as an address: an integer (operator.index), a ctypes pointer
    (c_void_p), or an object that converts with int() and is not a number
    of another kind (PyCUDA's DeviceAllocation, cuda-python's CUdeviceptr)."""
    if isinstance(ptr, bool):
        raise TypeError("dlbridge: from_pointer: ptr must be an address, not a bool (%r)" % ptr)
    if isinstance(ptr, ctypes.c_void_p):
        p = ptr.value or 0
    elif hasattr(ptr, "__index__"):
        p = operator.index(ptr)
    elif hasattr(type(ptr), "__int__") and not hasattr(type(ptr), "__float__") and not isinstance(ptr, str):
        p = int(ptr)
    else:
        raise TypeError("dlbridge: from_pointer: ptr must be an integer address, got %s (%r)"
                        % (type(ptr).__name__, ptr))
    if not 0 <= p < _U64_LIMIT:
        raise ValueError("dlbridge: from_pointer: ptr = %d is out of range (0 <= ptr < 2**64)" % p)
    return p


def from_pointer(ptr, shape, dtype, *, device="cuda:0", strides=None, readonly=False, owner=None,
                 deleter=None, stream=None, verify=True):
    """A dlbridge.Tensor over memory at address ptr that other code allocated:
    ctypes cudaMalloc, PyCUDA, cuda-python, Numba, CuPy, a C library, or host
    memory (device="cpu"). Nothing is copied.

    shape and strides are in elements (strides=None: C-contiguous); dtype is
    a name ("float32"), a NumPy or torch dtype. device is "cuda:N" (device
    memory), "cpu", "cuda_host" (pinned host memory) or "cuda_managed".

    verify=True (the default) asks the CUDA driver about the memory first:
    for CUDA memory the whole byte span of the tensor must lie in one
    allocation on that device (the error names the allocation's bounds and
    the overrun); host memory must not be device memory.

    Lifetime: owner (any object) is kept alive, and deleter(ptr) is called
    exactly once, after the last view and the last export of the memory are
    gone (from whatever thread drops them, holding the GIL). The memory is
    dlbridge's from this call on: if from_pointer raises, owner is dropped
    and deleter is called before it returns; only when ptr itself is not an
    address or deleter is not callable is nothing called. An exception in
    deleter cannot propagate (it
    is printed, as for __del__).

    stream= (any stream argument; 0 is dlbridge's work stream) says a write
    to this memory is pending on that stream: dlbridge orders its own reads
    and every export after it.
    """
    p = _address(ptr)
    if deleter is not None and not callable(deleter):
        raise TypeError("dlbridge: from_pointer: deleter must be callable, got %s" % type(deleter).__name__)
    keeper = _Keeper(p, owner, deleter) if (owner is not None or deleter is not None) else None
    try:
        dims = _tensor._shape_arg(shape)
        st = None
        if strides is not None:
            try:
                st = tuple(operator.index(s) for s in strides)
            except TypeError:
                raise TypeError("dlbridge: from_pointer: strides must be a sequence of ints (in elements), "
                                "got %r" % (strides,)) from None
            if len(st) != len(dims):
                raise ValueError("dlbridge: from_pointer: %d strides for %d dimensions" % (len(st), len(dims)))
        dev = C.device(device)
        if dev[0] not in (CPU, CUDA, CUDA_HOST, CUDA_MANAGED):
            raise ValueError("dlbridge: from_pointer: device %r: only cpu, cuda:N, cuda_host and cuda_managed "
                             "memory can be wrapped" % (device,))
        has_stream, s = (0, 0) if stream is None else (1, as_stream_handle(stream))
        dt = _tensor._dtype_bytes(dtype)
    except BaseException:
        if keeper is not None:
            keeper.release()  # now, not when the traceback lets go of it
        raise
    # Go takes a reference on keeper, dropped when the memory is released
    # (at once when the call fails).
    try:
        return _lib._core.dlb_from_pointer(p, dt, len(dims), dims, st, dev[0], dev[1], int(bool(readonly)),
                                           has_stream, s, int(bool(verify)), keeper)
    except BaseException:
        if keeper is not None:
            keeper.release()
        raise
