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

With DLBRIDGE_BENCH_PEERS naming the folder scripts/build-peers.sh wrote
(apache/tvm-ffi's Python package and bench/peers' functions in tvm-ffi and
nanobind, built for this Python), it also sets dlbridge's calls beside the
same functions in tvm-ffi and nanobind, in the same interleaved rounds: empty
bodies over two and nine tensors (pytest.noop2, pytest.noop9) and without
arguments (pytest.nothing; beside it the floor, a Go export that returns a
constant through the extension: what any call of Go costs), on NumPy
arrays and, on a GPU, on torch CUDA tensors with the caller's stream
(both sides are checked to see it); on the host also scale(out, x, 2.0).
Each line gives its ratio to tvm-ffi's cell
of the same function. Wherever dlbridge has a CUDA device (the fake driver's
too, DLBRIDGE_LIBCUDA), the same three functions also run over tensors of a
C exchange API producer built here (EXCHANGE_SRC), torch's way in without
torch, beside tvm-ffi's.
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


# A producer type with a DLPack C exchange API (DLPack 1.3's
# DLPackExchangeAPI), as torch.Tensor has one, whose tensors describe any
# address as float32 memory on a CUDA device, and whose current work stream
# is whatever set_stream says: how dlbridge and tvm-ffi take torch-like CUDA
# tensors through the exchange API, without torch or a GPU (the fake driver
# gives dlbridge its device). Nothing reads the memory.
EXCHANGE_SRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
typedef struct { uint32_t major, minor; } Ver;
typedef struct { int32_t device_type, device_id; } Dev;
typedef struct { uint8_t code, bits; uint16_t lanes; } DT;
typedef struct { void *data; Dev device; int32_t ndim; DT dtype; int64_t *shape, *strides; uint64_t byte_offset; } DLT;
typedef struct MT { Ver version; void *ctx; void (*deleter)(struct MT *); uint64_t flags; DLT dl; } MT;
typedef struct Hdr { Ver version; struct Hdr *prev; } Hdr;
typedef struct {
    Hdr header;
    void *alloc;
    int (*mfrom)(void *, MT **);
    void *mto;
    int (*dlfrom)(void *, DLT *);
    int (*stream)(int32_t, int32_t, void **);
} API;
typedef struct { PyObject_HEAD uint64_t ptr; int32_t dev; int64_t shape[1], strides[1]; } T;
static uint64_t current;
static void fill(T *t, DLT *d) {
    d->data = (void *)(uintptr_t)t->ptr; d->device.device_type = 2; d->device.device_id = t->dev;
    d->ndim = 1; d->dtype.code = 2; d->dtype.bits = 32; d->dtype.lanes = 1;
    d->shape = t->shape; d->strides = t->strides; d->byte_offset = 0;
}
static int dlfrom(void *o, DLT *d) { fill(o, d); return 0; }
static void del(MT *m) { Py_XDECREF((PyObject *)m->ctx); free(m); }
static int mfrom(void *o, MT **out) {  /* as torch's: a new managed tensor that holds the object */
    MT *m = malloc(sizeof *m);
    if (!m) { PyErr_NoMemory(); return -1; }
    m->version.major = 1; m->version.minor = 3; m->ctx = o; m->deleter = del; m->flags = 0;
    Py_INCREF((PyObject *)o);
    fill(o, &m->dl); *out = m; return 0;
}
static int stream(int32_t type, int32_t dev, void **out) { *out = (void *)(uintptr_t)current; return 0; }
static API api = {{{1, 3}, NULL}, NULL, mfrom, NULL, dlfrom, stream};
static int init(T *self, PyObject *args, PyObject *kw) {
    unsigned long long p; long long n; int dev = 0;
    if (!PyArg_ParseTuple(args, "KL|i", &p, &n, &dev)) return -1;
    self->ptr = p; self->shape[0] = n; self->strides[0] = 1; self->dev = dev;
    return 0;
}
static PyTypeObject TType = {PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "xproducer.Tensor", .tp_basicsize = sizeof(T),
    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew, .tp_init = (initproc)init};
