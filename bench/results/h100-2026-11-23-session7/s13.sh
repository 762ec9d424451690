#!/usr/bin/env bash
# Session 7, device call 13 (H100, 90e0908 trace build): worker counts 8/12/15 for a 64 MiB upload after a 100 ms pause and with torch's gc, alternated.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs13; mkdir -p $L
cd /tmp
for r in 1 2; do for w in 8 12 15; do for v in sleep100ms torchgc; do e="PROBE_NOTORCH=1 PROBE_SLEEP=0.1"; [ $v = torchgc ] && e="PROBE_NOPEERS=1"
  env $e DLBRIDGE_TRACE_WORKERS=$w PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.trace.so timeout 60 python3 $G/h2d_probe.py 64 > $L/probe-$v-w$w-$r.log 2>&1
  echo "== $v w$w r$r: $(grep best $L/probe-$v-w$w-$r.log | tr '\n' ' ')"; done; done; done
tar -C $L -czf $OUT/s13.tgz .
