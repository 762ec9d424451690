"""Probe (session 9): what does it cost to page-lock a NumPy array for one upload
(cuMemHostRegister, cuMemcpyHtoD direct, cuMemHostUnregister) against the transfer itself,
with and without transparent huge pages? Plain ctypes on libcuda, no dlbridge."""
import ctypes, sys, time
import numpy as np

cu = ctypes.CDLL("libcuda.so.1")
def ck(r, what):
    if r != 0:
        raise RuntimeError("%s: CUresult %d" % (what, r))
ck(cu.cuInit(0), "cuInit")
dev = ctypes.c_int(); ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
ck(cu.cuCtxSetCurrent(ctx), "setcurrent")
print(open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(), open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip())

def anon_huge(a):
    """kB of the array's span backed by huge pages (smaps AnonHugePages of its mapping)."""
    p = a.ctypes.data
    cur = None
    for line in open("/proc/self/smaps"):
        f = line.split()
        if "-" in f[0] and len(f) >= 5 and all(c in "0123456789abcdef-" for c in f[0]):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            cur = lo <= p < hi
        elif cur and f[0] == "AnonHugePages:":
            return int(f[1])
    return -1

for huge in (True, False):
    mod = getattr(np, "_core", None) or np.core
    mod.multiarray._set_madvise_hugepage(huge)
    for mib in (64, 256, 1024):
        n = mib << 20
        a = np.arange(n // 4, dtype=np.float32)
        d = ctypes.c_uint64(); ck(cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(n)), "alloc")
        res = {"reg": [], "copy": [], "unreg": [], "pageable": []}
        for rep in range(6):
            t0 = time.perf_counter()
            ck(cu.cuMemHostRegister_v2(ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(n), 0), "register")
            t1 = time.perf_counter()
            ck(cu.cuMemcpyHtoD_v2(d, ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(n)), "copy")
            t2 = time.perf_counter()
            ck(cu.cuMemHostUnregister(ctypes.c_void_p(a.ctypes.data)), "unregister")
            t3 = time.perf_counter()
            ck(cu.cuMemcpyHtoD_v2(d, ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(n)), "copy pageable")
            t4 = time.perf_counter()
            for k, v in (("reg", t1 - t0), ("copy", t2 - t1), ("unreg", t3 - t2), ("pageable", t4 - t3)):
                res[k].append(v * 1e3)
        tot = [r + c + u for r, c, u in zip(res["reg"], res["copy"], res["unreg"])]
        print("huge=%s %5d MiB AnonHuge %d kB: register %s ms; copy %s; unregister %s; all %s (best %.1f GB/s); pageable %s (best %.1f GB/s)" % (
            huge, mib, anon_huge(a), " ".join("%.2f" % x for x in res["reg"]), " ".join("%.2f" % x for x in res["copy"]),
            " ".join("%.2f" % x for x in res["unreg"]), " ".join("%.2f" % x for x in tot), n / min(tot) / 1e6,
            " ".join("%.2f" % x for x in res["pageable"]), n / min(res["pageable"]) / 1e6))
        sys.stdout.flush()
        cu.cuMemFree_v2(d)
        del a
