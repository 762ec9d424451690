"""DLPack capsule rules, with dlbridge as producer and consumer."""

import ctypes
import gc

import pytest

import dlbridge
from dlbridge import _lib  # noqa: F401

import _pycapi

from _hostile import Versioned  # dlpack.h's DLManagedTensorVersioned


def _name(cap):
    return _pycapi.PyCapsule_GetName(cap)


def _struct(cap):
    p = _pycapi.PyCapsule_GetPointer(cap, _name(cap))
    return Versioned.from_address(p)


def test_capsule_names_follow_max_version():
    t = dlbridge.arange(3, dtype="float32")
    assert _name(t.__dlpack__()) == b"dltensor"
    assert _name(t.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert _name(t.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert _name(t.__dlpack__(max_version=(2, 1))) == b"dltensor_versioned"


def test_versioned_struct_contents():
    t = dlbridge.zeros((2, 3), dtype="int16")[:, 1:]
    cap = t.__dlpack__(max_version=(1, 3))
    m = _struct(cap)
    assert (m.major, m.minor) == (1, 3)
    assert m.flags == 0
    d = m.dl_tensor
    assert d.data == t.data_ptr()
    assert (d.device_type, d.device_id) == (1, 0)
    assert d.ndim == 2 and (d.code, d.bits, d.lanes) == (0, 16, 1)
    assert [d.shape[i] for i in range(2)] == [2, 2]
    assert [d.strides[i] for i in range(2)] == [3, 1]
    assert d.byte_offset == 0
    assert dlbridge.from_dlpack(cap).tolist() == [[0, 0], [0, 0]]


def test_consumed_capsule_is_renamed_and_cannot_be_imported_twice(stats):
    t = dlbridge.arange(4, dtype="float64")
    for mv in (None, (1, 3)):
        cap = t.__dlpack__(max_version=mv)
        u = dlbridge.from_dlpack(cap)
        assert _name(cap) in (b"used_dltensor", b"used_dltensor_versioned")
        with pytest.raises(ValueError, match="already consumed"):
            dlbridge.from_dlpack(cap)
        assert u.data_ptr() == t.data_ptr()
        u.close()


def test_unconsumed_capsule_runs_deleter_once(stats):
    before = stats()
    t = dlbridge.arange(4, dtype="float64")
    for mv in (None, (1, 0)):
        cap = t.__dlpack__(max_version=mv)
        assert stats()["live_exports"] == before["live_exports"] + 1
        del cap
        s = stats()
        assert s["live_exports"] == before["live_exports"]
    assert stats()["deleter_calls"] == before["deleter_calls"] + 2
    # A consumed capsule's destructor leaves the deleter to the consumer.
    cap = t.__dlpack__(max_version=(1, 0))
    u = dlbridge.from_dlpack(cap)
    del cap
    assert stats()["deleter_calls"] == before["deleter_calls"] + 2
    u.close()
    assert stats()["deleter_calls"] == before["deleter_calls"] + 3


def test_exported_memory_outlives_the_tensor(stats):
    t = dlbridge.arange(5, dtype="int32")
    cap = t.__dlpack__(max_version=(1, 0))
    t.close()
    u = dlbridge.from_dlpack(cap)
    assert u.tolist() == [0, 1, 2, 3, 4]


def test_readonly_flag_both_ways():
    ro = dlbridge.asarray(b"\x01\x02")
    assert ro.readonly
    cap = ro.__dlpack__(max_version=(1, 0))
    assert _struct(cap).flags & 1  # READ_ONLY
    back = dlbridge.from_dlpack(cap)
    assert back.readonly
    with pytest.raises(ValueError, match="read-only"):
        back.fill_(0)
    with pytest.raises(BufferError, match="read-only"):
        ro.__dlpack__()  # a legacy capsule cannot say read-only


def test_copy_and_dl_device():
    t = dlbridge.arange(3, dtype="float32")
    cap = t.__dlpack__(max_version=(1, 0), copy=True)
    m = _struct(cap)
    assert m.flags & 2  # IS_COPIED
    assert m.dl_tensor.data != t.data_ptr()
    c = dlbridge.from_dlpack(cap)
    assert c.is_copy and c.tolist() == [0, 1, 2]
    same = dlbridge.from_dlpack(t.__dlpack__(max_version=(1, 0), copy=False, dl_device=(1, 0)))
    assert same.data_ptr() == t.data_ptr() and not same.is_copy
    if not dlbridge.cuda_available():
        with pytest.raises(BufferError, match="cuda"):
            t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0), copy=False)
    c2 = dlbridge.from_dlpack(t, copy=True)
    assert c2.data_ptr() != t.data_ptr() and c2.tolist() == [0, 1, 2]


def test_stream_rules_on_host():
    t = dlbridge.zeros(2)
    t.__dlpack__(stream=None)
    t.__dlpack__(stream=-1)
    with pytest.raises(ValueError, match="stream=5"):
        t.__dlpack__(stream=5)


def test_negative_strides_need_a_versioned_capsule():
    r = dlbridge.arange(4, dtype="int32")[::-1]
    with pytest.raises(BufferError, match="negative strides"):
        r.__dlpack__()
    u = dlbridge.from_dlpack(r.__dlpack__(max_version=(1, 0)))
    assert u.strides == (-1,) and u.tolist() == [3, 2, 1, 0]


def test_not_a_dlpack_capsule():
    import datetime

    with pytest.raises(TypeError, match="not a DLPack capsule"):
        dlbridge.from_dlpack(datetime.datetime_CAPI)


def test_deleter_after_many_exchanges(stats):
    before = stats()
    t = dlbridge.arange(8, dtype="uint8")
    for _ in range(1000):
        dlbridge.from_dlpack(t.__dlpack__(max_version=(1, 0))).close()
        t.__dlpack__()
    s = stats()
    assert s["live_exports"] == before["live_exports"]
    assert s["deleter_calls"] == before["deleter_calls"] + 2000
    assert s["live_tensors"] == before["live_tensors"] + 1
