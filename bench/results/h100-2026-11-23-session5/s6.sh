#!/usr/bin/env bash
# Session 5, device call 6 (926e9d9): transfer A/B vs 6651a52 (one round each), exchange A/B vs 922d2a6 (3 rounds).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export PYTHONUNBUFFERED=1
L=/tmp/logs6; mkdir -p $L; uptime > $L/load.txt
OUT=$L AB_DIR=x bash build/ab2/run.sh transfer > $L/transfer_tail.txt 2>&1
OUT=$L/ab bash build/ab/run.sh exchange > /dev/null 2>&1
tail -4 $L/ab2/*.transfer.log; ls $L/ab
tar -C $L -czf $OUT/s6.tgz .
