"""Go functions for Python: dlbridge.ops.<ns>.<name> and load_library.

A Go package registers functions with pyfunc.Register (package
github.com/dlbridge/dlbridge/pybridge/pyfunc); the library that links it
with dlbridge's C ABI (`dlbridge build -o lib.so PKG...`) is loaded with
load_library(path) or DLBRIDGE_LIB, and its functions appear here, as
torch.ops has them::

    dlbridge.load_library("build/libgofunc.so")
    dlbridge.ops.gofunc.scale(out, x, 2.0)

A tensor argument is anything dlbridge.asarray takes, never copied; the
results come back as the caller's tensor type (PyTorch in, PyTorch out;
CuPy, NumPy likewise; otherwise dlbridge.Tensor), or as result_type=
says ("torch", "cupy", "numpy", "dlbridge"). On CUDA the Go body runs on
stream= or the caller's current stream (PyTorch's, CuPy's), after the
arguments' pending writes, without the GIL.

One Go runtime per process: dlbridge loads one library. A second, different
Go-built library (already mapped into the process, or asked for after
dlbridge loaded its own) is refused with both paths named.
"""

import ctypes
import json
import os
import sys

from . import _convert as C
from . import _lib

# Parameter and result kinds, as _core's make_function numbers them.
_KINDS = {"tensor": 1, "bool": 2, "int": 3, "uint": 4, "float": 5, "str": 6}
_WRITABLE = 0x100  # or'ed into a writable tensor's kind (_core's P_WRITABLE)
_PY_TYPES = {"tensor": "Tensor", "bool": "bool", "int": "int", "uint": "int", "float": "float", "str": "str"}

# dlb_arg kinds (capi.h).
_ARG_MISSING, _ARG_HANDLE, _ARG_MEMORY, _ARG_INT, _ARG_UINT, _ARG_FLOAT, _ARG_BOOL, _ARG_STR = range(8)
_RES_TENSOR = 1


class _Arg(ctypes.Structure):
    """dlb_arg (capi.h)."""

    _fields_ = [
        ("kind", ctypes.c_int32), ("ndim", ctypes.c_int32), ("handle", ctypes.c_uint64),
        ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
        ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
        ("flags", ctypes.c_uint32),
        ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("stream", ctypes.c_int64), ("i", ctypes.c_int64), ("u", ctypes.c_uint64), ("f", ctypes.c_double),
        ("s", ctypes.c_char_p), ("slen", ctypes.c_int64), ("kept", ctypes.c_uint64),
    ]


class _Result(ctypes.Structure):
    """dlb_result (capi.h)."""

    _fields_ = [
        ("kind", ctypes.c_int32), ("_pad", ctypes.c_int32), ("handle", ctypes.c_uint64),
        ("i", ctypes.c_int64), ("u", ctypes.c_uint64), ("f", ctypes.c_double),
        ("s", ctypes.c_void_p), ("slen", ctypes.c_int64),
    ]


_func_count = _lib._declare("dlb_func_count", ctypes.c_int32)
_func_describe = _lib._declare("dlb_func_describe", ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p,
                               ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))
_call = _lib._declare("dlb_call", ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(_Arg),
                      ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(_Result),
                      ctypes.POINTER(_lib.Info))
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def load_library(path):
    """Load the dlbridge library at path, one built with `dlbridge build`
    that links Go packages' registered functions beside dlbridge's ABI (as
    torch.ops.load_library loads operator libraries). Its functions appear
    under dlbridge.ops. The library replaces dlbridge's own, so call this
    before dlbridge's first use; loading the library already in use again
    does nothing, and any other is refused (one Go runtime per process)."""
    _lib.use_library(os.fspath(path))
    _lib.load()
    ops._refresh()
    return _lib.path


def _describe_all():
    out = []
    n = _func_count()
    if n < 0:
        msg = _lib.last_error()
        raise ImportError("%s (library %s)" % (msg.decode("utf-8", "replace") if msg else "registration failed", _lib.path))
    size = ctypes.c_int64(0)
    for i in range(n):
        cap = 4096
        while True:
            buf = ctypes.create_string_buffer(cap)
            _lib.check(_func_describe(i, buf, cap, ctypes.byref(size)))
            if size.value < cap:
                break
            cap = size.value + 1
        out.append(json.loads(buf.value.decode("utf-8")))
    return out


def _signature_text(d):
    parts = []
    for p in d["params"]:
        if p["has_default"]:
            parts.append("%s=%s" % (p["name"], _py_literal(p)))
        else:
            parts.append(p["name"])
    parts.append("*")
    parts.append("stream=None")
    parts.append("result_type=None")
    return "(%s)" % ", ".join(parts)


