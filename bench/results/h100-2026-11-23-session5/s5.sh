#!/usr/bin/env bash
# Session 5, device call 5 (926e9d9): Go staged benches, pytest, chain, bench_transfer, exchange A/B vs 922d2a6.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; B=$R/build/gpu/bin; L=/tmp/logs5; mkdir -p $L
uptime > $L/load.txt
cd $R/zerocopy
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline.log 2>&1
grep -E '^staged' $L/timeline.log
timeout 150 $B/zerocopy.new.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic' > $L/workers.log
timeout 120 $B/zerocopy.new.test -test.run '^$' -test.bench 'StagedMin$' -test.benchtime 20x 2>&1 | grep -E 'Benchmark|FAIL|panic' > $L/stagedmin.log
cat $L/workers.log
cd $R
OUT=$L bash build/gpu/run.sh py transfer chain > $L/runsh_tail.txt 2>&1
tail -5 $L/pytest.log; grep -E "counted|WRONG|exit" $L/chain.log | tail -4
OUT=$L/ab bash build/ab/run.sh exchange > /dev/null 2>&1
ls $L/ab
tar -C $L -czf $OUT/s5.tgz .
