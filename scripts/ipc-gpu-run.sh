#!/usr/bin/env bash
# Runs the dlbridge.ipc checks on the GPU machine (see build-ipc-gpu.sh).
set -uo pipefail
G="$(cd "$(dirname "$0")" && pwd)"
export DLBRIDGE_GPU=1 PYTHONPATH="$G/py" DLBRIDGE_IPC_PRODUCER="$G/bin/ipcproducer"
cd /tmp
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== cuda IPC bindings (CGO_ENABLED=0)"
"$G/bin/cuda.nocgo.test" -test.run 'IPC' -test.v 2>&1 | grep -E '^(---|ok|PASS|FAIL|panic)|_test.go'
echo "== zerocopy/ipc across processes (CGO_ENABLED=0)"
timeout 300 "$G/bin/ipc.nocgo.test" -test.v 2>&1 | grep -E '^(---|ok|PASS|FAIL|panic)|_test.go|SKIP'
echo "== hand-over against the driver's own import (ipcbench)"
timeout 300 "$G/bin/ipcbench" -rounds 30 -sizes 1M,16M,256M,1G,4G
echo "== Python: dlbridge.ipc tests on the real driver"
timeout 400 python3 -m pytest -q -rs -p no:cacheprovider "$G/py/tests/test_ipc.py" 2>&1 | tail -15
echo "== pickling 1 GiB to a spawned worker"
timeout 300 python3 "$G/ipc-pickle-bench.py" 5
