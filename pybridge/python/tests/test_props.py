"""Property tests at the Python border, with Hypothesis.

Every draw is an input a producer or a caller could hand us, valid or not:
interface dicts, DLPack capsules built through ctypes, shapes, dims, index
keys, __dlpack__ arguments and devices. The invariant for each one:
either a tensor equal to what NumPy makes of the same input, or a clear
exception of the right class (TypeError for a value of the wrong type,
ValueError for an integer out of its C range, else BufferError, ValueError
or IndexError as NumPy would, with a message from dlbridge's own layers);
producer deleters exactly once; reference counts of the producer and the
live-tensor counter back where they were.

Integers are classified by the test's own model of the rule: operator.index
semantics with bools refused, then the range of the C type.

Profiles (DLBRIDGE_HYPOTHESIS_PROFILE): "ci" (the default; a fixed,
derandomized budget for CI) and "long" (make fuzz-long-py).
"""

import gc
import operator
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

import dlbridge

from _hostile import CapsuleFactory, Iface, Producer, balanced, error_of

# Hypothesis caches a little (its Unicode tables): in the ignored build/
# directory of the checkout, not in whatever directory pytest runs from.
if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    set_hypothesis_home_dir(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         os.pardir, os.pardir, os.pardir, "build", "hypothesis"))

_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=200, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("DLBRIDGE_HYPOTHESIS_PROFILE", "ci"))

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
SIZE = (0, 2**63 - 1)

# Where our own layers' messages start: anything else is a stray error.
OURS = ("dlbridge:", "cai:", "zerocopy:", "dlpack:")


@pytest.fixture(autouse=True, scope="module")
def _no_auto_gc():
    """One full collection, then none while this module runs: reference
    counts and counters move only through each example's own objects."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


# ---- the model of an integer crossing the border ----

def classify(value, lo, hi):
    """("ok", int) | ("type", None) | ("range", int) for value as an
    integer of the C range lo..hi."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return "type", None
    if getattr(value, "ndim", 0):
        return "type", None
    try:
        v = operator.index(value)
    except TypeError:
        return "type", None
    return ("ok", v) if lo <= v <= hi else ("range", v)


EXC = {"type": TypeError, "range": ValueError}


def assert_clear(exc, msg, allowed):
    """A clear error: a class the input calls for and our own message."""
    assert exc in allowed, (exc, msg, allowed)
    assert msg.startswith(OURS), msg


# ---- strategies ----

EDGES = [2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 2, -(2**63), -(2**63) - 1, 2**31, 2**32, -1, -(2**31) - 1]
huge = st.one_of(st.integers(2**63, 2**70), st.integers(-(2**70), -1), st.sampled_from(EDGES))
not_int = st.one_of(
    st.booleans(), st.floats(), st.text("0123456789 +-_.xé", max_size=3), st.none(), st.binary(max_size=2),
    st.sampled_from([np.float64(2.0), np.float32(1.0), np.bool_(True), np.bool_(False), 1 + 0j, [1], (2,)]),
)


def huge_out(lo, hi):
    """Integers far from zero that lie outside lo..hi."""
    return huge.filter(lambda x: not lo <= x <= hi)


def np_int(lo, hi):
    types = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
    return st.tuples(st.integers(lo, hi), st.sampled_from(types)).filter(
        lambda p: np.iinfo(p[1]).min <= p[0] <= np.iinfo(p[1]).max).map(lambda p: p[1](p[0]))


def small(lo, hi):
    """Valid small integers, as int or as a NumPy integer scalar."""
    return st.one_of(st.integers(lo, hi), np_int(lo, hi))


# ---- shapes given to empty / zeros ----

