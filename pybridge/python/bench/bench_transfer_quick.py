"""A quick look at host <-> GPU transfer speed through dlbridge, with
PyTorch beside it when it is there (same process, float32, best of 5):
host -> GPU from pageable NumPy, GPU -> new host array (steady state: the
pinned pool is warm), GPU -> existing NumPy array. The full transfer
benchmark (every size, every peer, ratios) lives elsewhere; this checks the
issue's targets at 256 MiB and 1 GiB.

    DLBRIDGE_LIB=build/libdlbridge.so PYTHONPATH=pybridge/python python3 pybridge/python/bench/bench_transfer_quick.py
"""

import os
import time

import numpy as np

import dlbridge


def best(fn, repeat=5):
    fn()  # warm up: pools, registration history, kernels
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    if not dlbridge.cuda_available():
        print("no CUDA device")
        return
    try:
        import torch

        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    targets = {"host->GPU (pageable numpy)": 40, "GPU->new host array": 30, "GPU->existing numpy": 40}
    rows = []
    sizes = [int(x) for x in os.environ.get("DLBRIDGE_BENCH_MIB", "256,1024").split(",")]
    for mib in sizes:
        n = mib << 18  # float32 elements
        nb = n * 4
        a = np.random.default_rng(0).random(n, dtype=np.float32)
        g = dlbridge.empty(n, device="cuda")
        out = np.empty_like(a)
        out_t = dlbridge.asarray(out)

        def h2d_copy():
            g.copy_(a)

        def h2d_to():
            dlbridge.asarray(a).to("cuda").close()

        def d2h_new():
            h = g.to("cpu")
            np.from_dlpack(h)
            h.close()

        def d2h_existing():
            out_t.copy_(g)

        cases = [
            ("host->GPU (pageable numpy)", "dst.copy_(a)", h2d_copy),
            ("host->GPU (pageable numpy)", "asarray(a).to('cuda')", h2d_to),
            ("GPU->new host array", "t.to('cpu')", d2h_new),
            ("GPU->existing numpy", "asarray(out).copy_(t)", d2h_existing),
        ]
        if torch is not None:
            x = torch.empty(n, device="cuda")
            cases += [
                ("host->GPU (pageable numpy)", "torch.from_numpy(a).cuda()", lambda: torch.from_numpy(a).cuda()),
                ("GPU->new host array", "torch x.cpu()", lambda: x.cpu()),
            ]
        for kind, name, fn in cases:
            t = best(fn)
            if torch is not None:
                torch.cuda.synchronize()
            rows.append((mib, kind, name, nb / t / 1e9))
        # correctness of ours
        g.copy_(a)
        out_t.copy_(g)
        assert np.array_equal(out, a)
        h = g.to("cpu")
        assert np.array_equal(np.from_dlpack(h), a) and h.is_pinned()
        h.close()
        g.close()
    print("%6s  %-28s %-28s %8s  %s" % ("MiB", "transfer", "call", "GB/s", "target"))
    for mib, kind, name, gbs in rows:
        ours = not name.startswith("torch")
        mark = ""
        if ours and mib == max(sizes):
            mark = ">= %d %s" % (targets[kind], "ok" if gbs >= targets[kind] else "MISSED")
        print("%6d  %-28s %-28s %8.1f  %s" % (mib, kind, name, gbs, mark))
    print("pools:", dlbridge.debug_stats()["pinned_pool"], dlbridge.debug_stats()["device_pool"])


if __name__ == "__main__":
    main()
