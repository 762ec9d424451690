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

import json
import os
import sys

from . import _lib

# Parameter and result kinds, as _core's make_function numbers them.
_KINDS = {"tensor": 1, "bool": 2, "int": 3, "uint": 4, "float": 5, "str": 6}
_WRITABLE = 0x100  # or'ed into a writable tensor's kind (_core's P_WRITABLE)
_PY_TYPES = {"tensor": "Tensor", "bool": "bool", "int": "int", "uint": "int", "float": "float", "str": "str"}

def load_library(path):
    """Load the dlbridge library at path, one built with `dlbridge build`
    that links Go packages' registered functions beside dlbridge's ABI (as
    torch.ops.load_library loads operator libraries). Its functions appear
    under dlbridge.ops. The library replaces dlbridge's own, so call this
    before dlbridge's first use; loading the library already in use again
    does nothing, and any other is refused (one Go runtime per process).
    A file that is not a whole dlbridge library of this machine is an
    ImportError saying what it is, before anything of it is loaded."""
    _lib.use_library(os.fspath(path))
    try:
        _lib.load()
    except BaseException:
        _lib.drop_choice()
        raise
    ops._refresh()
    return _lib.path


def _describe_all():
    core = _lib._core
    _lib.load()
    n = core.dlb_func_count()
    if n < 0:
        try:
            core.check(5)  # the registration's error, with Go's message
        except RuntimeError as e:
            raise ImportError("%s (library %s)" % (e, _lib.path)) from None
    return [json.loads(core.dlb_func_describe(i)) for i in range(n)]


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
    does not say): facts for Go's stream policy."""
    from ._stream import stream_facts
    return stream_facts(obj)


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


def _make(d):
    m = _lib._core
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
    if _helpers_set:
        return
    from ._tensor import _describe_producer
    _lib._core.set_call_helpers(_as_tensor, _stream_of, _finish, _describe_producer)
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
