#!/usr/bin/env bash
# Session 6, device call 5 (5380cc1): zerocopy GPU tests, StagedEndQuarters, DMAUnderLoad, pytest, chain, exchange A/B vs 922d2a6 (3 rounds).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; B=$R/build/gpu/bin; L=/tmp/logs5; mkdir -p $L
uptime > $L/load.txt
cd $R/zerocopy
timeout 150 $B/zerocopy.new.test -test.count=1 > $L/gotest.log 2>&1; echo "zerocopy tests rc=$?"; tail -2 $L/gotest.log
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench StagedEndQuarters -test.benchtime 10x 2>&1 | grep -E 'Benchmark|FAIL|panic' > $L/endq.log
timeout 60 $B/zerocopy.new.test -test.run '^$' -test.bench DMAUnderLoad -test.benchtime 20x -test.count 2 2>&1 | grep -E 'Benchmark|FAIL|panic' > $L/dmaload.log
awk '{print $1, $(NF-1)}' $L/endq.log $L/dmaload.log
cd $R
OUT=$L bash build/gpu/run.sh py chain > $L/runsh_tail.txt 2>&1
tail -2 $L/pytest.log; grep -E "counted|WRONG|exit" $L/chain.log | tail -4
OUT=$L/ab bash build/ab/run.sh exchange > /dev/null 2>&1
ls $L/ab
tar -C $L -czf $OUT/s5.tgz .
