#!/bin/bash
# Makes pybridge/cmd/libdlbridge/default.pgo, the CPU profile that guides
# Go's compiler (profile-guided optimization) in every build of the
# library: `go build ./pybridge/cmd/libdlbridge` finds it beside main.go,
# and `dlbridge build` copies it into the library it builds.
#
# The profile is of the call path of Go functions called from Python (the
# bridge's code, which every library shares): calls of examples/gofunc and
# the test functions with NumPy arrays, torch CPU tensors, dlbridge tensors
# and scalars, with and without results, for SECONDS seconds (default 20),
# through DLBRIDGE_CPUPROFILE. Run it after `make ext`, on an idle machine.
#
#     bash scripts/pgo-profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SECONDS_TO_PROFILE:-20}
lib=$(mktemp -d)/libprofile.so
out=pybridge/cmd/libdlbridge/default.pgo
# Built without the current profile, so that it does not shape the new one.
GOFLAGS="${GOFLAGS:-} -pgo=off" go run ./cmd/dlbridge build -o "$lib" ./examples/gofunc ./pybridge/pyfunc/pyfunctest
tmp=$(mktemp)
DLBRIDGE_CPUPROFILE="$tmp" DLBRIDGE_CPUPROFILE_SECONDS="$secs" DLBRIDGE_LIB="$lib" \
PYTHONPATH=pybridge/python /usr/bin/python3 - "$secs" <<'PY'
import sys, time
import numpy as np
import dlbridge
ops = dlbridge.ops
x = np.arange(16, dtype=np.float32); out = np.empty_like(x)
m = np.ones((4, 4), np.float32)
t = dlbridge.asarray(np.arange(16, dtype=np.float32))
t2 = dlbridge.asarray(np.arange(16, dtype=np.float32))  # apart from t: arguments that overlap take a copy
try:
    import torch
    tt = torch.arange(16, dtype=torch.float32); to = torch.empty_like(tt)
except ImportError:
    tt = None
end = time.time() + float(sys.argv[1]) + 1
while time.time() < end:
    for _ in range(20000):
        ops.gofunc.scale(out, x, 2.0)
    for _ in range(5000):
        ops.gofunc.scale(out, x)
        ops.gofunc.scale(t, t2, 1.0)
        ops.pytest.nothing()
        ops.pytest.sum(x)
        ops.pytest.echo(True, -3, 65535, 10, 1.5, "s")
        ops.gofunc.normalize_rows(m)
        if tt is not None:
            ops.gofunc.scale(to, tt, 2.0)
PY
mv "$tmp" "$out"
rm -rf "$(dirname "$lib")"
echo "wrote $out ($(wc -c < "$out") bytes)"
