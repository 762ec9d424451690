#!/usr/bin/env bash
# Session 8, device call 7 (H100, b070a28 trace library): at most 12 (default) against at most 8 workers, alternated,
# 4 rounds, h2d/h2d-into 64 and 256 MiB, with cells.py (per-call times and the steal time of each cell): does the host
# steal CPU time from uploads that keep 13 vCPUs busy, and less from 9?
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs7; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt
for r in 1 2 3 4; do for w in 12 8; do
  env DLBRIDGE_TRACE_WORKERS=$w PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.trace.so timeout 100 python3 $G/cells.py --min-mib 64 --max-mib 256 --only h2d,h2d-into > $L/w$w-$r.log 2> $L/cells-w$w-$r.log
  echo "== w$w r$r"; grep -E "MiB" $L/w$w-$r.log | grep -v done; grep -E "^cell (1|4|7|10):" $L/cells-w$w-$r.log | sed -E 's/.*best ([0-9.]+) us.*wall ([0-9.]+) s.*steal ([0-9.]+) s.*/best \1 wall \2 steal \3/'
done; done
tar -C $L -czf $OUT/s7.tgz .
