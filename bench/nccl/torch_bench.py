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
    # Not --min/--max: torchrun would take "--max" for its --max-restarts.
    p.add_argument("--min-bytes", type=int, default=64 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    return p.parse_args()


def torch_op(op, src, dst, peer, prev):
    """One operation through torch.distributed: all_reduce of dst, or src
    sent to peer while dst is received from prev."""
    if op == "all_reduce":
        dist.all_reduce(dst)
    else:
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, src, peer), dist.P2POp(dist.irecv, dst, prev)]):
            r.wait()


def join():
    """The device from LOCAL_RANK, torch.distributed's group joined:
    (rank, size)."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size()


def cases(a):
    """(op, bytes, operations per timed run) of a sweep: the 4 KiB latency,
    then every power of two from --min-bytes to --max-bytes."""
    yield "all_reduce", 4096, a.lat_iters
    yield "send_recv", 4096, a.lat_iters
    b = a.min_bytes
    while b <= a.max_bytes:
        yield "all_reduce", b, a.iters
        yield "send_recv", b, a.iters
        b *= 2


def buffers(nbytes, rank, size):
    """float32 src and dst of nbytes on the device, and the ring's next and
    previous rank."""
    src = torch.ones(nbytes // 4, device="cuda", dtype=torch.float32)
    return src, torch.empty_like(src), (rank + 1) % size, (rank - 1) % size


def timed(s, one, iters):
    """Microseconds per operation of iters calls of one, by CUDA events on s."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(s)
    for _ in range(iters):
        one()
    e1.record(s)
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / iters


def busbw(op, nbytes, us, size):
    """Bus bandwidth in GB/s (NCCL's convention: an all-reduce moves
    2(n-1)/n of its bytes per rank)."""
    alg = nbytes / us / 1e3
    return alg * 2 * (size - 1) / size if op == "all_reduce" else alg


def main():
    a = parse_args()
    rank, size = join()
    s = torch.cuda.Stream()
    if rank == 0:
        print(f"# torch ranks={size} nccl={torch.cuda.nccl.version()} "
              f"NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE', '')!r} "
              f"NCCL_SHM_DISABLE={os.environ.get('NCCL_SHM_DISABLE', '')!r} NCCL_NET={os.environ.get('NCCL_NET', '')!r}",
              flush=True)
    for op, nbytes, iters in cases(a):
        src, dst, peer, prev = buffers(nbytes, rank, size)

        def one():
            torch_op(op, src, dst, peer, prev)

        with torch.cuda.stream(s):
            for _ in range(3):
                one()
            us = statistics.median(timed(s, one, iters) for _ in range(a.reps))
        if rank == 0:
            print(f"torch {op} bytes={nbytes} us={us:.2f} algbw={nbytes / us / 1e3:.2f} "
                  f"busbw={busbw(op, nbytes, us, size):.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
