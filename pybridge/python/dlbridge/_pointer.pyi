import ctypes
from typing import Callable, Optional, SupportsIndex, SupportsInt, Tuple, Union

from ._tensor import Tensor
from ._types import DType, Device, Shape, StreamArg

#: An address: an int, a ctypes c_void_p, or an object that converts with
#: int() (PyCUDA's DeviceAllocation, cuda-python's CUdeviceptr).
_Address = Union[SupportsIndex, ctypes.c_void_p, SupportsInt]

def from_pointer(
    ptr: _Address,
    shape: Shape,
    dtype: DType,
    *,
    device: Device = "cuda:0",
    strides: Optional[Union[Tuple[SupportsIndex, ...], list[SupportsIndex]]] = None,
    readonly: bool = False,
    owner: object = None,
    deleter: Optional[Callable[[int], object]] = None,
    stream: StreamArg = None,
    verify: bool = True,
) -> Tensor: ...
