"""__dlpack__'s integer arguments in the extension: operator.index semantics
(bool, float, str refused), each checked against its C type, the error
naming the argument, the value and the limit, and no reference leaked on an
error path; a producer whose __dlpack__ returns no capsule is named."""

import sys

import pytest

import dlbridge

class Index:
    """An integer-like object that is not an int (operator.index works)."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


# The extension's messages, worded as dlbridge._convert words them.
@pytest.mark.parametrize("kwargs, exc, message", [
    ({"stream": True}, TypeError, "dlbridge: stream=True (bool) is not an integer"),
    ({"stream": 1.0}, TypeError, "dlbridge: stream=1.0 (float) is not an integer"),
    ({"stream": "1"}, TypeError, "dlbridge: stream='1' (str) is not an integer"),
    ({"stream": 2**63}, ValueError,
     "dlbridge: stream=9223372036854775808 out of range for int64 "
     "(-9223372036854775808..9223372036854775807)"),
    ({"dl_device": (1, 2**32)}, ValueError,
     "dlbridge: dl_device[1]=4294967296 out of range for int32 (-2147483648..2147483647)"),
    ({"dl_device": (-2**31 - 1, 0)}, ValueError,
     "dlbridge: dl_device[0]=-2147483649 out of range for int32 (-2147483648..2147483647)"),
    ({"dl_device": (1.0, 0)}, TypeError, "dlbridge: dl_device[0]=1.0 (float) is not an integer"),
    ({"dl_device": (1, False)}, TypeError, "dlbridge: dl_device[1]=False (bool) is not an integer"),
    ({"dl_device": (1, 0, 0)}, TypeError, "dlbridge: dl_device=(1, 0, 0) (tuple) is not a pair of integers"),
    ({"dl_device": 1}, TypeError, "dlbridge: dl_device=1 (int) is not a pair of integers"),
    ({"max_version": (2**32, 0)}, ValueError,
     "dlbridge: max_version[0]=4294967296 out of range for uint32 (0..4294967295)"),
    ({"max_version": (1, -1)}, ValueError, "dlbridge: max_version[1]=-1 out of range for uint32 (0..4294967295)"),
    ({"max_version": ("1", "0")}, TypeError, "dlbridge: max_version[0]='1' (str) is not an integer"),
    ({"max_version": "10"}, TypeError, "dlbridge: max_version='10' (str) is not a pair of integers"),
    ({"max_version": (1, "x" * 100)}, TypeError,
     "dlbridge: max_version[1]='" + "x" * 56 + "... (str) is not an integer"),
    ({"strem": None}, TypeError, "__dlpack__() got an unexpected keyword argument 'strem'"),
])
def test_bad_arguments(kwargs, exc, message):
    t = dlbridge.zeros(2)
    args = [a for a in kwargs.values() if sys.getrefcount(a) < 100]  # not shared singletons
    before = [sys.getrefcount(a) for a in args]
    with pytest.raises(exc) as e:
        t.__dlpack__(**kwargs)
    assert str(e.value) == message
    del e
    assert [sys.getrefcount(a) for a in args] == before


def test_index_objects_accepted():
    t = dlbridge.arange(3, dtype="int32")
    cap = t.__dlpack__(stream=Index(-1), max_version=[Index(1), Index(0)], dl_device=(Index(1), Index(0)))
    u = dlbridge.from_dlpack(cap)
    assert u.tolist() == [0, 1, 2] and u.data_ptr() == t.data_ptr()
    try:
        import numpy as np
    except ImportError:
        return
    cap = t.__dlpack__(max_version=(np.int64(1), np.uint8(2)), dl_device=(np.int32(1), np.int64(0)))
    assert dlbridge.from_dlpack(cap).tolist() == [0, 1, 2]


def test_producer_returning_no_capsule():
    class Liar:
        def __dlpack__(self, **kw):
            return 42

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match=r"^dlbridge: Liar.__dlpack__\(\) returned int, not a PyCapsule$"):
        dlbridge.from_dlpack(Liar())
