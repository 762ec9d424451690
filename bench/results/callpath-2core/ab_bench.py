"""The call-path A/B of this record: one process per build, the cells of
bench_gofunc.py's exchange peers (noop2, noop9, nothing against tvm-ffi), N calls
per round, the best of ROUNDS interleaved rounds."""
import os, sys, time, gc
# fakeproducer: a C exchange API producer module in $XPRODUCER, EXCHANGE_SRC of bench_gofunc.py
# but for its managed export (tvm-ffi's way in), which holds no reference on the object; tvm-ffi
# from scripts/build-peers.sh's folder, $DLBRIDGE_BENCH_PEERS.
sys.path.insert(0, os.environ["XPRODUCER"])
import dlbridge, fakeproducer
P = os.environ["DLBRIDGE_BENCH_PEERS"]
sys.path.insert(0, P)
import tvm_ffi
t = tvm_ffi.load_module(os.path.join(P, "tvmffi_peers.so"))
ops = dlbridge.ops
side = dlbridge.Stream(device=0)
fakeproducer.set_stream(side.cuda_stream)
backing = [dlbridge.zeros(1024, device="cuda:0") for _ in range(9)]
xs = [fakeproducer.Tensor(b.data_ptr(), 1024) for b in backing]
x, y = xs[0], xs[1]
d2, d9, dn = ops.pytest.noop2, ops.pytest.noop9, ops.pytest.nothing
t2, t9, tn = t.noop2, t.noop9, t.nothing
assert ops.pytest.stream_of(x)[0] == side.cuda_stream
cases = [("noop2", {"dlbridge": lambda: d2(x, y), "tvm-ffi": lambda: t2(x, y)}),
         ("noop9", {"dlbridge": lambda: d9(*xs), "tvm-ffi": lambda: t9(*xs)}),
         ("nothing", {"dlbridge": lambda: dn(), "tvm-ffi": lambda: tn()})]
gc.disable()
N = int(os.environ.get("N", "50000"))
for name, cells in cases:
    best = {k: 1e9 for k in cells}
    for _ in range(int(os.environ.get("ROUNDS", "7"))):
        for k, f in cells.items():
            t0 = time.perf_counter()
            for _ in range(N):
                f()
            best[k] = min(best[k], (time.perf_counter() - t0) / N)
    print("%-8s dlbridge %7.1f ns  tvm-ffi %7.1f ns  ratio %.2fx" % (name, best["dlbridge"] * 1e9, best["tvm-ffi"] * 1e9, best["dlbridge"] / best["tvm-ffi"]))
