"""The CPython fast path (the C base type of dlbridge.Tensor), and a run of
the suite through the pure-ctypes path (DLBRIDGE_NO_FASTPATH=1)."""

import ctypes
import gc
import os
import subprocess
import sys

import pytest

import dlbridge
from dlbridge import _lib

fast = pytest.mark.skipif(not dlbridge.fast_path, reason="the CPython fast path is off")


@fast
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


@fast
def test_exchange_api_capsule():
    api = type(dlbridge.zeros(1)).__dlpack_c_exchange_api__
    assert _lib.PyCapsule_GetName(api) == b"dlpack_exchange_api"
    t = dlbridge.arange(4, dtype="float32")
    u = dlbridge.from_dlpack(t)  # through the exchange API, ours on both sides
    assert u.data_ptr() == t.data_ptr() and u.tolist() == [0, 1, 2, 3]


@fast
def test_exchange_api_functions_directly():
    class Header(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev", ctypes.c_void_p)]

    class API(ctypes.Structure):
        _fields_ = [("header", Header), ("alloc", ctypes.c_void_p), ("from_py", ctypes.c_void_p),
                    ("to_py", ctypes.c_void_p), ("dltensor", ctypes.c_void_p), ("stream", ctypes.c_void_p)]

    cap = dlbridge.Tensor.__dlpack_c_exchange_api__
    api = API.from_address(_lib.PyCapsule_GetPointer(cap, b"dlpack_exchange_api"))
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


@fast
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


@fast
def test_dlpack_kwargs_errors():
    t = dlbridge.zeros(2)
    with pytest.raises(TypeError, match="keyword"):
        t.__dlpack__(None)
    with pytest.raises(TypeError, match="unexpected keyword"):
        t.__dlpack__(strem=None)
    with pytest.raises(TypeError):
        t.__dlpack__(max_version="x")


@pytest.mark.skipif(os.environ.get("DLBRIDGE_NO_FASTPATH") == "1", reason="already the ctypes path")
def test_suite_through_ctypes_path():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, DLBRIDGE_NO_FASTPATH="1")
    files = [os.path.join(here, f) for f in ("test_basic.py", "test_capsule.py", "test_numpy.py", "test_torch.py")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"] + files,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_fast_path_is_on_where_it_can_be():
    # On wherever the extension is built (also on a free-threaded CPython,
    # which enables the GIL for it); a checkout without `make ext` has none.
    import importlib.util

    if os.environ.get("DLBRIDGE_NO_FASTPATH"):
        assert not dlbridge.fast_path
    elif importlib.util.find_spec("dlbridge._core") or os.environ.get("DLBRIDGE_EXPECT_INSTALLED") == "1":
        assert dlbridge.fast_path
    else:
        pytest.skip("the extension dlbridge._core is not built (make ext)")