# Never a valid size above 4: Go would allocate it. The last shapes are valid
# sizes whose element count overflows int64 (Go refuses them).
size = st.one_of(small(0, 4), huge_out(*SIZE), not_int)
shape_args = st.one_of(
    size,
    st.lists(size, max_size=4),
    st.lists(size, max_size=4).map(tuple),
    st.lists(small(0, 3), max_size=4).map(np.array),
    st.sampled_from([(1,) * 65, (2**62, 4), (2**32, 2**32, 2**32), [2**63 - 1, 2]]),
)


def shape_model(shape):
    """("ok", dims) or (exception class, None) under the border's rules."""
    if isinstance(shape, (str, bytes)):
        return TypeError, None
    kind, v = classify(shape, *SIZE)
    if kind != "type":
        return ("ok", (v,)) if kind == "ok" else (ValueError, None)
    if not hasattr(shape, "__len__"):
        return TypeError, None
    if len(shape) > 64:
        return ValueError, None
    dims = []
    for e in shape:
        kind, v = classify(e, *SIZE)
        if kind != "ok":
            return EXC[kind], None
        dims.append(v)
    if 0 not in dims and np.prod([float(e) for e in dims]) >= 2**63:
        return ValueError, None  # the element count overflows int64
    return "ok", tuple(dims)


@given(shape=shape_args, zero=st.booleans(), dtype=st.sampled_from(["float32", "int8", "complex128", "bool"]))
def test_shapes(shape, zero, dtype):
    make = dlbridge.zeros if zero else dlbridge.empty
    want, dims = shape_model(shape)
    with balanced():
        exc, t = error_of(make, shape, dtype=dtype)
        if want == "ok":
            assert exc is None, t
            assert t.shape == dims and np.asarray(t).shape == np.empty(dims).shape
            if zero:
                assert np.array_equal(np.asarray(t), np.zeros(dims, dtype=dtype))
            t.close()
        else:
            assert_clear(exc, t, {want})
        del t


@given(n=st.one_of(small(0, 6), st.integers(-(2**63), -1), huge_out(*INT64), not_int))
def test_arange(n):
    kind, v = classify(n, *INT64)
    with balanced():
        exc, t = error_of(dlbridge.arange, n)
        if kind == "ok" and v >= 0:
            assert exc is None and np.asarray(t).tolist() == list(range(v))
            t.close()
        else:
            assert_clear(exc, t, {EXC.get(kind, ValueError)})
        del t


# ---- __array_interface__ / __cuda_array_interface__ dicts ----

DTYPES = ["<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1", "<f2", "<c8", "<c16"]


@st.composite
def views(draw):
    """A NumPy view with an arbitrary layout (offsets, negative and zero-size
    strides, a transposition) over a backing array it keeps alive."""
    dtype = draw(st.sampled_from(DTYPES))
    base_shape = tuple(draw(st.lists(st.integers(1, 4), max_size=3)))
    n = int(np.prod(base_shape, dtype=np.int64))
    base = (np.arange(n) % 97).astype(dtype).reshape(base_shape)
    index = tuple(slice(draw(st.integers(0, e)), draw(st.integers(0, e)), draw(st.sampled_from([1, 2, -1, -2])))
                  for e in base_shape)
    v = (base[index] if index else base[...]).transpose(draw(st.permutations(range(len(base_shape)))))
    return base, v


