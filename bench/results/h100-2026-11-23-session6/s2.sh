#!/usr/bin/env bash
# Session 6, device call 2 (8733dd9): zerocopy GPU tests, Go staged benches new vs base (997c2e5), transfer A/B vs 997c2e5 (1 round).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; B=$R/build/gpu/bin; L=/tmp/logs2; mkdir -p $L
uptime > $L/load.txt
cd $R/zerocopy
timeout 150 $B/zerocopy.new.test -test.count=1 > $L/gotest.log 2>&1; echo "zerocopy tests rc=$?"; tail -3 $L/gotest.log
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline.log 2>&1
grep -E '^staged' $L/timeline.log
for side in base new base new; do
  timeout 60 $B/zerocopy.$side.test -test.run '^$' -test.bench 'StagedMin$' -test.benchtime 20x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/$side /" >> $L/stagedmin.log
done
for side in base new; do
  timeout 100 $B/zerocopy.$side.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/$side /" >> $L/workers.log
done
cat $L/stagedmin.log $L/workers.log | awk '{print $1, $2, $(NF-1)}'
cd $R
OUT=$L/ab bash build/ab/run.sh transfer > /dev/null 2>&1
for f in $L/ab/*.transfer.log; do echo "== $f"; grep -A12 -E '^h2d' $f | grep -E 'MiB|GiB|h2d'; grep -E 'cells checked' $f; done
tar -C $L -czf $OUT/s2.tgz .
