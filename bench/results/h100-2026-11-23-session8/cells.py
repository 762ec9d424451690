"""bench_transfer.py with each cell's warm-up and batch times, dlbridge's pools and the CPU time of the
process's busiest threads printed to stderr (why h2d at 1 GiB ran at 34 GB/s in a full run and at 51
in a run of h2d alone)."""
import os, sys, time
import bench_transfer as B
import dlbridge

def cpu_by_thread():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            f = open("/proc/self/task/%s/stat" % tid).read()
        except OSError:
            continue
        rest = f[f.rindex(")") + 2:].split()
        out[tid] = (f[f.index("(") + 1:f.rindex(")")], int(rest[11]) + int(rest[12]), int(rest[36]))  # utime+stime, last CPU
    return out

def steal():
    with open("/proc/stat") as f:
        v = f.readline().split()
    return int(v[8])  # steal ticks, all CPUs

orig = B.best_of
n = [0]
def best_of(fn, reps, pause=0.0):
    calls = []
    def timed():
        t0 = time.perf_counter(); r = fn(); B.sync(); calls.append(time.perf_counter() - t0); return r
    c0, s0, w0, start = cpu_by_thread(), steal(), time.perf_counter(), time.time()
    t, r = orig(timed, reps, pause)
    c1, s1, w1 = cpu_by_thread(), steal(), time.perf_counter()
    n[0] += 1
    tick = os.sysconf("SC_CLK_TCK")
    busy = sorted(((c1[k][1] - c0.get(k, ("", 0))[1]) / tick, k, c1[k][0]) for k in c1)[::-1]
    st = dlbridge.debug_stats()
    print("cell %d at %s.%06d: best %.1f us; calls (us): %s; wall %.2f s, threads %d, steal %.2f s; busiest: %s; pinned %s; device %s" % (
        n[0], time.strftime("%H:%M:%S", time.gmtime(start)), int(start % 1 * 1e6), t * 1e6, " ".join("%.0f" % (c * 1e6) for c in calls[:12]), w1 - w0, len(c1), (s1 - s0) / tick,
        " ".join("%s:%s=%.2f" % (k, comm, d) for d, k, comm in busy[:16] if d > 0),
        st["pinned_pool"]["cached"], st["device_pool"]), file=sys.stderr)
    return t, r
B.best_of = best_of
sys.exit(B.main())