def _mutations(kind, d, ptr):
    """Strategies of (field, new value or DELETE, tag): tag "ok" keeps the
    same memory description, "type"/"range" must be refused by the integer
    rule, "refuse" must be refused by the interface's own rules, "any" is a
    different, perhaps valid, description."""
    nd = len(d["shape"])
    itemsize = np.dtype(d["typestr"]).itemsize
    m = [
        st.tuples(st.just("shape"), st.just(list(d["shape"])), st.just("ok")),
        st.tuples(st.just("descr"), not_int, st.just("ok")),
        st.tuples(st.just("version"), st.sampled_from([3, np.int64(3), np.uint8(3)]), st.just("ok")),
        st.tuples(st.just("version"), not_int, st.just("type")),
        st.tuples(st.just("version"), huge_out(*INT32), st.just("range")),
        st.tuples(st.just("version"), st.sampled_from([0, 1, 4, 2**31 - 1]), st.just("refuse")),
        st.tuples(st.just("typestr"), st.just(d["typestr"].encode()), st.just("ok")),
        st.tuples(st.just("typestr"), st.sampled_from([">f4", ">i8", "", "x", "<f3", "|V4", "<f4\0", "<U4", 5, None]),
                  st.just("refuse")),
        st.tuples(st.just("typestr"), st.sampled_from(DTYPES), st.just("any")),
        st.tuples(st.just("mask"), st.sampled_from([1, "m", object()]), st.just("refuse")),
        st.tuples(st.just("data"), st.tuples(st.integers(0, 2**20).map(lambda k: ptr + 2**64 + k), st.booleans()),
                  st.just("range")),
        st.tuples(st.just("data"), st.tuples(st.integers(-(2**70), -1), st.booleans()), st.just("range")),
        st.tuples(st.just("data"), st.tuples(not_int.filter(lambda x: x is not None), st.booleans()), st.just("type")),
        st.tuples(st.just("data"), st.tuples(st.sampled_from([np.uint64, np.int64]).map(lambda t: t(ptr)),
                                             st.sampled_from([False, 0, np.bool_(False)])), st.just("ok")),
        st.tuples(st.just("data"), st.sampled_from([(ptr,), (ptr, False, 0), (), 5, "p"]), st.just("refuse")),
        st.tuples(st.just("DELETE"), st.sampled_from(["shape", "typestr"]), st.just("refuse")),
    ]
    if nd:
        i = st.integers(0, nd - 1)
        m += [
            st.tuples(st.just("shape"), st.tuples(i, huge_out(*SIZE)), st.just("range")),
            st.tuples(st.just("shape"), st.tuples(i, not_int), st.just("type")),
            st.tuples(st.just("shape"), st.tuples(i, st.integers(0, 4)), st.just("any")),
            st.tuples(st.just("strides"), st.tuples(i, huge_out(*INT64)), st.just("range")),
            st.tuples(st.just("strides"), st.tuples(i, not_int), st.just("type")),
            st.tuples(st.just("strides"), st.tuples(i, st.integers(-4, 4).map(lambda k: k * itemsize)), st.just("any")),
            st.tuples(st.just("strides"), st.just((0,) * (nd + 1)), st.just("refuse")),
        ]
    m.append(st.tuples(st.just("shape"), st.sampled_from([4, "4", None, {"a": 1}, (1,) * 65]), st.just("refuse")))
    if kind == 0:
        m += [
            st.tuples(st.just("stream"), st.sampled_from([None, 1, 2, np.int64(2)]), st.just("ok")),
            st.tuples(st.just("stream"), st.just(0), st.just("refuse")),
            st.tuples(st.just("stream"), huge_out(*UINT64), st.just("range")),
            st.tuples(st.just("stream"), not_int.filter(lambda x: x is not None), st.just("type")),
            st.tuples(st.just("data"), st.just(None), st.just("refuse")),
        ]
    else:
        m += [
            st.tuples(st.just("offset"), st.one_of(not_int, huge), st.just("ok")),  # ignored beside a pointer
            st.tuples(st.just("data"), st.just(None), st.just("type")),  # an Iface has no buffer
        ]
    return st.one_of(m)


def _apply(d, field, value, tag, full_strides):
    """d with one edit: a key deleted, one item of shape/strides replaced
    (value is (index, item)) or a field set."""
    d = dict(d)
    if field == "DELETE":
        del d[value]
    elif field in ("shape", "strides") and tag in ("range", "type", "any"):
        i, e = value
        items = list(d.get(field) or full_strides)
        items[i] = e
        d[field] = tuple(items)
    else:
        d[field] = value
    return d


