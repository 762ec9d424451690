import time, sys, mmap, ctypes, os
import numpy as np
import dlbridge
def best(fn, reps=8):
    fn(); dlbridge.synchronize(0)
    r = 1e9
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); dlbridge.synchronize(0); r = min(r, time.perf_counter() - t0)
    return r
def huge_array(nbytes):
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    a = np.frombuffer(m, dtype=np.float32)
    return a, m
def run(tag):
    for n in (64 << 20, 256 << 20):
        a = np.ones(n // 4, dtype=np.float32)
        g = dlbridge.empty(n // 4, dtype="float32", device="cuda")
        hp, m = huge_array(n); hp[:] = 1
        ct = dlbridge.empty(n // 4, dtype="float32"); ct.fill_(1)
        at = dlbridge.asarray(a)
        for name, fn in [("copy_(numpy 4K pages)", lambda: g.copy_(a)),
                         ("copy_(numpy THP mmap)", lambda: g.copy_(hp)),
                         ("copy_(asarray(a) once)", lambda: g.copy_(at)),
                         ("copy_(dlbridge cpu tensor)", lambda: g.copy_(ct)),
                         ("asarray(a).to(cuda)", lambda: dlbridge.asarray(a).to("cuda"))]:
            t = best(fn)
            print("%-8s %4d MiB %-28s %7.0f us %6.1f GB/s" % (tag, n >> 20, name, t * 1e6, n / t / 1e9), flush=True)
        del hp; m.close()
run("plain")
if len(sys.argv) > 1:
    import torch
    x = torch.ones(1 << 24); x.sum(); (x * 2).sum()
    run("torch")
