#!/usr/bin/env bash
# Session 9, device call 4 (H100, HEAD): pytest (the README's GPU example on the real driver now),
# then the full interleaved bench_transfer twice more with cells.py.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs4; mkdir -p $L
uptime > $L/gpu.txt
OUT=$L bash $G/run.sh py > $L/runsh_tail.txt 2>&1; tail -3 $L/pytest.log
(cd /tmp && DLBRIDGE_LIB=$G/libdlbridge.so PYTHONPATH=$G/py DLBRIDGE_README=$R/README.md python3 -m pytest -v -p no:cacheprovider $G/py/tests/test_readme.py 2>&1 | tail -5)
cd /tmp
for r in i4 i5; do
  t0=$SECONDS
  env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 200 python3 $G/cells.py > $L/transfer-$r.log 2> $L/cells-$r.log; echo "exit $? in $((SECONDS-t0)) s" >> $L/transfer-$r.log
  echo "== $r"; grep -E "^(h2d|d2h)|64 MiB|256 MiB|1 GiB|^ *(4|64) KiB|wrong|exit" $L/transfer-$r.log
done
tar -C $L -czf $OUT/s4.tgz .
