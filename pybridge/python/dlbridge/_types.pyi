# Type aliases shared by dlbridge's stubs (a stub-only module: nothing
# imports it at run time).
from types import EllipsisType
from typing import Protocol, SupportsIndex, Tuple, Union

from typing_extensions import TypeAlias

class _DeviceLike(Protocol):
    # torch.device and anything whose str() is "cpu", "cuda" or "cuda:N"
    @property
    def type(self) -> str: ...

#: "cpu", "cuda", "cuda:N", "cuda_host", "cuda_managed", a (device_type,
#: device_id) pair as __dlpack_device__ returns, or a torch.device.
Device: TypeAlias = Union[str, Tuple[int, int], _DeviceLike]

#: A dtype name ("float32", "bfloat16", "bool", ...), a NumPy or torch
#: dtype, a NumPy scalar type, or bool, int, float, complex.
DType: TypeAlias = object

#: A stream argument: None (dlbridge's work stream), an int CUstream
#: handle, a dlbridge.Stream, a torch or CuPy stream, or an object with
#: __cuda_stream__.
StreamArg: TypeAlias = object

#: A number as sum() and item() return it.
Scalar: TypeAlias = Union[int, float, complex]

Shape: TypeAlias = Union[SupportsIndex, Tuple[SupportsIndex, ...], list[SupportsIndex]]

_Index1: TypeAlias = Union[SupportsIndex, slice, None, EllipsisType]
Index: TypeAlias = Union[_Index1, Tuple[_Index1, ...]]