static PyObject *set_stream(PyObject *m, PyObject *a) {
    current = PyLong_AsUnsignedLongLong(a);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"set_stream", set_stream, METH_O, NULL}, {NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "xproducer", NULL, -1, methods};
PyMODINIT_FUNC PyInit_xproducer(void) {
    if (PyType_Ready(&TType) < 0) return NULL;
    PyObject *cap = PyCapsule_New(&api, "dlpack_exchange_api", NULL);
    if (!cap || PyDict_SetItemString(TType.tp_dict, "__dlpack_c_exchange_api__", cap) < 0) return NULL;
    Py_DECREF(cap);
    PyType_Modified(&TType);
    PyObject *m = PyModule_Create(&mod);
    if (!m) return NULL;
    Py_INCREF(&TType);
    PyModule_AddObject(m, "Tensor", (PyObject *)&TType);
    return m;
}
"""


def build_exchange_producer(tmp):
    """The xproducer module built from EXCHANGE_SRC, or None without gcc or
    Python's headers."""
    inc = sysconfig.get_paths()["include"]
    if not shutil.which("gcc") or not os.path.exists(os.path.join(inc, "Python.h")):
        return None
    src = os.path.join(tmp, "xproducer.c")
    with open(src, "w") as f:
        f.write(EXCHANGE_SRC)
    so = os.path.join(tmp, "xproducer" + sysconfig.get_config_var("EXT_SUFFIX"))
    r = subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-I" + inc, src, "-o", so], capture_output=True, text=True)
    if r.returncode != 0:
        print("exchange producer not built:", r.stderr[-500:])
        return None
    sys.path.insert(0, tmp)
    import xproducer  # noqa: E402
    return xproducer


