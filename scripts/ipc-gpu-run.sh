#!/usr/bin/env bash
# Runs the dlbridge.ipc checks on the GPU machine (see build-ipc-gpu.sh).
# Each step has its own time limit and log under $OUT; a Go step that
# hangs prints its goroutines (-test.timeout, SIGQUIT), pytest its threads.
set -uo pipefail
G="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/tmp/ipc-out}"; mkdir -p "$OUT"
export DLBRIDGE_GPU=1 PYTHONPATH="$G/py" DLBRIDGE_IPC_PRODUCER="$G/bin/ipcproducer"
cd /tmp
STEPS="${STEPS:-cuda fabricdestroy ipc ipcbench pytest pickle}"
step() { # name limit command...
  local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return ;; esac
  echo "== $name"
  timeout -s QUIT -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "rc=$?" >> "$OUT/$name.log"
  grep -E '^(---|ok|PASS|FAIL|panic|rc=|size|[0-9]+ +[0-9]+ |#|pickle|speed|SKIP|[0-9]+ passed|.*(passed|failed|error))|_test.go:|Error|error' "$OUT/$name.log" | head -60
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step cuda 45 "$G/bin/cuda.nocgo.test" -test.run 'IPC' -test.skip 'IPCFabricDestroyGPU' -test.v -test.timeout 40s
step fabricdestroy 30 "$G/bin/cuda.nocgo.test" -test.run 'IPCFabricDestroyGPU' -test.v -test.timeout 25s
step ipc 150 "$G/bin/ipc.nocgo.test" -test.v -test.timeout 140s
step ipcbench 240 sh -c "$G/bin/ipcbench -rounds 20 -sizes 1M,64M,1G,4G && $G/bin/ipcbench -fill host -rounds 10 -sizes 1M,64M,1G,4G"
step pytest 120 python3 -m pytest -q -rs -p no:cacheprovider -o faulthandler_timeout=60 "$G/py/tests/test_ipc.py"
step pickle 80 python3 "$G/ipc-pickle-bench.py" 3
echo "== tails"
for f in "$OUT"/*.log; do echo "-- $f"; tail -25 "$f"; done
