"""Where a small transfer's time goes: dlbridge's copy_ against the same
driver calls made directly (ctypes) and against torch, at 4 KiB, each
variant best of 5 batches of 2000 calls. A diagnostic for the small
sizes; bench_transfer.py is the benchmark."""
import ctypes
import os
import time

import numpy as np
import dlbridge
from dlbridge import _lib

try:
    import torch
    if not torch.cuda.is_available():
        torch = None
except ImportError:
    torch = None


def best(fn, n=2000, reps=5):
    for _ in range(50):
        fn()
    out = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out = min(out, (time.perf_counter() - t0) / n)
    return out * 1e6


def main():
    if not dlbridge.cuda_available():
        print("no CUDA device")
        return
    n = 1024
    a = np.arange(n, dtype=np.float32)
    out = np.empty_like(a)
    out_t = dlbridge.asarray(out)
    g = dlbridge.asarray(a).to("cuda")
    g_dd = dlbridge.empty(n, dtype="float32", device="cuda")
    sync = lambda: dlbridge.synchronize(0)  # noqa: E731
    cu = ctypes.CDLL(os.environ.get("DLBRIDGE_LIBCUDA") or "libcuda.so.1")
    work = ctypes.c_void_p(_lib._core.dlb_work_stream(0))
    dst, src, nb = ctypes.c_uint64(g_dd.data_ptr()), ctypes.c_uint64(g.data_ptr()), ctypes.c_size_t(4 * n)
    hbuf = out.ctypes.data_as(ctypes.c_void_p)
    at = dlbridge.asarray(a)
    rows = [
        ("dlbridge.synchronize(0) alone", sync),
        ("d2d  g_dd.copy_(g)", lambda: g_dd.copy_(g)),
        ("d2d  g_dd.copy_(g) + sync", lambda: (g_dd.copy_(g), sync())),
        ("d2d  copy_(non_blocking) + sync", lambda: (g_dd.copy_(g, non_blocking=True), sync())),
        ("d2d  ctypes cuMemcpyDtoDAsync+cuStreamSynchronize(work)",
         lambda: (cu.cuMemcpyDtoDAsync_v2(dst, src, nb, work), cu.cuStreamSynchronize(work))),
        ("d2d  ctypes ... (legacy stream)",
         lambda: (cu.cuMemcpyDtoDAsync_v2(dst, src, nb, None), cu.cuStreamSynchronize(None))),
        ("d2h-into out_t.copy_(g) + sync", lambda: (out_t.copy_(g), sync())),
        ("d2h-into ctypes cuMemcpyDtoHAsync+sync(work)",
         lambda: (cu.cuMemcpyDtoHAsync_v2(hbuf, src, nb, work), cu.cuStreamSynchronize(work))),
        ("h2d-into g_dd.copy_(a) + sync", lambda: (g_dd.copy_(a), sync())),
        ("h2d-into ctypes cuMemcpyHtoDAsync+sync(work)",
         lambda: (cu.cuMemcpyHtoDAsync_v2(dst, hbuf, nb, work), cu.cuStreamSynchronize(work))),
        ("h2d-into g_dd.copy_(at), at = asarray(a) made once, + sync", lambda: (g_dd.copy_(at), sync())),
        ("asarray(a) + close (the import h2d pays)", lambda: dlbridge.asarray(a).close()),
        ("ctypes cuStreamQuery(legacy) (the per-op legacy check)", lambda: cu.cuStreamQuery(ctypes.c_void_p(1))),
        ("h2d  asarray(a).to('cuda') + sync", lambda: (dlbridge.asarray(a).to("cuda"), sync())),
        ("h2d  at.to('cuda') + sync", lambda: (at.to("cuda"), sync())),
        ("empty(n, device='cuda') (pool alloc + free)", lambda: dlbridge.empty(n, dtype="float32", device="cuda")),
        ("d2h  g.to('cpu') + sync", lambda: (g.to("cpu"), sync())),
    ]
    if torch is not None:
        x = torch.from_dlpack(g).clone()
        x_dd = torch.empty_like(x)
        ta = torch.from_numpy(a)
        tout = torch.from_numpy(out)
        rows += [
            ("torch.cuda.synchronize() alone", torch.cuda.synchronize),
            ("torch d2d x_dd.copy_(x) + torch sync", lambda: (x_dd.copy_(x), torch.cuda.synchronize())),
            ("torch d2d x_dd.copy_(x) + dlbridge sync", lambda: (x_dd.copy_(x), sync())),
            ("torch d2h-into tout.copy_(x) + sync", lambda: (tout.copy_(x), sync())),
            ("torch h2d-into x_dd.copy_(ta) + sync", lambda: (x_dd.copy_(ta), sync())),
            ("torch h2d ta.cuda() + sync", lambda: (ta.cuda(), sync())),
            ("torch d2h x.cpu() + sync", lambda: (x.cpu(), sync())),
        ]
    for name, fn in rows:
        print("%-58s %7.2f us" % (name, best(fn)))


if __name__ == "__main__":
    main()
