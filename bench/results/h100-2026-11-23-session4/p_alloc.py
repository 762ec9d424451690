import time, ctypes, gc, os, dlbridge
from dlbridge import _lib, _tensor
core = _lib.core
h = ctypes.c_uint64()
info = _lib.Info()
dims = _tensor._i64_array((1024,))
def best(fn, n=3000):
    for _ in range(100): fn()
    r = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        r = min(r, (time.perf_counter() - t0) / n * 1e6)
    return r
def raw(dev):
    _lib.empty(b"float32", 1, dims, dev, 0, 0, ctypes.byref(h), None); _lib.close(h.value)
def rawinfo(dev):
    _lib.empty(b"float32", 1, dims, dev, 0, 0, ctypes.byref(h), None); _lib.info_get(h.value, ctypes.byref(info)); _lib.close(h.value)
def wrapped(dev):
    _lib.empty(b"float32", 1, dims, dev, 0, 0, ctypes.byref(h), None); core["wrap"](_tensor.Tensor, h.value).close()
a = __import__("numpy").arange(1024, dtype="float32")
at = dlbridge.asarray(a)
g = at.to("cuda")
kept = []
def keep_to():
    kept.append(at.to("cuda"))
    if len(kept) >= 3000: kept.clear()
rows = [
  ("empty cpu", lambda: dlbridge.empty(1024, dtype="float32")),
  ("empty cuda", lambda: dlbridge.empty(1024, dtype="float32", device="cuda")),
  ("raw ctypes empty+close cpu", lambda: raw(1)),
  ("raw ctypes empty+close cuda", lambda: raw(2)),
  ("raw ctypes empty+info+close cuda", lambda: rawinfo(2)),
  ("raw empty+wrap+close cuda", lambda: wrapped(2)),
  ("at.to(cuda) (drop)", lambda: at.to("cuda")),
  ("at.to(cuda).close()", lambda: at.to("cuda").close()),
  ("at.to(cuda) kept (freed in bulk)", keep_to),
  ("g_dd.copy_(at)", lambda: g.copy_(at)),
  ("g.to(cuda, copy=True)", lambda: g.to("cuda", copy=True)),
  ("g.to(cpu)", lambda: g.to("cpu")),
  ("dlbridge.synchronize(0)", lambda: dlbridge.synchronize(0)),
]
for name, fn in rows:
    print("%-40s %7.2f us" % (name, best(fn)))
gc.disable()
for name, fn in rows[:2] + rows[6:7]:
    print("gc off %-33s %7.2f us" % (name, best(fn)))
gc.enable()
N = 3000
for dev in (1, 2):
    hs = []
    t0 = time.perf_counter()
    for _ in range(N):
        _lib.empty(b"float32", 1, dims, dev, 0, 0, ctypes.byref(h), None); hs.append(h.value)
    t1 = time.perf_counter()
    for x in hs: _lib.close(x)
    t2 = time.perf_counter()
    print("bulk dev %d: empty %.2f close %.2f us" % (dev, (t1 - t0) / N * 1e6, (t2 - t1) / N * 1e6))