def _norm(d):
    """d with NumPy scalars as ints and lists as tuples, for NumPy's view."""
    n = dict(d)
    for k in ("shape", "strides"):
        if isinstance(n.get(k), (list, tuple)):
            n[k] = tuple(int(e) for e in n[k])
    p, ro = n["data"]
    n["data"] = (int(p), bool(ro))
    n["version"] = 3
    n.pop("descr", None)  # NumPy would read a stale descr before typestr
    if isinstance(n["typestr"], bytes):
        n["typestr"] = n["typestr"].decode()
    return n


def _layout(n):
    """(shape, byte strides) of the normalized dict n."""
    itemsize = np.dtype(n["typestr"]).itemsize
    shape, strides = n["shape"], n.get("strides")
    if strides is None:
        strides, acc = [], itemsize
        for e in reversed(shape):
            strides.insert(0, acc)
            acc *= e
    return shape, tuple(strides)


def _within(n, lo, hi):
    """Whether the layout of the normalized dict n lies in [lo, hi)."""
    itemsize = np.dtype(n["typestr"]).itemsize
    shape, strides = _layout(n)
    if 0 in shape:
        return True
    a = b = n["data"][0]
    for e, s in zip(shape, strides):
        a, b = (a + (e - 1) * s, b) if s < 0 else (a, b + (e - 1) * s)
    return lo <= a and b + itemsize <= hi


@st.composite
def interfaces(draw):
    kind = draw(st.sampled_from([0, 1]))
    base, v = draw(views())
    d = dict(v.__array_interface__, version=3)
    if d["strides"] is None:  # C-contiguous: no strides, None, or NumPy's explicitly
        d["strides"] = draw(st.sampled_from([None, v.strides, "drop"]))
        if d["strides"] == "drop":
            del d["strides"]
    # At most one edit per field, so that no edit undoes another.
    edits = draw(st.lists(_mutations(kind, dict(d, strides=v.strides), d["data"][0]), max_size=2,
                          unique_by=lambda e: e[1] if e[0] == "DELETE" else e[0]))
    for field, value, tag in edits:
        d = _apply(d, field, value, tag, v.strides)
    return kind, base, v, d, [(field, tag) for field, _, tag in edits]


@given(case=interfaces())
def test_interfaces(case):
    kind, base, v, d, tags = case
    note("kind=%d dict=%r tags=%r" % (kind, d, tags))
    obj = Iface(d, kind)
    obj.keep = base
    must = {t for _, t in tags if t in ("type", "range", "refuse")}
    other = any(t == "any" for _, t in tags)
    with balanced(obj):
        exc, t = error_of(dlbridge.asarray, obj)
        if must:
            allowed = {EXC[t] for t in must if t in EXC}
            if "refuse" in must or other:
                allowed |= {TypeError, BufferError, ValueError}
            assert exc is not None, "accepted %r" % (t,)
            assert_clear(exc, t, allowed)
        elif exc is not None:
            # Only a different (maybe invalid) layout, or CAI without a GPU.
            allowed = {RuntimeError, BufferError} if kind == 0 else set()
            if other:
                allowed |= {TypeError, BufferError, ValueError}
            assert_clear(exc, t, allowed)
        else:
            n = _norm(d)
            shape, strides = _layout(n)
            assert t.shape == shape and np.dtype(t.dtype) == np.dtype(n["typestr"])
            assert t.readonly == n["data"][1]
            if t.size:  # the layout of no elements is anything
                assert all(a * t.itemsize == b for a, b, e in zip(t.strides, strides, shape) if e > 1)
                assert t.data_ptr() == n["data"][0]
            lo = base.__array_interface__["data"][0]
            if kind == 1 and _within(n, lo, lo + base.nbytes):
                mine, theirs = np.asarray(t), np.asarray(Iface(n))
                assert mine.tobytes() == theirs.tobytes()
                if not other:
                    assert mine.tobytes() == v.tobytes()
                del mine, theirs  # NumPy's view pins t's memory until it goes
            t.close()
        del t


