"""Calls of Go functions from Python (dlbridge.ops) against the peers, in
one process, as ratios.

Host (any machine): gofunc.scale(out, x, 2.0) over 16-element float32 NumPy
arrays against numpy.multiply(x, 2.0, out=out), the same loop in a pybind11
extension (py::array_t arguments; Debian's pybind11-dev) and in a C function
called through ctypes (with the arrays' addresses), all built here at run
time with g++/gcc. GPU (PyTorch with CUDA): gofunc.noop over two torch CUDA
tensors with the caller's stream, gofunc.axpy (one kernel launch), a CuPy
RawKernel launch of the same PTX where CuPy is installed, torch's
x.add_(0) and torch.cuda.current_stream(); then 1 and 8 threads calling
axpy in a loop (the GIL is released during the Go body).

Each cell is the best of interleaved rounds (one batch of each library a
round), the garbage collector off as timeit has it.

    DLBRIDGE_LIB=build/libopstest.so PYTHONPATH=pybridge/python python3 pybridge/python/bench/bench_gofunc.py
"""

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

import numpy

import dlbridge

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))

PYBIND_SRC = r"""
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
namespace py = pybind11;
static void scale(py::array_t<float, 0> out, py::array_t<float, 0> x, float factor) {
    if (out.ndim() != 1 || x.ndim() != 1 || out.shape(0) != x.shape(0))
        throw py::value_error("scale: want two 1-d arrays of one length");
    auto o = out.mutable_unchecked<1>();
    auto in = x.unchecked<1>();
    for (py::ssize_t i = 0; i < in.shape(0); i++) o(i) = in(i) * factor;
}
PYBIND11_MODULE(pyb_scale, m) { m.def("scale", &scale); }
"""

C_SRC = r"""
#include <stddef.h>
void scale(float *out, const float *x, size_t n, float f) { for (size_t i = 0; i < n; i++) out[i] = x[i] * f; }
"""


def build_peers(tmp):
    """The pybind11 module and the ctypes library, or None where the
    toolchain is missing."""
    peers = {}
    inc = sysconfig.get_paths()["include"]
    if shutil.which("g++") and os.path.exists("/usr/include/pybind11/pybind11.h"):
        src = os.path.join(tmp, "pyb_scale.cpp")
        with open(src, "w") as f:
            f.write(PYBIND_SRC)
        so = os.path.join(tmp, "pyb_scale" + sysconfig.get_config_var("EXT_SUFFIX"))
        r = subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-std=c++17", "-I" + inc, src, "-o", so],
                           capture_output=True, text=True)
        if r.returncode == 0:
            sys.path.insert(0, tmp)
            import pyb_scale  # noqa: E402
            peers["pybind11"] = pyb_scale.scale
        else:
            print("pybind11 peer not built:", r.stderr[-500:])
    if shutil.which("gcc"):
        src = os.path.join(tmp, "c_scale.c")
        with open(src, "w") as f:
            f.write(C_SRC)
        so = os.path.join(tmp, "c_scale.so")
        if subprocess.run(["gcc", "-O2", "-shared", "-fPIC", src, "-o", so]).returncode == 0:
            lib = ctypes.CDLL(so)
            lib.scale.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float]
            lib.scale.restype = None
            peers["ctypes"] = lib.scale
    return peers


def best_per_call(cells, number, rounds=ROUNDS):
    """{name: best seconds per call} over interleaved rounds of each cell."""
    best = {name: float("inf") for name in cells}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in cells.items():
                t = time.perf_counter()
                for _ in range(number):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - t) / number)
    finally:
        if gc_was:
            gc.enable()
    return best


def report(title, best, base):
    print("== " + title)
    for name, s in best.items():
        print("  %-44s %8.3f us   %5.2fx %s" % (name, s * 1e6, s / best[base], base))


def host():
    ops = dlbridge.ops
    x = numpy.arange(16, dtype=numpy.float32)
    out = numpy.empty_like(x)
    with tempfile.TemporaryDirectory() as tmp:
        peers = build_peers(tmp)
        scale = ops.gofunc.scale
        nothing = ops.pytest.nothing if "pytest" in dir(ops) else None
        cells = {
            "dlbridge.ops.gofunc.scale(out, x, 2.0)": lambda: scale(out, x, 2.0),
            "numpy.multiply(x, 2.0, out=out)": lambda: numpy.multiply(x, 2.0, out=out),
            # As users write it: the attribute reads are part of the call.
            "dlbridge.ops.gofunc.scale(...) written inline": lambda: dlbridge.ops.gofunc.scale(out, x, 2.0),
        }
        if nothing is not None:
            cells["dlbridge.ops.pytest.nothing() (no argument)"] = nothing
        if "pybind11" in peers:
            pb = peers["pybind11"]
            cells["pybind11 scale(out, x, 2.0)"] = lambda: pb(out, x, 2.0)
        if "ctypes" in peers:
            cs = peers["ctypes"]
            cells["ctypes scale(out.ctypes.data, x.ctypes.data, 16, 2.0)"] = lambda: cs(out.ctypes.data, x.ctypes.data, 16, 2.0)
        scale(out, x, 2.0)
        assert (out == x * 2).all()
        best = best_per_call(cells, 20000)
        report("host: 16-element float32 NumPy arrays", best,
               "numpy.multiply(x, 2.0, out=out)")


