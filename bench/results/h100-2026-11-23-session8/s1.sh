#!/usr/bin/env bash
# Session 8, device call 1 (H100, 67e0876): bench_transfer in the steady state (gc off, new rule), with a 0.1 s pause,
# and with the old rule (gc.collect before each batch); cold 64 MiB probes with host copy tasks of 256 KiB / 1 MiB / 2 MiB
# (1 MiB and up: Go's memmove uses non-temporal stores).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs1; mkdir -p $L
nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt; lscpu | grep -E "Model name|^CPU\(s\)|L3" >> $L/gpu.txt
cd /tmp
X="PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so"
env PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so timeout 200 python3 $G/py/bench/bench_transfer.py > $L/transfer.log 2>&1; echo "exit $?" >> $L/transfer.log
grep -v "done " $L/transfer.log | tail -60
for r in 1 2; do
 for v in new pause old; do
  case $v in new) b=$G/py/bench/bench_transfer.py; a="";; pause) b=$G/py/bench/bench_transfer.py; a="--pause 0.1";; old) b=$G/bench_transfer_old.py; a="";; esac
  env PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so timeout 100 python3 $b --min-mib 16 --only h2d,h2d-into $a > $L/h2d-$v-$r.log 2>&1
  echo "== $v r$r"; grep -E "MiB|GiB" $L/h2d-$v-$r.log | grep -v done
 done
 for m in 262144 1048576 2097152; do for v in sleep100ms torchgc; do e="PROBE_NOTORCH=1 PROBE_SLEEP=0.1"; [ $v = torchgc ] && e="PROBE_NOPEERS=1"
  env $e DLBRIDGE_TRACE_MINPART=$m PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.trace.so timeout 60 python3 $G/h2d_probe.py 64 > $L/probe-$v-m$m-$r.log 2>&1
  echo "== probe $v minpart $m r$r: $(grep best $L/probe-$v-m$m-$r.log | tr '\n' ' ')"; done; done
 env DLBRIDGE_TRACE_MINPART=1048576 PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.trace.so timeout 100 python3 $G/bench_transfer_old.py --min-mib 16 --only h2d,h2d-into > $L/h2d-old-m1M-$r.log 2>&1
 echo "== old rule, minpart 1M r$r"; grep -E "MiB|GiB" $L/h2d-old-m1M-$r.log | grep -v done
done
tar -C $L -czf $OUT/s1.tgz .