def _py_literal(p):
    v = p.get("default")
    if p["kind"] == "bool":
        return "True" if v else "False"
    if p["kind"] == "str":
        return repr(v if v is not None else "")
    if p["kind"] == "float":
        return repr(float(v if v is not None else 0.0))
    return repr(int(v if v is not None else 0))


def _doc(d):
    lines = []
    if d["doc"]:
        lines += [d["doc"], ""]
    lines += ["Parameters", "----------"]
    for p in d["params"]:
        t = _PY_TYPES[p["kind"]]
        if p["kind"] == "tensor":
            lines.append("%s : Tensor, %s" % (p["name"], p["spec"]))
        else:
            extra = " = %s" % _py_literal(p) if p["has_default"] else ""
            lines.append("%s : %s (Go %s)%s" % (p["name"], t, p["go_type"], extra))
    lines.append("stream : optional, the CUDA stream to run on (default: the current stream of the tensors' framework)")
    lines.append("result_type : optional, %s (default: the type of the first tensor)" % RESULT_TYPES_TEXT)
    if d["results"]:
        lines += ["", "Returns", "-------"]
        lines.append(", ".join(_PY_TYPES[r["kind"]] for r in d["results"]))
    lines += ["", "Go function %s, registered as %s" % (d["go_name"], d["schema"])]
    return "\n".join(lines)


def _as_tensor(obj):
    from ._tensor import asarray
    return asarray(obj)


def _stream_of(obj):
    """(handle, device) of an explicit stream= (device -1 when the object
    does not say)."""
    from ._stream import copy_stream, _stream_device
    return (copy_stream(obj, ()), _stream_device(obj, -1))


# The frameworks result_type= names: help(), the errors below and the stubs
# of dlbridge.stubgen read them here.
RESULT_TYPES = ("torch", "cupy", "numpy", "jax", "dlbridge")
RESULT_TYPES_TEXT = ", ".join(repr(n) for n in RESULT_TYPES[:-1]) + " or " + repr(RESULT_TYPES[-1])


def _framework(like, result_type):
    if result_type is not None:
        name = getattr(result_type, "__name__", result_type)
        if not isinstance(name, str):
            raise TypeError("dlbridge: result_type must be %s or a module, got %r"
                            % (RESULT_TYPES_TEXT.replace(" or ", ", "), result_type))
        name = name.partition(".")[0]
        if name not in RESULT_TYPES:
            raise ValueError("dlbridge: result_type=%r: want %s" % (result_type, RESULT_TYPES_TEXT))
        return name
    if like is None:
        return "dlbridge"
    module = (getattr(type(like), "__module__", None) or "").partition(".")[0]
    if module in ("torch", "cupy", "numpy", "jax", "jaxlib"):
        return "jax" if module == "jaxlib" else module
    return "dlbridge"


def _convert(t, fw):
    from ._tensor import Tensor
    if fw == "dlbridge" or not isinstance(t, Tensor):
        return t
    mod = sys.modules.get(fw) or __import__(fw)
    if fw == "numpy":
        try:
            return mod.from_dlpack(t)
        except (BufferError, TypeError, ValueError, RuntimeError, AttributeError):
            return mod.asarray(t)  # NumPy before 1.25 refuses some dtypes and read-only tensors
    if fw == "jax":
        import jax.dlpack
        return jax.dlpack.from_dlpack(t)
    return mod.from_dlpack(t)


def _finish(results, like, result_type):
    """The results of a call: tensors as the caller's framework's; one result
    alone, several as a tuple."""
    fw = _framework(like, result_type)
    out = tuple(_convert(r, fw) for r in results)
    return out[0] if len(out) == 1 else out


