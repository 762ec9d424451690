#!/usr/bin/env bash
# Session 8, device call 4 (H100): zerocopy GPU tests and pytest at b070a28 (packed pieces pass a late one);
# h2d/h2d-into from 16 MiB, 67e0876 (base) against b070a28 (new), alternated, 3 rounds; the full bench_transfer of b070a28.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; B=$G/bin; L=/tmp/logs4; mkdir -p $L
nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt; uptime >> $L/gpu.txt
(cd $R/zerocopy && timeout 200 $B/zerocopy.nocgo.test -test.count=1 > $L/go-zerocopy.log 2>&1; echo "zerocopy rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' $L/go-zerocopy.log | head -5)
(cd $R/zerocopy && timeout 60 $B/zerocopy.nocgo.test -test.count=3 -test.v -test.run 'TestUploadDMAs' > $L/go-order.log 2>&1; echo "order tests rc=$?")
cd /tmp
for r in 1 2 3; do for s in base new; do d=$R/build/ab/$s
  PYTHONPATH=$d DLBRIDGE_LIB=$d/libdlbridge.so timeout 100 python3 $d/bench/bench_transfer.py --min-mib 16 --only h2d,h2d-into > $L/h2d-$s-$r.log 2>&1
  echo "== $s r$r"; grep -E "MiB|GiB" $L/h2d-$s-$r.log | grep -v done
done; done
PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so timeout 200 python3 $G/py/bench/bench_transfer.py > $L/transfer.log 2>&1; echo "exit $?" >> $L/transfer.log
grep -v "done " $L/transfer.log | tail -62
cd $R && OUT=$L bash $G/run.sh py > $L/runsh_tail.txt 2>&1; tail -1 $L/pytest.log
tar -C $L -czf $OUT/s4.tgz .
