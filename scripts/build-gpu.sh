#!/usr/bin/env bash
# Builds everything the GPU machine runs into build/gpu (it has no Go toolchain):
# test binaries (with and without cgo), the c-shared library with the Python package,
# the command-line tool and the benchmark programs, plus run.sh that runs them all
# and writes logs under $OUT. Usage: make gpu; then on the device:
#   bash build/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
G=build/gpu
rm -rf "$G"; mkdir -p "$G/bin" "$G/py"
# Test binaries: every package that has GPU tests (they skip without DLBRIDGE_GPU=1).
for p in cuda zerocopy pybridge cmd/dlbridge; do
  [ -d "$p" ] || continue
  CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$G/bin/${p//\//_}.nocgo.test" "./$p" 2>/dev/null || echo "note: no CGO_ENABLED=0 test binary for $p"
  go test -c -ldflags="-s -w" -o "$G/bin/${p//\//_}.cgo.test" "./$p"
done
# Benchmark programs and the command-line tool.
[ -d bench/bindcost ] && go build -ldflags="-s -w" -o "$G/bin/bindcost" ./bench/bindcost
[ -d bench/bindcost ] && CGO_ENABLED=0 go build -tags nocgo -ldflags="-s -w" -o "$G/bin/bindcost.nocgo" ./bench/bindcost 2>/dev/null || true
[ -d cmd/dlbridge ] && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$G/bin/dlbridge" ./cmd/dlbridge
# The c-shared library and the Python package exactly as the README builds them:
# the wheel (abi3: installs on the device's Python 3.12 without Go) and, for
# PYTHONPATH=$G/py, the package with its extension and library built in place.
make -s lib
cp build/libdlbridge.so "$G/"
make -s wheel
cp build/wheel/dlbridge-*.whl "$G/"
make -s ext
# A user's own c-shared library that ships dlbridge's ABI beside its functions.
[ -d examples/userlib ] && go build -buildmode=c-shared -ldflags="-s -w" -o "$G/libuserlib.so" ./examples/userlib
cp -r pybridge/python/. "$G/py/"
rm -rf "$G/py/build" "$G/py"/*.egg-info
find "$G/py" -name __pycache__ -prune -exec rm -rf {} +
# C baselines compiled on the device with nvcc.
[ -d bench/cuda ] && cp -r bench/cuda "$G/cuda-src"
[ -d examples ] && cp -r examples "$G/examples"
cp scripts/gpu-run.sh "$G/run.sh"
du -sh "$G"
