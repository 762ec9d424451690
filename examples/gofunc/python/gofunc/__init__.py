"""gofunc: Go functions called from Python on NumPy, PyTorch, CuPy or
dlbridge tensors, without copies (dlbridge's worked example).

    import gofunc, numpy
    x = numpy.arange(4, dtype=numpy.float32); out = numpy.empty_like(x)
    gofunc.scale(out, x, 2.0)                # out = x * 2, in Go
    norms = gofunc.normalize_rows(m)         # m's rows to unit length

Importing gofunc loads its library, libgofunc.so (beside this file), with
dlbridge.load_library: that library carries dlbridge's own C ABI and the
process's one Go runtime, so import gofunc before dlbridge's first use
(a process that already runs another Go library refuses it, naming both).
"""

import os as _os

import dlbridge as _dlbridge

_dlbridge.load_library(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "libgofunc.so"))

scale = _dlbridge.ops.gofunc.scale
normalize_rows = _dlbridge.ops.gofunc.normalize_rows
axpy = _dlbridge.ops.gofunc.axpy
noop = _dlbridge.ops.gofunc.noop

__all__ = ["scale", "normalize_rows", "axpy", "noop"]
