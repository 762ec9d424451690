"""dlbridge.ops against the test library (examples/gofunc and
pybridge/pyfunc/pyfunctest linked by `dlbridge build`), run by test_ops.py
in a process of its own with DLBRIDGE_LIB naming that library: one Go
runtime per process, so the rest of the suite's library cannot be there."""

import array
import ctypes
import datetime
import decimal
import fractions
import gc
import inspect
import os
import struct
import sys
import threading
import warnings

import pytest

import dlbridge
from dlbridge import _lib, _ops

np = pytest.importorskip("numpy")
ops = dlbridge.ops


def test_the_library_is_the_test_library():
    assert os.path.realpath(dlbridge.library_path) == os.path.realpath(os.environ["DLBRIDGE_LIB"])
    assert set(dir(ops)) >= {"gofunc", "pytest"}
    assert set(dir(ops.gofunc)) >= {"scale", "normalize_rows", "axpy", "noop"}


def test_every_function_is_called_without_reflection():
    # dlbridge build generated an invoker for each registered signature.
    slow = [d["name"] for d in _ops._describe_all() if not d["fast"]]
    assert slow == []


def test_signature_and_help():
    f = ops.gofunc.scale
    assert str(inspect.signature(f)) == "(out, x, factor=2.0, *, stream=None, result_type=None)"
    assert f.__name__ == "scale"
    assert f.__module__ == "dlbridge.ops.gofunc"
    doc = f.__doc__
    assert "out : Tensor, float32 [N] C writable" in doc
    assert "x : Tensor, float32 [N] C" in doc
    assert "factor : float (Go float32) = 2.0" in doc
    # result_type= as the stub (dlbridge.stubgen) and the code take it.
    assert "result_type : optional, 'torch', 'cupy', 'numpy', 'jax' or 'dlbridge'" in doc
    # The Go doc comment, recorded by dlbridge build.
    assert "Scale writes x * factor into out" in doc
    assert "examples/gofunc.Scale" in doc
    assert "The number of elements of x." in ops.pytest.count.__doc__
    assert str(inspect.signature(ops.pytest.echo)) == (
        "(b, i8, u16, i, f32, s, f64=0.5, flag=False, name='go', *, stream=None, result_type=None)")


def test_scale_numpy_positional_keyword_default():
    x = np.arange(16, dtype=np.float32)
    out = np.zeros_like(x)
    assert ops.gofunc.scale(out, x, 3.0) is None
    np.testing.assert_array_equal(out, x * 3)
    ops.gofunc.scale(out, x)
    np.testing.assert_array_equal(out, x * 2)
    ops.gofunc.scale(x=x, out=out, factor=0.5)
    np.testing.assert_array_equal(out, x * 0.5)
    ops.gofunc.scale(out, x, np.float32(4))  # NumPy scalars are numbers
    np.testing.assert_array_equal(out, x * 4)
    ops.gofunc.scale(out, x, 5)  # an int for a float
    np.testing.assert_array_equal(out, x * 5)


def test_scale_other_producers_and_temporaries():
    torch = pytest.importorskip("torch")
    t = torch.zeros(8)
    ops.gofunc.scale(t, torch.arange(8.0), 2.0)  # a temporary argument
    assert t.tolist() == [2.0 * i for i in range(8)]
    d = dlbridge.zeros(8)
    ops.gofunc.scale(d, np.arange(8, dtype=np.float32))
    assert np.from_dlpack(d).tolist() == [2.0 * i for i in range(8)]
    ops.gofunc.scale(dlbridge.asarray(np.zeros(3, np.float32)), dlbridge.arange(3, dtype="float32"))
    a = array.array("f", [1, 2, 3])
    ops.gofunc.scale(a, memoryview(array.array("f", [1, 2, 3])), 10)
    assert a.tolist() == [10, 20, 30]


def test_empty_bodies_take_tensors_of_any_kind():
    # bench_gofunc.py's pytest.noop2 and noop9: any dtype, layout or
    # read-only array, nothing returned; still tensors and still counted.
    ro = np.arange(6, dtype=np.int8).reshape(2, 3)[:, ::2]
    ro.flags.writeable = False
    xs = [np.zeros(i + 1, np.float64) for i in range(8)]
    assert ops.pytest.noop2(ro, xs[0]) is None
    assert ops.pytest.noop9(ro, *xs) is None
    with pytest.raises(TypeError, match=r"pytest.noop9\(\) missing required argument 'i'"):
        ops.pytest.noop9(ro, *xs[:7])
    with pytest.raises(TypeError, match="argument b: want a tensor, got float"):
        ops.pytest.noop2(ro, 1.5)


def _numpy_cases():
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ro = np.arange(5, dtype=np.int16)
    ro.setflags(write=False)
    cases = [base, base[:, ::2, ::-1], base.T, base[1], np.array(3, np.float32),
             np.zeros((0, 3), np.float32), ro, np.ones(9, bool), np.arange(6, dtype=np.float16)[::3],
             np.arange(4, dtype=np.complex64), np.arange(4, dtype=np.complex128), np.zeros((1,) * 8, np.uint8)]
    for t in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f8", "<f4", "=i8", np.intc, np.int_, np.uint, np.longlong):
        cases.append(np.arange(6, dtype=t).reshape(3, 2)[::-1])
    return cases


