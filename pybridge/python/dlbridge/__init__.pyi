# The public API of dlbridge (the modules' stubs hold the signatures).
import ctypes

from ._ops import load_library as load_library, ops as ops
from . import ipc as ipc
from ._pointer import from_pointer as from_pointer
from ._stream import Event as Event, Stream as Stream, synchronize as synchronize
from ._tensor import (
    Tensor as Tensor,
    arange as arange,
    asarray as asarray,
    cuda_available as cuda_available,
    cuda_device_count as cuda_device_count,
    debug_stats as debug_stats,
    empty as empty,
    from_dlpack as from_dlpack,
    set_pinned_pool_limit as set_pinned_pool_limit,
    zeros as zeros,
)

__version__: str
#: The path of the loaded libdlbridge.so (reading it loads the library).
library_path: str

def library() -> ctypes.CDLL: ...
def from_handle(handle: int) -> Tensor: ...
def check(rc: int) -> None: ...

