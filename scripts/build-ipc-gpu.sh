#!/usr/bin/env bash
# Builds what the GPU machine runs for dlbridge.ipc into build/ipc-gpu (it
# has no Go toolchain): the cuda and zerocopy/ipc test binaries built with
# CGO_ENABLED=0, zerocopy's for the device pool benchmark, the Go producer of the Python tests, the hand-over
# benchmark, the Python package made whole in place, the pickling
# benchmark, and run.sh. On the device: bash build/ipc-gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
G=build/ipc-gpu
rm -rf "$G"; mkdir -p "$G/bin"
CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$G/bin/cuda.nocgo.test" ./cuda
CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$G/bin/ipc.nocgo.test" ./zerocopy/ipc
# BenchmarkDevicePool (the exportable device pool against the default one),
# built with cgo as the Python package's library is.
go test -c -ldflags="-s -w" -o "$G/bin/zerocopy.cgo.test" ./zerocopy
CGO_ENABLED=0 go build -ldflags="-s -w" -o "$G/bin/ipcproducer" ./internal/ipcproducer
CGO_ENABLED=0 go build -ldflags="-s -w" -o "$G/bin/ipcbench" ./internal/ipcbench
make -s ext
mkdir -p "$G/py"
cp -r pybridge/python/dlbridge "$G/py/"
mkdir -p "$G/py/tests"
cp pybridge/python/tests/conftest.py pybridge/python/tests/test_ipc.py pybridge/python/tests/ipc_consumer.py "$G/py/tests/"
find "$G/py" -name __pycache__ -prune -exec rm -rf {} +
cp scripts/ipc-pickle-bench.py "$G/"
cp scripts/ipc-gpu-run.sh "$G/run.sh"
du -sh "$G"
