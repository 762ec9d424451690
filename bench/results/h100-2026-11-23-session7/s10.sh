#!/usr/bin/env bash
# Session 7, device call 10 (H100, 90e0908): zerocopy and pybridge GPU tests, pytest, Go timeline, A/B probes against 3530837.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; B=$G/bin; L=/tmp/logs10; mkdir -p $L
nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt; uptime >> $L/gpu.txt
for t in zerocopy.nocgo pybridge.cgo; do dir=${t%%.*}; (cd $R/$dir && timeout 200 $B/$t.test -test.count=1 > $L/go-$t.log 2>&1; echo "$t rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' $L/go-$t.log | head -5); done
(cd $R/zerocopy && timeout 60 $B/zerocopy.nocgo.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x > $L/timeline.log 2>&1; grep -E "^staged" $L/timeline.log)
OUT=$L bash $G/run.sh py > $L/runsh_tail.txt 2>&1; tail -1 $L/pytest.log
cd /tmp
probe() { side=$1; v=$2; shift 2; d=$R/build/ab/$side
  env "$@" PYTHONPATH=$d DLBRIDGE_LIB=$d/libdlbridge.so timeout 60 python3 $G/h2d_probe.py 64 > $L/probe-$side-$v.log 2>&1
  echo "== $side $v: $(grep -E "best" $L/probe-$side-$v.log | tr '\n' ' ')"; }
for r in 1 2; do for s in base new; do probe $s sleep100ms-$r PROBE_NOTORCH=1 PROBE_SLEEP=0.1; probe $s torchgc-$r PROBE_NOPEERS=1; done; done
PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.trace.so DLBRIDGE_TRACE=$L/pytrace-sleep100ms.txt PROBE_NOTORCH=1 PROBE_SLEEP=0.1 timeout 60 python3 $G/h2d_probe.py 64 > $L/probe-trace.log 2>&1
tar -C $L -czf $OUT/s10.tgz .
