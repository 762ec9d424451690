"""bench_transfer.py with, for each cell, every library's per-call times (warm-up and timed
batches), the wall time, the steal time (CPU time the VM's host took away, all vCPUs) and the
busiest threads printed to stderr. Arguments are bench_transfer.py's; bench_transfer must be
importable (PYTHONPATH=pybridge/python/bench, or build/gpu/py/bench on the GPU machine):

    PYTHONPATH=build/gpu/py:build/gpu/py/bench DLBRIDGE_LIB=build/gpu/libdlbridge.so \
        python3 bench/transfer/cells.py > transfer.log 2> cells.log
"""
import sys, time
import bench_transfer as B
from procstat import busiest, cpu_by_thread, steal, TICK

orig = B.cell
n = [0]
def cell(fns, reps, pause=0.0, interleave=True):
    calls = {lib: [] for lib in fns}
    def timed(lib, fn):
        def f():
            t0 = time.perf_counter(); r = fn(); B.sync(); calls[lib].append(time.perf_counter() - t0); return r
        return f
    c0, s0, w0, start = cpu_by_thread(), steal(), time.perf_counter(), time.time()
    out = orig({lib: timed(lib, fn) for lib, fn in fns.items()}, reps, pause, interleave)
    c1, s1, w1 = cpu_by_thread(), steal(), time.perf_counter()
    n[0] += 1
    busy = busiest(c0, c1)
    print("cell %d at %s: wall %.2f s, steal %.2f s; busiest: %s" % (
        n[0], time.strftime("%H:%M:%S", time.gmtime(start)), w1 - w0, (s1 - s0) / TICK,
        " ".join("%s=%.2f" % (comm, d) for d, k, comm in busy[:8] if d > 0)), file=sys.stderr)
    for lib, (t, _) in out.items():
        cs = calls[lib]
        if t is None or not cs:
            print("  %-8s failed" % lib, file=sys.stderr)
            continue
        print("  %-8s best %.1f us; calls %d, min %.0f, median %.0f, max %.0f us" % (
            lib, t * 1e6, len(cs), min(cs) * 1e6, sorted(cs)[len(cs) // 2] * 1e6, max(cs) * 1e6), file=sys.stderr)
    return out
B.cell = cell
sys.exit(B.main())