@given(data=st.binary(max_size=64), writable=st.booleans(), typestr=st.sampled_from(DTYPES),
       shape=st.lists(st.integers(0, 4), max_size=3), strides=st.data(),
       offset=st.one_of(st.integers(-8, 72), huge, not_int), source=st.sampled_from(["data", "self"]))
def test_interface_buffers(data, writable, typestr, shape, strides, offset, source):
    """An __array_interface__ whose 'data' is a buffer (or None: the object's
    own buffer), with 'offset' bytes into it, as NumPy reads it: accepted
    exactly when the layout lies inside the buffer, then equal to NumPy's."""
    itemsize = np.dtype(typestr).itemsize
    st_ = strides.draw(st.one_of(st.none(), st.lists(st.integers(-3, 3).map(lambda k: k * itemsize),
                                                      min_size=len(shape), max_size=len(shape)).map(tuple)))
    buf = bytearray(data) if writable else bytes(data)
    d = {"shape": tuple(shape), "typestr": typestr, "version": 3, "strides": st_, "offset": offset}

    class Own(bytearray):
        pass

    if source == "self":
        obj = Own(buf)  # its own buffer, always writable
        obj.__array_interface__ = dict(d, data=None)
        buf = bytes(obj)
    else:
        obj = Iface(dict(d, data=buf))
    kind, off = classify(offset, *INT64)
    with balanced(obj):
        exc, t = error_of(dlbridge.asarray, obj)
        if kind != "ok":
            assert_clear(exc, t, {EXC[kind]})
        else:
            n = {"shape": tuple(shape), "typestr": typestr, "strides": st_, "data": (off, False)}
            if 0 <= off <= len(buf) and _within(n, 0, len(buf)):
                assert exc is None, t
                theirs = np.asarray(Iface(dict(d, data=buf)))
                mine = np.asarray(t)
                assert mine.shape == theirs.shape and mine.tobytes() == theirs.tobytes()
                assert t.readonly == (source == "data" and not writable)
                del mine, theirs
                t.close()
            else:
                assert_clear(exc, t, {BufferError})
        del t


# ---- DLPack capsules built through ctypes ----

# (DLPack code, bits), NumPy dtype
DL_DTYPES = [((0, 8), "i1"), ((0, 16), "<i2"), ((0, 32), "<i4"), ((0, 64), "<i8"), ((1, 8), "u1"),
             ((1, 16), "<u2"), ((1, 32), "<u4"), ((1, 64), "<u8"), ((2, 16), "<f2"), ((2, 32), "<f4"),
             ((2, 64), "<f8"), ((5, 64), "<c8"), ((5, 128), "<c16"), ((6, 8), "?")]
BUF = 256

MALFORMED = {
    "ndim": st.sampled_from([-1, 65, 2**31 - 1, -(2**31)]),
    "negative": st.integers(-(2**63), -1),
    "dtype": st.sampled_from([(99, 32, 1), (2, 33, 1), (2, 0, 1), (2, 32, 0), (2, 32, 2), (0, 7, 1), (6, 16, 1)]),
    "null": st.just(0),
    "major": st.sampled_from([0, 2, 2**32 - 1]),
    "device": st.sampled_from([(99, 0), (1, -1), (0, 0), (-5, 0)]),
    "flags": st.sampled_from([1 << 7, 1 << 63]),
}