@pytest.mark.parametrize("x", _numpy_cases(), ids=lambda x: f"{x.dtype.str}{list(x.shape)}{list(x.strides)}")
def test_numpy_arrays_reach_go_as_they_are(x):
    # NumPy arrays are read from their fields, not the buffer protocol:
    # Go sees the same dtype, shape, strides, flag and first element.
    names = {"b1": "bool", "f2": "float16", "c8": "complex64", "c16": "complex128"}
    kind = names.get(x.dtype.str[1:], {"i": "int", "u": "uint", "f": "float"}.get(x.dtype.kind, "?") + str(x.itemsize * 8))
    strides = [s // x.itemsize for s in x.strides]
    want = f"{kind} {list(x.shape)} {strides} {str(not x.flags.writeable).lower()}".replace(",", "")
    got, ptr = ops.pytest.layout(x)
    if x.size == 0:  # strides of an empty array say nothing: paths differ
        got, want = got.split(" [")[0:2], want.split(" [")[0:2]
    assert got == want
    assert ptr == x.__array_interface__["data"][0]


def test_numpy_views_of_any_layout_reach_go_as_they_are():
    """Hypothesis draws arrays of up to four dimensions, sliced with
    steps of either sign and transposed: Go reads the layout NumPy has and
    sums the same elements."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=150, derandomize=True, deadline=None, database=None)
    @hypothesis.given(st.data())
    def check(data):
        dt = data.draw(st.sampled_from(["f4", "f8"]))
        shape = data.draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))
        base = np.arange(int(np.prod(shape)), dtype=dt).reshape(shape) * 0.5 - 3
        steps = [data.draw(st.sampled_from([1, 2, -1, -2])) for _ in shape]
        x = base[tuple(slice(None, None, k) for k in steps) + (Ellipsis,)]  # a view, 0-d too
        x = x.transpose(data.draw(st.permutations(range(x.ndim))))
        got, ptr = ops.pytest.layout(x)
        dtype, rest = got.split(" ", 1)
        gshape, gstrides, ro = rest.replace("[", "").split("] ")
        assert (dtype, gshape.split(), ro) == (f"float{x.itemsize * 8}", [str(e) for e in x.shape], "false")
        if x.size:  # strides of extent-1 dimensions and of empty arrays say nothing
            assert ptr == x.__array_interface__["data"][0]
            for e, g, w in zip(x.shape, gstrides.split(), x.strides):
                assert e == 1 or int(g) == w // x.itemsize, (got, x.strides)
        assert ops.pytest.sum(x) == pytest.approx(float(x.sum(dtype=np.float64)))

    check()


def test_numpy_arrays_the_direct_read_does_not_take():
    # Another byte order, a dtype dlbridge lacks, more dimensions than the
    # inline room, subclasses and strides that are not whole items go the
    # general way: taken where that can, refused with the reason elsewhere.
    nine = np.zeros((1,) * 9 + (2,), np.float32)
    assert ops.pytest.layout(nine)[0] == "float32 [1 1 1 1 1 1 1 1 1 2] [2 2 2 2 2 2 2 2 2 1] false"
    m = np.ma.masked_array(np.arange(3, dtype=np.float32))
    assert ops.pytest.layout(m)[0] == "float32 [3] [1] false"
    with pytest.raises((TypeError, BufferError, ValueError), match="argument x"):
        ops.pytest.layout(np.arange(3, dtype=">f4"))
    with pytest.raises((TypeError, BufferError, ValueError), match="argument x"):
        ops.pytest.layout(np.zeros(3, np.longdouble))
    packed = np.zeros(4, dtype=[("a", "u1"), ("b", "f4")])["b"]  # strides of 5 bytes
    with pytest.raises((TypeError, BufferError, ValueError), match="argument x"):
        ops.pytest.layout(packed)


def test_results_come_back_as_the_callers_type():
    torch = pytest.importorskip("torch")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = np.linalg.norm(np.arange(12, dtype=np.float32).reshape(3, 4), axis=1)
    n = ops.gofunc.normalize_rows(x)
    assert type(n) is np.ndarray
    np.testing.assert_allclose(n, want, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1, rtol=1e-6)  # in place
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    n = ops.gofunc.normalize_rows(t)
    assert type(n) is torch.Tensor and n.dtype == torch.float32
    np.testing.assert_allclose(n.numpy(), want, rtol=1e-6)
    n = ops.gofunc.normalize_rows(dlbridge.asarray(np.ones((2, 4), np.float32)))
    assert isinstance(n, dlbridge.Tensor)
    n = ops.gofunc.normalize_rows(np.ones((2, 4), np.float32), result_type="dlbridge")
    assert isinstance(n, dlbridge.Tensor)
    n = ops.gofunc.normalize_rows(np.ones((2, 4), np.float32), result_type="torch")
    assert type(n) is torch.Tensor and n.tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="result_type='tensorflow'"):
        ops.gofunc.normalize_rows(np.ones((2, 4), np.float32), result_type="tensorflow")


def test_several_results_are_a_tuple():
    a, b = ops.pytest.pair(4)
    assert isinstance(a, dlbridge.Tensor) and isinstance(b, dlbridge.Tensor)  # no tensor argument
    a, b = ops.pytest.pair(3, result_type="numpy")
    assert a.dtype == np.float32 and a.tolist() == [0, 1, 2]
    assert b.dtype == np.int64 and b.tolist() == [0, 1, 2]
    assert ops.pytest.count(np.ones((2, 3))) == 6


def test_scalars_both_ways():
    got = ops.pytest.echo(True, -3, 65535, 10, 1.5, "héllo")
    assert got == (True, 7, 65535, 1.5, "héllo", 0.5, False, "go")
    got = ops.pytest.echo(False, 127, 0, -(2**62), np.float64(2.25), "", f64=-1e300, flag=np.bool_(True), name="x")
    assert got == (False, 127 - 2**62, 0, 2.25, "", -1e300, True, "x")


@pytest.mark.parametrize("args, exc, words", [
    ((True, 128, 0, 0, 0.0, ""), ValueError, ["argument i8", "128 is out of range for int8"]),
    ((True, 0, -1, 0, 0.0, ""), ValueError, ["argument u16", "-1 is out of range for uint16"]),
    ((True, 0, 0, 2**64, 0.0, ""), ValueError, ["argument i", "out of range"]),
    ((True, 0, 0, 1.5, 0.0, ""), TypeError, ["argument i", "want int", "float 1.5"]),
    ((1, 0, 0, 0, 0.0, ""), TypeError, ["argument b", "want bool", "int 1"]),
    ((True, True, 0, 0, 0.0, ""), TypeError, ["argument i8", "want int", "bool True"]),
    ((True, 0, 0, 0, "1.0", ""), TypeError, ["argument f32", "want float32", 'str "1.0"']),
    ((True, 0, 0, 0, 1e39, ""), ValueError, ["argument f32", "out of range for float32"]),
    ((True, 0, 0, 0, 0.0, 5), TypeError, ["argument s", "want str", "int 5"]),
    ((True, 0, 0, 0, 0.0, None), TypeError, ["argument s", "want str", "NoneType"]),
])
def test_scalar_errors_name_the_argument(args, exc, words):
    with pytest.raises(exc) as e:
        ops.pytest.echo(*args)
    for w in words:
        assert w in str(e.value)
    assert "pytest.echo" in str(e.value)


class _FloatFails:
    def __float__(self):
        raise ValueError("no float today")


class _Index:
    def __index__(self):
        return 3


@pytest.mark.parametrize("factor", [
    2, 2.5, np.float64(2.5), np.float32(2.5), np.float16(2.5), np.longdouble(2.5), np.int8(2), np.uint64(2),
    np.array(2.5), np.array(2), fractions.Fraction(5, 2), decimal.Decimal("2.5"), _Index(), 2**70,
], ids=repr)
def test_a_float_parameter_takes_real_numbers(factor):
    x = np.arange(4, dtype=np.float32)
    out = np.full(4, -1, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no value converted with a warning (ComplexWarning)
        ops.gofunc.scale(out, x, factor)
    assert out.tolist() == (x * np.float32(float(factor))).tolist()


def _came(v):
    """How a refusal names a value that is not one of Python's own numbers:
    its type's name and its repr (NumPy 2 writes np.True_ where NumPy 1
    wrote True, so the expectation is made from the value)."""
    return "%s (%r)" % (type(v).__name__, v)


@pytest.mark.parametrize("factor, came", [
    (1j, _came(1j)),
    (complex(2, 0), _came(complex(2, 0))),
    (np.complex128(2 + 1j), _came(np.complex128(2 + 1j))),
    (np.complex64(2 + 1j), _came(np.complex64(2 + 1j))),
    (np.array(2 + 1j), _came(np.array(2 + 1j))),
    (np.datetime64("2020-01-01"), _came(np.datetime64("2020-01-01"))),
    (np.timedelta64(5), _came(np.timedelta64(5))),
    (np.timedelta64(5, "s"), _came(np.timedelta64(5, "s"))),
    (np.array(np.datetime64("2020-01-01")), "ndarray ("),
    (datetime.timedelta(seconds=2), _came(datetime.timedelta(seconds=2))),
    (datetime.date(2020, 1, 1), _came(datetime.date(2020, 1, 1))),
    (b"2", _came(b"2")),
    (bytearray(b"2"), _came(bytearray(b"2"))),
    (np.bytes_(b"2"), _came(np.bytes_(b"2"))),
    (np.array([2.0]), _came(np.array([2.0]))),  # a tensor of one element is not a scalar
    (np.array(2.0, dtype=object), _came(np.array(2.0, dtype=object))),
    (np.bool_(True), _came(np.bool_(True))),
    (None, _came(None)),
], ids=repr)
def test_a_float_parameter_refuses_what_is_not_a_real_number(factor, came):
    x = np.arange(4, dtype=np.float32)
    out = np.full(4, -1, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError) as e:
            ops.gofunc.scale(out, x, factor)
    assert str(e.value).startswith("gofunc.scale: argument factor: want float, got " + came), str(e.value)
    assert out.tolist() == [-1] * 4  # the body did not run


def test_torch_scalars_convert_by_their_dtype():
    torch = pytest.importorskip("torch")
    x = np.arange(4, dtype=np.float32)
    out = np.full(4, -1, np.float32)
    ops.gofunc.scale(out, x, torch.tensor(2.5))
    assert out.tolist() == (x * 2.5).tolist()
    assert _echo(i8=torch.tensor(3), b=torch.tensor(False))[:2] == (False, 3)
    for bad in (torch.tensor(1j), torch.tensor([2.5])):  # complex; one element, not a scalar
        with pytest.raises(TypeError) as e:
            ops.gofunc.scale(out, x, bad)
        assert str(e.value) == "gofunc.scale: argument factor: want float, got Tensor (%r)" % bad
    with pytest.raises(TypeError, match="argument i8: want int, got Tensor"):
        _echo(i8=torch.tensor(3.0))


def _echo(**kw):
    args = dict(b=True, i8=0, u16=0, i=0, f32=0.0, s="")
    args.update(kw)
    return ops.pytest.echo(**args)


@pytest.mark.parametrize("kw, want", [
    (dict(i8=np.int8(-3)), (True, -3)),
    (dict(i8=np.uint16(3)), (True, 3)),
    (dict(i8=np.array(3)), (True, 3)),
    (dict(i8=_Index()), (True, 3)),
    (dict(b=np.bool_(False)), (False, 0)),
    (dict(b=np.array(True)), (True, 0)),
], ids=repr)
def test_int_and_bool_parameters_take_their_numbers(kw, want):
    assert _echo(**kw)[:2] == want


@pytest.mark.parametrize("kw, exc, words", [
    (dict(i8=np.float32(2)), TypeError, "argument i8: want int, got " + _came(np.float32(2))),
    (dict(i8=np.float64(2)), TypeError, "argument i8: want int (int8), got float 2"),
    (dict(i8=decimal.Decimal(2)), TypeError, "argument i8: want int, got Decimal (Decimal('2'))"),
    (dict(i8=np.timedelta64(2)), TypeError, "argument i8: want int, got " + _came(np.timedelta64(2))),
    (dict(i8=np.bool_(True)), TypeError, "argument i8: want int, got " + _came(np.bool_(True))),
    (dict(i8=np.array([2])), TypeError, "argument i8: want int, got " + _came(np.array([2]))),
    (dict(i8=2j), TypeError, "argument i8: want int, got complex (2j)"),
    (dict(i8=2**70), ValueError, "argument i8: 1180591620717411303424 is out of range for a 64-bit integer"),
    (dict(b=np.int8(1)), TypeError, "argument b: want bool, got " + _came(np.int8(1))),
    (dict(b=1), TypeError, "argument b: want bool, got int 1"),
    (dict(b=2**70), TypeError, "argument b: want bool, got int (1180591620717411303424)"),
    (dict(b=np.array([True])), TypeError, "argument b: want bool, got " + _came(np.array([True]))),
    (dict(s=b"x"), TypeError, "argument s: want str, got bytes (b'x')"),
    (dict(f32=_FloatFails()), ValueError, "argument f32: cannot convert _FloatFails: no float today"),
    (dict(f32=2**1100), ValueError, "argument f32: " + str(2**1100)[:57]),
], ids=repr)
def test_scalar_refusals_name_function_argument_and_what_came(kw, exc, words):
    with pytest.raises(exc) as e:
        _echo(**kw)
    assert str(e.value).startswith("pytest.echo: " + words), str(e.value)


def test_binding_errors():
    f = ops.gofunc.scale
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"gofunc.scale\(\) missing required argument 'x'"):
        f(x)
    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        f(x, x, y=1)
    with pytest.raises(TypeError, match="multiple values for argument 'out'"):
        f(x, x, out=x)
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4 were given"):
        f(x, x, 1.0, 2.0)


def test_tensor_constraints_name_function_argument_expectation_and_what_came():
    f = ops.gofunc.scale
    out = np.zeros(16, np.float32)
    with pytest.raises(ValueError) as e:
        f(out, np.zeros(15, np.float32))
    assert str(e.value) == ("gofunc.scale: argument x: want float32 [N] C (N=16 from out); "
                            "got float32 [15] C/F cpu writable: shape[0] (15 != N=16 from out)")
    with pytest.raises(TypeError, match=r"argument x: want float32 \[N\] C \(N=16 from out\); got float64 \[16\].*: dtype"):
        f(out, np.zeros(16))
    with pytest.raises(ValueError, match="argument out: .* strided .*: order"):
        f(np.zeros(32, np.float32)[::2], np.zeros(16, np.float32))
    ro = np.zeros(16, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="argument out: want float32 \\[N\\] C writable; got .* read-only: read-only"):
        f(ro, out)
    with pytest.raises(ValueError, match=r"argument x: .*ndim \(2 != 1\)"):
        f(out, np.zeros((4, 4), np.float32))
    with pytest.raises(TypeError, match="gofunc.scale: argument x: want a tensor, got str"):
        f(out, "not a tensor")
    with pytest.raises(ValueError, match=r"pytest.matmul_check: argument w: want float32 \[K, M\] \(K=3 from x\); got float32 \[4, 5\] C cpu writable: "
                       r"shape\[0\] \(4 != K=3 from x\)$"):
        ops.pytest.matmul_check(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32), np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match=r"argument out: want float32 \[N, M\] writable \(N=2 from x, M=5 from w\)"):
        ops.pytest.matmul_check(np.zeros((2, 3), np.float32), np.zeros((3, 5), np.float32), np.zeros((2, 6), np.float32))
    ops.pytest.matmul_check(np.zeros((2, 3), np.float32), np.zeros((3, 5), np.float32), np.zeros((2, 5), np.float32))
    # Every mismatch of the argument, in one message.
    bad = np.zeros((16, 2), np.float64)[:, 0]
    bad.setflags(write=False)
    with pytest.raises(TypeError) as e:
        f(bad, out)
    assert str(e.value) == ("gofunc.scale: argument out: want float32 [N] C writable; "
                            "got float64 [16] strided cpu read-only: dtype, order, read-only")
    with pytest.raises(TypeError, match="pytest.sum: argument x: want float32\\|float64"):
        ops.pytest.sum(np.zeros(3, np.int32))
    assert ops.pytest.sum(np.arange(4.0)) == 6.0
    with pytest.raises(TypeError, match="gofunc.axpy: argument y: want float32 \\[N\\] C cuda writable; got .* cpu"):
        ops.gofunc.axpy(out, out)


@pytest.mark.parametrize("kind, exc", [
    ("type", TypeError), ("value", ValueError), ("buffer", BufferError), ("memory", MemoryError),
    ("runtime", RuntimeError), ("plain", RuntimeError),
])
def test_go_errors_raise_their_class(kind, exc):
    with pytest.raises(exc, match="pytest.fail: pytest: a"):
        ops.pytest.fail(kind)


def test_a_panic_is_a_runtime_error_and_the_process_goes_on():
    with pytest.raises(RuntimeError, match="pytest.fail: Go panic: pytest: a panic"):
        ops.pytest.fail("panic")
    with pytest.raises(RuntimeError, match="Go panic: .*nil pointer dereference"):
        ops.pytest.fail("nilpanic")
    assert ops.pytest.fail("none") is None
    x = np.ones(4, np.float32)
    ops.gofunc.scale(x, x, 2)
    assert x.tolist() == [2, 2, 2, 2]


def test_a_result_that_views_an_argument_keeps_its_memory():
    torch = pytest.importorskip("torch")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    row = ops.pytest.first_row(x)
    assert type(row) is np.ndarray and row.tolist() == [0, 1, 2, 3]
    x[0, 1] = 42
    assert row[1] == 42  # the same memory
    del x
    gc.collect()
    assert row.tolist() == [0, 42, 2, 3]
    t = torch.arange(6.0).reshape(2, 3)
    r = ops.pytest.first_row(t)
    assert type(r) is torch.Tensor and r.tolist() == [0, 1, 2]
    t[0, 0] = 7
    assert r[0] == 7


def test_a_view_kept_after_the_call_keeps_its_memory():
    x = np.arange(5, dtype=np.float32)
    ops.pytest.keep(x)
    del x
    gc.collect()
    np.ones(10000, np.float32)  # reuse of freed memory would show
    assert ops.pytest.kept_sum() == 10.0
    ops.pytest.drop()
    with pytest.raises(ValueError, match="nothing kept"):
        ops.pytest.kept_sum()
    # NumPy refuses to resize an array whose buffer Go still holds.
    y = np.arange(3, dtype=np.float32)
    ops.pytest.keep(y)
    with pytest.raises((ValueError, BufferError)):
        y.resize(100)
    ops.pytest.drop()
    y.resize(100, refcheck=False)  # Go let go of it


def test_a_view_kept_of_one_array_keeps_the_call_s_arrays_until_dropped():
    # Through the extension, the host arrays of one call share one
    # reference (the call's lease): a view the body keeps of x keeps y too.
    # Dropping the view lets go of what it kept.
    x = np.arange(5, dtype=np.float32)
    y = np.ones(3, np.float32)
    rx, ry = sys.getrefcount(x), sys.getrefcount(y)
    for _ in range(3):
        ops.pytest.keep_first(x, y)
        assert sys.getrefcount(x) > rx
        assert sys.getrefcount(y) > ry
        assert ops.pytest.kept_sum() == 10.0
        ops.pytest.drop()
        assert (sys.getrefcount(x), sys.getrefcount(y)) == (rx, ry)
    # Calls after a kept one keep nothing.
    ops.gofunc.scale(y, y, 1.0)
    ops.gofunc.scale(x, x, 1.0)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == (rx, ry)


def test_a_view_kept_without_retain_fails_loudly_after_the_call():
    # The body keeps x[1:] without a reference of its own. Its use after
    # the call is an error, also once later calls reuse the call's views.
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 100, np.float32)
    for _ in range(20):
        ops.pytest.keep_unretained(x)
        with pytest.raises(Exception, match="closed view"):
            ops.pytest.unretained_sum(y)  # never y[1:]'s sum, 300.0


def test_calls_leave_no_handles_or_exports_behind():
    gc.collect()
    before = dlbridge.debug_stats()
    x = np.ones(16, np.float32)
    for _ in range(200):
        ops.gofunc.scale(x, x, 1.0)
        ops.gofunc.normalize_rows(x.reshape(4, 4))
    gc.collect()
    after = dlbridge.debug_stats()
    assert after["live_tensors"] == before["live_tensors"], (before, after)
    assert after["live_exports"] == before["live_exports"], (before, after)


def test_the_gil_is_released_while_the_body_runs():
    x = np.zeros(64, np.float32)
    started = threading.Event()

    def worker():
        started.set()
        ops.pytest.slow(x, 1.0, 4_000_000)

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    n = 0
    while t.is_alive():
        n += 1
    t.join()
    assert x.tolist() == [1.0] * 64
    # With the GIL held for the body this thread would have stood still.
    assert n > 10_000, n


def test_many_threads_call_at_once():
    errors = []
    outs = [np.zeros(256, np.float32) for _ in range(8)]
    xs = [np.full(256, i, np.float32) for i in range(8)]

    def worker(i):
        try:
            for _ in range(300):
                ops.gofunc.scale(outs[i], xs[i], 3.0)
                assert outs[i][0] == 3.0 * i
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_load_library_of_the_library_in_use_is_a_no_op_and_another_is_refused(tmp_path):
    assert dlbridge.load_library(os.environ["DLBRIDGE_LIB"]) == dlbridge.library_path
    other = tmp_path / "other.so"
    other.write_bytes(b"")
    with pytest.raises(RuntimeError) as e:
        dlbridge.load_library(str(other))
    assert str(other) in str(e.value) and os.path.realpath(dlbridge.library_path) in str(e.value)
    assert "one Go runtime per process" in str(e.value)
    with pytest.raises(AttributeError, match="has no namespace 'nope'"):
        ops.nope
    with pytest.raises(AttributeError, match="dlbridge.ops.gofunc has no function 'nope'"):
        ops.gofunc.nope


def test_namespaces_and_functions_are_plain_attributes():
    # dlbridge.ops.ns.f written inline reads two instance dictionaries, no
    # __getattr__ call (which cost more than a whole call of a Go function),
    # and reloading the library in use keeps the same objects reachable.
    ops.gofunc  # noqa: B018 (loads the library)
    assert vars(ops)["gofunc"] is ops.gofunc
    assert vars(ops.gofunc)["scale"] is ops.gofunc.scale
    assert "scale" in dir(ops.gofunc) and "gofunc" in dir(ops) and "pytest" in dir(ops)
    assert not any(n.startswith("_") for n in dir(ops.gofunc))
    dlbridge.load_library(os.environ["DLBRIDGE_LIB"])
    assert vars(ops)["gofunc"] is ops.gofunc and callable(ops.gofunc.scale)


# ---- CUDA: the fake driver in CI, the real one on a GPU machine ----

def _f32(values):
    return np.asarray(values, dtype=np.float32)


@pytest.mark.gpu
def test_cuda_call_runs_on_the_callers_stream(driver):
    x = dlbridge.asarray(_f32(range(8))).to("cuda")
    y = dlbridge.asarray(_f32([1] * 8)).to("cuda")
    s = dlbridge.Stream(device=0)
    got, pending = ops.pytest.stream_of(x, stream=s)
    assert got == s.cuda_stream
    got, _ = ops.pytest.stream_of(x)  # no stream named: dlbridge's own work stream
    assert got == _lib._core.dlb_work_stream(0)
    ops.gofunc.axpy(y, x, 2.0, stream=s)
    s.synchronize()
    assert np.from_dlpack(y.to("cpu")).tolist() == [1 + 2 * i for i in range(8)]
    out = dlbridge.empty(8, device="cuda")
    ops.gofunc.scale(out, x, 0.5)
    assert np.from_dlpack(out.to("cpu")).tolist() == [0.5 * i for i in range(8)]


def _pending_fill(fake_driver, n, value):
    """A CUDA tensor of n zeros and a stream on which a fill of value is
    pending (the fake runs queued work only when it is waited for)."""
    x = dlbridge.asarray(_f32([0] * n)).to("cuda")
    s = dlbridge.Stream(device=0)
    dlbridge.synchronize()
    ops.pytest.fill_async(x, value, stream=s)
    assert fake_driver.pending(s.cuda_stream) > 0
    return x, s


@pytest.mark.gpu
def test_a_body_that_waits_for_its_stream_returns_with_its_work_done(fake_driver):
    # pytest.fill_wait fills x on the caller's stream and waits for it (the
    # GIL is free meanwhile): nothing is left pending on the stream.
    x, s = _pending_fill(fake_driver, 32, 1.0)
    syncs = fake_driver.calls("cuStreamSynchronize")
    ops.pytest.fill_wait(x, 4.0, 3, stream=s)
    assert fake_driver.calls("cuStreamSynchronize") == syncs + 1
    # Left on the stream: only the event that orders later readers.
    assert fake_driver.pending(s.cuda_stream) <= 1
    assert np.from_dlpack(x.to("cpu")).tolist() == [4.0] * 32


@pytest.mark.gpu
def test_cuda_call_orders_after_pending_writes_by_event_without_host_sync(fake_driver):
    fake = fake_driver.lib
    y = dlbridge.asarray(_f32([1] * 64)).to("cuda")
    x, s1 = _pending_fill(fake_driver, 64, 3.0)
    s2 = dlbridge.Stream(device=0)
    syncs = [fake_driver.calls(n) for n in ("cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")]
    fake.fakecuda_reset_calls()
    ops.gofunc.axpy(y, x, 2.0, stream=s2)  # reads x on s2: after s1's write, by an event
    buf = (ctypes.c_ulonglong * 96)()
    n = fake.fakecuda_order_log(buf, 32)
    log = [(chr(buf[3 * i]), buf[3 * i + 1], buf[3 * i + 2]) for i in range(n)]
    # s2 waits for a record on s1 (made when fill_async returned: the
    # caller's stream may be gone before the readers come).
    assert ("w", s2.cuda_stream, s1.cuda_stream) in log, log
    assert [fake_driver.calls(n) for n in ("cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")] == [0, 0, 0]
    del syncs
    # The write of axpy is pending on s2: a reader elsewhere waits for it.
    assert np.from_dlpack(y.to("cpu")).tolist() == [7.0] * 64


@pytest.mark.gpu
def test_cuda_array_interface_stream_is_ordered_before_the_call(fake_driver):
    src = dlbridge.asarray(_f32([2] * 16)).to("cuda")
    s1 = dlbridge.Stream(device=0)
    dlbridge.synchronize()
    ops.pytest.fill_async(src, 5.0, stream=s1)

    class Producer:  # a CuPy-like array whose last write is on s1
        def __init__(self, t, stream):
            self._t = t
            self.__cuda_array_interface__ = dict(t.__cuda_array_interface__, stream=stream)

    out = dlbridge.empty(16, device="cuda")
    ops.gofunc.scale(out, Producer(src, s1.cuda_stream), 2.0)
    assert np.from_dlpack(out.to("cpu")).tolist() == [10.0] * 16


@pytest.mark.gpu
def test_cuda_errors(driver):
    x = dlbridge.asarray(_f32(range(4))).to("cuda")
    with pytest.raises(TypeError, match="gofunc.normalize_rows: argument x: want float32 \\[R, K\\] C cpu writable; got .*cuda"):
        ops.gofunc.normalize_rows(dlbridge.empty((2, 2), device="cuda"))  # host memory only
    with pytest.raises(TypeError, match="argument x: want float32 \\[N\\] C cuda \\(N=4 from y\\); got float32 \\[4\\] .* cpu writable: device"):
        ops.gofunc.axpy(x, np.zeros(4, np.float32))
    if dlbridge.cuda_device_count() > 1:
        z = dlbridge.empty(4, device="cuda:1")
        with pytest.raises(ValueError, match="argument x is on cuda:1 but y is on cuda:0"):
            ops.gofunc.axpy(x, z)
        # A stream of another device is refused before the body launches
        # on it (a copy refuses it too).
        y = dlbridge.zeros(4, device="cuda")
        with pytest.raises(ValueError, match=r"^gofunc.axpy: stream= is a stream of cuda:1, but argument x is on cuda:0"):
            ops.gofunc.axpy(y, x, 2.0, stream=dlbridge.Stream(device=1))
        # A bare integer handle names no device: Go asks the driver.
        s1 = dlbridge.Stream(device=1)
        with pytest.raises(ValueError, match=r"^gofunc.axpy: stream= is a stream of cuda:1, but argument x is on cuda:0"):
            ops.gofunc.axpy(y, x, 2.0, stream=s1.cuda_stream)
        s0 = dlbridge.Stream(device=0)
        ops.gofunc.axpy(y, x, 0.0, stream=s0.cuda_stream)  # a bare handle of the tensors' device runs
        s0.synchronize()
        assert np.from_dlpack(y.to("cpu")).tolist() == [0.0] * 4


def test_overlapping_arguments_are_made_right_as_numpy_makes_ufuncs():
    """A written argument that shares memory with a read one: the body reads
    a copy, and the result is NumPy's."""
    for out, x in [(slice(1, None), slice(None, -1)), (slice(None, -1), slice(1, None)), (slice(None), slice(None))]:
        a = np.arange(8, dtype=np.float32)
        want = a.copy()
        np.multiply(want[x], 2.0, out=want[out])
        ops.gofunc.scale(a[out], a[x], 2.0)
        assert a.tolist() == want.tolist(), (out, x)


