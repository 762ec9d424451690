# dlbridge.ops and load_library: Go functions a library registers, known
# only at run time (`python -m dlbridge.stubgen` writes a stub with their
# signatures for a package that re-exports them).
import inspect
import os
from typing import Any, Optional, Union

class GoFunction:
    def __init__(self, d: dict[str, Any]) -> None: ...
    @property
    def __signature__(self) -> inspect.Signature: ...
    def __call__(self, *args: Any, stream: object = None, result_type: Optional[str] = None, **kwargs: Any) -> Any: ...

class Namespace:
    def __init__(self, name: str) -> None: ...
    # A Go function (GoFunction) or a nested namespace.
    def __getattr__(self, attr: str) -> Any: ...

class _Ops:
    def __getattr__(self, name: str) -> Namespace: ...

ops: _Ops

def load_library(path: Union[str, "os.PathLike[str]"]) -> str: ...
