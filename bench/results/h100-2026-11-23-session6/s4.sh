#!/usr/bin/env bash
# Session 6, device call 4 (c6668fe): timeline; StagedWorkers base (997c2e5, w8/w12) and new (w8 = caller + 7 crew, w9 = caller + 8) alternated 3 times; transfer A/B vs 997c2e5 (1 round).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; B=$R/build/gpu/bin; L=/tmp/logs4; mkdir -p $L
uptime > $L/load.txt
cd $R/zerocopy
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline.log 2>&1
grep -E '^staged' $L/timeline.log
for r in 1 2 3; do
  timeout 100 $B/zerocopy.base.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/base$r /" >> $L/workers.log
  DLBRIDGE_BENCH_WORKERS=8,9 timeout 100 $B/zerocopy.new.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/new$r /" >> $L/workers.log
done
awk '{print $1, $2, $(NF-1)}' $L/workers.log
cd $R
OUT=$L/ab bash build/ab/run.sh transfer > /dev/null 2>&1
for f in $L/ab/*.transfer.log; do echo "== $f"; grep -A12 -E '^h2d' $f | grep -E 'MiB|GiB|h2d'; grep -E 'cells checked' $f; done
tar -C $L -czf $OUT/s4.tgz .
