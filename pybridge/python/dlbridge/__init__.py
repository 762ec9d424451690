"""dlbridge: tensors shared between Go and Python without copies.

Tensors made or filled by Go code leave as DLPack capsules,
``__cuda_array_interface__`` or ``__array_interface__``; tensors from
PyTorch, CuPy, NumPy, JAX, Numba or cuda.core come in the same ways::

    import dlbridge, numpy, torch

    t = dlbridge.arange(6, dtype="float32").fill_(1.5)   # made in Go
    a = numpy.from_dlpack(t)                             # NumPy sees the same memory
    x = torch.from_dlpack(t)                             # so does PyTorch
    back = dlbridge.from_dlpack(torch.ones(3))           # and back, zero-copy

The library (libdlbridge.so, built from Go, installed inside this package)
is loaded at the first call that needs it, not at import: a process that
imports dlbridge and never uses it never starts the Go runtime. DLBRIDGE_LIB
overrides which library is loaded.

The Go runtime does not survive fork(): in a child forked after the library
was loaded, dlbridge raises RuntimeError (use multiprocessing's 'spawn' or
'forkserver' start method, as for CUDA in PyTorch). Tensors pickle by value
(their bytes, dtype, shape and device), so they can be sent to such workers;
multiprocessing sends CUDA tensors by handle instead (dlbridge.ipc).
"""

import copyreg as _copyreg
import ctypes as _ctypes


from ._tensor import (
    Tensor,
    arange,
    asarray,
    cuda_available,
    cuda_device_count,
    debug_stats,
    empty,
    from_dlpack,
    set_pinned_pool_limit,
    zeros,
)
from ._pointer import from_pointer
from ._stream import Event, Stream, synchronize
from ._ops import load_library, ops
from . import _dtypes, _lib

__version__ = "0.1.0"

def __getattr__(name):
    if name == "library_path":
        # The path of the loaded libdlbridge.so (loading it if needed).
        return _lib.path
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def library():
    """The ctypes.CDLL of the loaded library. Go functions registered with
    pyfunc are called as dlbridge.ops.<ns>.<name> (see load_library); a
    function the library exports itself with cgo //export is called through
    this CDLL: pass Tensor.handle, turn returned handles into tensors with
    from_handle, and return codes into exceptions with check. (dlbridge
    itself calls the library through its extension, never ctypes.)"""
    global _cdll
    if _cdll is None:
        _cdll = _ctypes.CDLL(_lib.path)  # the library already loaded: the same Go runtime
    return _cdll


_cdll = None


def from_handle(handle):
    """A Tensor for a handle that a Go function the library exports itself
    returned (pybridge.NewTensor); the Tensor owns the handle from now on.
    Functions of dlbridge.ops return tensors already."""
    from ._tensor import _from_handle

    return _from_handle(handle)


def check(rc):
    """Raise the exception for a non-zero return code of a Go function the
    library exports itself (pybridge.Fence), with Go's message; do nothing
    for 0. Functions of dlbridge.ops raise their exceptions themselves."""
    _lib._core.check(rc)


def _reduce(t):
    """Pickle a Tensor by value: its bytes (C order), dtype, shape and
    device. Memory cannot be shared with another process through pickle: the
    receiver gets a copy (on the same device), made by Go on its side."""
    host = t if t.device == "cpu" else t.to("cpu")
    if not host.is_contiguous():
        host = host.clone()
    code, bits, lanes = _dtypes.parse(t.dtype)
    nbytes = host.nbytes if bits >= 8 else (host.size * bits * lanes + 7) // 8
    data = _ctypes.string_at(host.data_ptr(), nbytes) if nbytes else b""
    return _rebuild, (data, t.dtype, t.shape, t.device)


class _Bytes:
    """Host memory of a bytearray described by __array_interface__."""

    def __init__(self, buf, shape, typestr):
        self.buf = buf
        addr = _ctypes.addressof((_ctypes.c_char * len(buf)).from_buffer(buf))
        self.__array_interface__ = {"data": (addr, False), "shape": shape, "typestr": typestr,
                                    "version": 3}


def _rebuild(data, dtype, shape, device):
    if not data:
        return empty(shape, dtype, device)
    typestr = _dtypes.typestr(*_dtypes.parse(dtype), False)
    with asarray(_Bytes(bytearray(data), tuple(shape), typestr)) as src:
        return src.to(device, copy=True)


_copyreg.pickle(Tensor, _reduce)

# multiprocessing pickles CUDA tensors by handle (dlbridge.ipc).
from . import ipc  # noqa: E402

__all__ = [
    "Event",
    "Stream",
    "Tensor",
    "arange",
    "asarray",
    "cuda_available",
    "cuda_device_count",
    "debug_stats",
    "empty",
    "from_dlpack",
    "from_pointer",
    "set_pinned_pool_limit",
    "synchronize",
    "zeros",
    "check",
    "from_handle",
    "library",
    "library_path",
]
