#!/usr/bin/env bash
# Session 8, device call 8 (H100): zerocopy GPU tests (the DMA-order tests 3 times) and pytest with buffers given to an
# upload's uses as they come free (new); h2d/h2d-into 64 MiB-1 GiB, b3f6885 (base) against new, alternated, 3 rounds,
# with cells.py (per-call times, steal); the full bench_transfer of new with cells.py.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; B=$G/bin; L=/tmp/logs8; mkdir -p $L
nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt; uptime >> $L/gpu.txt
(cd $R/zerocopy && timeout 200 $B/zerocopy.nocgo.test -test.count=1 > $L/go-zerocopy.log 2>&1; echo "zerocopy rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' $L/go-zerocopy.log | head -5)
(cd $R/zerocopy && timeout 60 $B/zerocopy.nocgo.test -test.count=3 -test.v -test.run 'TestUploadDMAs' > $L/go-order.log 2>&1; echo "order tests rc=$?")
cd /tmp
for r in 1 2 3; do for s in base new; do d=$R/build/ab/$s
  PYTHONPATH=$d:$d/bench DLBRIDGE_LIB=$d/libdlbridge.so timeout 100 python3 $G/cells.py --min-mib 64 --only h2d,h2d-into > $L/h2d-$s-$r.log 2> $L/cells-$s-$r.log
  echo "== $s r$r"; grep -E "MiB|GiB" $L/h2d-$s-$r.log | grep -v done
  grep -E '^cell (1|4|7|10|13|16) ' $L/cells-$s-$r.log | sed -E 's/.*best ([0-9.]+) us.*steal ([0-9.]+) s.*/\1:\2/' | tr '\n' ' '; echo
done; done
PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 200 python3 $G/cells.py > $L/transfer.log 2> $L/cells-full.log; echo "exit $?" >> $L/transfer.log
grep -E "^(h2d|d2h)|64 MiB|256 MiB|1 GiB|^ *(4|64) KiB|wrong|exit" $L/transfer.log
cd $R && OUT=$L bash $G/run.sh py > $L/runsh_tail.txt 2>&1; tail -1 $L/pytest.log
tar -C $L -czf $OUT/s8.tgz .
