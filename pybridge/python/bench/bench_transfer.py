"""Host <-> GPU and GPU <-> GPU transfers through dlbridge's public API next to
PyTorch and CuPy doing the same, in one process, 4 KiB to 1 GiB of float32.

Each cell is the best of 5 timed batches after three warm-up calls (a batch
is one call, or for calls under 5 ms as many as fill about 5 ms, at most 500;
per-call time = batch time / calls); a call ends when the device is idle again
(cuCtxSynchronize through dlbridge.synchronize, the same for every library).
The batches of a cell run in rounds, one batch of each library a round, so
that all libraries see the machine in the same states (--sequential: each
library's batches back to back). The garbage collector is off while a cell
runs, as timeit has it, so the batches follow each other without a pause.
--pause S sleeps S seconds before each batch instead (the CPUs idle, the
source leaves the cache: a program that transfers now and then). GB/s is bytes moved / time (one way; 1 GB = 1e9 bytes). ratio is
dlbridge's GB/s over the best peer's. Every cell's result is checked
against the source data; a wrong one prints WRONG and the exit status is 1.

The dlbridge cells use only the public API, so they measure whatever engine
the library has:
  h2d       host -> new GPU tensor, pageable NumPy: dlbridge.asarray(a).to("cuda")
            | torch.from_numpy(a).cuda() | cupy.asarray(a)
  h2d-into  host -> existing GPU tensor: dst.copy_(a) | dst.copy_(torch.from_numpy(a)) | dst.set(a)
  d2h       GPU -> new host array: t.to("cpu") | x.cpu() | cupy.asnumpy(c)
  d2h-into  GPU -> existing NumPy array: out.copy_(g) | torch.from_numpy(out).copy_(x) | c.get(out=out)
  d2d       GPU -> existing GPU tensor: dst.copy_(g) | dst.copy_(x) | dst[...] = c
  peer      cuda:0 -> new tensor on cuda:1: t.to("cuda:1") | x.to("cuda:1") | cupy.array(c) on Device(1)
  peer-into cuda:0 -> existing tensor on cuda:1: dst.copy_(g) | dst.copy_(x) | dst.data.copy_from_device

    DLBRIDGE_LIB=build/libdlbridge.so PYTHONPATH=pybridge/python \\
        python3 pybridge/python/bench/bench_transfer.py [--max-mib 1024] [--reps 5] [--pause 0.1] [--sequential]
"""

import argparse
import gc
import platform
import sys
import time

import numpy as np

import dlbridge


def optional(name):
    try:
        return __import__(name)
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

LIBS = ("dlbridge", "torch", "cupy")


def sync():
    for d in range(min(dlbridge.cuda_device_count(), 2)):
        dlbridge.synchronize(d)


def calls_per_batch(fn):
    """Calls in one timed batch of fn, after three warm-up calls (first-use
    costs: kernels, pools, rings): 1 for calls of 5 ms or more; shorter
    calls are batched up to about 5 ms (at most 500), so that the timer and
    one-off stalls do not swamp a 10 us transfer."""
    warm = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        sync()
        warm = min(warm, time.perf_counter() - t0)
    return max(1, min(500, int(5e-3 / max(warm, 1e-6))))


