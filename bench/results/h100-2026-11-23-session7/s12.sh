#!/usr/bin/env bash
# Session 7, device call 12 (H100): exchange A/B 922d2a6 against 90e0908 (3 rounds), then the full transfer benchmark of 90e0908.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; A=$R/build/ab2; L=/tmp/logs12; mkdir -p $L
OUT=$L bash $A/run.sh exchange > /dev/null 2>&1; ls $L/ab2 | head -3
cd /tmp && PYTHONPATH=$A/new DLBRIDGE_LIB=$A/new/libdlbridge.so timeout 300 python3 $A/new/bench/bench_transfer.py > $L/transfer.log 2>&1
echo "bench_transfer exit status $?" >> $L/transfer.log; grep -v "done " $L/transfer.log | tail -62
tar -C $L -czf $OUT/s12.tgz .
