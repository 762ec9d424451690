"""torch.distributed's side of bench/nccl: the same operations, sizes and
timing (CUDA events on the rank's stream, median of reps runs), printed in
the same format with "torch" in front. Run under torchrun:

    torchrun --nproc-per-node=2 bench/nccl/torch_bench.py

NCCL is the one PyTorch loads (its nvidia/nccl/lib copy, or the system's);
point DLBRIDGE_LIBNCCL of the Go ranks at the same file to compare like
with like (the first line of each output names the library).
"""
import argparse
import os
import statistics

import torch
import torch.distributed as dist


def parse_args(iters=20, reps=5):
    """The options of torch_bench.py and pair_bench.py (which imports them)."""
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=iters)
    p.add_argument("--lat-iters", type=int, default=1000)
    p.add_argument("--reps", type=int, default=reps)
    p.add_argument("--min", type=int, default=64 << 20)
    p.add_argument("--max", type=int, default=1 << 30)
    return p.parse_args()


def torch_op(op, src, dst, peer, prev):
    """One operation through torch.distributed: all_reduce of dst, or src
    sent to peer while dst is received from prev."""
    if op == "all_reduce":
        dist.all_reduce(dst)
    else:
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, src, peer), dist.P2POp(dist.irecv, dst, prev)]):
            r.wait()


def main():
    a = parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, size = dist.get_rank(), dist.get_world_size()
    s = torch.cuda.Stream()
    if rank == 0:
        print(f"# torch ranks={size} nccl={torch.cuda.nccl.version()} "
              f"NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE', '')!r} "
              f"NCCL_SHM_DISABLE={os.environ.get('NCCL_SHM_DISABLE', '')!r} NCCL_NET={os.environ.get('NCCL_NET', '')!r}",
              flush=True)

    def run(op, nbytes, iters):
        n = nbytes // 4
        src = torch.ones(n, device="cuda", dtype=torch.float32)
        dst = torch.empty_like(src)
        peer, prev = (rank + 1) % size, (rank - 1) % size

        def one():
            torch_op(op, src, dst, peer, prev)

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
            print(f"torch {op} bytes={nbytes} us={us:.2f} algbw={alg:.2f} busbw={bus:.2f}", flush=True)

    run("all_reduce", 4096, a.lat_iters)
    run("send_recv", 4096, a.lat_iters)
    b = a.min
    while b <= a.max:
        run("all_reduce", b, a.iters)
        run("send_recv", b, a.iters)
        b *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