def cell(fns, reps, pause=0.0, interleave=True):
    """{lib: (best seconds per call, last result)} for {lib: fn}: reps timed
    batches of each fn (calls_per_batch calls, each followed by sync()). A
    library whose call raises is left out of the later rounds and gets
    (None, the exception); the others go on.

    interleave (the default) runs the batches in rounds, one batch of every
    library a round, so that each library's best comes from the same stretch
    of time: on the H100 VM the machine's speed changes from one 25 ms
    stretch to the next, and with the libraries one after another a slow
    stretch fell on one of them alone and moved a small cell's ratio by up
    to 1.6x either way (bench/results/transfer-h100 measures both orders).
    interleave=False runs each library's batches back to back.

    The garbage collector runs once before the cell and is off while it
    runs, as timeit does: a collection between batches (about 100 ms with
    torch loaded) left the CPUs idle and the source out of the cache before
    each batch, which made every batch a cold start
    (bench/results/upload-h100). pause > 0 sleeps that long before each
    batch, to measure that case on purpose. Every library gets the same
    rule."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        best = {lib: float("inf") for lib in fns}
        last = {lib: None for lib in fns}
        failed = {}

        def batch(lib, k):
            if lib in failed:
                return
            fn = fns[lib]
            last[lib] = None
            if pause > 0:
                time.sleep(pause)
            try:
                t0 = time.perf_counter()
                for _ in range(k):
                    r = fn()
                    sync()
            except Exception as e:
                failed[lib] = e
                return
            best[lib] = min(best[lib], (time.perf_counter() - t0) / k)
            last[lib] = r

        def per_batch(lib):
            try:
                return calls_per_batch(fns[lib])
            except Exception as e:
                failed[lib] = e
                return 0

        if interleave:
            ks = {lib: per_batch(lib) for lib in fns}
            for _ in range(reps):
                for lib in fns:
                    batch(lib, ks[lib])
        else:
            for lib in fns:
                k = per_batch(lib)
                for _ in range(reps):
                    batch(lib, k)
        return {lib: (None, failed[lib]) if lib in failed else (best[lib], last[lib]) for lib in fns}
    finally:
        if was_enabled:
            gc.enable()


def to_host(r):
    """A GPU result (any library's) as a NumPy array, through a trusted path."""
    if torch is not None:
        return torch.from_dlpack(r).cpu().numpy()
    if cupy is not None:
        return cupy.asnumpy(cupy.from_dlpack(r))
    return np.from_dlpack(dlbridge.from_dlpack(r).to("cpu"))


def same_device(r, ref):
    """Whether GPU result r holds ref's data; compared on the GPU where torch is there."""
    if torch is not None:
        return bool(torch.equal(torch.from_dlpack(r), ref))
    return np.array_equal(to_host(r), ref)


def cases(n, a, devices):
    """{direction: {lib: (fn, check)}} for n float32 elements of source a."""
    out = {}
    nbytes = 4 * n
    ref = [torch.from_numpy(a).to("cuda:%d" % d) for d in devices] if torch is not None else [a] * len(devices)
    host_ok = lambda r: np.array_equal(np.asarray(r), a)  # noqa: E731
    g = dlbridge.asarray(a).to("cuda:0")
    x = torch.from_numpy(a).cuda() if torch is not None else None
    c = cupy.asarray(a) if cupy is not None else None
    sync()

    def add(direction, lib, fn, check):
        out.setdefault(direction, {})[lib] = (fn, check)

    dev_ok = lambda r: same_device(r, ref[0])  # noqa: E731
    add("h2d", "dlbridge", lambda: dlbridge.asarray(a).to("cuda"), dev_ok)
    g_dst = dlbridge.empty(n, "float32", device="cuda:0")
    add("h2d-into", "dlbridge", lambda: g_dst.copy_(a), dev_ok)
    add("d2h", "dlbridge", lambda: g.to("cpu"), lambda r: np.array_equal(np.from_dlpack(r), a))
    out_d = np.zeros_like(a)
    out_dt = dlbridge.asarray(out_d)
    add("d2h-into", "dlbridge", lambda: out_dt.copy_(g), lambda r: np.array_equal(out_d, a))
    g_dd = dlbridge.empty(n, "float32", device="cuda:0")
    add("d2d", "dlbridge", lambda: g_dd.copy_(g), dev_ok)
    if torch is not None:
        add("h2d", "torch", lambda: torch.from_numpy(a).cuda(), dev_ok)
        x_dst = torch.empty(n, device="cuda:0")
        add("h2d-into", "torch", lambda: x_dst.copy_(torch.from_numpy(a)), dev_ok)
        add("d2h", "torch", lambda: x.cpu(), lambda r: np.array_equal(r.numpy(), a))
        out_t = np.zeros_like(a)
        out_tt = torch.from_numpy(out_t)
        add("d2h-into", "torch", lambda: out_tt.copy_(x), lambda r: np.array_equal(out_t, a))
        x_dd = torch.empty(n, device="cuda:0")
        add("d2d", "torch", lambda: x_dd.copy_(x), dev_ok)
    if cupy is not None:
        add("h2d", "cupy", lambda: cupy.asarray(a), dev_ok)
        c_dst = cupy.empty(n, dtype=cupy.float32)
        add("h2d-into", "cupy", lambda: (c_dst.set(a), c_dst)[1], dev_ok)
        add("d2h", "cupy", lambda: cupy.asnumpy(c), host_ok)
        out_c = np.zeros_like(a)
        add("d2h-into", "cupy", lambda: c.get(out=out_c), lambda r: np.array_equal(out_c, a))
        c_dd = cupy.empty(n, dtype=cupy.float32)

        def cupy_d2d():
            c_dd[...] = c
            return c_dd

        add("d2d", "cupy", cupy_d2d, dev_ok)
    if len(devices) > 1:
        def peer_ok(r):
            # With cuda:1 current, torch.from_dlpack asks for a stream of the
            # tensor's own device (it asks for the current device's otherwise).
            if torch is None:
                return same_device(r, ref[1])
            with torch.cuda.device(1):
                return same_device(r, ref[1])

        add("peer", "dlbridge", lambda: g.to("cuda:1"), peer_ok)
        g1 = dlbridge.empty(n, "float32", device="cuda:1")
        add("peer-into", "dlbridge", lambda: g1.copy_(g), peer_ok)
        if torch is not None:
            add("peer", "torch", lambda: x.to("cuda:1"), peer_ok)
            x1 = torch.empty(n, device="cuda:1")
            add("peer-into", "torch", lambda: x1.copy_(x), peer_ok)
        if cupy is not None:
            def cupy_peer():
                with cupy.cuda.Device(1):
                    return cupy.array(c)

            add("peer", "cupy", cupy_peer, peer_ok)
            with cupy.cuda.Device(1):
                c1 = cupy.empty(n, dtype=cupy.float32)

            def cupy_peer_into():
                c1.data.copy_from_device(c.data, nbytes)
                return c1

            add("peer-into", "cupy", cupy_peer_into, peer_ok)
    return out


def human(nbytes):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= k:
            return "%d %s" % (nbytes // k, unit)
    return "%d B" % nbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-mib", type=int, default=1024, help="largest transfer in MiB (default 1024)")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per cell (default 5)")
    ap.add_argument("--min-mib", type=int, default=0, help="smallest transfer in MiB (default: 4 KiB)")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds to sleep before each timed batch: the machine idle before a transfer (default 0)")
    ap.add_argument("--sequential", action="store_true",
                    help="run each library's batches of a cell back to back instead of in interleaved rounds")
    ap.add_argument("--only", default="", help="comma-separated directions to run (e.g. peer,peer-into; default all)")
    args = ap.parse_args()
    only = {d.strip() for d in args.only.split(",") if d.strip()}
    known = ("h2d", "h2d-into", "d2h", "d2h-into", "d2d", "peer", "peer-into")
    if only - set(known):
        ap.error("--only: unknown direction(s) %s (known: %s)" % (", ".join(sorted(only - set(known))), ", ".join(known)))
    if not dlbridge.cuda_available():
        print("bench_transfer: no CUDA device")
        return 0
    ndev = dlbridge.cuda_device_count()
    devices = [0, 1] if ndev > 1 else [0]
    sizes = [4 << 10]
    while sizes[-1] * 4 <= args.max_mib << 20:
        sizes.append(sizes[-1] * 4)
    if sizes[-1] < args.max_mib << 20:
        sizes.append(args.max_mib << 20)
    name = torch.cuda.get_device_name(0) if torch is not None else "cuda:0"
    print("bench_transfer: %s x%d; python %s, numpy %s, torch %s, cupy %s"
          % (name, ndev, platform.python_version(), np.__version__,
             torch.__version__ if torch else "-", cupy.__version__ if cupy else "-"))
    print("GB/s, best of %d (1 GB = 1e9 bytes); ratio = dlbridge / best peer%s"
          % (args.reps, "; %.3f s idle before each batch" % args.pause if args.pause > 0 else ""))
    results = {}  # (direction, size) -> {lib: (gbps, ok)}
    wrong = 0
    sizes = [s for s in sizes if s >= args.min_mib << 20]
    for size in sizes:
        n = size // 4
        a = np.arange(n, dtype=np.float32)
        table = cases(n, a, devices)
        for direction, libs in table.items():
            if only and direction not in only:
                continue
            row = results.setdefault((direction, size), {})
            # A library whose call or check raises is reported here and in
            # the table, and counted as wrong.
            timed = cell({lib: fn for lib, (fn, _) in libs.items()}, args.reps, args.pause, not args.sequential)
            for lib, (t, r) in timed.items():
                try:
                    if t is None:
                        raise r
                    row[lib] = (size / t / 1e9, bool(libs[lib][1](r)), t)
                except Exception as e:
                    row[lib] = (0.0, False, 0.0)
                    print("  %s %s %s: %s: %s" % (direction, human(size), lib, type(e).__name__, e))
            wrong += sum(1 for lib in libs if not row[lib][1])
            timed = r = None
        del table
        gc.collect()
        sync()
        print("  done %s" % human(size), file=sys.stderr)
    directions = []
    for d, _ in results:
        if d not in directions:
            directions.append(d)
    for d in directions:
        print("\n%s" % d)
        print("%10s %10s %10s %10s %8s %10s %10s" % ("size", "dlbridge", "torch", "cupy", "ratio",
                                                  "dlb us", "peer us"))
        for size in sizes:
            row = results.get((d, size))
            if row is None:
                continue
            cells = []
            for lib in LIBS:
                if lib not in row:
                    cells.append("%10s" % "-")
                else:
                    gbps, ok, _ = row[lib]
                    cells.append("%10.2f" % gbps if ok else "%10s" % "WRONG")
            peers = [row[lib][0] for lib in LIBS[1:] if lib in row and row[lib][1]]
            good = peers and row["dlbridge"][1]
            ratio = "%8.2f" % (row["dlbridge"][0] / max(peers)) if good else "%8s" % "-"
            us = "%10.1f %10.1f" % (row["dlbridge"][2] * 1e6, size / max(peers) / 1e3) if good else ""
            print("%10s %s %s %s" % (human(size), " ".join(cells), ratio, us))
    print("\ncells checked: %d wrong" % wrong)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
