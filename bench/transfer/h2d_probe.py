"""Where a Python upload's time goes: per call, asarray / to() returned / synchronized, next to
the Go trace (DLBRIDGE_TRACE with a dlbtrace build) and torch's pinned DMA, and the CPU seconds of
each thread. Arguments: sizes in MiB (default 64).

    PYTHONPATH=build/gpu/py DLBRIDGE_LIB=build/gpu/libdlbridge.so python3 bench/transfer/h2d_probe.py 64

PROBE_NOTORCH=1 without torch; PROBE_NOPEERS=1 without torch's copies; PROBE_SLEEP=S a pause
before each call; PROBE_NOGC=1 no gc.collect() before each call; PROBE_FLUSH=1 1 GiB through the
caches before each call; PROBE_READ=1 the source read back into the cache; PROBE_ALIGN=1 a
page-aligned source; PROBE_OMP1=1 torch on one thread."""
import sys, time, gc
import numpy as np
import os
import dlbridge
from procstat import busiest, cpu_by_thread
NOTORCH = os.environ.get("PROBE_NOTORCH") == "1"
ALIGN = os.environ.get("PROBE_ALIGN") == "1"
if not NOTORCH:
    import torch

def sync():
    if NOTORCH:
        dlbridge.synchronize(0)
    else:
        torch.cuda.synchronize(0)

def source(n):
    if not ALIGN:
        return np.arange(n, dtype=np.float32)
    raw = np.empty(n + 4096, dtype=np.float32)
    off = (-raw.ctypes.data % 4096) // 4
    a = raw[off:off + n]
    a[:] = np.arange(n, dtype=np.float32)
    return a

def report_cpu(before, after, wall):
    rows = busiest(before, after)
    print("threads %d; CPU seconds over %.2f s wall by thread (top 24):" % (len(after), wall))
    print("   " + "  ".join("%s:%s=%.2f" % (tid, comm, d) for d, tid, comm in rows[:24]))

def phases(n, reps=30):
    if os.environ.get("PROBE_OMP1") == "1":
        torch.set_num_threads(1)
    before, w0 = cpu_by_thread(), time.perf_counter()
    _phases(n, reps)
    report_cpu(before, cpu_by_thread(), time.perf_counter() - w0)

def _phases(n, reps):
    a = source(n)
    print("source address mod 4096:", a.ctypes.data % 4096)
    dst = dlbridge.empty(n, "float32", device="cuda:0")
    for label, into in (("to", False), ("into", True)):
        rows = []
        flush = np.ones(1 << 28, dtype=np.float32) if os.environ.get("PROBE_FLUSH") == "1" else None
        for i in range(reps):
            if os.environ.get("PROBE_NOGC") != "1":
                gc.collect()
            if flush is not None:
                flush += 1  # 1 GiB through the caches
            if os.environ.get("PROBE_SLEEP"):
                time.sleep(float(os.environ["PROBE_SLEEP"]))
            if os.environ.get("PROBE_READ") == "1":
                a.sum()  # the source back into the cache (one core)
            sync()
            t0 = time.perf_counter()
            t = dlbridge.asarray(a)
            t1 = time.perf_counter()
            r = dst.copy_(t) if into else t.to("cuda")
            t2 = time.perf_counter()
            sync()
            t3 = time.perf_counter()
            rows.append(((t1 - t0) * 1e6, (t2 - t0) * 1e6, (t3 - t0) * 1e6))
            del r, t
        print("%s %d MiB: asarray / returned / synced us per call:" % (label, n * 4 >> 20))
        for r in rows:
            print("   %7.1f %8.1f %8.1f   %.1f GB/s" % (r[0], r[1], r[2], n * 4 / r[2] / 1e3))
        print("   best synced %.1f us = %.1f GB/s" % (min(r[2] for r in rows), n * 4 / min(r[2] for r in rows) / 1e3))

def peers(n, reps=8):
    a = np.arange(n, dtype=np.float32)
    p = torch.empty(n, dtype=torch.float32).pin_memory()
    p.copy_(torch.from_numpy(a))
    x = torch.empty(n, dtype=torch.float32, device="cuda:0")
    for label, fn in (("torch pinned copy_", lambda: x.copy_(p, non_blocking=True)),
                      ("torch pageable copy_", lambda: x.copy_(torch.from_numpy(a))),
                      ("torch pinned 4 x quarter", lambda: [x[i*n//4:(i+1)*n//4].copy_(p[i*n//4:(i+1)*n//4], non_blocking=True) for i in range(4)])):
        best = 1e9
        for i in range(reps):
            sync(); t0 = time.perf_counter(); fn(); sync(); best = min(best, time.perf_counter() - t0)
        print("%-26s %d MiB: %.1f us  %.1f GB/s" % (label, n * 4 >> 20, best * 1e6, n * 4 / best / 1e9))

if __name__ == "__main__":
    for mib in [int(s) for s in sys.argv[1:]] or [64]:
        n = mib << 18
        if not NOTORCH and os.environ.get("PROBE_NOPEERS") != "1":
            peers(n)
        phases(n)
