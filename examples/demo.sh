#!/usr/bin/env bash
# The dlbridge demo: build the library (when Go is here and DLBRIDGE_LIB is
# not set), then hand Go-made tensors to NumPy and PyTorch (CuPy and CUDA
# tensors on a GPU machine) and take theirs back, printing the pointers.
# With nothing but python3 it runs through the buffer protocol.
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
userlib="$(dirname "$DLBRIDGE_LIB")/libuserlib.so"
if [ -n "$GO" ] && [ -f examples/userlib/main.go ]; then
  "$GO" build -buildmode=c-shared -o "$userlib" ./examples/userlib
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

if [ -f "$userlib" ]; then
  echo
  echo "== A user's own Go function (examples/userlib), called on NumPy/PyTorch memory in place"
  DLBRIDGE_LIB="$userlib" "$PYTHON" examples/userlib/use_userlib.py
else
  echo
  echo "== skipped: examples/userlib ($userlib not built)"
fi
