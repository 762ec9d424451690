"""dlbridge.nccl's side of bench/nccl: torch_bench.py's operations, sizes
and timing (CUDA events on the rank's stream, median of reps runs) with
PyTorch tensors passed to dlbridge.nccl instead of torch.distributed,
printed in the same format with "dlbridge" in front. Ranks are started as
for the Go ranks (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK):

    for r in 0 1; do MASTER_ADDR=127.0.0.1 MASTER_PORT=29700 WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \\
      python3 bench/nccl/dlbridge_bench.py & done; wait

DLBRIDGE_LIBNCCL picks the NCCL (point it at PyTorch's nvidia/nccl/lib copy
to compare like with like with torch_bench.py). Each call imports the
torch tensors through DLPack, as a user's call does.
"""
import argparse
import os
import statistics

import torch

import dlbridge.nccl as nccl


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--lat-iters", type=int, default=1000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--min", type=int, default=64 << 20)
    p.add_argument("--max", type=int, default=1 << 30)
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    world = nccl.from_env()
    c = world.comm
    rank, size = c.rank, c.size
    s = torch.cuda.Stream()
    if rank == 0:
        print(f"# dlbridge ranks={size} NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE', '')!r} "
              f"NCCL_SHM_DISABLE={os.environ.get('NCCL_SHM_DISABLE', '')!r} NCCL_NET={os.environ.get('NCCL_NET', '')!r} "
              f"DLBRIDGE_LIBNCCL={os.environ.get('DLBRIDGE_LIBNCCL', '')!r}", flush=True)

    def run(op, nbytes, iters):
        n = nbytes // 4
        src = torch.ones(n, device="cuda", dtype=torch.float32)
        dst = torch.empty_like(src)
        peer, prev = (rank + 1) % size, (rank - 1) % size

        def one():
            if op == "all_reduce":
                c.all_reduce(dst)
            else:
                with c.group() as g:
                    g.send(src, peer)
                    g.recv(dst, prev)

        with torch.cuda.stream(s):
            for _ in range(3):
                one()
            times = []
            for _ in range(a.reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(s)
                for _ in range(iters):
                    one()
                e1.record(s)
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1e3 / iters)
        us = statistics.median(times)
        alg = nbytes / us / 1e3
        bus = alg * 2 * (size - 1) / size if op == "all_reduce" else alg
        if rank == 0:
            print(f"dlbridge {op} bytes={nbytes} us={us:.2f} algbw={alg:.2f} busbw={bus:.2f}", flush=True)

    run("all_reduce", 4096, a.lat_iters)
    run("send_recv", 4096, a.lat_iters)
    b = a.min
    while b <= a.max:
        run("all_reduce", b, a.iters)
        run("send_recv", b, a.iters)
        b *= 2
    c.finalize()
    world.close()


if __name__ == "__main__":
    main()
