"""Mistakes mypy must report against the installed dlbridge's types (each
line marked E: is an error), so that `make typecheck` fails should the
types degrade to Any."""

import dlbridge

t = dlbridge.arange(6)
t.to(3.5)  # E: arg-type
n: str = t.ndim  # E: assignment
t.fill_()  # E: call-arg
t.no_such_method()  # E: attr-defined
dlbridge.arange("6")  # E: arg-type
s: dlbridge.Stream = dlbridge.Event()  # E: assignment
