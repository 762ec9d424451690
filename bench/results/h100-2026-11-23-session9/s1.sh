#!/usr/bin/env bash
# Session 9, device call 1 (H100, 7908dea): the full bench_transfer with interleaved rounds twice and
# once with --sequential (cells.py: per-call times, steal), then bench_exchange (issue 9: within 10%
# of bench/results/h100-2026-11-22).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs1; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt; nvidia-smi -L >> $L/gpu.txt
run() { # name, bench_transfer args
  local t0=$SECONDS
  env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 200 python3 $G/cells.py "${@:2}" > $L/transfer-$1.log 2> $L/cells-$1.log; echo "exit $? in $((SECONDS-t0)) s" >> $L/transfer-$1.log
  echo "== $1"; grep -E "^(h2d|d2h)|64 MiB|256 MiB|1 GiB|^ *(4|64) KiB|wrong|exit" $L/transfer-$1.log
}
run i1
run seq --sequential
run i2
env PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so timeout 120 python3 $G/py/bench/bench_exchange.py > $L/exchange.log 2>&1; echo "exit $?" >> $L/exchange.log
sed -n '/fast path/,/^ours/p' $L/exchange.log | head -30
tar -C $L -czf $OUT/s1.tgz .
