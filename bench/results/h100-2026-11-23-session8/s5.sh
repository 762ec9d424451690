#!/usr/bin/env bash
# Session 8, device call 5 (H100, b070a28): the full bench_transfer twice with per-cell call times (cells.py) and the
# dlbtrace library writing every staged transfer (it no longer allocates per transfer): what a slow 64 MiB cell looks like.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs5; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt
for r in 1 2; do
  env TZ=UTC PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.trace.so DLBRIDGE_TRACE=$L/trace-$r.txt timeout 220 python3 $G/cells.py --min-mib 16 > $L/transfer-$r.log 2> $L/cells-$r.log; echo "exit $?" >> $L/transfer-$r.log
  echo "== run $r"; grep -E "MiB|GiB|^[a-z]" $L/transfer-$r.log | grep -v "done\|bench_transfer\|GB/s, best\|^ *4 MiB"
  gzip -9 $L/trace-$r.txt
done
tar -C $L -czf $OUT/s5.tgz .
