#!/usr/bin/env bash
# Runs on the GPU machine from the repo root: bash build/gpu/run.sh [parts...]
# parts: go py nccl ops bench bw demo chain transfer (default: all). Logs go to $OUT (at most 8 files come back).
G=build/gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${*:-"go py nccl ops bench bw demo chain transfer"}
export DLBRIDGE_GPU=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
has() { [[ " $parts " == *" $1 "* ]]; }
if has go; then
  for t in $G/bin/*.test; do
    b=$(basename "$t"); pkg=${b%%.*}; dir=${pkg//_//}
    echo "=== $t (in $dir)"; (cd "$dir" && timeout 300 "$OLDPWD/$t" -test.count=1 -test.v 2>&1 | grep -Ev '^=== (RUN|PAUSE|CONT)' | tail -400)
  done > "$OUT/gotest.log" 2>&1
  grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$OUT/gotest.log" | head -50
fi
if has py; then
  DLBRIDGE_LIB=$PWD/$G/libdlbridge.so PYTHONPATH=$PWD/$G/py DLBRIDGE_README=$PWD/README.md \
    DLBRIDGE_TEST_OPS_LIB=$PWD/$G/libopstest.so DLBRIDGE_README_LIB=$PWD/$G/libmylib.so \
    timeout 400 python3 -m pytest -q -rs --ignore=$G/py/tests/test_nccl.py $G/py/tests > "$OUT/pytest.log" 2>&1
  tail -15 "$OUT/pytest.log"
fi
if has nccl; then
  # Go ranks (the nccl test binary, examples/nccl) with PyTorch and CuPy ranks,
  # one per GPU (two GPUs: make it the only part on such a machine).
  DLBRIDGE_LIB=$PWD/$G/libdlbridge.so PYTHONPATH=$PWD/$G/py DLBRIDGE_README=$PWD/README.md \
    DLBRIDGE_NCCL_RANK=$PWD/$G/bin/nccl.nocgo.test DLBRIDGE_NCCL_EXAMPLE=$PWD/$G/bin/ncclex \
    timeout 500 python3 -m pytest -q -rs $G/py/tests/test_nccl.py > "$OUT/nccl.log" 2>&1
  echo "test_nccl exit status $?" >> "$OUT/nccl.log"
  # dlbridge.nccl's Python ranks (PyTorch tensors) against torch.distributed
  # on PyTorch's NCCL over NVLink, both in the same two processes, their
  # timed runs alternating (bench/nccl/pair_bench.py through nccl-run.sh).
  OUT=/tmp/nccl-pair G=$G PAIR=1 MODES=nvlink timeout 300 bash $G/bin/nccl-run.sh 2>&1 \
    | grep -E '^(===|#|torch|dlbridge|ratio|Traceback|[A-Za-z.]*Error)' >> "$OUT/nccl.log"
  tail -60 "$OUT/nccl.log"
fi
if has ops; then
  # Calls of examples/gofunc's Go functions through dlbridge.ops (bench_gofunc.py).
  if [ -f $G/py/bench/bench_gofunc.py ]; then
    # With build/gpu/peers (GPU_PEERS=... make gpu), tvm-ffi and nanobind too.
    peers=; [ -d $G/peers ] && peers=$PWD/$G/peers
    DLBRIDGE_LIB=$PWD/$G/libopstest.so PYTHONPATH=$PWD/$G/py DLBRIDGE_BENCH_PEERS=$peers \
      timeout 300 python3 $G/py/bench/bench_gofunc.py > "$OUT/gofunc.log" 2>&1
    echo "bench_gofunc exit status $?" >> "$OUT/gofunc.log"
  else
    echo "ops: $G/py/bench/bench_gofunc.py is not in the bundle" > "$OUT/gofunc.log"
  fi
  tail -60 "$OUT/gofunc.log"
fi
if has bench; then
  {
    [ -x $G/bin/bindcost ] && { echo "== bindcost (cgo build)"; timeout 120 $G/bin/bindcost; }
    [ -x $G/bin/bindcost.nocgo ] && { echo "== bindcost (CGO_ENABLED=0)"; timeout 120 $G/bin/bindcost.nocgo; }
    [ -f $G/py/bench/bench_exchange.py ] && DLBRIDGE_LIB=$PWD/$G/libdlbridge.so PYTHONPATH=$PWD/$G/py timeout 200 python3 $G/py/bench/bench_exchange.py
  } > "$OUT/bench.log" 2>&1
  cat "$OUT/bench.log" | tail -60
fi
if has bw; then
  {
    base=""
    if [ -f $G/cuda-src/memcpy_bw.cu ]; then
      nvcc -O2 -o /tmp/memcpy_bw $G/cuda-src/memcpy_bw.cu && /tmp/memcpy_bw > "$OUT/baseline.tsv" && base="-baseline $OUT/baseline.tsv"
    fi
    [ -x $G/bin/dlbridge ] && { $G/bin/dlbridge devices; timeout 300 $G/bin/dlbridge bandwidth $base -svg "$OUT/bandwidth.svg" -tsv "$OUT/bandwidth.tsv" 2>/dev/null; $G/bin/dlbridge selftest; }
  } > "$OUT/bw.log" 2>&1
  tail -45 "$OUT/bw.log"
fi
if has demo; then
  [ -d $G/examples ] && DLBRIDGE_LIB=$PWD/$G/libdlbridge.so DLBRIDGE_GOFUNC_LIB=$PWD/$G/libopstest.so PYTHONPATH=$PWD/$G/py \
    timeout 120 bash $G/examples/demo.sh > "$OUT/demo.log" 2>&1
  tail -30 "$OUT/demo.log"
fi
if has chain; then
  # The chain matrix: producer -> dlbridge [-> dlbridge] -> consumer on other streams.
  DLBRIDGE_LIB=$PWD/$G/libdlbridge.so PYTHONPATH=$PWD/$G/py timeout 300 python3 $G/py/bench/chain_matrix.py > "$OUT/chain.log" 2>&1
  echo "chain_matrix exit status $?" >> "$OUT/chain.log"
  grep -E '^(==|chain_matrix)|WRONG' "$OUT/chain.log" | head -60
fi
if has transfer; then
  # Transfers through dlbridge's public API next to torch and CuPy.
  DLBRIDGE_LIB=$PWD/$G/libdlbridge.so PYTHONPATH=$PWD/$G/py timeout 300 python3 $G/py/bench/bench_transfer.py > "$OUT/transfer.log" 2>&1
  echo "bench_transfer exit status $?" >> "$OUT/transfer.log"
  tail -80 "$OUT/transfer.log"
fi