@st.composite
def capsule_specs(draw):
    (code, bits), npdt = draw(st.sampled_from(DL_DTYPES))
    itemsize = np.dtype(npdt).itemsize
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    versioned = draw(st.booleans())
    strides = draw(st.one_of(st.none(), st.lists(st.integers(-3, 3), min_size=len(shape), max_size=len(shape))))
    lo = hi = 0
    if strides is not None and all(shape):
        for e, s in zip(shape, strides):
            lo, hi = (lo + (e - 1) * s, hi) if s < 0 else (lo, hi + (e - 1) * s)
    elif all(shape):
        hi = int(np.prod(shape)) - 1
    span = (hi - lo + 1) * itemsize
    assume(span <= BUF)
    offset = draw(st.integers(-lo * itemsize, BUF - span - lo * itemsize))
    spec = dict(shape=shape, strides=strides, byte_offset=offset, versioned=versioned, dtype=(code, bits, 1),
                minor=draw(st.integers(0, 3)), flags=draw(st.sampled_from([0, 1, 2, 3])) if versioned else 0)
    bad = draw(st.one_of(st.none(), st.sampled_from(sorted(MALFORMED))))
    if bad == "major" and not versioned:
        bad = None
    if bad == "flags" and not versioned:
        bad = None
    if bad is not None:
        value = draw(MALFORMED[bad])
        if bad == "ndim":
            spec["ndim"] = value
        elif bad == "negative":
            if not shape:
                bad = None
            else:
                i = draw(st.integers(0, len(shape) - 1))
                spec["shape"] = shape[:i] + [value] + shape[i + 1:]
        elif bad == "null":
            if 0 in shape:
                bad = None  # NULL is fine for no elements
            else:
                spec["data"] = 0
        elif bad == "dtype":
            spec["dtype"] = value
        elif bad == "major":
            spec["major"] = value
        elif bad == "device":
            spec["device"] = value
        elif bad == "flags":
            spec["flags"] = value
    route = draw(st.sampled_from(["capsule", "producer", "not a capsule"]))
    return spec, npdt, bad, route


@given(case=capsule_specs())
def test_capsules(case):
    spec, npdt, bad, route = case
    note(repr(case))
    f = CapsuleFactory(BUF)
    cap, m = f.capsule(**spec)
    src = {"capsule": cap, "producer": Producer(cap), "not a capsule": Producer(m)}[route]
    # Versioned capsules of DLPack >= 1.2 must carry strides.
    null_strides_refused = spec["versioned"] and spec["strides"] is None and spec["minor"] >= 2 and spec["shape"]
    with balanced(src):
        exc, t = error_of(dlbridge.from_dlpack, src)
        if route == "not a capsule":  # the capsule's address, as an int
            assert (exc, t) == (TypeError, "dlbridge: Producer.__dlpack__() returned int, not a PyCapsule")
            assert f.calls[m] == 0
        elif bad is not None or null_strides_refused:
            assert_clear(exc, t, {BufferError})
            assert f.calls[m] == 1
        else:
            assert exc is None, t
            itemsize = np.dtype(npdt).itemsize
            strides = spec["strides"]
            if strides is None:
                strides = [int(np.prod(spec["shape"][i + 1:])) for i in range(len(spec["shape"]))]
            want = np.ndarray(tuple(spec["shape"]), npdt, buffer=f.buf, offset=spec["byte_offset"],
                              strides=tuple(s * itemsize for s in strides))
            got = np.asarray(t)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert got.tobytes() == want.tobytes()
            if want.size:
                assert t.data_ptr() == f.address + spec["byte_offset"]
            assert t.readonly == bool(spec["flags"] & 1) and t.is_copy == bool(spec["flags"] & 2)
            if route == "capsule":  # a second import of the same capsule
                exc2, msg2 = error_of(dlbridge.from_dlpack, cap)
                assert exc2 is ValueError and "already consumed" in msg2
            assert f.calls[m] == 0
            del got, want
            t.close()
            t = None  # NumPy's view pinned the memory until this object goes
            assert f.calls[m] == 1
        del t
    del src, cap
    assert f.calls[m] == 1


# ---- index keys ----

