#!/bin/bash
# The A/B of this record: the build before (BEFORE: a folder with the dlbridge
# package and libopstest.so of d2cfe42) and this tree's (R), alternating
# processes, REPS times; the fake driver gives both a CUDA device.
R=${R:-$(git rev-parse --show-toplevel)}
for i in $(seq ${REPS:-3}); do
  for side in before after; do
    if [ $side = before ]; then PP=$BEFORE; LIB=$BEFORE/libopstest.so; else PP=$R/pybridge/python; LIB=$R/build/libopstest.so; fi
    echo "-- $side"
    (cd /tmp && DLBRIDGE_LIB=$LIB PYTHONPATH=$PP DLBRIDGE_LIBCUDA=$R/build/fakecuda/libcuda.so.1 FAKECUDA_DEVICES=2 \
      python3 $R/bench/results/callpath-2core/ab_bench.py 2>&1 | grep -E "^(noop|nothing)")
  done
done
