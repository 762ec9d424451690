"""The extension's own paths: the C base type of dlbridge.Tensor, DLPack's
C exchange API, and the functions of the exports (_core.dlb_x)."""

import ctypes
import gc

import pytest

import dlbridge
from dlbridge import _lib  # noqa: F401

import _pycapi

def test_buffer_protocol_export():
    t = dlbridge.arange(6, dtype="int16")
    m = memoryview(t)
    assert m.format == "h" and m.shape == (6,) and m.strides == (2,) and not m.readonly
    m[1] = 100
    assert t[1].item() == 100
    s = memoryview(dlbridge.zeros((3, 4), dtype="float64").T)
    assert s.shape == (4, 3) and s.strides == (8, 32) and not s.c_contiguous
    ro = memoryview(dlbridge.asarray(b"xyz"))
    assert ro.readonly and ro.tobytes() == b"xyz"
    with pytest.raises(BufferError, match="buffer-protocol format"):
        memoryview(dlbridge.zeros(2, dtype="bfloat16"))
    t.close()  # the memoryview pins the memory
    assert m.tolist()[1] == 100


def test_exchange_api_capsule():
    api = type(dlbridge.zeros(1)).__dlpack_c_exchange_api__
    assert _pycapi.PyCapsule_GetName(api) == b"dlpack_exchange_api"
    t = dlbridge.arange(4, dtype="float32")
    u = dlbridge.from_dlpack(t)  # through the exchange API, ours on both sides
    assert u.data_ptr() == t.data_ptr() and u.tolist() == [0, 1, 2, 3]


def test_exchange_api_functions_directly():
    class Header(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev", ctypes.c_void_p)]

    class API(ctypes.Structure):
        _fields_ = [("header", Header), ("alloc", ctypes.c_void_p), ("from_py", ctypes.c_void_p),
                    ("to_py", ctypes.c_void_p), ("dltensor", ctypes.c_void_p), ("stream", ctypes.c_void_p)]

    cap = dlbridge.Tensor.__dlpack_c_exchange_api__
    api = API.from_address(_pycapi.PyCapsule_GetPointer(cap, b"dlpack_exchange_api"))
    assert (api.header.major, api.header.minor) == (1, 3)
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(api.from_py)
    to_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.py_object))(api.to_py)
    stream = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(api.stream)
    t = dlbridge.arange(3, dtype="int64")
    mt = ctypes.c_void_p()
    assert from_py(t, ctypes.byref(mt)) == 0 and mt.value
    out = ctypes.py_object()
    assert to_py(mt.value, ctypes.byref(out)) == 0
    u = out.value
    assert isinstance(u, dlbridge.Tensor) and u.data_ptr() == t.data_ptr() and u.tolist() == [0, 1, 2]
    s = ctypes.c_void_p(123)
    assert stream(1, 0, ctypes.byref(s)) == 0 and not s.value  # CPU: no stream
    with pytest.raises(TypeError, match="not a dlbridge.Tensor"):
        from_py(42, ctypes.byref(mt))


def test_close_with_live_exports(stats):
    before = stats()
    t = dlbridge.arange(5, dtype="float32")
    caps = [t.__dlpack__(max_version=(1, 3)) for _ in range(3)]
    t.close()
    assert stats()["live_exports"] == before["live_exports"] + 3
    u = dlbridge.from_dlpack(caps[0])
    assert u.tolist() == [0, 1, 2, 3, 4]
    del caps, u
    s = stats()
    assert s["live_exports"] == before["live_exports"]
    assert s["live_tensors"] == before["live_tensors"]


def test_dlpack_kwargs_errors():
    t = dlbridge.zeros(2)
    with pytest.raises(TypeError, match="keyword"):
        t.__dlpack__(None)
    with pytest.raises(TypeError, match="unexpected keyword"):
        t.__dlpack__(strem=None)
    with pytest.raises(TypeError):
        t.__dlpack__(max_version="x")


def test_export_functions_check_their_arguments():
    core = _lib._core
    with pytest.raises(TypeError, match="dlb_close takes 1 arguments"):
        core.dlb_close()
    with pytest.raises(ValueError, match=r"h=-1 out of range for uint64 \(0\.\.18446744073709551615\)"):
        core.dlb_close(-1)
    with pytest.raises(ValueError, match="devID=4294967296 out of range for int32"):
        core.dlb_empty(b"float32", 1, (2,), 1, 2**32, 0)
    with pytest.raises(TypeError, match=r"devID=True \(bool\) is not an integer"):
        core.dlb_empty(b"float32", 1, (2,), 1, True, 0)
    with pytest.raises(TypeError, match=r"shape\[1\]=2.0 \(float\) is not an integer"):
        core.dlb_empty(b"float32", 2, (2, 2.0), 1, 0, 0)
    with pytest.raises(TypeError, match="dtype must be bytes or str"):
        core.dlb_empty(3, 1, (2,), 1, 0, 0)
    with pytest.raises(ValueError, match="shape has 65 items, at most 64"):
        core.dlb_empty(b"float32", 65, (1,) * 65, 1, 0, 0)
    with pytest.raises(TypeError, match="unknown dtype"):  # the error class of Go's error
        core.dlb_empty(b"nope", 1, (2,), 1, 0, 0)
    t = core.dlb_empty("int16", 2, [2, 3], 1, 0, 1)
    assert isinstance(t, dlbridge.Tensor) and t.shape == (2, 3) and t.sum() == 0
    assert core.dlb_typestr(0, 16, 1, 0) == "<i2" and core.dlb_parse_dtype(b"int16") == (0, 16, 1)


def test_check_raises_by_error_class():
    dlbridge.arange(1)  # loaded
    _lib._core.check(0)
    with pytest.raises(IndexError):
        _lib._core.check(6)
