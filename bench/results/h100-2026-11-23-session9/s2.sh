#!/usr/bin/env bash
# Session 9, device call 2 (H100, 38fc9e4): exchange A/B against 922d2a6 (3 rounds, build/ab from
# scripts/build-ab.sh 922d2a6 3), then one more full interleaved bench_transfer with cells.py.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs2; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt
t0=$SECONDS; OUT=$L/ab bash $R/build/ab/run.sh exchange > /dev/null 2>&1; echo "exchange A/B in $((SECONDS-t0)) s"
python3 $R/scripts/exchange-ab-compare.py $L/ab > $L/exchange-ab-compare.txt 2>&1; cat $L/exchange-ab-compare.txt
t0=$SECONDS
env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 200 python3 $G/cells.py > $L/transfer-i3.log 2> $L/cells-i3.log; echo "exit $? in $((SECONDS-t0)) s" >> $L/transfer-i3.log
grep -E "^(h2d|d2h)|64 MiB|256 MiB|1 GiB|^ *(4|64) KiB|wrong|exit" $L/transfer-i3.log
tar -C $L -czf $OUT/s2.tgz .
