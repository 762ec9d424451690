"""Integers that cross from Python into C, checked on the way in.

C casts reduce an out-of-range int modulo 2**N, and int() takes floats and
strings: a shape of 2**64 + 2 would become 2, 2.7 would become 2 and "4"
would become 4. Every integer argument of the package goes through here or
through the extension's int_arg (_core.c), which writes the same messages
(__dlpack__'s stream, dl_device, max_version, and every integer parameter
of a _core.dlb_x function). It is taken with operator.index semantics, as
the Array API takes integers: bool (Python's, NumPy's, a 0-d bool tensor),
float, str and NumPy floats are refused with TypeError; NumPy integer
scalars are accepted. Then it is range-checked for the C type it will be
stored in (ValueError, or the class the caller asks for). Messages name the
field, the value and the limit:

    dlbridge: shape[1]=18446744073709551618 out of range for int64 (0..9223372036854775807)
    dlbridge: shape[0]=2.7 (float) is not an integer
    dlbridge: dl_device=5 (int) is not a pair of integers
"""

import operator

from . import _lib

# (name, lowest, highest) of the C types values are stored in.
INT32 = ("int32", -(2**31), 2**31 - 1)
UINT32 = ("uint32", 0, 2**32 - 1)
INT64 = ("int64", -(2**63), 2**63 - 1)
UINT64 = ("uint64", 0, 2**64 - 1)

_REPR_MAX = 60


def show(value):
    """repr(value), cut short: a hostile value may be a megabyte string."""
    try:
        r = repr(value)
    except Exception:  # a hostile __repr__
        r = "<%s object>" % type(value).__name__
    return r if len(r) <= _REPR_MAX else r[: _REPR_MAX - 3] + "..."


def _is_bool(value):
    """True for bool, numpy.bool_ and 0-d bool arrays or tensors: their
    __index__ works, but a flag is not a size (the Array API refuses them)."""
    if isinstance(value, bool):
        return True
    dt = getattr(value, "dtype", None)
    return dt is not None and not isinstance(value, type) and str(dt) in ("bool", "torch.bool")


def not_integer(field, value):
    return TypeError("dlbridge: %s=%s (%s) is not an integer" % (field, show(value), type(value).__name__))


def out_of_range(field, v, ctype, lo=None, hi=None, exc=ValueError):
    name, tlo, thi = ctype
    return exc("dlbridge: %s=%d out of range for %s (%d..%d)"
               % (field, v, name, tlo if lo is None else lo, thi if hi is None else hi))


def _plain_int(value):
    """An int or an int subclass other than bool (IntEnum members)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _index(value, field):
    """operator.index(value), bools refused, with our TypeError."""
    if type(value) is int:  # the common case, first (a bool's type is bool)
        return value
    if _is_bool(value):
        raise not_integer(field, value)
    try:
        return operator.index(value)
    except TypeError:
        raise not_integer(field, value) from None


def integer(value, field, ctype=INT64, lo=None, hi=None, exc=ValueError):
    """value as a Python int within [lo, hi] (by default the range of
    ctype); TypeError when it is not an integer, exc when out of range."""
    v = _index(value, field)
    _, tlo, thi = ctype
    if not (tlo if lo is None else lo) <= v <= (thi if hi is None else hi):
        raise out_of_range(field, v, ctype, lo, hi, exc)
    return v


def clamped(value, field, lo, hi):
    """value as an int, clamped into [lo, hi]: for slice bounds, where any
    bound past the largest extent means the same as that extent."""
    v = _index(value, field)
    return lo if v < lo else hi if v > hi else v


def is_integer(value):
    """Whether value would be taken as one integer (not a sequence)."""
    return not _is_bool(value) and hasattr(type(value), "__index__")


def sequence(value, field, max_len=None):
    """value as a tuple, for a field that is a tuple or list of integers
    (a shape, strides, a permutation); at most max_len items."""
    if not isinstance(value, (tuple, list, range)):
        raise TypeError("dlbridge: %s=%s (%s) is not a tuple of integers" % (field, show(value), type(value).__name__))
    if max_len is not None and len(value) > max_len:
        raise ValueError("dlbridge: %s has %d items, at most %d" % (field, len(value), max_len))
    return tuple(value)


def integers(values, field, ctype=INT64, lo=None, hi=None):
    """A tuple of integers (see integer), named field[0], field[1], ...
    Exact ints in range pass without a name being formatted for them: this
    runs on every exchange (shapes, strides, __dlpack_device__)."""
    _, tlo, thi = ctype
    lo = tlo if lo is None else lo
    hi = thi if hi is None else hi
    for v in values:
        if type(v) is not int or not lo <= v <= hi:
            return tuple(integer(v, "%s[%d]" % (field, i), ctype, lo, hi) for i, v in enumerate(values))
    return tuple(values)


def sizes(values, field="shape"):
    """Extents: integers in 0..INT64_MAX."""
    return integers(values, field, INT64, 0)


def pair(value, field, ctype):
    """A (first, second) pair of integers such as dl_device or max_version."""
    if type(value) is tuple and len(value) == 2:
        a, b = value
        _, lo, hi = ctype
        if type(a) is int and type(b) is int and lo <= a <= hi and lo <= b <= hi:
            return value  # the common case, without a call per item
        if _plain_int(a) and _plain_int(b) and lo <= a <= hi and lo <= b <= hi:
            return (int(a), int(b))  # IntEnum members: PyTorch's __dlpack_device__
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError("dlbridge: %s=%s (%s) is not a pair of integers" % (field, show(value), type(value).__name__))
    return integers(value, field, ctype)


def as_int64_bits(v):
    """A uint64 value (a pointer-sized handle) as the int64 with the same
    bits, for a C parameter declared int64_t."""
    return v - 2**64 if v > INT64[2] else v


# Device strings parsed before (to("cuda") runs on every transfer); a few
# dozen at most are kept.
_parsed = {}


def device(device):
    """(device_type, device_id) for "cpu", "cuda", "cuda:N", a torch.device,
    a (type, id) pair such as __dlpack_device__() returns, or None."""
    if type(device) is str:
        d = _parsed.get(device)
        if d is not None:
            return d
        d = _parse_device(device)
        if len(_parsed) < 64:
            _parsed[device] = d
        return d
    return _parse_device(device)


def _parse_device(device):
    if device is None:
        return None
    if isinstance(device, tuple) and len(device) == 2:
        return pair(device, "device", INT32)
    text = str(device).strip().lower()
    name, _, idx = text.partition(":")
    code = _lib.DEVICE_CODES.get(name)
    if code is None:
        raise ValueError(
            "dlbridge: unknown device %r (want 'cpu', 'cuda' or 'cuda:N')" % (device,)
        )
    if idx:
        if not (idx.isascii() and idx.isdigit()):
            raise ValueError("dlbridge: device %r: %r is not a device number" % (device, idx))
        i = integer(int(idx), "device %r: id" % (device,), INT32, 0)
    else:
        i = 0
    if code == _lib.CPU and i != 0:
        raise ValueError("dlbridge: device %r: the host is 'cpu' (device 0)" % (device,))
    return (code, i)
