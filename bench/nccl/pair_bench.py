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
median and best are printed with their ratio, and the median and
quartiles of the rounds' own ratios (paired: each round's two runs are
next to each other in time, so drift over the sweep, which moves both,
cancels).
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
from torch_bench import buffers, busbw, cases, join, parse_args, timed, torch_op  # beside this file


def main():
    a = parse_args(iters=5, reps=9)
    join()
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
    for op, nbytes, iters in cases(a):
        src, dst, peer, prev = buffers(nbytes, rank, size)

        def torch_one():
            torch_op(op, src, dst, peer, prev)

        def dlbridge_one():
            if op == "all_reduce":
                c.all_reduce(dst)
            else:
                with c.group() as g:
                    g.send(src, peer)
                    g.recv(dst, prev)

        sides = [("torch", torch_one), ("dlbridge", dlbridge_one)]
        times = {k: [] for k, _ in sides}
        with torch.cuda.stream(s):
            for _, one in sides:
                for _ in range(3):
                    one()
            for rep in range(a.reps):
                # torch first in even rounds, dlbridge first in odd ones: a
                # side that always ran first or second would carry whatever
                # that place costs (a socket thread still busy, a cold cache).
                for name, one in sides if rep % 2 == 0 else sides[::-1]:
                    times[name].append(timed(s, one, iters))
        if rank != 0:
            continue
        bus = {k: [busbw(op, nbytes, us, size) for us in v] for k, v in times.items()}
        for k, _ in sides:
            print(f"{k} {op} bytes={nbytes} us_median={statistics.median(times[k]):.2f} us_best={min(times[k]):.2f} "
                  f"busbw_median={statistics.median(bus[k]):.2f} busbw_best={max(bus[k]):.2f}", flush=True)
        # Latency as dlbridge's time over torch's, bandwidth as torch's time
        # over dlbridge's (the bus bandwidth's ratio).
        rounds = [d / t if nbytes == 4096 else t / d for t, d in zip(times["torch"], times["dlbridge"])]
        q = statistics.quantiles(rounds, n=4) if len(rounds) > 1 else rounds * 3
        paired = f"{q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})"
        if nbytes == 4096:
            print(f"ratio {op} bytes={nbytes} latency dlbridge/torch "
                  f"median={statistics.median(times['dlbridge']) / statistics.median(times['torch']):.3f} "
                  f"best={min(times['dlbridge']) / min(times['torch']):.3f} paired={paired}", flush=True)
        else:
            print(f"ratio {op} bytes={nbytes} busbw dlbridge/torch "
                  f"median={statistics.median(bus['dlbridge']) / statistics.median(bus['torch']):.3f} "
                  f"best={max(bus['dlbridge']) / max(bus['torch']):.3f} paired={paired}", flush=True)
    c.finalize()
    world.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
