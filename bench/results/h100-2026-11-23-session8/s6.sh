#!/usr/bin/env bash
# Session 8, device call 6 (H100, 3e72dcd = b070a28's engine): the full bench_transfer three times with cells.py
# (per-call times, threads, steal): how often each figure of issue 9 is met, and what a slow cell looks like.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs6; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt
for r in 1 2 3; do
  env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 180 python3 $G/cells.py > $L/transfer-$r.log 2> $L/cells-$r.log; echo "exit $?" >> $L/transfer-$r.log
  echo "== run $r"; grep -E "^(h2d|d2h)|64 MiB|256 MiB|1 GiB|^ *(4|64) KiB|wrong" $L/transfer-$r.log
done
tar -C $L -czf $OUT/s6.tgz .
