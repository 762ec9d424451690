#!/usr/bin/env bash
# Session 6, device call 3 (69a5d23): DMA under load, timeline, StagedWorkers 4/6/8/12 new vs base (997c2e5), transfer A/B vs 997c2e5 (1 round).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; B=$R/build/gpu/bin; L=/tmp/logs3; mkdir -p $L
uptime > $L/load.txt
cd $R/zerocopy
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench DMAUnderLoad -test.benchtime 20x -test.count 2 2>&1 | grep -E 'Benchmark|FAIL|panic' > $L/dmaload.log
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline.log 2>&1
grep -E '^staged' $L/timeline.log
DLBRIDGE_BENCH_WORKERS=4,6,8,12 timeout 120 $B/zerocopy.new.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/new /" >> $L/workers.log
timeout 100 $B/zerocopy.base.test -test.run '^$' -test.bench 'StagedWorkers' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/base /" >> $L/workers.log
cat $L/dmaload.log $L/workers.log | awk '{print $1, $2, $(NF-1)}'
cd $R
OUT=$L/ab bash build/ab/run.sh transfer > /dev/null 2>&1
for f in $L/ab/*.transfer.log; do echo "== $f"; grep -A12 -E '^h2d' $f | grep -E 'MiB|GiB|h2d'; grep -E 'cells checked' $f; done
tar -C $L -czf $OUT/s3.tgz .
