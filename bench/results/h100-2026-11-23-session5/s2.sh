#!/usr/bin/env bash
# Session 5, device call 2: transfer A/B (6651a52 vs HEAD), one round each.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export PYTHONUNBUFFERED=1
L=/tmp/logs2; mkdir -p $L
OUT=$L AB_DIR=x bash build/ab2/run.sh transfer > $L/tail.txt 2>&1
cat $L/tail.txt
tar -C $L -czf $OUT/s2.tgz .
