#!/usr/bin/env bash
# The dlbridge demo: build the library (when Go is here and DLBRIDGE_LIB is
# not set), then hand Go-made tensors to NumPy and PyTorch (CuPy and CUDA
# tensors on a GPU machine) and take theirs back, printing the pointers;
# then call a Go function of examples/gofunc on their memory through
# dlbridge.ops. With nothing but python3 it runs through the buffer protocol.
#
#   bash examples/demo.sh            # or: make demo
#   PYTHON=python3.12 bash examples/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

GO=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
if [ -z "${DLBRIDGE_LIB:-}" ]; then
  export DLBRIDGE_LIB="$root/build/libdlbridge.so"
  if [ -n "$GO" ]; then
    echo "building $DLBRIDGE_LIB"
    "$GO" build -buildmode=c-shared -o "$DLBRIDGE_LIB" ./pybridge/cmd/libdlbridge
  elif [ ! -f "$DLBRIDGE_LIB" ]; then
    echo "demo: no Go toolchain to build $DLBRIDGE_LIB, and none is there; set DLBRIDGE_LIB" >&2
    exit 1
  fi
fi
# A library of Go functions for Python (examples/gofunc, linked by dlbridge build),
# or DLBRIDGE_GOFUNC_LIB: one built elsewhere that links examples/gofunc.
if [ -z "${DLBRIDGE_GOFUNC_LIB:-}" ]; then
  DLBRIDGE_GOFUNC_LIB="$root/build/libgofunc.so"
  if [ -n "$GO" ]; then
    echo "building $DLBRIDGE_GOFUNC_LIB"
    "$GO" run ./cmd/dlbridge build -go "$GO" -o "$DLBRIDGE_GOFUNC_LIB" ./examples/gofunc
  fi
fi
export PYTHONPATH="$root/pybridge/python${PYTHONPATH:+:$PYTHONPATH}"

# The Python to use: $PYTHON, else the first python3 that has NumPy (Debian's
# /usr/bin/python3 in CI), else any python3.
if [ -z "${PYTHON:-}" ]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then PYTHON=$p; break; fi
  done
  PYTHON=${PYTHON:-python3}
fi

"$PYTHON" examples/demo.py

echo
if [ -f "$DLBRIDGE_GOFUNC_LIB" ]; then
  echo "== A Go function registered with pyfunc (examples/gofunc), called on NumPy/PyTorch memory in place"
  DLBRIDGE_LIB="$DLBRIDGE_GOFUNC_LIB" "$PYTHON" - <<'EOF'
import dlbridge

normalize_rows = dlbridge.ops.gofunc.normalize_rows  # rows to unit length in place; returns the old norms
try:
    import numpy as np
except ImportError:
    np = None
if np is not None:
    a = np.array([[3, 4], [6, 8], [0, 0]], dtype=np.float32)
    norms = normalize_rows(a)
    print("   numpy in : ptr %#x, rows now %s" % (a.ctypes.data, a.round(3).tolist()))
    print("   norms    : %s (made in Go, a %s)" % (norms.tolist(), type(norms).__name__))
    assert np.allclose(a, [[0.6, 0.8], [0.6, 0.8], [0, 0]])
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    norms = normalize_rows(x)
    print("   torch in : ptr %#x, rows now %s" % (x.data_ptr(), x.tolist()))
    print("   norms    : %s (a %s)" % (norms.tolist(), type(norms).__name__))
# A tensor the schema refuses is a Python exception naming the argument.
try:
    normalize_rows(dlbridge.zeros((2, 2), dtype="float64"))
except TypeError as e:
    print("   error    :", e)
EOF
else
  echo "== skipped: examples/gofunc ($DLBRIDGE_GOFUNC_LIB not built)"
fi
