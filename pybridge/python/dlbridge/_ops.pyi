# dlbridge.ops and load_library: Go functions a library registers, known
# only at run time (`python -m dlbridge.stubgen` writes a stub with their
# signatures for a package that re-exports them).
import os
from typing import Any, Union

class Namespace:
    def __init__(self, name: str) -> None: ...
    # A Go function (a builtin function of dlbridge._core) or a nested namespace.
    def __getattr__(self, attr: str) -> Any: ...

class _Ops:
    def __getattr__(self, name: str) -> Namespace: ...

ops: _Ops

#: The names result_type= takes, and the same as a sentence's list.
RESULT_TYPES: tuple[str, ...]
RESULT_TYPES_TEXT: str

def load_library(path: Union[str, "os.PathLike[str]"]) -> str: ...
