#!/usr/bin/env bash
# Session 7, device call 14 (H100, 90e0908 trace build, no trace): bench_transfer h2d/h2d-into 16 MiB-1 GiB with at most 8 against at most 12 workers, alternated.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs14; mkdir -p $L
cd /tmp
for r in 1 2; do for w in 8 12; do
  DLBRIDGE_TRACE_WORKERS=$w PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.trace.so timeout 100 python3 $G/py/bench/bench_transfer.py --min-mib 16 --only h2d,h2d-into > $L/h2d-w$w-$r.log 2>&1
  echo "== w$w r$r"; grep -E "MiB|GiB|wrong" $L/h2d-w$w-$r.log | grep -v done
done; done
tar -C $L -czf $OUT/s14.tgz .