class GoFunction:
    """A registered Go function on the ctypes path (the C extension makes a
    builtin function instead)."""

    def __init__(self, d):
        self._d = d
        self._index = d["index"]
        self._params = d["params"]
        self._names = [p["name"] for p in d["params"]]
        self._results = d["results"]
        self.__name__ = d["name"].rpartition(".")[2]
        self.__qualname__ = d["name"]
        self.__module__ = "dlbridge.ops." + d["name"].rpartition(".")[0]
        self.__doc__ = _doc(d)
        self.__text_signature__ = _signature_text(d)

    @property
    def __signature__(self):
        return _signature(self._d)

    def __repr__(self):
        return "<Go function %s>" % self._d["name"]

    def __call__(self, *args, stream=None, result_type=None, **kwargs):
        d = self._d
        n = len(self._params)
        name = d["name"]
        if len(args) > n:
            raise TypeError("%s() takes %d positional arguments but %d were given" % (name, n, len(args)))
        slots = list(args) + [_MISSING] * (n - len(args))
        for k, v in kwargs.items():
            try:
                i = self._names.index(k)
            except ValueError:
                raise TypeError("%s() got an unexpected keyword argument '%s'" % (name, k)) from None
            if slots[i] is not _MISSING:
                raise TypeError("%s() got multiple values for argument '%s'" % (name, k))
            slots[i] = v
        for i, p in enumerate(self._params):
            if slots[i] is _MISSING and not p["has_default"]:
                raise TypeError("%s() missing required argument '%s' (pos %d)" % (name, p["name"], i + 1))
        cargs = (_Arg * max(n, 1))()
        keep = []
        like = None
        h, dev = 0, -1
        if stream is not None:
            h, dev = _stream_of(stream)
        from ._tensor import _stream_probe
        for i, p in enumerate(self._params):
            v = slots[i]
            a = cargs[i]
            if v is _MISSING:
                continue
            if p["kind"] == "tensor":
                try:
                    t = _as_tensor(v)
                except (TypeError, ValueError, BufferError) as e:
                    raise type(e)("%s: argument %s: want a tensor, got %s (%s)" % (name, p["name"], type(v).__name__, e)) from None
                keep.append(t)
                a.kind, a.handle = _ARG_HANDLE, t.handle
                if like is None:
                    like = v
                dev_type, dev_id = t.__dlpack_device__()
                if stream is None and not h and dev_type == _lib.CUDA:
                    probe = _stream_probe(type(v)) if v is not t else None
                    s = probe(dev_id) if probe is not None else None
                    if s:
                        h = s
                continue
            _scalar_arg(name, p, v, a, keep)
        nr = len(self._results)
        res = (_Result * max(nr, 1))()
        infos = (_lib.Info * max(nr, 1))()
        rc = _call(self._index, n, cargs, h, dev, nr, res, infos)
        if any(p.get("writable") for p in self._params):
            from ._tensor import _note_write_in_flight
            _note_write_in_flight()  # a written tensor's pending stream changed
        out = []
        for r in range(nr):
            x = res[r]
            if x.kind == _RES_TENSOR:
                from ._tensor import _from_handle
                out.append(_from_handle(x.handle))
            elif x.kind == _ARG_BOOL:
                out.append(bool(x.i))
            elif x.kind == _ARG_INT:
                out.append(x.i)
            elif x.kind == _ARG_UINT:
                out.append(x.u)
            elif x.kind == _ARG_FLOAT:
                out.append(x.f)
            elif x.kind == _ARG_STR:
                out.append(ctypes.string_at(x.s, x.slen).decode("utf-8", "surrogateescape") if x.s else "")
                _libc.free(x.s)
        _lib.check(rc)
        if nr == 0:
            return None
        if any(r["kind"] == "tensor" for r in self._results):
            return _finish(tuple(out), like, result_type)
        return out[0] if nr == 1 else tuple(out)


_MISSING = object()


def _scalar_arg(name, p, v, a, keep):
    """A scalar argument as _core's scalar_arg passes it: Go checks its kind
    and range against the parameter's Go type."""
    import operator
    kind = p["kind"]
    if isinstance(v, bool) or kind != "str" and C._is_bool(v):
        a.kind, a.i = _ARG_BOOL, int(bool(v))
        return
    if isinstance(v, str):
        b = v.encode("utf-8", "surrogateescape")
        keep.append(b)
        a.kind, a.s, a.slen = _ARG_STR, b, len(b)
        return
    if isinstance(v, float):
        a.kind, a.f = _ARG_FLOAT, v
        return
    x = None
    if isinstance(v, int) or kind not in ("str", "bool"):
        try:
            x = operator.index(v)
        except TypeError:
            x = None
    if x is not None:
        if -(2**63) <= x < 2**63:
            a.kind, a.i = _ARG_INT, x
        elif 0 <= x < 2**64:
            a.kind, a.u = _ARG_UINT, x
        else:
            raise ValueError("%s: argument %s: %r is out of range for a 64-bit integer" % (name, p["name"], v))
        return
    if kind == "float":
        try:
            a.kind, a.f = _ARG_FLOAT, float(v)
            return
        except (TypeError, ValueError):
            pass
    want = {"bool": "bool", "int": "int", "uint": "int", "float": "float", "str": "str"}[kind]
    raise TypeError("%s: argument %s: want %s, got %s" % (name, p["name"], want, type(v).__name__))


