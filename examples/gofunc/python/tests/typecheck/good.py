# A user's script that calls gofunc as its stub says: mypy passes it.
import numpy

import gofunc

x = numpy.arange(16, dtype=numpy.float32)
out = numpy.empty_like(x)
gofunc.scale(out, x)
gofunc.scale(out, x, 2.0)
gofunc.scale(out, x, factor=3)                  # an int is a float
gofunc.scale(out=out, x=x, factor=numpy.float32(0.5), stream=None)
gofunc.scale(bytearray(64), memoryview(bytes(64)), result_type="numpy")
m = numpy.ones((3, 4), dtype=numpy.float32)
norms = gofunc.normalize_rows(m, result_type=numpy)
print(norms.sum())                               # a tensor result is Any
gofunc.axpy(out, x, a=0.5, stream=None)  # CUDA tensors at run time
gofunc.noop(x, x)
