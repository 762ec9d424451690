#!/usr/bin/env bash
# Session 8, device call 2 (H100): the full bench_transfer again with per-cell call times and pools (cells.py), with the
# dlbtrace library writing every staged transfer; then the zerocopy and pybridge GPU tests and pytest at this head.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; B=$G/bin; L=/tmp/logs2; mkdir -p $L
cd /tmp
env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.trace.so DLBRIDGE_TRACE=$L/trace.txt timeout 220 python3 $G/cells.py > $L/transfer.log 2> $L/cells.log; echo "exit $?" >> $L/transfer.log
grep -v "done " $L/transfer.log | grep -A12 "^h2d$"; grep -E "^(  |cells|exit)" $L/transfer.log | tail -3
for t in zerocopy.nocgo pybridge.cgo cuda.nocgo; do dir=${t%%.*}; (cd $R/$dir && timeout 200 $B/$t.test -test.count=1 > $L/go-$t.log 2>&1; echo "$t rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' $L/go-$t.log | head -5); done
cd $R && OUT=$L bash $G/run.sh py > $L/runsh_tail.txt 2>&1; tail -1 $L/pytest.log
gzip -9 $L/trace.txt; tar -C $L -czf $OUT/s2.tgz .
