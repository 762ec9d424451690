#!/usr/bin/env bash
# Session 9, device call 3 (HEAD), two H200s: Go cuda/pybridge/zerocopy tests, pytest, peer and h2d cells.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
R=$PWD; G=$R/build/gpu; B=$G/bin; L=/tmp/logs3; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1; uptime >> $L/gpu.txt
OUT=$L bash $G/run.sh py > $L/runsh_tail.txt 2>&1
tail -12 $L/pytest.log
for t in cuda.nocgo pybridge.cgo zerocopy.nocgo; do
  dir=${t%%.*}; (cd $R/$dir && timeout 200 $B/$t.test -test.count=1 > $L/go-$t.log 2>&1; echo "$t rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' $L/go-$t.log | head -8)
done
cd /tmp
PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so timeout 100 python3 $G/py/bench/bench_transfer.py --min-mib 16 --only peer,peer-into,d2d > $L/peer.log 2>&1
grep -v "done " $L/peer.log
PYTHONPATH=$G/py DLBRIDGE_LIB=$G/libdlbridge.so timeout 80 python3 $G/py/bench/bench_transfer.py --min-mib 16 --only h2d,h2d-into > $L/h2d.log 2>&1
grep -v "done " $L/h2d.log
tar -C $L -czf $OUT/s3.tgz .
