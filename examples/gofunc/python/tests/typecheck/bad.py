# A user's script with mistakes the stub lets mypy find (check_wheel.py
# names the errors it expects, by line).
import numpy

import gofunc

x = numpy.arange(16, dtype=numpy.float32)
out = numpy.empty_like(x)
gofunc.scale(out, x, fctor=2.0)                  # line 9: no such keyword
gofunc.scale(out, x, "two")                      # line 10: a str for a float
gofunc.scale(out, x, 2.0, None)                  # line 11: stream is keyword-only
gofunc.normalize_rows([1.0, 2.0])                # line 12: a list is no tensor
gofunc.axpy(out, x, a=1.0, result_type=3)        # line 13: result_type is a str or module
gofunc.no_such_function(x)                       # line 14: not registered