bound = st.one_of(st.none(), st.integers(-5, 5), huge, np_int(-3, 3), st.sampled_from([True, False, 1.0, "1"]))
key_item = st.one_of(
    st.integers(-4, 4), np_int(-3, 3), huge,
    st.builds(slice, bound, bound, st.one_of(st.none(), st.integers(-3, 3), huge, st.sampled_from([True, 1.5]))),
    st.none(), st.just(Ellipsis),
    st.sampled_from([True, False, np.bool_(True), 1.0, np.float32(0), "0"]),
)
keys = st.one_of(key_item, st.lists(key_item, max_size=4).map(tuple))


def _bad_type(k):
    """Whether an index item is of a type basic indexing refuses."""
    if k is None or k is Ellipsis:
        return False
    if isinstance(k, slice):
        return any(b is not None and classify(b, -(2**200), 2**200)[0] == "type" for b in (k.start, k.stop, k.step))
    return classify(k, -(2**200), 2**200)[0] == "type"


@given(shape=st.lists(st.integers(0, 4), max_size=3), key=keys)
def test_index_keys(shape, key):
    a = (np.arange(int(np.prod(shape, dtype=np.int64))) * 3).reshape(shape)
    items = key if isinstance(key, tuple) else (key,)
    with balanced(a):
        x = dlbridge.asarray(a)
        exc, t = error_of(x.__getitem__, key)
        if any(_bad_type(k) for k in items):
            assert_clear(exc, t, {TypeError})
        else:
            nexc, want = error_of(a.__getitem__, key)
            if nexc is None:
                assert exc is None, t
                assert np.asarray(t).tolist() == np.asarray(want).tolist() and t.shape == np.shape(want)
                t.close()
            else:  # NumPy says OverflowError for some integers past int64: IndexError here
                assert_clear(exc, t, {IndexError if nexc is OverflowError else nexc})
        del t
        x.close()
        del x


# ---- permute and transpose ----

dim = st.one_of(st.integers(-4, 4), np_int(-3, 3), huge, not_int.filter(lambda v: not isinstance(v, (list, tuple))))


@given(shape=st.lists(st.integers(1, 3), max_size=4), dims=st.lists(dim, max_size=5), spread=st.booleans(),
       perm=st.randoms(use_true_random=False))
def test_permute(shape, dims, spread, perm):
    nd = len(shape)
    if perm.random() < 0.5:  # a valid permutation, some dims given as negatives or NumPy ints
        dims = list(range(nd))
        perm.shuffle(dims)
        dims = [d - nd if perm.random() < 0.3 else (np.int64(d) if perm.random() < 0.3 else d) for d in dims]
    a = np.arange(int(np.prod(shape))).reshape(shape)
    x = dlbridge.asarray(a)
    kinds = [classify(d, *INT32) for d in dims]
    with balanced(a):
        exc, t = error_of(x.permute, *dims) if spread else error_of(x.permute, dims)
        first = next((k for k, _ in kinds if k != "ok"), None)
        if first is not None:
            assert_clear(exc, t, {EXC[first]})
        else:
            norm = [v for _, v in kinds]
            nexc, want = error_of(np.transpose, a, norm)
            if nexc is None and len(norm) == nd:
                assert exc is None, t
                assert np.asarray(t).tolist() == want.tolist()
                t.close()
            else:
                assert_clear(exc, t, {ValueError})
        del t
    x.close()


@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), d0=dim, d1=dim)
def test_transpose(shape, d0, d1):
    a = np.arange(int(np.prod(shape))).reshape(shape)
    x = dlbridge.asarray(a)
    k0, k1 = classify(d0, *INT64), classify(d1, *INT64)
    with balanced(a):
        exc, t = error_of(x.transpose, d0, d1)
        first = next((k for k, _ in (k0, k1) if k != "ok"), None)
        if d0 is None and d1 is None:  # no dims: all of them reversed
            assert exc is None and np.asarray(t).tolist() == a.T.tolist()
            t.close()
        elif d0 is None or d1 is None:
            assert_clear(exc, t, {TypeError})  # two dims or none
        elif first is not None:
            assert_clear(exc, t, {EXC[first]})
        elif all(-len(shape) <= v < len(shape) for v in (k0[1], k1[1])):
            assert exc is None and np.asarray(t).tolist() == np.swapaxes(a, k0[1], k1[1]).tolist()
            t.close()
        else:
            assert_clear(exc, t, {IndexError})
        del t
    x.close()


