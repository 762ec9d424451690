#!/usr/bin/env bash
# The two-GPU NCCL comparison, on the GPU machine after `make gpu` (from the
# repo root): Go ranks (bench/nccl, built as build/gpu/bin/ncclbench) against
# torch.distributed (torch_bench.py) on the same NCCL library in the same run,
# over NVLink and with the network path forced (the stand-in for two nodes).
#   bash build/gpu/bin/nccl-run.sh   # (a copy of bench/nccl/run.sh); log: $OUT/nccl-bench.log
#   ROUNDS=1 bash build/gpu/bin/nccl-run.sh   # one round: about two minutes
#   MODES=socket bash build/gpu/bin/nccl-run.sh   # only the network path (nvlink, socket)
#   SYSTEM=0 bash build/gpu/bin/nccl-run.sh   # without the Go ranks on the system's NCCL
#   PAIR=1 bash build/gpu/bin/nccl-run.sh   # torch and dlbridge.nccl in the same processes (pair_bench.py)
#   (REPS=N: rounds of the pair on the network path, 15 by default: about 3 minutes)
set -uo pipefail
G=${G:-build/gpu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log="$OUT/nccl-bench.log"
# The NCCL PyTorch loads: its nvidia/nccl/lib copy when it has one, else the loader's.
TORCH_NCCL=$(python3 -c 'import os, nvidia.nccl as n; p = os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"); print(p if os.path.exists(p) else "")' 2>/dev/null || true)
go_ranks() { # env... : two Go ranks on GPUs 0 and 1
  local port=$((29600 + RANDOM % 200))
  for r in 0 1; do
    env "$@" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
      timeout 300 "$G/bin/ncclbench" "${args[@]}" &
  done
  wait
}
pair_ranks() { # env... : torch.distributed and dlbridge.nccl in the same two processes (pair_bench.py)
  env "$@" ${TORCH_NCCL:+DLBRIDGE_LIBNCCL=$TORCH_NCCL} DLBRIDGE_NCCL_PORT=$((29700 + RANDOM % 100)) \
    DLBRIDGE_LIB=$PWD/$G/libdlbridge.so PYTHONPATH=$PWD/$G/py \
    timeout 300 python3 -m torch.distributed.run --nproc-per-node=2 --master-port=$((29800 + RANDOM % 100)) "$G/bin/pair_bench.py" "${args[@]}"
}
torch_ranks() {
  env "$@" timeout 300 python3 -m torch.distributed.run --nproc-per-node=2 --master-port=$((29800 + RANDOM % 100)) "$G/bin/torch_bench.py" "${args[@]}"
}
{
  nvidia-smi topo -m
  for mode in ${MODES:-nvlink socket}; do
    net=() args=()
    # The network path moves ~2.6 GB/s: 20 runs x 5 of 64 MiB-1 GiB would
    # take many minutes a side. Both sides take the same smaller counts
    # (the 4 KiB latency keeps its 1000 operations per run).
    [ $mode = socket ] && net=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket) args=(--iters=3 --reps=3)
    echo "=== $mode ${net[*]} ${args[*]}"
    if [ "${PAIR:-0}" = 1 ]; then
      # Both libraries in the same processes, their timed runs alternating
      # (pair_bench.py): a process's placement moves the network path's
      # bandwidth more than the libraries differ, so this is the comparison
      # that resolves a few percent there.
      [ $mode = socket ] && args=(--iters=3 --reps=${REPS:-15})
      echo "=== pair $mode ${net[*]} ${args[*]}"
      pair_ranks "${net[@]}" 2>&1 | grep -E '^(#|torch|dlbridge|ratio|Traceback|[A-Za-z.]*Error)'
      continue
    fi
    # Interleaved, ROUNDS times (2: drift shows as a difference between rounds; 1 halves the time).
    for round in $(seq "${ROUNDS:-2}"); do
      torch_ranks "${net[@]}" 2>&1 | grep -E '^(#|torch)'
      # A Go rank's failure is a "# go rank N error: ..." line (each measurement has a
      # deadline); a crash of the runtime starts with "panic:" or "fatal error:".
      if [ -n "$TORCH_NCCL" ]; then
        go_ranks "${net[@]}" DLBRIDGE_LIBNCCL="$TORCH_NCCL" 2>&1 | grep -E '^(#|go|panic|fatal error|SIG)'
      fi
      # SYSTEM=0 leaves out the Go ranks on the loader's NCCL (a round is then two runs, not three).
      [ "${SYSTEM:-1}" = 0 ] || go_ranks "${net[@]}" 2>&1 | grep -E '^(#|go|panic|fatal error|SIG)' | sed 's/^go /go(system-nccl) /'
    done
  done
} > "$log" 2>&1
cat "$log"
