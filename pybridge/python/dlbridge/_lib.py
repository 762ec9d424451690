"""Loading libdlbridge.so and declaring its C ABI for ctypes.

The library is looked up, in order: the DLBRIDGE_LIB environment variable, a
libdlbridge.so next to this package, then build/libdlbridge.so of the source
checkout this package sits in. No compiler is involved at any point.
"""

import ctypes
import os

ABI_VERSION = 1
MAX_NDIM = 64

# DLPack device types and the names this package writes.
CPU, CUDA, CUDA_HOST, ROCM, CUDA_MANAGED = 1, 2, 3, 10, 13
DEVICE_NAMES = {
    1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi",
    15: "webgpu", 16: "hexagon", 17: "maia", 18: "trn",
}
DEVICE_CODES = {v: k for k, v in DEVICE_NAMES.items()}

# Flags of dlb_info.flags.
INFO_READONLY, INFO_COPIED, INFO_PADDED = 1, 2, 4
INFO_C_CONTIGUOUS, INFO_F_CONTIGUOUS, INFO_FOREIGN = 8, 16, 32

# pybridge.Code -> Python exception.
_EXCEPTIONS = {
    1: BufferError,
    2: TypeError,
    3: ValueError,
    4: MemoryError,
    5: RuntimeError,
    6: IndexError,
}


class Info(ctypes.Structure):
    """dlb_info: everything Python caches about a tensor handle."""

    _fields_ = [
        ("ptr", ctypes.c_uint64),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("ndim", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("itemsize", ctypes.c_int32),
        ("stream", ctypes.c_uint64),
        ("shape", ctypes.c_int64 * MAX_NDIM),
        ("strides", ctypes.c_int64 * MAX_NDIM),
    ]


class Scalar(ctypes.Structure):
    """dlb_scalar: one number, exact for 64-bit integers."""

    _fields_ = [
        ("kind", ctypes.c_int32),
        ("_pad", ctypes.c_int32),
        ("i", ctypes.c_int64),
        ("u", ctypes.c_uint64),
        ("re", ctypes.c_double),
        ("im", ctypes.c_double),
    ]


class IndexItem(ctypes.Structure):
    """dlb_index_item: one item of a basic index."""

    _fields_ = [
        ("kind", ctypes.c_int32),
        ("_pad", ctypes.c_int32),
        ("start", ctypes.c_int64),
        ("stop", ctypes.c_int64),
        ("step", ctypes.c_int64),
    ]


INDEX_INT, INDEX_SLICE, INDEX_NEWAXIS = 0, 1, 2
OMIT = -(2**63)  # a slice bound left out (zerocopy.Omit)


def _candidates():
    env = os.environ.get("DLBRIDGE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, "libdlbridge.so"),
        # pybridge/python/dlbridge -> repository root / build
        os.path.join(here, os.pardir, os.pardir, os.pardir, "build", "libdlbridge.so"),
    ]


def _load():
    tried = []
    for path in _candidates():
        path = os.path.normpath(path)
        if not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "dlbridge: cannot load libdlbridge.so; build it with "
        "`go build -buildmode=c-shared -o build/libdlbridge.so ./pybridge/cmd/libdlbridge` "
        "or set DLBRIDGE_LIB. Tried: " + "; ".join(tried)
    )


lib, path = _load()

_u64, _i64, _i32, _vp = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
_pu64 = ctypes.POINTER(ctypes.c_uint64)
_pinfo = ctypes.POINTER(Info)
_pi64 = ctypes.POINTER(ctypes.c_int64)
_cstr = ctypes.c_char_p