def test_overlapping_written_arguments_are_refused():
    a = np.arange(9, dtype=np.float32)
    with pytest.raises(ValueError, match="^pytest.swap: arguments a and b share memory and both are written"):
        ops.pytest.swap(a[:5], a[4:])
    assert a.tolist() == list(range(9))  # the body did not run
    b = np.zeros(5, np.float32)
    ops.pytest.swap(a[:5], b)
    assert b.tolist() == [0, 1, 2, 3, 4] and a[:5].tolist() == [0] * 5


@pytest.mark.gpu
def test_overlapping_cuda_arguments_are_made_right(driver):
    """The body reads a copy of x made on the call's stream before it runs."""
    a = np.arange(8, dtype=np.float32)
    t = dlbridge.asarray(a).to("cuda")
    s = dlbridge.Stream(device=0)
    ops.gofunc.axpy(t[1:], t[:-1], 2.0, stream=s)
    s.synchronize()
    want = a.copy()
    want[1:] = 2.0 * a[:-1] + a[1:]
    assert np.from_dlpack(t.to("cpu")).tolist() == want.tolist()


@pytest.mark.gpu
def test_cuda_result_is_pending_on_the_callers_stream(driver):
    x = dlbridge.zeros(16, device="cuda")
    s = dlbridge.Stream(device=0)
    r = ops.pytest.full_like(x, 4.0, stream=s)
    assert isinstance(r, dlbridge.Tensor) and r.device == "cuda:0"
    assert np.from_dlpack(r.to("cpu")).tolist() == [4.0] * 16


