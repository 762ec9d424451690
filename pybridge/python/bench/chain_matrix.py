"""The chain matrix: does a consumer read what the producer wrote
when the tensor passes through dlbridge on the way?

Every producer is slow: its final write is queued on a non-blocking side
stream behind a spin of about SPIN_MS of GPU time (torch.cuda._sleep on that
stream, or dlbridge's _debug_spin_write), and the tensor is imported into
dlbridge at once, with the producer's stream current where the producer has
that notion. Every consumer then takes the dlbridge tensor on a non-blocking
stream of its own and reads it there (nothing synchronizes the device in
between). Each cell compares the bytes read with the bytes written.

  producers   torch, cupy, numba, jax, cuda.core, dlbridge (a Go-side write)
  import path dlpack      dlbridge.from_dlpack through __dlpack__
              c-exchange  DLPack 1.3's C exchange API (__dlpack_c_exchange_api__: torch, dlbridge)
              cai         __cuda_array_interface__ v3
  hops        1: producer -> dlbridge -> consumer
              2: producer -> dlbridge -> dlbridge -> consumer
  consumers   torch and cupy (DLPack and CAI), numba (CAI), jax (DLPack),
              cuda.core (StridedMemoryView, read with CuPy on the view's stream),
              go (dlbridge's own Go code: t.to("cpu"))

A direct table (producer -> consumer, no dlbridge) comes first as the
control. Cells: OK, WRONG (stale data), ERR (an exception; listed below the
table), "-" (the pair does not support that path). A WRONG cell whose direct
control is WRONG too is written wrong* and not counted: the producer or the
consumer breaks the protocol with nobody in the middle. Exit status 1 when
any counted cell is WRONG.

    DLBRIDGE_LIB=build/libdlbridge.so PYTHONPATH=pybridge/python python3 pybridge/python/bench/chain_matrix.py
"""

import argparse
import contextlib
import gc
import os
import struct
import sys
import traceback
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax must leave memory to the others

import numpy as np  # noqa: E402

import dlbridge  # noqa: E402
from dlbridge import _tensor  # noqa: E402

N = 1 << 20  # float32 elements per tensor (4 MiB)
SPIN_MS = 60
SPIN_CYCLES = 120_000_000  # torch.cuda._sleep cycles, about SPIN_MS on an H100 (~2 GHz)


def optional(name):
    try:
        mod = __import__(name)
        for part in name.split(".")[1:]:
            mod = getattr(mod, part)
        return mod
    except Exception:
        return None


torch = optional("torch")
if torch is not None and not torch.cuda.is_available():
    torch = None
cupy = optional("cupy")
if cupy is not None:
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        cupy = None
ncuda = None
try:
    from numba import cuda as ncuda

    if not ncuda.is_available():
        ncuda = None
except Exception:
    ncuda = None
jax = optional("jax")
if jax is not None:
    try:
        if not jax.devices("gpu"):
            jax = None
    except Exception:
        jax = None
ccore = None
SMV = None
for mod in ("cuda.core", "cuda.core.experimental"):
    try:
        ccore = __import__(mod, fromlist=["Device"])
        SMV = getattr(__import__(mod + ".utils", fromlist=["StridedMemoryView"]), "StridedMemoryView")
        break
    except Exception:
        ccore = None


class Unsupported(Exception):
    """The producer, path or consumer does not offer what the cell needs."""


class DLPackOnly:
    """Another object's __dlpack__ and __dlpack_device__, and nothing else
    (no C exchange API, no CAI): forces the Python-level DLPack path."""

    def __init__(self, obj):
        if not hasattr(obj, "__dlpack__"):
            raise Unsupported("no __dlpack__")
        self.obj = obj

    def __dlpack__(self, **kw):
        return self.obj.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()


class CAIOnly:
    """Another object's __cuda_array_interface__ and nothing else."""

    def __init__(self, obj):
        try:
            self.__cuda_array_interface__ = obj.__cuda_array_interface__
        except AttributeError:
            raise Unsupported("no __cuda_array_interface__") from None
        self.obj = obj


def spin(handle):
    """Queue about SPIN_MS of GPU spinning on the raw stream handle."""
    if torch is not None:
        with torch.cuda.stream(torch.cuda.ExternalStream(handle)):
            torch.cuda._sleep(SPIN_CYCLES)
        return
    if cupy is not None:
        k = cupy.RawKernel(r"""
        extern "C" __global__ void spin(long long cycles) {
            long long t0 = clock64();
            while (clock64() - t0 < cycles) {}
        }""", "spin")
        with cupy.cuda.ExternalStream(handle):
            k((1,), (1,), (cupy.int64(SPIN_CYCLES),))
        return
    raise Unsupported("no torch or cupy to spin a stream with")


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