def _declare(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


abi_version = _declare("dlb_abi_version", _i32)
if abi_version() != ABI_VERSION:
    raise ImportError(
        "dlbridge: %s has ABI version %d, this package needs %d: rebuild the library"
        % (path, abi_version(), ABI_VERSION)
    )

last_error = _declare("dlb_last_error", _cstr)
py_init = _declare("dlb_py_init", ctypes.c_int)
cuda_device_count = _declare("dlb_cuda_device_count", _i32)
work_stream = _declare("dlb_work_stream", _i64, _i32)
empty = _declare("dlb_empty", _i32, _cstr, _i32, _pi64, _i32, _i32, _i32, _pu64, _pinfo)
arange = _declare("dlb_arange", _i32, _i64, _cstr, _i32, _i32, _pu64, _pinfo)
info_get = _declare("dlb_info_get", _i32, _u64, _pinfo)
close = _declare("dlb_close", _i32, _u64)
export = _declare(
    "dlb_export", _i32, _u64, _i32, _i32, _i64, _i32, _i32, _i32, _i32, ctypes.POINTER(_vp)
)
import_ = _declare("dlb_import", _i32, _vp, _i32, _i32, _pu64, _pinfo)
from_memory = _declare(
    "dlb_from_memory", _i32,
    _i32, _u64, _i32, _cstr, _i32, _pi64, _pi64, _i32, _i32, _i64, _i32, _i32, _i32, _vp,
    _pu64, _pinfo,
)
typestr = _declare("dlb_typestr", _i32, _i32, _i32, _i32, _i32, ctypes.c_char_p, _i32)
dtype_name = _declare("dlb_dtype_name", _i32, _i32, _i32, _i32, ctypes.c_char_p, _i32)
parse_dtype = _declare(
    "dlb_parse_dtype", _i32, _cstr,
    ctypes.POINTER(_i32), ctypes.POINTER(_i32), ctypes.POINTER(_i32),
)
fill = _declare("dlb_fill", _i32, _u64, ctypes.POINTER(Scalar))
sum_ = _declare("dlb_sum", _i32, _u64, ctypes.POINTER(Scalar))
copy = _declare("dlb_copy", _i32, _u64, _u64)
to = _declare("dlb_to", _i32, _u64, _i32, _i32, _pu64, _pinfo)
index = _declare("dlb_index", _i32, _u64, _i32, ctypes.POINTER(IndexItem), _pu64, _pinfo)
permute = _declare("dlb_permute", _i32, _u64, _i32, ctypes.POINTER(_i32), _pu64, _pinfo)
stats = _declare("dlb_stats", _i32, _pi64, _pi64, _pi64)
debug_spin_write = _declare("dlb_debug_spin_write", _i32, _u64, ctypes.c_uint32, _i64)
call_deleter = _declare("dlb_call_deleter", None, _vp, ctypes.c_int)
capsule_name = _declare("dlb_capsule_name", _vp, ctypes.c_int, ctypes.c_int)

# The capsule destructor is a C function of the library, not a ctypes
# callback: it stays valid without the GIL and after interpreter shutdown.
CAPSULE_DESTRUCTOR = ctypes.cast(lib.dlb_capsule_destructor, _vp).value
NAME_LEGACY = capsule_name(0, 0)
NAME_VERSIONED = capsule_name(1, 0)
NAME_USED_LEGACY = capsule_name(0, 1)
NAME_USED_VERSIONED = capsule_name(1, 1)

IN_PYTHON = bool(py_init())


def _load_core():
    """The CPython fast path (pybridge/capi/pyext.c): a dict with the C base
    type of Tensor and a few C functions, or None where it cannot be used
    (DLBRIDGE_NO_FASTPATH=1, a free-threaded interpreter, or CPython
    functions not found in the process)."""
    import sysconfig

    if os.environ.get("DLBRIDGE_NO_FASTPATH") or sysconfig.get_config_var("Py_GIL_DISABLED") or not IN_PYTHON:
        return None
    try:
        init = ctypes.PyDLL(path).dlb_pyext_init  # PyDLL: called with the GIL held
        init.restype = ctypes.py_object
        init.argtypes = []
        return init()
    except (AttributeError, ValueError, OSError):
        return None


core = _load_core()


def error(rc):
    """The exception for a non-zero return code, with the Go message."""
    msg = last_error()
    text = msg.decode("utf-8", "replace") if msg else "dlbridge: error code %d" % rc
    return _EXCEPTIONS.get(rc, RuntimeError)(text)


def check(rc):
    if rc:
        raise error(rc)


# CPython's capsule functions, called with the GIL held (pythonapi is a PyDLL).
_api = ctypes.pythonapi
PyCapsule_New = _api.PyCapsule_New
PyCapsule_New.restype = ctypes.py_object
PyCapsule_New.argtypes = [_vp, _vp, _vp]
PyCapsule_GetName = _api.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]
PyCapsule_GetPointer = _api.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = _vp
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
PyCapsule_SetName = _api.PyCapsule_SetName
PyCapsule_SetName.restype = ctypes.c_int
PyCapsule_SetName.argtypes = [ctypes.py_object, _vp]
Py_IncRef = _api.Py_IncRef
Py_IncRef.restype = None
Py_IncRef.argtypes = [ctypes.py_object]


class PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (stable layout since 3.3)."""

    _fields_ = [
        ("buf", _vp),
        ("obj", _vp),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", _vp),
    ]


PyObject_GetBuffer = _api.PyObject_GetBuffer
PyObject_GetBuffer.restype = ctypes.c_int
PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int]
PyBuffer_Release = _api.PyBuffer_Release
PyBuffer_Release.restype = None
PyBuffer_Release.argtypes = [ctypes.POINTER(PyBuffer)]
PyBUF_RECORDS_RO = 0x0010 | 0x0008 | 0x0004  # STRIDES | ND | FORMAT