@pytest.mark.gpu
def test_a_result_outlives_the_stream_it_was_made_on(driver):
    x = dlbridge.zeros(1024, device="cuda")
    s = dlbridge.Stream(device=0)
    r = ops.pytest.full_like(x, 2.0, stream=s)
    s.synchronize()
    s._close()  # the caller's stream goes first: the result is freed on dlbridge's work stream
    del s
    gc.collect()
    assert np.from_dlpack(r.to("cpu")).tolist() == [2.0] * 1024
    del r
    gc.collect()
    dlbridge.synchronize()
    if driver.fake:
        f = driver.lib.fakecuda_stale_stream_uses
        f.restype = ctypes.c_long
        assert f() == 0, "a driver call named a destroyed stream"


# ---- PyTorch and CuPy on a real GPU ----

def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs PyTorch with a CUDA device")
    return torch


@pytest.mark.gpu
def test_torch_current_stream_reaches_go():
    torch = _torch_cuda()
    x = torch.zeros(4, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got, pending = ops.pytest.stream_of(x)
    assert got == side.cuda_stream
    explicit = torch.cuda.Stream()
    got, _ = ops.pytest.stream_of(x, stream=explicit)
    assert got == explicit.cuda_stream


@pytest.mark.gpu
def test_torch_chain_slow_producer_call_consumer_on_other_streams():
    torch = _torch_cuda()
    producer, caller, consumer = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    n = 1 << 20
    wrong = 0
    for i in range(20):
        x, y = torch.zeros(n, device="cuda"), torch.ones(n, device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(producer):
            torch.cuda._sleep(5_000_000)
            x.fill_(i + 1)
            if i % 2:
                ops.gofunc.axpy(y, x, 2.0)                 # on the producer's (current) stream
                consumer.wait_stream(producer)
            else:
                ops.gofunc.axpy(y, x, 2.0, stream=caller)  # on another stream: after the fill, by event
                consumer.wait_stream(caller)
        with torch.cuda.stream(consumer):
            ok = bool((y == 2 * (i + 1) + 1).all())
        wrong += not ok
    assert wrong == 0


@pytest.mark.gpu
def test_torch_cuda_results_come_back_as_torch():
    torch = _torch_cuda()
    x = torch.zeros(8, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        r = ops.pytest.full_like(x, 3.0)
        assert type(r) is torch.Tensor and r.device.type == "cuda"
        assert r.tolist() == [3.0] * 8


@pytest.mark.gpu
def test_cupy_arrays_and_current_stream():
    cupy = pytest.importorskip("cupy")
    if dlbridge.cuda_device_count() == 0 or getattr(dlbridge.Stream, "__module__", "") == "":
        pytest.skip("needs CUDA")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - CuPy without a usable device
        pytest.skip("CuPy has no CUDA device")
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.full(16, 2, dtype=cupy.float32)
        y = cupy.ones(16, dtype=cupy.float32)
        got, _ = ops.pytest.stream_of(x)
        assert got == s.ptr
        ops.gofunc.axpy(y, x, 3.0)
        r = ops.pytest.full_like(x, 1.5)
    assert type(r) is cupy.ndarray
    s.synchronize()
    assert y.get().tolist() == [7.0] * 16 and r.get().tolist() == [1.5] * 16


@pytest.mark.gpu
def test_torch_cuda_graph_capture_survives_a_call():
    torch = _torch_cuda()
    x = torch.full((4096,), 2.0, device="cuda")
    y = torch.zeros(4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: the module loads outside the capture
        ops.gofunc.axpy(y, x, 1.0)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    y.zero_()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ops.gofunc.axpy(y, x, 3.0)  # captured: no host synchronisation, no foreign waits
    torch.cuda.synchronize()
    assert float(y.sum()) == 0.0  # captured, not run
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert y.tolist() == [18.0] * 4096


@pytest.mark.gpu
def test_jax_and_numba_arrays_are_arguments():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(6.0, dtype=jnp.float32)
    assert ops.pytest.count(x) == 6
    a, b = ops.pytest.pair(3, result_type="jax")
    assert type(a).__module__.startswith("jax") and a.tolist() == [0.0, 1.0, 2.0]
    numba_cuda = pytest.importorskip("numba.cuda")
    if not numba_cuda.is_available():
        pytest.skip("numba sees no CUDA device")
    d = numba_cuda.to_device(np.full(8, 2, np.float32))   # the CUDA Array Interface
    y = numba_cuda.to_device(np.ones(8, np.float32))
    ops.gofunc.axpy(y, d, 3.0)
    numba_cuda.synchronize()
    assert y.copy_to_host().tolist() == [7.0] * 8