def _as_function(g):
    """g as a plain Python function, which help() and inspect show with its
    signature and doc as they show the extension's builtin functions."""

    def call(*args, **kwargs):
        return g(*args, **kwargs)

    call.__name__, call.__qualname__, call.__module__ = g.__name__, g.__qualname__, g.__module__
    call.__doc__ = g.__doc__
    call.__signature__ = _signature(g._d)
    call.__wrapped__ = g
    return call


def _signature(d):
    import inspect
    P = inspect.Parameter
    params = []
    for p in d["params"]:
        default = P.empty
        if p["has_default"]:
            default = {"bool": bool, "str": str, "float": float}.get(p["kind"], int)(p["default"] if p.get("default") is not None else 0)
        params.append(P(p["name"], P.POSITIONAL_OR_KEYWORD, default=default))
    params.append(P("stream", P.KEYWORD_ONLY, default=None))
    params.append(P("result_type", P.KEYWORD_ONLY, default=None))
    return inspect.Signature(params)


def _make(d):
    core = _lib.core
    if core is None:
        return _as_function(GoFunction(d))
    m = core["module"]
    pyname = d["name"].rpartition(".")[2]
    doc = pyname + _signature_text(d) + "\n--\n\n" + _doc(d)
    names = tuple(p["name"] for p in d["params"])
    kinds = tuple(_KINDS[p["kind"]] | (_WRITABLE if p.get("writable") else 0) for p in d["params"])
    required = tuple(not p["has_default"] for p in d["params"])
    results = tuple(_KINDS[r["kind"]] for r in d["results"])
    return m.make_function(d["index"], d["name"], pyname, doc, names, kinds, required, results)


_helpers_set = False


def _set_helpers():
    global _helpers_set
    core = _lib.core
    if core is None or _helpers_set:
        return
    from ._tensor import _describe_producer
    core["module"].set_call_helpers(_as_tensor, _stream_of, _finish, _describe_producer)
    _helpers_set = True


class Namespace:
    """dlbridge.ops.<ns>: the functions registered under one namespace.

    Functions and sub-namespaces are plain instance attributes, so that
    `dlbridge.ops.ns.f(...)` written inline costs two dictionary reads, not
    two calls of __getattr__ (which took longer than a whole call of a Go
    function: bench/results/gofunc-2core). __getattr__ only explains a name
    that is missing."""

    def __init__(self, name):
        self.__name = name

    def _add(self, attr, value):
        self.__dict__[attr] = value

    def _names(self):
        return sorted(k for k in self.__dict__ if not k.startswith("_Namespace__"))

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError("dlbridge.ops.%s has no function %r (it has: %s)"
                             % (self.__name, attr, ", ".join(self._names()) or "none"))

    def __dir__(self):
        return self._names()

    def __repr__(self):
        return "<dlbridge.ops namespace %r>" % self.__name


class _Ops:
    """dlbridge.ops: namespaces of the Go functions the loaded library
    registered. Reading it loads the library (DLBRIDGE_LIB, or the one
    load_library chose, or dlbridge's own). Namespaces become plain
    attributes once read (see Namespace)."""

    def __init__(self):
        self.__spaces = None

    def _refresh(self):
        _lib.load()
        _set_helpers()
        spaces = {}
        for d in _describe_all():
            parts = d["name"].split(".")
            ns = spaces.get(parts[0])
            if ns is None:
                ns = spaces[parts[0]] = Namespace(parts[0])
            for depth, part in enumerate(parts[1:-1], 1):
                sub = ns.__dict__.get(part)
                if sub is None:
                    sub = Namespace(".".join(parts[:depth + 1]))
                    ns._add(part, sub)
                ns = sub
            ns._add(parts[-1], _make(d))
        for name in list(self.__dict__):
            if not name.startswith("_Ops__"):
                del self.__dict__[name]
        self.__dict__.update(spaces)
        self.__spaces = spaces

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if self.__spaces is None:
            self._refresh()
        ns = self.__spaces.get(name)
        if ns is None:
            raise AttributeError("dlbridge.ops has no namespace %r: the library %s registers %s"
                                 % (name, _lib.path, ", ".join(sorted(self.__spaces)) or "no functions"))
        return ns

    def __dir__(self):
        if self.__spaces is None:
            self._refresh()
        return sorted(self.__spaces)

    def __repr__(self):
        return "<dlbridge.ops>"


ops = _Ops()
