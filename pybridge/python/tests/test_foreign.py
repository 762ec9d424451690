"""Imports of hand-made DLPack tensors: byte_offset, NULL strides, broadcast
strides, and malformed tensors that must be refused with the deleter run
exactly once."""

import ctypes
import gc

import pytest

import dlbridge
from dlbridge import _lib  # noqa: F401

import _pycapi

from _hostile import DELETER, DLTensor, Legacy, Versioned  # dlpack.h's structures


DELETER_V = DELETER


class Producer:
    """Makes DLPack capsules over a ctypes buffer and counts deleter calls."""

    def __init__(self, values, ctype=ctypes.c_float):
        self.buf = (ctype * len(values))(*values)
        self.calls = 0
        self.keep = []
        self.deleter = DELETER_V(self._deleted)

    def _deleted(self, p):
        self.calls += 1

    def capsule(self, shape, strides=None, byte_offset=0, versioned=True, code=2, bits=32, lanes=1,
                major=1, flags=0, data=True, device=(1, 0)):
        nd = len(shape)
        sh = (ctypes.c_int64 * max(nd, 1))(*shape)
        st = (ctypes.c_int64 * max(nd, 1))(*strides) if strides is not None else None
        t = DLTensor(ctypes.addressof(self.buf) if data else None, device[0], device[1], nd, code, bits, lanes,
                     ctypes.cast(sh, ctypes.POINTER(ctypes.c_int64)),
                     ctypes.cast(st, ctypes.POINTER(ctypes.c_int64)) if st is not None else None, byte_offset)
        if versioned:
            m = Versioned(major, 3, None, self.deleter, flags, t)
            name = _pycapi.NAME_VERSIONED
        else:
            m = Legacy(t, None, self.deleter)
            name = _pycapi.NAME_LEGACY
        self.keep += [sh, st, m]
        return _pycapi.PyCapsule_New(ctypes.addressof(m), name, None)


def test_byte_offset_and_null_strides():
    p = Producer([0, 1, 2, 3, 4, 5])
    t = dlbridge.from_dlpack(p.capsule([2, 2], byte_offset=8, versioned=False))  # legacy: NULL strides allowed
    assert t.data_ptr() == ctypes.addressof(p.buf) + 8
    assert t.strides == (2, 1) and t.tolist() == [[2, 3], [4, 5]]
    t.fill_(-1)
    assert list(p.buf) == [0, 1, -1, -1, -1, -1]
    t.close()
    assert p.calls == 1


def test_broadcast_and_negative_strides():
    p = Producer([1, 2, 3])
    b = dlbridge.from_dlpack(p.capsule([4, 3], strides=[0, 1]))
    assert b.strides == (0, 1) and b.tolist() == [[1, 2, 3]] * 4 and b.sum() == 24
    r = dlbridge.from_dlpack(p.capsule([3], strides=[-1], byte_offset=8))
    assert r.tolist() == [3, 2, 1]
    del b, r
    gc.collect()
    assert p.calls == 2


def test_flags_on_import():
    p = Producer([1, 2])
    ro = dlbridge.from_dlpack(p.capsule([2], strides=[1], flags=1))  # READ_ONLY
    assert ro.readonly
    with pytest.raises(ValueError, match="read-only"):
        ro.fill_(0)
    cp = dlbridge.from_dlpack(p.capsule([2], strides=[1], flags=2))  # IS_COPIED
    assert cp.is_copy and not cp.readonly


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(shape=[2], strides=[1], major=2), "version"),
        (dict(shape=[1] * 65, strides=[1] * 65), "ndim"),
        (dict(shape=[-2], strides=[1]), "shape"),
        (dict(shape=[2], strides=[1], code=99), "code"),
        (dict(shape=[2], strides=[1], bits=33), "bits"),
        (dict(shape=[2], strides=[1], lanes=0), "lanes"),
        (dict(shape=[2], strides=[1], data=False), "NULL"),
        (dict(shape=[2], strides=[1], device=(99, 0)), "device"),
        (dict(shape=[2], strides=[1], flags=1 << 7), "flag"),
        (dict(shape=[3, 2 ** 62], strides=[2 ** 62, 4]), "overflow"),
    ],
)
def test_malformed_tensors_are_refused_and_deleted_once(kwargs, words):
    p = Producer([0, 0])
    cap = p.capsule(**kwargs)
    with pytest.raises(BufferError) as e:
        dlbridge.from_dlpack(cap)
    assert words in str(e.value).lower() or words in str(e.value)
    assert p.calls == 1
    del cap
    gc.collect()
    assert p.calls == 1  # consumed: the capsule destructor leaves it alone


def test_null_deleter_is_legal():
    buf = (ctypes.c_double * 2)(3.0, 4.0)
    sh = (ctypes.c_int64 * 1)(2)
    m = Legacy(DLTensor(ctypes.addressof(buf), 1, 0, 1, 2, 64, 1, ctypes.cast(sh, ctypes.POINTER(ctypes.c_int64)),
                        None, 0), None, DELETER_V())
    t = dlbridge.from_dlpack(_pycapi.PyCapsule_New(ctypes.addressof(m), _pycapi.NAME_LEGACY, None))
    assert t.sum() == 7.0
    t.close()
