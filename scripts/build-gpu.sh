#!/usr/bin/env bash
# Builds everything the GPU machine runs into build/gpu (it has no Go toolchain):
# test binaries (with and without cgo), the c-shared library with the Python package,
# libraries of Go functions made by dlbridge build, the command-line tool and the
# benchmark programs, plus run.sh that runs them all and writes logs under $OUT.
# Usage: make gpu; then on the device:
#   bash build/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
G=build/gpu
rm -rf "$G"; mkdir -p "$G/bin" "$G/py"
# Test binaries: every package that has GPU tests (they skip without DLBRIDGE_GPU=1),
# or those GPU_GO_TESTS names ("none": no Go tests, for a bundle that must stay
# under the device tool's 64 MiB carry limit when only Python runs there).
for p in ${GPU_GO_TESTS:-cuda zerocopy nccl pybridge cmd/dlbridge}; do
  [ -d "$p" ] || continue
  CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$G/bin/${p//\//_}.nocgo.test" "./$p" 2>/dev/null || echo "note: no CGO_ENABLED=0 test binary for $p"
  go test -c -ldflags="-s -w" -o "$G/bin/${p//\//_}.cgo.test" "./$p"
done
# Benchmark programs and the command-line tool.
[ -d bench/bindcost ] && go build -ldflags="-s -w" -o "$G/bin/bindcost" ./bench/bindcost
[ -d bench/bindcost ] && CGO_ENABLED=0 go build -tags nocgo -ldflags="-s -w" -o "$G/bin/bindcost.nocgo" ./bench/bindcost 2>/dev/null || true
[ -d cmd/dlbridge ] && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$G/bin/dlbridge" ./cmd/dlbridge
# The NCCL benchmark's Go rank and its torch.distributed twin (bench/nccl).
[ -d bench/nccl ] && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$G/bin/ncclbench" ./bench/nccl && cp bench/nccl/torch_bench.py "$G/bin/" && cp bench/nccl/run.sh "$G/bin/nccl-run.sh"
# torch.distributed and dlbridge.nccl (Python ranks with PyTorch tensors) in the same processes.
[ -f bench/nccl/pair_bench.py ] && cp bench/nccl/pair_bench.py "$G/bin/"
# The Go rank of examples/nccl, beside which test_nccl.py runs a PyTorch rank
# (DLBRIDGE_NCCL_EXAMPLE; the nccl test binary above is its Go ranks' DLBRIDGE_NCCL_RANK).
[ -d examples/nccl ] && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$G/bin/ncclex" ./examples/nccl
# The c-shared library and the Python package exactly as the README builds them:
# the wheel (abi3: installs on the device's Python 3.12 without Go) and, for
# PYTHONPATH=$G/py, the package with its extension and library built in place.
make -s lib
cp build/libdlbridge.so "$G/"
make -s wheel
cp build/wheel/dlbridge-*.whl "$G/"
make -s ext
# Go functions for Python, each library linked by dlbridge build with dlbridge's ABI:
# examples/gofunc with pyfunc's test package (tests/test_ops.py, bench_gofunc.py), and
# the Go package of README.md's section "Shipping Go functions to Python" with
# examples/gofunc (tests/test_readme.py), written where test_readme.py writes it.
go run ./cmd/dlbridge build -ldflags "-s -w" -o "$G/libopstest.so" ./examples/gofunc ./pybridge/pyfunc/pyfunctest
mkdir -p build/_readme/mylib
awk '/^## /{s = ($0 == "## Shipping Go functions to Python")} s && /^```go$/{g=1; next} g && /^```$/{exit} g' \
  README.md > build/_readme/mylib/mylib.go
go run ./cmd/dlbridge build -ldflags "-s -w" -o "$G/libmylib.so" ./build/_readme/mylib ./examples/gofunc
cp -r pybridge/python/. "$G/py/"
rm -rf "$G/py/build" "$G/py"/*.egg-info "$G/py/.mypy_cache" "$G/py/.pytest_cache"
find "$G/py" -name __pycache__ -prune -exec rm -rf {} +
# C baselines compiled on the device with nvcc.
[ -d bench/cuda ] && cp -r bench/cuda "$G/cuda-src"
[ -d examples ] && cp -r examples "$G/examples"
rm -rf "$G/examples/gofunc/python/build" "$G/examples/gofunc/python"/*.egg-info
cp scripts/gpu-run.sh "$G/run.sh"
# The peers bench_gofunc.py sets beside dlbridge (tvm-ffi, nanobind), built
# here for the device's Python (it has no cmake): GPU_PEERS names a CPython
# 3.12 with headers; scripts/build-peers.sh says which sources it needs.
if [ -n "${GPU_PEERS:-}" ]; then
  scripts/build-peers.sh "$GPU_PEERS" "$G/peers"
fi
du -sh "$G"
