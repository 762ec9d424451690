#!/usr/bin/env bash
# Session 7, device call 15 (H100): zerocopy GPU tests at 212bbd9; bench_transfer h2d/h2d-into/d2h from 4 MiB, 90e0908 (base) against 212bbd9 (new), alternated.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; L=/tmp/logs15; mkdir -p $L
nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt
(cd $R/zerocopy && timeout 150 $R/build/g7/zerocopy.test -test.count=1 > $L/go-zerocopy.log 2>&1; echo "zerocopy rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' $L/go-zerocopy.log | head -5)
cd /tmp
for s in base new; do d=$R/build/ab/$s
  PYTHONPATH=$d DLBRIDGE_LIB=$d/libdlbridge.so timeout 100 python3 $d/bench/bench_transfer.py --min-mib 4 --only h2d,h2d-into,d2h > $L/xfer-$s.log 2>&1
  echo "== $s"; grep -E "MiB|GiB|wrong|^[a-z]" $L/xfer-$s.log | grep -v "done\|bench_transfer\|GB/s, best"
done
tar -C $L -czf $OUT/s15.tgz .
