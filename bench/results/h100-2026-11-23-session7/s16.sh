#!/usr/bin/env bash
# Session 7, device call 16 (H100): 4 and 16 MiB cells, 90e0908 against 212bbd9, alternated three times.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; L=/tmp/logs16; mkdir -p $L
cd /tmp
for r in 1 2 3; do for s in base new; do d=$R/build/ab/$s
  PYTHONPATH=$d DLBRIDGE_LIB=$d/libdlbridge.so timeout 60 python3 $d/bench/bench_transfer.py --min-mib 4 --max-mib 16 --only h2d,h2d-into > $L/small-$s-$r.log 2>&1
  echo "== $s $r: $(grep -E "MiB" $L/small-$s-$r.log | grep -v done | awk '{printf "%s%s %s | ", $1, $2, $3}')"
done; done
tar -C $L -czf $OUT/s16.tgz .
