"""Pickling a 1 GiB CUDA tensor to a spawned worker: by handle (dlbridge.ipc,
memory of an IPC pool, and other CUDA memory that is first copied into the
sharing pool) against by value (the bytes through the host), side by side
in one run. The worker checks the last element through torch and answers;
each figure is the median time from put to answer over ROUNDS rounds (the
worker is started and warmed up first).

    python ipc-pickle-bench.py [ROUNDS]
"""

import multiprocessing as mp
import statistics
import sys
import time

import dlbridge
import dlbridge.ipc


def worker(q, ack):
    import torch

    while True:
        t = q.get()
        if t is None:
            return
        x = torch.from_dlpack(t)
        ack.put(float(x[-1].item()))
        del x
        t.close()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    ctx = mp.get_context("spawn")
    q, ack = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=worker, args=(q, ack))
    p.start()
    n = (1 << 30) // 4
    pool = dlbridge.ipc.Pool(0, 3 << 30)
    shared = pool.empty(n, "float32")
    shared.fill_(5)
    plain = dlbridge.empty(n, "float32", device="cuda:0")
    plain.fill_(6)
    warm = pool.zeros(4, "float32")
    q.put(warm)
    ack.get(timeout=300)
    cases = [("handle, IPC pool memory", "handle", shared, 5.0),
             ("handle, other CUDA memory", "handle", plain, 6.0),
             ("value (bytes through the host)", "value", shared, 5.0)]
    results = {}
    for name, strategy, t, want in cases:
        dlbridge.ipc.set_sharing_strategy(strategy)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            q.put(t)
            got = ack.get(timeout=600)
            times.append(time.perf_counter() - t0)
            assert got == want, (name, got)
        results[name] = statistics.median(times)
        print("pickle 1 GiB, %-32s median %9.3f ms over %d rounds" % (name, results[name] * 1e3, rounds), flush=True)
    dlbridge.ipc.set_sharing_strategy("handle")
    v = results["value (bytes through the host)"]
    for name in ("handle, IPC pool memory", "handle, other CUDA memory"):
        print("speed-up by value / %s: %.0fx" % (name, v / results[name]), flush=True)
    q.put(None)
    p.join(60)


if __name__ == "__main__":
    main()