# ---- __dlpack__ arguments ----

pair_item = st.one_of(small(0, 2), huge, not_int)
pairs = st.one_of(st.none(), st.tuples(pair_item, pair_item), st.lists(pair_item, min_size=2, max_size=2),
                  st.sampled_from([(1,), (1, 0, 0), 5, "cpu"]))
streams = st.one_of(st.none(), st.just(-1), small(-1, 3), huge, not_int)


@given(stream=streams, max_version=pairs, dl_device=pairs, copy=st.sampled_from([None, True, False]))
def test_dlpack_arguments(stream, max_version, dl_device, copy):
    t = dlbridge.arange(4, dtype="int32")
    before = dlbridge.debug_stats()
    allowed = set()
    for name, value, rng in (("max_version", max_version, UINT32), ("dl_device", dl_device, INT32)):
        if value is None:
            continue
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            allowed.add(TypeError)
            continue
        for e in value:
            k, _ = classify(e, *rng)
            if k != "ok":
                allowed.add(EXC[k])
                break
    sk, sv = ("ok", None) if stream is None else classify(stream, *INT64)
    if sk != "ok":
        allowed.add(EXC[sk])
    exc, cap = error_of(t.__dlpack__, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    if allowed:
        assert exc is not None, "accepted %r" % (cap,)
        assert_clear(exc, cap, allowed)
    elif exc is not None:
        # Integers of the right type and range that the exchange refuses:
        # a stream on a host tensor, a device we cannot make.
        assert_clear(exc, cap, {ValueError, BufferError})
        assert (stream not in (None, -1)) or dl_device is not None or copy is not None
    else:
        u = dlbridge.from_dlpack(cap)
        assert u.cpu().tolist() == [0, 1, 2, 3]
        u.close()
        del u
    del cap
    after = dlbridge.debug_stats()
    assert after["live_exports"] == before["live_exports"]
    t.close()


# ---- devices ----

devices = st.one_of(
    st.tuples(pair_item, pair_item),
    st.sampled_from(["cpu", "cuda", "cpu:0", "cpu:1", "tpu", "cuda:x", "cuda:-1", "cuda:+1", "cuda:4294967296",
                     "cuda:2147483648", "cuda:٣"]),
    st.integers(0, 2**70).map(lambda i: "cuda:%d" % i),
)


@given(device=devices)
def test_devices(device):
    if isinstance(device, tuple):
        kinds = [classify(e, *INT32) for e in device]
        first = next((k for k, _ in kinds if k != "ok"), None)
        allowed = {EXC[first]} if first else None
    else:
        name, _, idx = device.partition(":")
        allowed = None
        if name not in ("cpu", "cuda") or (idx and not (idx.isascii() and idx.isdigit())):
            allowed = {ValueError}
        elif idx and int(idx) > INT32[1]:
            allowed = {ValueError}
    with balanced():
        exc, t = error_of(dlbridge.zeros, 2, device=device)
        if allowed is not None:
            assert_clear(exc, t, allowed)
        elif exc is not None:
            # A device we cannot make here: another device type, cpu:N,
            # or CUDA without a driver (RuntimeError), or a missing GPU.
            assert_clear(exc, t, {ValueError, RuntimeError, BufferError})
        else:
            # A CUDA device (the fake driver or a GPU) is read through the host.
            host = t if t.device == "cpu" else t.to("cpu")
            assert host.tolist() == [0.0, 0.0]
            if host is not t:
                host.close()
            t.close()
        del t
