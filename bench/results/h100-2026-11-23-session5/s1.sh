#!/usr/bin/env bash
# Session 5, device call 1: Go diagnostics, staged A/B (6651a52 vs HEAD), pytest, exchange A/B (922d2a6 vs HEAD).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; B=$R/build/gpu/bin; L=/tmp/logs; mkdir -p $L
uptime > $L/load.txt; nvidia-smi -q -d PERFORMANCE,CLOCK > $L/nvsmi.txt 2>&1; nproc >> $L/load.txt; lscpu >> $L/load.txt
cd $R/zerocopy
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench WakeWorkers -test.benchtime 1x > $L/wake.log 2>&1
cat $L/wake.log | grep wake
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline_new.log 2>&1
timeout 60 $B/zerocopy.base.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline_base.log 2>&1
head -3 $L/timeline_new.log $L/timeline_base.log
for r in 1 2; do for side in base new; do
  echo "== $side round $r"; timeout 90 $B/zerocopy.$side.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic'
done; done > $L/staged_ab.log
cat $L/staged_ab.log
cd $R
OUT=$L bash build/gpu/run.sh py
OUT=$L/ab bash build/ab/run.sh exchange > $L/ab_exchange_tail.txt 2>&1
grep -h -A30 "fast path\|C fast" $L/ab/*.log | head -5
tar -C $L -czf $OUT/s1.tgz .
ls -la $OUT
