#!/usr/bin/env bash
# Session 6, device call 7 (3174e56 engine, 71f9704 bench), two H200s: peer cells, then uploads from 16 MiB.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
A=$PWD/build/ab/new; L=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1; nvidia-smi topo -m > $L/topo.txt 2>&1
cd /tmp
PYTHONPATH=$A DLBRIDGE_LIB=$A/libdlbridge.so timeout 100 python3 $A/bench/bench_transfer.py --min-mib 16 --only peer,peer-into > $L/peer.log 2>&1
cat $L/peer.log | grep -v "done "
PYTHONPATH=$A DLBRIDGE_LIB=$A/libdlbridge.so timeout 80 python3 $A/bench/bench_transfer.py --min-mib 16 --only h2d,h2d-into > $L/h2d.log 2>&1
grep -v "done " $L/h2d.log
