"""dlbridge: tensors shared between Go and Python without copies.

Tensors made or filled by Go code leave as DLPack capsules,
``__cuda_array_interface__`` or ``__array_interface__``; tensors from
PyTorch, CuPy, NumPy, JAX, Numba or cuda.core come in the same ways::

    import dlbridge, numpy, torch

    t = dlbridge.arange(6, dtype="float32").fill_(1.5)   # made in Go
    a = numpy.from_dlpack(t)                             # NumPy sees the same memory
    x = torch.from_dlpack(t)                             # so does PyTorch
    back = dlbridge.from_dlpack(torch.ones(3))           # and back, zero-copy

The library (libdlbridge.so, built from Go) is found through the
DLBRIDGE_LIB environment variable, next to this package, or in the source
checkout's build/ directory.
"""

from ._tensor import (
    Tensor,
    arange,
    asarray,
    cuda_available,
    cuda_device_count,
    debug_stats,
    empty,
    from_dlpack,
    zeros,
)
from . import _lib

__version__ = "0.1.0"

#: The path of the loaded libdlbridge.so.
library_path = _lib.path

#: Whether the CPython fast path of the library is in use (else pure ctypes).
fast_path = _lib.core is not None


def library():
    """The ctypes.CDLL of the loaded library. A library built with your own
    exported Go functions next to dlbridge's ABI (see examples/userlib) is
    called through it: pass Tensor.handle, turn returned handles into
    tensors with from_handle, and return codes into exceptions with check."""
    return _lib.lib


def from_handle(handle):
    """A Tensor for a handle that a Go function of the library returned
    (pybridge.NewTensor); the Tensor owns the handle from now on."""
    from ._tensor import _from_handle

    return _from_handle(handle)


def check(rc):
    """Raise the exception for a non-zero return code of a Go function of
    the library (pybridge.Fence), with Go's message; do nothing for 0."""
    _lib.check(rc)


__all__ = [
    "Tensor",
    "arange",
    "asarray",
    "cuda_available",
    "cuda_device_count",
    "debug_stats",
    "empty",
    "from_dlpack",
    "zeros",
    "check",
    "from_handle",
    "library",
    "library_path",
]
