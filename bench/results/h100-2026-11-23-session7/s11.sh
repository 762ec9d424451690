#!/usr/bin/env bash
# Session 7, device call 11 (H100): bench_transfer h2d/h2d-into 16-256 MiB and d2h 64 MiB+, 3530837 against 90e0908, alternated.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; L=/tmp/logs11; mkdir -p $L
nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt
cd /tmp
for r in 1 2; do for s in base new; do d=$R/build/ab/$s
  PYTHONPATH=$d DLBRIDGE_LIB=$d/libdlbridge.so timeout 110 python3 $d/bench/bench_transfer.py --min-mib 16 --max-mib 1024 --only h2d,h2d-into > $L/h2d-$s-$r.log 2>&1
  echo "== $s $r"; grep -E "MiB|GiB|wrong" $L/h2d-$s-$r.log | grep -v done
done; done
tar -C $L -czf $OUT/s11.tgz .