def cupy_axpy():
    """CuPy's RawKernel of gofunc's axpy, or None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    src = r'''extern "C" __global__ void axpy(float* y, const float* x, unsigned long long n, float a) {
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
            y[i] = a * x[i] + y[i]; }'''
    return cupy.RawKernel(src, "axpy")


def gpu():
    try:
        import torch
    except ImportError:
        print("== gpu: no torch")
        return
    if not torch.cuda.is_available():
        print("== gpu: torch has no CUDA device")
        return
    ops = dlbridge.ops
    n = 1 << 10
    x = torch.ones(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    side = torch.cuda.Stream()
    noop, axpy = ops.gofunc.noop, ops.gofunc.axpy
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        cells = {
            "dlbridge.ops.gofunc.noop(x, y)": lambda: noop(x, y),
            "dlbridge.ops.gofunc.axpy(y, x, 2.0)": lambda: axpy(y, x, 2.0),
            "torch x.add_(0)": lambda: x.add_(0),
            "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
        }
        k = cupy_axpy()
        if k is not None:
            import cupy
            cx, cy = cupy.asarray(x), cupy.asarray(y)
            cs = cupy.cuda.ExternalStream(side.cuda_stream)
            grid = ((n + 255) // 256,)
            a32 = numpy.float32(2.0)
            nn = numpy.uint64(n)
            with cs:
                k(grid, (256,), (cy, cx, nn, a32))
            cells["cupy RawKernel axpy launch"] = lambda: k(grid, (256,), (cy, cx, nn, a32), stream=cs)
        for fn in cells.values():
            fn()
        torch.cuda.synchronize()
        best = best_per_call(cells, 5000)
        torch.cuda.synchronize()
    report("gpu: torch CUDA tensors on a side stream", best,
           "torch x.add_(0)")
    if "cupy RawKernel axpy launch" in best:
        print("  axpy / cupy RawKernel launch: %.2fx" % (best["dlbridge.ops.gofunc.axpy(y, x, 2.0)"] / best["cupy RawKernel axpy launch"]))
    threads_scaling(torch)


def threads_scaling(torch):
    """Calls per second from 1 and from 8 threads, each with its own
    tensors and stream: gofunc.axpy (a kernel launch), gofunc.noop (no
    driver call) on torch CUDA tensors, and pytest.slow (a host body of a
    few microseconds, where only the GIL could stand in the way), and
    pytest.fill_wait (ten fills of 4 MiB and a wait for them: a GPU function
    whose caller needs its result when it returns)."""
    ops = dlbridge.ops

    def axpy_case():
        y, x, s = torch.zeros(1024, device="cuda"), torch.ones(1024, device="cuda"), torch.cuda.Stream()
        f = ops.gofunc.axpy
        return s, lambda: f(y, x, 1.0)

    def noop_case():
        y, x, s = torch.zeros(1024, device="cuda"), torch.ones(1024, device="cuda"), torch.cuda.Stream()
        f = ops.gofunc.noop
        return s, lambda: f(x, y)

    def add_case():  # a peer: torch releases the GIL in its ops too
        x, s = torch.zeros(1024, device="cuda"), torch.cuda.Stream()
        return s, lambda: x.add_(0)

    def cupy_case():  # a peer: CuPy's launch of the same kernel
        import cupy
        k = cupy_axpy()
        y, x, s = torch.zeros(1024, device="cuda"), torch.ones(1024, device="cuda"), torch.cuda.Stream()
        cy, cx, cs = cupy.asarray(y), cupy.asarray(x), cupy.cuda.ExternalStream(s.cuda_stream)
        a32, nn = numpy.float32(1.0), numpy.uint64(1024)
        return s, lambda: k((4,), (256,), (cy, cx, nn, a32), stream=cs)

    def fill10_case():
        x, s = torch.zeros(1024, device="cuda"), torch.cuda.Stream()
        f = ops.pytest.fill_times
        return s, lambda: f(x, 1.0, 10)

    def fill10_wait_case():
        x, s = torch.zeros(1 << 20, device="cuda"), torch.cuda.Stream()
        f = ops.pytest.fill_wait
        return s, lambda: f(x, 1.0, 10)

    def slow_case():
        x = numpy.zeros(64, numpy.float32)
        f = ops.pytest.slow
        return None, lambda: f(x, 1.0, 2000)

    def run(case, nthreads, calls):
        work = [case() for _ in range(nthreads)]
        torch.cuda.synchronize()
        start = threading.Barrier(nthreads + 1)

        def worker(s, fn):
            if s is not None:
                with torch.cuda.stream(s):
                    start.wait()
                    for _ in range(calls):
                        fn()
            else:
                start.wait()
                for _ in range(calls):
                    fn()

        ts = [threading.Thread(target=worker, args=w) for w in work]
        for t in ts:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        torch.cuda.synchronize()
        return nthreads * calls / (time.perf_counter() - t0)

    print("== threads: calls per second, each thread its own tensors and stream")
    cases = [("gofunc.axpy (one kernel launch)", axpy_case), ("gofunc.noop (no driver call)", noop_case),
             ("torch x.add_(0) (a peer)", add_case)]
    if cupy_axpy() is not None:
        cases.append(("cupy RawKernel axpy launch (a peer)", cupy_case))
    if "pytest" in dir(ops):
        cases.append(("pytest.fill_times(x, 1.0, 10) (10 launches)", fill10_case))
        cases.append(("pytest.fill_wait(x 4 MiB, 1.0, 10) (10 launches and a wait)", fill10_wait_case))
        cases.append(("pytest.slow (a host body, no GPU)", slow_case))
    for name, case in cases:
        one = max(run(case, 1, 3000) for _ in range(3))
        eight = max(run(case, 8, 3000) for _ in range(3))
        print("  %-36s 1 thread %9.0f   8 threads %9.0f   %.2fx" % (name, one, eight, eight / one))


if __name__ == "__main__":
    print("dlbridge", dlbridge.__version__, "library", dlbridge.library_path, "python", sys.version.split()[0],
          "numpy", numpy.__version__)
    host()
    gpu()
