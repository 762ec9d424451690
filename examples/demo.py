"""dlbridge demo: tensors cross between Go and Python without copies.

Run through examples/demo.sh (which builds the library). Every exchange
prints both sides' data pointers and proves the sharing with a write on one
side that the other side reads. Whatever is not installed (NumPy, PyTorch,
CuPy, a CUDA device) is skipped and listed at the end; with nothing but
python3 the demo still runs through the buffer protocol.
"""

import array
import sys

import dlbridge

skipped = []
failures = []


def section(title):
    print()
    print("== " + title)


def same(label, ours, theirs):
    """Print both pointers; record a failure unless they are equal."""
    ok = ours == theirs
    print("   %-44s Go %#014x  %s %#014x  %s" % (label, ours, "peer", theirs, "same memory" if ok else "DIFFERENT"))
    if not ok:
        failures.append(label)


def check(label, cond):
    print("   %-44s %s" % (label, "ok" if cond else "FAILED"))
    if not cond:
        failures.append(label)


def optional(name):
    try:
        return __import__(name)
    except Exception as e:  # ImportError, or a broken install
        skipped.append("%s (not importable: %s)" % (name, str(e).splitlines()[0] if str(e) else type(e).__name__))
        return None


def buffer_protocol():
    section("Python only: the buffer protocol (memoryview, array.array)")
    t = dlbridge.arange(8, dtype="float32")  # made and filled in Go
    print("   Go made %r" % t)
    mv = t.memoryview()
    mv[0] = 100.0  # Python writes through the memoryview...
    check("Go sees Python's write: sum() == 128", t.sum() == 128.0)  # ...Go sums it
    a = array.array("d", [1.0, 2.0, 3.0])
    u = dlbridge.asarray(a)  # Python's memory into Go, no copy
    same("array.array -> dlbridge.asarray", u.data_ptr(), a.buffer_info()[0])
    u.fill_(7.0)  # Go writes...
    check("array.array sees Go's fill_(7): %s" % a.tolist(), a.tolist() == [7.0, 7.0, 7.0])


def with_numpy(np):
    section("NumPy %s" % np.__version__)
    t = dlbridge.arange(6, dtype="float64")
    a = np.from_dlpack(t)
    same("Go tensor -> numpy.from_dlpack", t.data_ptr(), a.ctypes.data)
    t.fill_(2.5)
    check("NumPy sees Go's fill_(2.5)", bool((a == 2.5).all()))
    b = np.asarray(t)  # __array_interface__: writable in every NumPy
    same("Go tensor -> numpy.asarray", t.data_ptr(), b.ctypes.data)
    b[:] = np.arange(6)
    check("Go sees NumPy's write: sum() == 15", t.sum() == 15.0)
    n = np.linspace(0, 1, 5, dtype=np.float32)
    u = dlbridge.from_dlpack(n)
    same("numpy array -> dlbridge.from_dlpack", u.data_ptr(), n.ctypes.data)
    u.fill_(-1)
    check("NumPy sees Go's fill_(-1)", bool((n == -1).all()))
    m = np.arange(12.0).reshape(3, 4)[:, ::2]  # a strided view
    v = dlbridge.asarray(m)
    same("strided numpy view -> dlbridge", v.data_ptr(), m.ctypes.data)
    print("   strides: numpy %s bytes, dlbridge %s elements" % (m.strides, v.strides))


def with_torch(torch):
    section("PyTorch %s (CPU)" % torch.__version__)
    t = dlbridge.arange(6, dtype="float32")
    x = torch.from_dlpack(t)
    same("Go tensor -> torch.from_dlpack", t.data_ptr(), x.data_ptr())
    x.mul_(10)
    check("Go sees torch's mul_(10): sum() == 150", t.sum() == 150.0)
    y = torch.arange(4, dtype=torch.int64)
    u = dlbridge.from_dlpack(y)
    same("torch tensor -> dlbridge.from_dlpack", u.data_ptr(), y.data_ptr())
    u.fill_(42)
    check("torch sees Go's fill_(42): %s" % y.tolist(), y.tolist() == [42] * 4)
    z = torch.from_dlpack(dlbridge.from_dlpack(y))  # and around again
    same("torch -> dlbridge -> torch", y.data_ptr(), z.data_ptr())


def with_cuda(torch, cupy):
    section("CUDA (%d device%s)" % (dlbridge.cuda_device_count(), "" if dlbridge.cuda_device_count() == 1 else "s"))
    g = dlbridge.arange(1 << 20, dtype="float32", device="cuda")
    print("   Go made %r" % g)
    if torch is not None and torch.cuda.is_available():
        x = torch.from_dlpack(g)
        same("Go CUDA tensor -> torch.from_dlpack", g.data_ptr(), x.data_ptr())
        x.fill_(1.0)  # queued on torch's stream; the next export orders it
        check("Go sees torch's fill_(1): sum() == %d" % (1 << 20), dlbridge.from_dlpack(x).sum() == float(1 << 20))
        y = torch.zeros(1000, device="cuda")
        u = dlbridge.from_dlpack(y)  # torch orders its work before our stream
        same("torch CUDA tensor -> dlbridge.from_dlpack", u.data_ptr(), y.data_ptr())
        u.fill_(3.0)
        check("torch sees Go's fill_(3)", bool((y == 3).all().item()))
        w = dlbridge.asarray(torch.ones(8, device="cuda"))
        check("torch via __cuda_array_interface__/DLPack", w.sum() == 8.0)
    elif torch is not None:
        skipped.append("torch CUDA (torch %s has no CUDA)" % torch.__version__)
    if cupy is not None:
        c = cupy.from_dlpack(g)
        same("Go CUDA tensor -> cupy.from_dlpack", g.data_ptr(), c.data.ptr)
        d = cupy.asarray(g)  # __cuda_array_interface__
        same("Go CUDA tensor -> cupy.asarray (CAI)", g.data_ptr(), d.data.ptr)
        c[:] = 2
        check("Go sees CuPy's write: sum() == %d" % (2 << 20), g.sum() == float(2 << 20))
        e = cupy.arange(16, dtype=cupy.float64)
        u = dlbridge.from_dlpack(e)
        same("cupy array -> dlbridge.from_dlpack", u.data_ptr(), e.data.ptr)
        u.fill_(5)
        check("CuPy sees Go's fill_(5)", bool((e == 5).all()))
        v = dlbridge.asarray(cupy.ones((4, 4), dtype=cupy.float32).T)
        check("cupy strided view -> dlbridge: strides %s" % (v.strides,), v.strides == (1, 4))
    else:
        skipped.append("CuPy CUDA exchange (cupy not importable)")


def main():
    print("dlbridge %s, library %s" % (dlbridge.__version__, dlbridge.library_path))
    print("Python %s" % sys.version.split()[0])
    buffer_protocol()
    np = optional("numpy")
    if np is not None:
        with_numpy(np)
    torch = optional("torch")
    if torch is not None:
        with_torch(torch)
    if dlbridge.cuda_available():
        cupy = optional("cupy")
        with_cuda(torch, cupy)
    else:
        skipped.append("CUDA tensors, torch CUDA and CuPy (no CUDA driver or device)")
    section("Summary")
    for s in skipped:
        print("   skipped: " + s)
    s = dlbridge.debug_stats()
    print("   library: %d live tensor handles, %d live DLPack exports, %d deleters run"
          % (s["live_tensors"], s["live_exports"], s["deleter_calls"]))
    if failures:
        print("   FAILED: " + ", ".join(failures))
        return 1
    print("   every exchange shared memory: no copies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
