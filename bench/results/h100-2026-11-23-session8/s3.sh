#!/usr/bin/env bash
# Session 8, device call 3 (H100): the full bench_transfer (no trace) with per-cell call times, thread CPU and steal (cells.py)
# and Go's GC trace; then the same, h2d and h2d-into alone.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; L=/tmp/logs3; mkdir -p $L
cd /tmp; uptime > $L/gpu.txt; cat /sys/kernel/mm/transparent_hugepage/enabled >> $L/gpu.txt; nproc >> $L/gpu.txt; cat /sys/fs/cgroup/cpu.max >> $L/gpu.txt 2>&1
env GODEBUG=gctrace=1 PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 220 python3 $G/cells.py > $L/transfer.log 2> $L/cells.log; echo "exit $?" >> $L/transfer.log
grep -v "done " $L/transfer.log | grep -A12 "^h2d"; grep -c "^gc " $L/cells.log
env PYTHONPATH=$G/py:$G/py/bench DLBRIDGE_LIB=$G/libdlbridge.so timeout 100 python3 $G/cells.py --min-mib 16 --only h2d,h2d-into > $L/transfer-h2d.log 2> $L/cells-h2d.log
grep -E "MiB|GiB" $L/transfer-h2d.log | grep -v done
tar -C $L -czf $OUT/s3.tgz .