# ---- producers: make(value) -> (object, context to import under, keepalive) ----

def produce_torch(v):
    if torch is None:
        raise Unsupported("no torch with CUDA")
    s = torch.cuda.Stream()
    x = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SPIN_CYCLES)
        x.fill_(v)
    return x, torch.cuda.stream(s), (s,)


def produce_cupy(v):
    if cupy is None:
        raise Unsupported("no cupy")
    s = cupy.cuda.Stream(non_blocking=True)
    a = cupy.zeros(N, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    spin(s.ptr)
    with s:
        a.fill(v)
    return a, s, (s,)


def produce_numba(v):
    if ncuda is None:
        raise Unsupported("no numba.cuda")
    side = dlbridge.Stream()  # a non-blocking stream numba can use
    ns = ncuda.external_stream(side.cuda_stream)
    d = ncuda.device_array(N, dtype=np.float32, stream=ns)
    d.copy_to_device(np.zeros(N, np.float32), stream=ns)
    ns.synchronize()
    spin(side.cuda_stream)
    # The final write: a copy queued on ns behind the spin (numba's JIT is
    # not needed for that, and does not build with every NumPy).
    src = ncuda.pinned_array(N, dtype=np.float32)  # pinned: the copy is truly queued
    src[:] = v
    d.copy_to_device(src, stream=ns)
    return d, contextlib.nullcontext(), (side, ns, src)


_jax_slow = None


def produce_jax(v):
    global _jax_slow
    if jax is None:
        raise Unsupported("no jax with a GPU")
    import jax.numpy as jnp

    if _jax_slow is None:
        @jax.jit
        def slow(x, value):
            for _ in range(12):
                x = jnp.tanh(x @ x * 1e-4)
            return jnp.full((N,), value, jnp.float32) + 0 * x[0, 0]

        _jax_slow = slow
        _jax_slow(jnp.ones((4096, 4096), jnp.float32), 0.0).block_until_ready()  # compile
    x = jnp.ones((4096, 4096), jnp.float32)
    x.block_until_ready()
    j = _jax_slow(x, np.float32(v))  # returns at once; the GPU is still busy
    return j, contextlib.nullcontext(), (x,)


def produce_cuda_core(v):
    if ccore is None or torch is None:
        raise Unsupported("needs cuda.core and torch")
    dev = ccore.Device(0)
    dev.set_current()
    s = dev.create_stream()
    dst = torch.zeros(N, device="cuda")
    src = torch.full((N,), v, device="cuda")
    torch.cuda.synchronize()
    dbuf = ccore.Buffer.from_handle(dst.data_ptr(), 4 * N)
    sbuf = ccore.Buffer.from_handle(src.data_ptr(), 4 * N)
    spin(int(s.handle))
    dbuf.copy_from(sbuf, stream=s)
    return dbuf, contextlib.nullcontext(), (s, dst, src, sbuf)


def produce_dlbridge(v):
    g = dlbridge.zeros(N, dtype="float32", device="cuda")
    dlbridge.synchronize()
    _tensor._debug_spin_write(g, f32_bits(v), SPIN_MS / 1000)
    return g, contextlib.nullcontext(), ()


PRODUCERS = {
    "torch": produce_torch,
    "cupy": produce_cupy,
    "numba": produce_numba,
    "jax": produce_jax,
    "cuda.core": produce_cuda_core,
    "dlbridge": produce_dlbridge,
}


# ---- import paths into dlbridge ----

def import_dlpack(obj):
    return dlbridge.from_dlpack(DLPackOnly(obj))


def import_exchange(obj):
    if getattr(type(obj), "__dlpack_c_exchange_api__", None) is None:
        raise Unsupported("no __dlpack_c_exchange_api__")
    return dlbridge.from_dlpack(obj)


def import_cai(obj):
    return dlbridge.asarray(CAIOnly(obj))


PATHS = {"dlpack": import_dlpack, "c-exchange": import_exchange, "cai": import_cai}


# ---- consumers: read(t) -> bytes, on a non-blocking stream of their own ----

def read_torch_dlpack(t):
    if torch is None:
        raise Unsupported("no torch with CUDA")
    if not hasattr(t, "__dlpack__"):
        raise Unsupported("no __dlpack__")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        h = torch.from_dlpack(t).cpu()  # the copy runs on s; .cpu() waits for s only
    return h.numpy().tobytes()


def read_torch_cai(t):
    if torch is None:
        raise Unsupported("no torch with CUDA")
    src = CAIOnly(t)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        h = torch.as_tensor(src, device="cuda").cpu()
    return h.numpy().tobytes()


def read_cupy_dlpack(t):
    if cupy is None:
        raise Unsupported("no cupy")
    if not hasattr(t, "__dlpack__"):
        raise Unsupported("no __dlpack__")
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h = cupy.asnumpy(cupy.from_dlpack(t), stream=s)
    s.synchronize()
    return h.tobytes()


def read_cupy_cai(t):
    if cupy is None:
        raise Unsupported("no cupy")
    src = CAIOnly(t)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h = cupy.asnumpy(cupy.asarray(src), stream=s)
    s.synchronize()
    return h.tobytes()


def read_numba(t):
    if ncuda is None:
        raise Unsupported("no numba.cuda")
    src = CAIOnly(t)
    side = dlbridge.Stream()
    ns = ncuda.external_stream(side.cuda_stream)
    d = ncuda.as_cuda_array(src)
    h = d.copy_to_host(stream=ns)
    ns.synchronize()
    return h.tobytes()


def read_jax(t):
    if jax is None:
        raise Unsupported("no jax with a GPU")
    if not hasattr(t, "__dlpack__"):
        raise Unsupported("no __dlpack__")
    j = jax.dlpack.from_dlpack(DLPackOnly(t))
    return np.asarray(j).tobytes()


def read_cuda_core(t):
    if SMV is None or cupy is None:
        raise Unsupported("needs cuda.core and cupy")
    if not hasattr(t, "__dlpack__"):
        raise Unsupported("no __dlpack__")
    dev = ccore.Device(0)
    dev.set_current()
    s = dev.create_stream()
    h = int(s.handle)
    make = getattr(SMV, "from_dlpack", SMV)
    v = make(DLPackOnly(t), stream_ptr=h)  # __dlpack__(stream=h): ordered before s
    nbytes = 4 * N
    mem = cupy.cuda.UnownedMemory(v.ptr, nbytes, v)
    arr = cupy.ndarray((nbytes,), cupy.uint8, cupy.cuda.MemoryPointer(mem, 0))
    cs = cupy.cuda.ExternalStream(h)
    with cs:
        out = cupy.asnumpy(arr, stream=cs)
    s.sync()
    return out.tobytes()


def read_go(t):
    if not isinstance(t, dlbridge.Tensor):
        raise Unsupported("Go reads dlbridge tensors")
    return np.from_dlpack(t.to("cpu")).tobytes()


CONSUMERS = {
    "torch-dlpack": read_torch_dlpack,
    "torch-cai": read_torch_cai,
    "cupy-dlpack": read_cupy_dlpack,
    "cupy-cai": read_cupy_cai,
    "numba-cai": read_numba,
    "jax-dlpack": read_jax,
    "cuda.core": read_cuda_core,
    "go": read_go,
}


def sync_all():
    dlbridge.synchronize()
    if torch is not None:
        torch.cuda.synchronize()


_value = [1.0]


def run_cell(producer, path, hops, consumer, tries):
    """'OK', 'WRONG', '-' or 'ERR: ...' for one cell."""
    wrong = 0
    for _ in range(tries):
        _value[0] += 1.0
        v = _value[0]
        want = np.full(N, v, np.float32).tobytes()
        keep = ()
        try:
            obj, ctx, keep = PRODUCERS[producer](v)
            if path is None:
                with ctx:  # as a user hands a producer's tensor on: its stream current
                    got = CONSUMERS[consumer](obj)
            else:
                with ctx:  # the producer's stream is current while we import
                    t = PATHS[path](obj)
                for _ in range(hops - 1):
                    t = dlbridge.from_dlpack(t)
                got = CONSUMERS[consumer](t)
        except Unsupported:
            return "-"
        except Exception as e:
            return "ERR: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else "")
        finally:
            sync_all()  # let the spin finish before the next cell
            del keep
        if got != want:
            wrong += 1
    return "OK" if wrong == 0 else ("WRONG" if tries == 1 else "WRONG %d/%d" % (wrong, tries))


DLPACK_CONSUMERS = ("torch-dlpack", "cupy-dlpack", "jax-dlpack", "cuda.core")
CAI_CONSUMERS = ("torch-cai", "cupy-cai", "numba-cai")


def _verdict(results):
    """True when some result is OK, False when none is but some is WRONG,
    None when there is nothing to judge by."""
    if any(r == "OK" for r in results):
        return True
    if any(r.startswith("WRONG") for r in results):
        return False
    return None


class Control:
    """What the direct table (no dlbridge) says about each producer and
    consumer, to tell dlbridge's failures from the others'."""

    def __init__(self, direct):
        self.direct = direct

    def producer_honest(self, p, proto):
        """Whether p orders its write before a consumer's stream through
        proto ("dlpack" or "cai") with nobody in the middle."""
        if p == "dlbridge" or not self.direct:
            return True
        cons = DLPACK_CONSUMERS if proto == "dlpack" else CAI_CONSUMERS
        return _verdict([self.direct.get((p, c), "-") for c in cons]) is not False

    def consumer_honest(self, c):
        """Whether c reads after the stream a producer other than dlbridge
        names. A consumer that reads stale data from a producer of another
        library, which another consumer of the same protocol reads right,
        breaks the protocol itself, whatever it reads from the rest: one
        right read can be a race won by chance (numba -> torch-cai read
        right once on two H200s while torch-cai read stale data from CuPy,
        which cupy-cai and numba-cai read right). Otherwise c is honest when
        it reads right from some producer."""
        if not self.direct:
            return True
        cons = CAI_CONSUMERS if c in CAI_CONSUMERS else DLPACK_CONSUMERS
        for (p, cc), r in self.direct.items():
            if cc != c or p == "dlbridge" or c.split("-")[0] == p or not r.startswith("WRONG"):
                continue
            if any(self.direct.get((p, other), "-") == "OK" for other in cons if other != c):
                return False
        return _verdict([r for (p, cc), r in self.direct.items() if cc == c and p != "dlbridge"]) is not False

    def excused(self, p, proto, c):
        """Whether a WRONG cell p -> dlbridge -> c is explained without dlbridge."""
        if not self.consumer_honest(c) or not self.producer_honest(p, proto):
            return True
        return p != "dlbridge" and self.direct.get((p, c), "-").startswith("WRONG")


def table(title, cells, judge):
    """Print one matrix; return the number of counted WRONG cells. judge(p, c)
    says whether a WRONG cell is excused (printed wrong*, not counted)."""
    print("\n== %s" % title)
    cons = list(CONSUMERS)
    w = 13
    print("%-10s" % "producer" + "".join("%-*s" % (w, c) for c in cons))
    errors, counted = [], 0
    for p in PRODUCERS:
        row = []
        for c in cons:
            r = cells.get((p, c), "-")
            if r.startswith("ERR"):
                errors.append("  %s -> %s: %s" % (p, c, r[5:]))
                r = "ERR"
            elif r.startswith("WRONG"):
                if judge(p, c):
                    r = "wrong*"
                else:
                    counted += 1
            row.append("%-*s" % (w, r))
        print("%-10s" % p + "".join(row))
    for e in errors:
        print(e)
    return counted


def matrix(paths, hops_list, tries, control):
    bad = 0
    for path in paths:
        proto = "cai" if path == "cai" else "dlpack"
        for hops in hops_list:
            cells = {}
            for p in PRODUCERS:
                for c in CONSUMERS:
                    cells[(p, c)] = run_cell(p, path, hops, c, tries)
            chain = "producer -> dlbridge%s -> consumer" % (" -> dlbridge" * (hops - 1))
            bad += table("import path %s, %d hop%s (%s)" % (path, hops, "s" if hops > 1 else "", chain),
                         cells, lambda p, c: control.excused(p, proto, c))
            gc.collect()
    return bad


LEGEND = """
Cells: OK; WRONG (the consumer read stale data; counted); wrong* (WRONG, but explained
without dlbridge: the direct control shows the producer does not order its write for any
consumer of that protocol, or the consumer reads stale data from producers other than
dlbridge, or this very pair fails directly; not counted); ERR (an exception, listed);
- (the pair does not support that path). In the direct table only the dlbridge row counts
(it is dlbridge's own export of a pending Go-side write); the other rows are the control."""


def main():
    ap = argparse.ArgumentParser(description="the chain matrix: producer -> dlbridge -> consumer on other streams")
    ap.add_argument("--tries", type=int, default=1)
    args = ap.parse_args()
    if not dlbridge.cuda_available():
        print("chain_matrix: no CUDA device")
        return 0
    name = torch.cuda.get_device_name(0) if torch is not None else "cuda:0"
    print("chain_matrix: %s; N=%d float32, producer spin ~%d ms; torch %s, cupy %s, numba %s, jax %s, cuda.core %s"
          % (name, N, SPIN_MS, torch.__version__ if torch else "-", cupy.__version__ if cupy else "-",
             "yes" if ncuda else "-", jax.__version__ if jax else "-", "yes" if ccore else "-"))
    print(LEGEND)
    direct = {}
    for p in PRODUCERS:
        for c in CONSUMERS:
            if c != "go":
                direct[(p, c)] = run_cell(p, None, 0, c, args.tries)
    control = Control(direct)
    bad = table("direct (control, no dlbridge): producer -> consumer", direct,
                lambda p, c: p != "dlbridge" or not control.consumer_honest(c))
    bad += matrix(["dlpack", "c-exchange", "cai"], [1, 2], args.tries, control)
    print("\nchain_matrix: %s" % ("every counted cell OK" if not bad else "WRONG cells found (exit status 1)"))
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
