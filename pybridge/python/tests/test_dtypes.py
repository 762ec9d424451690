"""DLPack dtypes as the big producers export them: every fp8 type, the
sub-byte floats of DLPack 1.3 (fp6, fp4 packed two to a byte) and PyTorch
2.11's torch.float4_e2m1fn_x2 (code float4_e2m1fn, bits 4, lanes 2: one byte
per element). Hand-built capsules everywhere; PyTorch where it has them."""

import ctypes

import pytest

import dlbridge
from test_capsule import _struct
from test_foreign import Producer

# name: (code, bits, lanes, elements per byte)
DTYPES = {
    "float8_e3m4": (7, 8, 1, 1),
    "float8_e4m3": (8, 8, 1, 1),
    "float8_e4m3b11fnuz": (9, 8, 1, 1),
    "float8_e4m3fn": (10, 8, 1, 1),
    "float8_e4m3fnuz": (11, 8, 1, 1),
    "float8_e5m2": (12, 8, 1, 1),
    "float8_e5m2fnuz": (13, 8, 1, 1),
    "float8_e8m0fnu": (14, 8, 1, 1),
    "float4_e2m1fn": (17, 4, 1, 2),
    "float4_e2m1fn_x2": (17, 4, 2, 1),
}


def _bytes(t, n):
    return ctypes.string_at(t.data_ptr(), n)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_round_trip_of_hand_built_capsules(name):
    code, bits, lanes, per_byte = DTYPES[name]
    raw = list(range(1, 17))
    p = Producer(raw, ctypes.c_uint8)
    n = len(raw) * per_byte
    t = dlbridge.from_dlpack(p.capsule([2, n // 2], [n // 2, 1], code=code, bits=bits, lanes=lanes))
    assert t.dtype == name and t.shape == (2, n // 2)
    assert t.data_ptr() == ctypes.addressof(p.buf)
    cap = t.__dlpack__(max_version=(1, 3))
    m = _struct(cap)
    assert (m.dl_tensor.code, m.dl_tensor.bits, m.dl_tensor.lanes) == (code, bits, lanes)
    back = dlbridge.from_dlpack(cap)
    assert back.dtype == name and back.data_ptr() == t.data_ptr()
    c = t.clone()  # a copy of the bytes
    assert c.dtype == name and c.data_ptr() != t.data_ptr() and _bytes(c, len(raw)) == bytes(raw)
    assert dlbridge.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True)).dtype == name
    for x in (back, t, c):
        x.close()
    assert p.calls == 1


def test_vector_lanes_are_still_refused():
    p = Producer([0.0] * 4)
    with pytest.raises(BufferError, match="lanes"):
        dlbridge.from_dlpack(p.capsule([4], [1], code=2, bits=32, lanes=2))
    assert p.calls == 1


def _torch_dtypes():
    torch = pytest.importorskip("torch")
    have = [n for n in DTYPES if isinstance(getattr(torch, n, None), torch.dtype)]
    if not have:
        pytest.skip("torch %s has no fp8 or fp4 dtypes" % torch.__version__)
    return torch, have


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_round_trip(device):
    torch, have = _torch_dtypes()
    if device == "cuda" and not (torch.cuda.is_available() and dlbridge.cuda_available()):
        pytest.skip("no CUDA device")
    for name in have:
        dt = getattr(torch, name)
        raw = torch.arange(1, 17, dtype=torch.uint8, device=device).reshape(2, 8)
        x = raw.view(dt)
        try:
            t = dlbridge.from_dlpack(x)
        except (BufferError, RuntimeError) as e:
            if "lanes" in str(e) or "dtype" in str(e):
                raise
            pytest.skip("torch %s cannot export %s through DLPack: %s" % (torch.__version__, name, e))
        assert t.dtype == name and t.data_ptr() == x.data_ptr() and t.shape == tuple(x.shape)
        y = torch.from_dlpack(t)
        assert y.dtype == dt and y.data_ptr() == x.data_ptr()
        assert torch.equal(y.view(torch.uint8), raw)
        z = torch.from_dlpack(t.clone())
        assert z.dtype == dt and torch.equal(z.view(torch.uint8), raw)
