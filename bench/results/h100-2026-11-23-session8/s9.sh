#!/usr/bin/env bash
# Session 8, device call 9 (H100, c031a83): the full bench_transfer twice with cells.py (per-call times, steal).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs9; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt
for r in 1 2; do
  env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 180 python3 $G/cells.py > $L/transfer-$r.log 2> $L/cells-$r.log; echo "exit $?" >> $L/transfer-$r.log
  echo "== run $r"; grep -E "^(h2d|d2h)|64 MiB|256 MiB|1 GiB|^ *(4|64) KiB|wrong" $L/transfer-$r.log
done
tar -C $L -czf $OUT/s9.tgz .
