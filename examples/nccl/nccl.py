"""The Python rank beside examples/nccl's Go program: it joins the same
communicator from the environment, as torchrun starts ranks, and exchanges
the same tensors: an all-reduce every rank checks, then a ring of sends and
receives. A Go rank and a Python rank on one machine with two GPUs:

    go build -o /tmp/ncclex ./examples/nccl
    export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2
    RANK=0 LOCAL_RANK=0 /tmp/ncclex & RANK=1 LOCAL_RANK=1 python3 examples/nccl/nccl.py; wait

Tensors are PyTorch's (on torch's current stream: nothing waits on the
host until .tolist() reads them). Without a GPU (DLBRIDGE_LIBCUDA and
DLBRIDGE_LIBNCCL at the fakes, as the tests run it) they are dlbridge
tensors made from NumPy arrays.
"""

import dlbridge.nccl as nccl


def tensors(dev):
    """(make(values), read(tensor)) on CUDA device dev."""
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.set_device(dev)
            return (lambda xs: torch.tensor(xs, dtype=torch.float32, device="cuda"),
                    lambda t: t.tolist())
    except ImportError:
        pass
    import numpy
    import dlbridge
    return (lambda xs: dlbridge.asarray(numpy.array(xs, dtype=numpy.float32)).to("cuda:%d" % dev),
            lambda t: t.to("cpu").tolist())


def main():
    world = nccl.from_env()
    c = world.comm
    r, n = c.rank, c.size
    make, read = tensors(c.device)

    # Every rank contributes rank+1; the sum is n(n+1)/2 everywhere.
    x = make([r + 1, r + 1])
    c.all_reduce(x)  # queued on the current stream, nothing waits
    print("rank %d: all_reduce sum %s (want %d)" % (r, read(x), n * (n + 1) // 2), flush=True)

    # A ring: send to the next rank, receive from the previous one.
    out, into = make([100 * r, 100 * r + 1]), make([0, 0])
    with c.group() as g:
        g.send(out, (r + 1) % n)
        g.recv(into, (r - 1) % n)
    print("rank %d: received %s from rank %d" % (r, read(into), (r - 1) % n), flush=True)
    c.finalize()
    world.close()


if __name__ == "__main__":
    main()
