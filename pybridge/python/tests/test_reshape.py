"""Tensor.reshape and Tensor.contiguous against numpy.reshape (values, shape,
and whether the result shares memory: NumPy and PyTorch take a view under
the same rule) and torch.reshape (strides too, where torch is installed), on
CPU tensors and on CUDA tensors (the fake driver of `make pytest-fakecuda`,
or a GPU)."""

import gc

import pytest

import dlbridge

np = pytest.importorskip("numpy")

# How a case derives the tensor it reshapes from a C-contiguous arange of
# its base shape: the same expression works on a NumPy array, a dlbridge
# Tensor and a torch tensor.
DERIVE = {
    "contig": lambda a: a,
    "T": lambda a: a.T,
    "permute": lambda a: a.transpose(1, 2, 0) if isinstance(a, np.ndarray) else a.permute(1, 2, 0),
    "cols": lambda a: a[:, :3],
    "rows2": lambda a: a[::2],
    "row": lambda a: a[1:2],
    "element": lambda a: a[1:2, 2:3],
}

# (base shape, derivation, new shape): views and copies alike.
CASES = [
    ((2, 3, 4), "contig", (6, 4)),
    ((2, 3, 4), "contig", (-1,)),
    ((2, 3, 4), "contig", (4, -1, 2)),
    ((2, 3), "contig", (1, 2, 1, 3, 1)),
    ((2, 3), "T", (3, 2)),
    ((2, 3), "T", (6,)),  # copy
    ((2, 3), "T", (-1, 3)),  # copy
    ((2, 3), "T", (3, 2, 1)),
    ((2, 3, 4), "permute", (12, 2)),
    ((2, 3, 4), "permute", (3, 8)),  # copy
    ((4, 6), "cols", (2, 2, 3)),
    ((4, 6), "cols", (12,)),  # copy
    ((4, 6), "rows2", (2, 2, 3)),
    ((4, 6), "rows2", (-1,)),  # copy
    ((3, 3), "row", (1, -1)),
    ((3, 3), "element", ()),
    ((0, 3), "contig", (3, 0)),
    ((0, 3), "contig", (-1,)),
    ((0, 3), "contig", (-1, 3, 1)),
    ((0, 3), "T", (3, 0)),
    ((0, 3), "T", (0, 3)),
    ((), "contig", (1, 1)),
    ((), "contig", (-1,)),
    ((1, 1), "contig", ()),
]


def _ids(case):
    base, how, to = case
    return "%s-%s-%s" % ("x".join(map(str, base)) or "0d", how, "x".join(map(str, to)) or "0d")


def _reshape(t, to):
    """t.reshape(*to); a 0-d shape as the empty tuple (reshape() with no
    argument is a TypeError, as in NumPy and PyTorch)."""
    return t.reshape(*to) if to else t.reshape(to)


def _numel(shape):
    n = 1
    for e in shape:
        n *= e
    return n


def _numpy_source(base):
    return np.arange(_numel(base), dtype=np.float32).reshape(base)


def _tensor_source(base, device):
    return dlbridge.arange(_numel(base), dtype="float32", device=device).reshape(base)


def _host(t):
    """t's elements as a new NumPy array (from a CUDA tensor through to("cpu"))."""
    return np.array(np.from_dlpack(t.to("cpu")), copy=True)


def _is_view(r, t):
    """Whether r shares t's memory: writing r changes t. A write is the test
    (not an address), so that it holds for 0-size and 0-d tensors too."""
    if r.size == 0:
        return r.data_ptr() == t.data_ptr()
    before = _host(t)
    r.fill_(-1)
    changed = not np.array_equal(_host(t), before)
    return changed


DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_reshape_matches_numpy(case, device):
    base, how, to = case
    a = DERIVE[how](_numpy_source(base))
    want = np.reshape(a, to)
    want_view = want.size == 0 or np.shares_memory(want, a)
    t = DERIVE[how](_tensor_source(base, device))
    r = _reshape(t, to)
    assert r.shape == want.shape
    assert r.dtype == "float32" and r.device == t.device
    assert np.array_equal(_host(r), want)
    if not want_view:
        assert r.is_contiguous(), "a copy is C-contiguous, as torch's"
    assert _is_view(r, t) == want_view
    # The same shape as one tuple or list.
    assert t.reshape(to).shape == want.shape and t.reshape(list(to)).shape == want.shape


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_reshape_matches_torch(case):
    """Strides and view-or-copy as torch.reshape, over the same memory
    (dlbridge.from_dlpack of the torch tensor)."""
    torch = pytest.importorskip("torch")
    base, how, to = case
    x = DERIVE[how](torch.arange(_numel(base), dtype=torch.float32).reshape(base))
    want = x.reshape(to)
    t = dlbridge.from_dlpack(x)
    r = _reshape(t, to)
    assert r.shape == tuple(want.shape)
    if want.numel() > 1:  # strides of one element or none are any
        assert r.strides == want.stride()
    assert (r.data_ptr() == t.data_ptr()) == (want.data_ptr() == x.data_ptr())
    assert torch.equal(torch.from_dlpack(r), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("to, exc, words", [
    ((4, 2), ValueError, ["[4, 2] has 8 elements", "has 6"]),
    ((-1, 4), ValueError, ["[-1, 4] is invalid for 6 elements"]),
    ((-1, -1), ValueError, ["[-1, -1] for 6 elements", "both -1"]),
    ((-2, 3), ValueError, ["[-2, 3] for 6 elements", "extent -2"]),
    ((2**62, 4, 0, 2), ValueError, ["[4611686018427387904, 4, 0, 2] for 6 elements overflows int64"]),
    ((1,) * 65, ValueError, ["65", "at most 64"]),
    ((2, 3.0), TypeError, ["shape[1]"]),
    ((2**63, 1), ValueError, ["shape[0]"]),
])
def test_reshape_errors(device, to, exc, words):
    """A bad shape raises with the shape and the element count in the
    message, from a view and from a layout that would need a copy alike."""
    for t in (_tensor_source((2, 3), device), _tensor_source((2, 3), device).T):
        with pytest.raises(exc) as e:
            t.reshape(*to)
        for w in words:
            assert w in str(e.value)


def test_reshape_refuses_what_is_not_a_shape():
    t = dlbridge.zeros((2, 3))
    with pytest.raises(TypeError, match="needs a shape"):
        t.reshape()
    with pytest.raises(TypeError, match="not a tuple of integers"):
        t.reshape("6")
    with pytest.raises(TypeError):
        t.reshape(6.0)
    with pytest.raises(TypeError):
        t.reshape(True, 6)
    t.close()
    with pytest.raises(ValueError):
        t.reshape(6)


def test_reshape_keeps_readonly_views_and_the_dtype():
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    a.flags.writeable = False
    t = dlbridge.asarray(a)
    v = t.reshape(3, 2)
    assert v.readonly and v.dtype == "int16"
    c = t.T.reshape(-1)  # a copy is memory of its own: writable
    assert not c.readonly and c.dtype == "int16" and c.tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("base, how", [((2, 3), "contig"), ((2, 3), "T"), ((4, 6), "cols"), ((4, 6), "rows2"),
                                       ((0, 3), "T"), ((), "contig"), ((3, 3), "row")])
def test_contiguous(device, base, how):
    a = DERIVE[how](_numpy_source(base))
    t = DERIVE[how](_tensor_source(base, device))
    c = t.contiguous()
    assert c.shape == a.shape and c.dtype == "float32" and c.device == t.device
    assert np.array_equal(_host(c), a)
    if t.is_contiguous():
        assert c is t
    else:
        assert c is not t and c.is_contiguous() and not _is_view(c, t)
        assert c.strides == tuple(np.ascontiguousarray(a).strides[i] // 4 for i in range(a.ndim))


def test_contiguous_of_a_closed_tensor_raises():
    t = dlbridge.zeros((2, 3))
    t.close()
    with pytest.raises(ValueError):
        t.contiguous()


@pytest.mark.gpu
def test_reshape_copy_waits_for_a_pending_write():
    """The copy of a reshape reads a tensor whose write is still queued on
    another stream: the engine orders the copy after it (on the fake driver
    an unordered read sees the zeros from before the write)."""
    s = dlbridge.Stream(0)
    x = dlbridge.zeros((4, 6), device="cuda:0")
    src = np.arange(24, dtype=np.float32).reshape(4, 6)
    x.copy_(dlbridge.asarray(src).to("cuda:0"), stream=s, non_blocking=True)
    r = x.T.reshape(-1)
    assert np.array_equal(_host(r), src.T.reshape(-1))
    c = x[:, :3].contiguous()
    assert np.array_equal(_host(c), src[:, :3])


@pytest.mark.gpu
def test_reshape_copy_outlives_its_source():
    """A reshape's copy still queued when its source is freed: the freed
    memory may serve the next allocation on the same stream at once (as the
    driver's stream-ordered pools do), and the queued copy still reads the
    source's elements, before the new owner's work (a smaller allocation,
    of the same rounded size)."""
    t = dlbridge.arange(24, dtype="float32", device="cuda:0").reshape(4, 6)
    r = t.T.reshape(-1)
    del t
    gc.collect()
    x = dlbridge.arange(9, dtype="float32", device="cuda:0")
    assert np.array_equal(_host(r), np.arange(24, dtype=np.float32).reshape(4, 6).T.reshape(-1))
    assert np.array_equal(_host(x), np.arange(9, dtype=np.float32))
