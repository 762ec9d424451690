"""Shared pieces of the hostile-input tests (test_border.py, test_props.py):
DLPack structures built through ctypes with counting deleters, objects that
expose an interface dict, and checks that nothing leaked."""

import contextlib
import ctypes
import gc
import sys

import pytest

import dlbridge

def error_of(fn, *args, **kwargs):
    """(exception class, message) of fn(*args, **kwargs), or (None, result)
    when it returns. The exception and its traceback are dropped before this
    returns, so that reference counts can be compared afterwards."""
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - classified by the caller
        return type(e), str(e)
    return None, r


def live_tensors():
    return dlbridge.debug_stats()["live_tensors"]


def _state(objs):
    return [sys.getrefcount(o) for o in objs], live_tensors()


@contextlib.contextmanager
def balanced(*objs):
    """Assert that the reference counts of objs and the number of live tensor
    handles are the same after the block as before it. A full collection
    runs only when they differ (it costs milliseconds; nothing here should
    need one, but a cycle that the collector frees is no leak)."""
    before = _state(objs)
    yield
    after = _state(objs)
    if after != before:
        gc.collect()
        after = _state(objs)
    assert after == before, "reference counts, live tensors changed: %s -> %s" % (before, after)


class Iface:
    """An object that exposes nothing but an interface dict: kind 0 is
    __cuda_array_interface__, kind 1 __array_interface__."""

    def __init__(self, d, kind=1):
        setattr(self, "__cuda_array_interface__" if kind == 0 else "__array_interface__", d)


class Producer:
    """A __dlpack__ producer that returns whatever it was given."""

    def __init__(self, result, device=(1, 0)):
        self.result, self.device = result, device

    def __dlpack__(self, **kwargs):
        return self.result

    def __dlpack_device__(self):
        return self.device


# ---- DLPack structures (dlpack.h), built by hand ----

class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Versioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class Legacy(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


# Our own handle on CPython's capsule functions, declared for raw pointers:
# the capsule destructor runs while the capsule is being freed.
_api = ctypes.PyDLL(None)
_get_name = _api.PyCapsule_GetName
_get_name.restype, _get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
_get_pointer = _api.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
_new_capsule = _api.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# The managed tensors of live capsules, by address: what the destructor of
# an unconsumed capsule hands back to its producer.
_unconsumed = {}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(cap):
    """What producers do: a capsule nobody consumed deletes its tensor; a
    consumed one (renamed used_*) leaves that to the consumer."""
    name = _get_name(cap)
    if name in (b"dltensor", b"dltensor_versioned"):
        p = _get_pointer(cap, name)
        owner = _unconsumed.get(p)
        if owner is not None:
            owner.delete(p)


class CapsuleFactory:
    """Makes DLPack capsules over memory of its own and counts, per managed
    tensor, how many times the deleter ran."""

    def __init__(self, nbytes=256):
        self.buf = (ctypes.c_uint8 * nbytes)(*[i % 251 for i in range(nbytes)])
        self.calls = {}
        self._keep = {}
        self._deleter = DELETER(self._deleted)

    @property
    def address(self):
        return ctypes.addressof(self.buf)

    def _deleted(self, p):
        self.calls[p] = self.calls.get(p, 0) + 1
        _unconsumed.pop(p, None)

    def delete(self, p):
        self._deleted(p)

    def capsule(self, shape, strides=None, *, byte_offset=0, versioned=True, dtype=(2, 32, 1),
                major=1, minor=3, flags=0, data=None, device=(1, 0), ndim=None):
        """A capsule; every field may be hostile. data None means the
        factory's buffer; ndim None means len(shape)."""
        nd = len(shape) if ndim is None else ndim
        sh = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        st = (ctypes.c_int64 * max(len(strides), 1))(*strides) if strides is not None else None
        code, bits, lanes = dtype
        t = DLTensor(self.address if data is None else data, device[0], device[1], nd, code, bits, lanes,
                     ctypes.cast(sh, ctypes.POINTER(ctypes.c_int64)),
                     ctypes.cast(st, ctypes.POINTER(ctypes.c_int64)) if st is not None else None, byte_offset)
        if versioned:
            m = Versioned(major, minor, None, self._deleter, flags, t)
            name = b"dltensor_versioned"
        else:
            m = Legacy(t, None, self._deleter)
            name = b"dltensor"
        p = ctypes.addressof(m)
        self._keep[p] = (sh, st, m)
        self.calls[p] = 0
        _unconsumed[p] = self
        return _new_capsule(p, name, ctypes.cast(_capsule_destructor, ctypes.c_void_p).value), p
