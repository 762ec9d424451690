"""A user's script against the installed dlbridge: `make typecheck` runs
mypy --strict on it and checks the revealed types below."""

import dlbridge

t = dlbridge.arange(6, dtype="float32")
reveal_type(t.to("cpu"))  # R: dlbridge._tensor.Tensor
reveal_type(t.shape)  # R: builtins.tuple[builtins.int, ...]
reveal_type(t[1:, None])  # R: dlbridge._tensor.Tensor
reveal_type(t.sum())  # R: Union[builtins.int, builtins.float, builtins.complex]
reveal_type(dlbridge.from_dlpack(t))  # R: dlbridge._tensor.Tensor

with dlbridge.zeros((2, 3), dtype="int32") as z:
    z.fill_(7).copy_(dlbridge.asarray(bytearray(24)))
    n: int = z.ndim + z.size + z.nbytes + z.data_ptr()
    dev: str = z.device
    for row in z:
        reveal_type(row)  # R: dlbridge._tensor.Tensor
    print(n, dev, z.T.is_contiguous(), z.permute(1, 0).strides, memoryview(z.memoryview()))

p = dlbridge.from_pointer(t.data_ptr(), (6,), "float32", device="cpu", owner=t)
reveal_type(p.clone().cpu().numel())  # R: builtins.int
if dlbridge.cuda_available():
    s = dlbridge.Stream(0, priority=-1)
    e = s.record_event()
    reveal_type(e.elapsed_time(s.record_event(dlbridge.Event(enable_timing=True))))  # R: builtins.float
    dlbridge.synchronize("cuda:0")
