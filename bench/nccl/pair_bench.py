"""torch.distributed and dlbridge.nccl in the same processes, on the same
NCCL, their timed runs alternating: the comparison of torch_bench.py with
the Go ranks (run.sh) measures each side in processes of its own, and over
the network path a process's own placement (where NCCL's socket threads
run) moved one library's bandwidth by 20-45% from run to run
(bench/results/nccl-h200x2), more than any difference between the two.
Here both communicators live in one process per rank: each of reps rounds
times iters operations of each library (torch first in even rounds,
dlbridge first in odd ones; dlbridge's calls are the Go package's, through
the c-shared library), on one stream with CUDA events, and each side's
median and best are printed with their ratio.
Under torchrun (its store holds MASTER_PORT, so dlbridge's rendezvous
takes DLBRIDGE_NCCL_PORT); point DLBRIDGE_LIBNCCL at PyTorch's NCCL:

    DLBRIDGE_NCCL_PORT=29601 DLBRIDGE_LIBNCCL=.../nvidia/nccl/lib/libnccl.so.2 \\
        torchrun --nproc-per-node=2 bench/nccl/pair_bench.py [--iters 3 --reps 9]
"""
import os
import statistics

import torch
import torch.distributed as dist

import dlbridge.nccl as nccl
from torch_bench import parse_args, torch_op  # beside this file


def main():
    a = parse_args(iters=5, reps=9)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = nccl.from_env()
    c = world.comm
    rank, size = c.rank, c.size
    s = torch.cuda.Stream()
    if rank == 0:
        print(f"# pair ranks={size} torch nccl={torch.cuda.nccl.version()} "
              f"DLBRIDGE_LIBNCCL={os.environ.get('DLBRIDGE_LIBNCCL', '')!r} "
              f"NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE', '')!r} "
              f"NCCL_SHM_DISABLE={os.environ.get('NCCL_SHM_DISABLE', '')!r} NCCL_NET={os.environ.get('NCCL_NET', '')!r} "
              f"iters={a.iters} reps={a.reps}", flush=True)

    def run(op, nbytes, iters):
        n = nbytes // 4
        src = torch.ones(n, device="cuda", dtype=torch.float32)
        dst = torch.empty_like(src)
        peer, prev = (rank + 1) % size, (rank - 1) % size

        def torch_one():
            torch_op(op, src, dst, peer, prev)

        def dlbridge_one():
            if op == "all_reduce":
                c.all_reduce(dst)
            else:
                with c.group() as g:
                    g.send(src, peer)
                    g.recv(dst, prev)

        sides = {"torch": torch_one, "dlbridge": dlbridge_one}
        times = {k: [] for k in sides}
        with torch.cuda.stream(s):
            for one in sides.values():
                for _ in range(3):
                    one()
            for rep in range(a.reps):
                # torch first in even rounds, dlbridge first in odd ones: a
                # side that always ran first or second would carry whatever
                # that place costs (a socket thread still busy, a cold cache).
                order = list(sides.items())
                for name, one in order if rep % 2 == 0 else order[::-1]:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(s)
                    for _ in range(iters):
                        one()
                    e1.record(s)
                    e1.synchronize()
                    times[name].append(e0.elapsed_time(e1) * 1e3 / iters)
        factor = 2 * (size - 1) / size if op == "all_reduce" else 1.0
        bus = {k: [nbytes / us / 1e3 * factor for us in v] for k, v in times.items()}
        if rank == 0:
            for k in sides:
                print(f"{k} {op} bytes={nbytes} us_median={statistics.median(times[k]):.2f} us_best={min(times[k]):.2f} "
                      f"busbw_median={statistics.median(bus[k]):.2f} busbw_best={max(bus[k]):.2f}", flush=True)
            if nbytes == 4096:
                print(f"ratio {op} bytes={nbytes} latency dlbridge/torch median={statistics.median(times['dlbridge']) / statistics.median(times['torch']):.3f} "
                      f"best={min(times['dlbridge']) / min(times['torch']):.3f}", flush=True)
            else:
                print(f"ratio {op} bytes={nbytes} busbw dlbridge/torch median={statistics.median(bus['dlbridge']) / statistics.median(bus['torch']):.3f} "
                      f"best={max(bus['dlbridge']) / max(bus['torch']):.3f}", flush=True)

    run("all_reduce", 4096, a.lat_iters)
    run("send_recv", 4096, a.lat_iters)
    b = a.min
    while b <= a.max:
        run("all_reduce", b, a.iters)
        run("send_recv", b, a.iters)
        b *= 2
    c.finalize()
    world.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