def exchange_peers(peers):
    """dlbridge's calls beside tvm-ffi's on tensors of a C exchange API
    producer (EXCHANGE_SRC: torch's way in, without torch) on cuda:0, with
    the producer's current stream a stream of dlbridge's: both bindings
    take the tensors and the stream through the API. Runs wherever dlbridge
    has a CUDA device, the fake driver's too (DLBRIDGE_LIBCUDA), where it is
    the 2-core machine's stand-in for the torch CUDA cells of the GPU."""
    ops = dlbridge.ops
    if "pytest" not in dir(ops) or dlbridge.cuda_device_count() < 1:
        return
    tmp = tempfile.mkdtemp(prefix="dlb-xproducer-")
    try:
        xp = build_exchange_producer(tmp)
        if xp is None:
            return
        side = dlbridge.Stream(device=0)
        xp.set_stream(side.cuda_stream)
        backing = [dlbridge.zeros(1024, device="cuda:0") for _ in range(9)]
        xs = [xp.Tensor(b.data_ptr(), 1024, 0) for b in backing]
        x, y = xs[0], xs[1]
        d2, d9, dn = ops.pytest.noop2, ops.pytest.noop9, ops.pytest.nothing
        seen = {"dlbridge": ops.pytest.stream_of(x)[0]}
        cases = [("noop2", {"dlbridge pytest.noop2(x, y)": lambda: d2(x, y)}),
                 ("noop9", {"dlbridge pytest.noop9(9 tensors)": lambda: d9(*xs)}),
                 ("nothing", {"dlbridge pytest.nothing()": dn, "floor: a Go export returning a constant": floor_call()})]
        if "tvm-ffi" in peers:
            t = peers["tvm-ffi"]
            t2, t9, tn = t.noop2, t.noop9, t.nothing
            seen["tvm-ffi"] = t.stream_of(x)
            cases[0][1]["tvm-ffi noop2(x, y)"] = lambda: t2(x, y)
            cases[1][1]["tvm-ffi noop9(9 tensors)"] = lambda: t9(*xs)
            cases[2][1]["tvm-ffi nothing()"] = tn
        compare("exchange peers: a C exchange API producer's cuda:0 tensors (torch's way in, without torch), "
                "its current stream a side stream, empty bodies", cases, 20000)
        for lib, got in seen.items():
            print("  %s's body is given the producer's stream: %s" % (
                lib, "yes" if got == side.cuda_stream else "NO (%#x, the producer's is %#x)" % (got, side.cuda_stream)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def load_built_peers():
    """{"tvm-ffi": module, "nanobind": module} of the functions in
    bench/peers, built by scripts/build-peers.sh into the folder
    DLBRIDGE_BENCH_PEERS names; empty without it. A peer that does not load
    says why and is left out."""
    folder = os.environ.get("DLBRIDGE_BENCH_PEERS")
    peers = {}
    if not folder:
        return peers
    folder = os.path.abspath(folder)
    sys.path.insert(0, folder)
    try:
        import tvm_ffi
        peers["tvm-ffi"] = tvm_ffi.load_module(os.path.join(folder, "tvmffi_peers.so"))
        lib = tvm_ffi.libinfo.find_libtvm_ffi()
        print("tvm-ffi", tvm_ffi.__version__, "from", os.path.dirname(tvm_ffi.__file__), "library", lib)
        if not os.path.realpath(lib).startswith(os.path.realpath(folder)):
            # An installed apache-tvm-ffi wins libinfo's search: its library
            # is not the one the Cython core was built against.
            print("tvm-ffi peer left out: its library is not the one built in", folder)
            del peers["tvm-ffi"]
    except Exception as e:  # noqa: BLE001 - a peer that fails to load is reported, not fatal
        print("tvm-ffi peer not loaded:", type(e).__name__, e)
    try:
        import nanobind_peers
        peers["nanobind"] = nanobind_peers
    except ImportError as e:
        print("nanobind peer not loaded:", e)
    return peers


def floor_call():
    """The least a Python call of Go code costs through dlbridge's one
    binding: _core's wrapper of a Go export that returns a constant (the
    GIL released and taken again, the cgo entry and exit), measured beside
    the "nothing" cells as the bound under pytest.nothing()."""
    from dlbridge import _lib
    _lib.load()
    return _lib._core.dlb_abi_version


def compare(title, cases, number):
    """cases: [(function, {label: call})], each label starting with its
    library's name. Every call of every case runs in the same interleaved
    rounds; each line gives the call's time and its ratio to tvm-ffi's call
    of the same function, and a line per library gives its first call's
    ratios side by side (dlbridge/tvm-ffi: ...)."""
    cells, refused = {}, []
    for fn, calls in cases:
        for label, call in list(calls.items()):
            try:
                call()
            except Exception as e:  # noqa: BLE001 - a peer that refuses the arguments is reported, not fatal
                refused.append("  %-8s %s: not measured: %s: %s" % (fn, label, type(e).__name__, e))
                del calls[label]
                continue
            cells[(fn, label)] = call
    best = best_per_call(cells, number)

    def first(calls, lib):
        return next((label for label in calls if label.split(" ")[0] == lib), None)

    print("== " + title)
    for line in refused:
        print(line)
    for fn, calls in cases:
        base = first(calls, "tvm-ffi")
        for label in calls:
            t = best[(fn, label)]
            ratio = "   %5.2fx tvm-ffi" % (t / best[(fn, base)]) if base else ""
            print("  %-8s %-44s %8.3f us%s" % (fn, label, t * 1e6, ratio))
    for lib in ("dlbridge", "nanobind"):
        parts = []
        for fn, calls in cases:
            mine, base = first(calls, lib), first(calls, "tvm-ffi")
            if mine and base:
                parts.append("%s %.2fx" % (fn, best[(fn, mine)] / best[(fn, base)]))
        if parts:
            print("  %s/tvm-ffi: %s" % (lib, "   ".join(parts)))


def host_peers(peers):
    """dlbridge's calls beside tvm-ffi's and nanobind's on 16-element
    float32 NumPy arrays (tvm-ffi takes them through __dlpack__, nanobind
    through DLPack or the buffer protocol)."""
    ops = dlbridge.ops
    if not peers or "pytest" not in dir(ops):
        return
    xs = [numpy.arange(16, dtype=numpy.float32) for _ in range(9)]
    a, b = xs[0], xs[1]
    out = numpy.empty_like(a)
    d2, d9, dn, ds = ops.pytest.noop2, ops.pytest.noop9, ops.pytest.nothing, ops.gofunc.scale
    cases = [("noop2", {"dlbridge pytest.noop2(a, b)": lambda: d2(a, b)}),
             ("noop9", {"dlbridge pytest.noop9(9 arrays)": lambda: d9(*xs)}),
             ("nothing", {"dlbridge pytest.nothing()": dn, "floor: a Go export returning a constant": floor_call()}),
             ("scale", {"dlbridge gofunc.scale(out, x, 2.0)": lambda: ds(out, a, 2.0)})]
    for name, m in peers.items():
        p2, p9, pn, ps = m.noop2, m.noop9, m.nothing, m.scale
        out[:] = 0
        ps(out, a, 2.0)  # each peer's scale does what dlbridge's does
        assert (out == a * 2).all(), name
        cases[0][1][name + " noop2(a, b)"] = lambda p2=p2: p2(a, b)
        cases[1][1][name + " noop9(9 arrays)"] = lambda p9=p9: p9(*xs)
        cases[2][1][name + " nothing()"] = pn
        cases[3][1][name + " scale(out, x, 2.0)"] = lambda ps=ps: ps(out, a, 2.0)
    compare("host peers: 16-element float32 NumPy arrays", cases, 20000)


def gpu_peers(peers, torch):
    """dlbridge's calls beside tvm-ffi's (and nanobind's) on torch CUDA
    tensors, on a side stream the caller made current: tvm-ffi takes the
    tensors through torch's DLPack exchange API and sets the caller's stream
    for the call; dlbridge's functions receive that stream (both checked);
    nanobind passes no stream."""
    ops = dlbridge.ops
    if "tvm-ffi" not in peers or "pytest" not in dir(ops):
        return
    t = peers["tvm-ffi"]
    xs = [torch.ones(1024, device="cuda") for _ in range(9)]
    x, y = xs[0], xs[1]
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        # What each body is given, the caller's stream or not, is printed
        # with the figures: a call that skips the stream work is cheaper.
        seen = {"tvm-ffi": t.stream_of(x), "dlbridge": ops.pytest.stream_of(x)[0]}
        g2, d2, d9, dn = ops.gofunc.noop, ops.pytest.noop2, ops.pytest.noop9, ops.pytest.nothing
        t2, t9, tn = t.noop2, t.noop9, t.nothing
        cases = [("noop2", {"dlbridge pytest.noop2(x, y)": lambda: d2(x, y),
                            "dlbridge gofunc.noop(x, y) (x, y: cuda)": lambda: g2(x, y),
                            "tvm-ffi noop2(x, y)": lambda: t2(x, y)}),
                 ("noop9", {"dlbridge pytest.noop9(9 tensors)": lambda: d9(*xs),
                            "tvm-ffi noop9(9 tensors)": lambda: t9(*xs)}),
                 ("nothing", {"dlbridge pytest.nothing()": dn, "floor: a Go export returning a constant": floor_call(),
                              "tvm-ffi nothing()": tn})]
        if "nanobind" in peers:
            n = peers["nanobind"]
            n2, n9, nn = n.noop2, n.noop9, n.nothing
            cases[0][1]["nanobind noop2(x, y) (no stream)"] = lambda: n2(x, y)
            cases[1][1]["nanobind noop9(9 tensors) (no stream)"] = lambda: n9(*xs)
            cases[2][1]["nanobind nothing()"] = nn
        compare("gpu peers: torch CUDA tensors on the caller's side stream, empty bodies", cases, 5000)
        torch.cuda.synchronize()
    for lib, got in seen.items():
        print("  %s's body is given the caller's stream: %s" % (
            lib, "yes" if got == side.cuda_stream else "NO (%#x, the caller's is %#x)" % (got, side.cuda_stream)))


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


def gpu_with_peers(peers):
    """gpu_peers where torch has a CUDA device."""
    if "tvm-ffi" not in peers:
        return
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        gpu_peers(peers, torch)


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
    peers = load_built_peers()
    host_peers(peers)
    exchange_peers(peers)
    gpu()
    gpu_with_peers(peers)
