"""The consumer process of test_ipc.py: connects to a dlbridge.ipc producer
(the Go program internal/ipcproducer, or a Python one) and checks, holds or
times what it receives. Run as: python ipc_consumer.py MODE SOCKET N.

check  receive N tensors; tensor i must hold i+1 everywhere; close each.
hold   receive N tensors, check them, keep every tenth and close the
       others; print "holding K" and wait to be killed.
early  like check, but first read each tensor's memory directly through the
       driver, without waiting for the producer, and print how many reads
       saw the data already ("early K"): the control that shows a slow
       producer is slow.
torch  like check, through torch.from_dlpack on a torch stream of its own.
cupy   like check, through cupy.from_dlpack on a CuPy stream of its own.
wait   receive N tensors and check them, keeping them all; print "holding N",
       wait for a line on stdin, check them again (their memory must not
       have been freed or reused meanwhile), close them, print "ok N".
slow   receive N tensors; queue a copy of each on the tensor's own stream
       (left in flight), close it at once (the lease goes back), and read
       the copies only once the producer is gone: "read V0 V1 ..." (each
       copy's value, or the first element that differs). With the fake's
       FAKECUDA_IPC_DELAY_MS the copies run late, after the producer
       allocated again: they read right only if its frees wait for this
       process's "done" events.
give   like hold, but instead of waiting to be killed wait for a line on
       stdin (the producer closed), then print "recv EOF" if recv raises
       EOFError, check the kept tensors again ("wrong later I" if their
       memory changed), close them and print "released K".
recycle
       receive N tensors, check them (tensor i holds i+1) and close each;
       print "imports I M" (allocations mapped so far, kept mapped now);
       then print "mapped M" for each line on stdin (the producer trimmed).
time   hand-overs of one tensor (internal/ipcproducer -bytes): receive N,
       time each recv (socket to ready view), print "handover BYTES MEDIAN_NS".
"""

import ctypes
import os
import sys
import time

import numpy

import dlbridge
import dlbridge.ipc


def values(t):
    return numpy.from_dlpack(t.to("cpu"))


def raw_first_word(t):
    lib = ctypes.CDLL(os.environ.get("DLBRIDGE_LIBCUDA") or "libcuda.so.1")
    ctx = ctypes.c_void_p()
    lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
    lib.cuCtxSetCurrent(ctx)
    w = ctypes.c_uint32()
    rc = lib.cuMemcpyDtoH_v2(ctypes.byref(w), ctypes.c_uint64(t.data_ptr()), ctypes.c_size_t(4))
    if rc:
        raise RuntimeError("cuMemcpyDtoH_v2: %d" % rc)
    return w.value


def main():
    mode, sock, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = dlbridge.ipc.connect(sock)
    if mode == "time":
        times = []
        nbytes = 0
        for _ in range(n):
            t0 = time.perf_counter_ns()
            t = conn.recv()
            times.append(time.perf_counter_ns() - t0)
            nbytes = t.nbytes
            t.close()
        times.sort()
        print("handover", nbytes, times[len(times) // 2], flush=True)
        return
    if mode == "recycle":
        for i in range(n):
            t = conn.recv()
            if not (values(t) == i + 1).all():
                print("wrong", i, flush=True)
                sys.exit(1)
            t.close()
        print("imports", conn.imports, conn.mapped, flush=True)
        for _ in sys.stdin:
            print("mapped", conn.mapped, flush=True)
        conn.close()
        return
    if mode == "wait":
        got = [conn.recv() for _ in range(n)]
        for i, t in enumerate(got):
            if not (values(t) == i + 1).all():
                print("wrong", i, flush=True)
                sys.exit(1)
        print("holding", n, flush=True)
        sys.stdin.readline()
        for i, t in enumerate(got):
            if not (values(t) == i + 1).all():
                print("wrong later", i, values(t).ravel()[0], flush=True)
                sys.exit(1)
            t.close()
        print("ok", n, flush=True)
        conn.close()
        return
    if mode == "slow":
        copies = []
        for _ in range(n):
            t = conn.recv()
            d = dlbridge.empty(t.shape, t.dtype, t.device)
            d.copy_(t, non_blocking=True, stream=t._stream)
            t.close()
            copies.append(d)
        try:
            conn.recv()
        except EOFError:
            pass
        got = []
        for d in copies:
            v = values(d).ravel()
            bad = v[v != v[0]]
            got.append(int(bad[0] if len(bad) else v[0]))
        print("read", " ".join(map(str, got)), flush=True)
        conn.close()
        return
    held, early = [], 0
    stream = None
    if mode == "torch":
        import torch

        stream = torch.cuda.Stream()
    elif mode == "cupy":
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)
    for i in range(n):
        try:
            t = conn.recv()
        except EOFError:
            break
        if mode == "early" and raw_first_word(t) == i + 1:
            early += 1
        if mode == "torch":
            import torch

            with torch.cuda.stream(stream):
                x = torch.from_dlpack(t)
                ok = bool((x == i + 1).all().item())
            del x
        elif mode == "cupy":
            import cupy

            with stream:
                x = cupy.from_dlpack(t)
                ok = bool((x == i + 1).all())
            del x
        else:
            v = values(t)
            ok = bool((v == i + 1).all())
        if not ok:
            print("wrong", i, flush=True)
            sys.exit(1)
        if mode in ("hold", "give") and i % 10 == 0:
            held.append(t)
        else:
            t.close()
    if mode in ("hold", "give"):
        print("holding", len(held), flush=True)
        if mode == "hold":
            time.sleep(3600)
        sys.stdin.readline()
        try:
            conn.recv()
            print("recv a tensor", flush=True)
        except EOFError:
            print("recv EOF", flush=True)
        for k, t in enumerate(held):
            if not (values(t) == 10 * k + 1).all():
                print("wrong later", 10 * k, flush=True)
                sys.exit(1)
            t.close()
        print("released", len(held), flush=True)
        conn.close()
        return
    if mode == "early":
        print("early", early, flush=True)
    print("ok", n, flush=True)
    conn.close()


if __name__ == "__main__":
    main()
