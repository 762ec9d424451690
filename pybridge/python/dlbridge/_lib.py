"""Loading libdlbridge.so and declaring its C ABI for ctypes.

Nothing is loaded when dlbridge is imported: the library, and the Go runtime
in it, start at the first call that needs them (load(), reached through this
module's __getattr__ for every name that needs the library, PEP 562). A
process that never uses dlbridge never starts Go, and can fork freely.

The library is looked up, in order: the DLBRIDGE_LIB environment variable
(an override), the libdlbridge.so installed inside this package (the wheel,
or `make ext` in a checkout), then build/libdlbridge.so of the source
checkout this package sits in.

Fork: the Go runtime does not survive fork(). In a child forked after the
library was loaded, every name that needs the library raises RuntimeError
(FORK_MESSAGE), as CUDA does in PyTorch; a child forked before loads the
library itself and works normally.
"""

import _thread
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


FORK_MESSAGE = (
    "dlbridge: this process was forked after dlbridge started its library (and the Go runtime) in the "
    "parent; the Go runtime does not survive fork(), so dlbridge cannot be used in this process. To use "
    "dlbridge in subprocesses, use the 'spawn' or 'forkserver' start method of multiprocessing "
    "(multiprocessing.set_start_method('spawn')), or fork before dlbridge's first use")


def _candidates():
    env = os.environ.get("DLBRIDGE_LIB")
    if _chosen:
        return [_chosen]
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, "libdlbridge.so"),
        # pybridge/python/dlbridge -> repository root / build
        os.path.join(here, os.pardir, os.pardir, os.pardir, "build", "libdlbridge.so"),
    ]


def _open():
    tried = []
    for path in _candidates():
        path = os.path.normpath(path)
        if not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        _refuse_second_runtime(path)
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            from ._loaderr import explain

            tried.append(explain(path, e))
    raise ImportError(
        "dlbridge: cannot load libdlbridge.so; install the package (pip install ./pybridge/python), "
        "build it in the checkout (make ext, or make lib for build/libdlbridge.so), or set "
        "DLBRIDGE_LIB. Tried: " + "; ".join(tried)
    )


# The library load_library chose (an absolute, resolved path), or None.
_chosen = None

ONE_RUNTIME = (
    "one Go runtime per process (golang/go#18976): build one library with dlbridge and every Go "
    "package you need, `dlbridge build -o lib.so PKG...`, and load only that one")


def use_library(path):
    """Make path the library to load (dlbridge.load_library). The library
    already loaded, asked for again, is fine; any other is refused."""
    global _chosen
    real = os.path.realpath(path)
    if _opened or _started:
        current = globals().get("path")
        if current and os.path.realpath(current) == real:
            return
        raise RuntimeError("dlbridge: cannot load %s: this process already runs the Go library %s; %s"
                           % (real, current or "(loading)", ONE_RUNTIME))
    if not os.path.exists(real):
        raise FileNotFoundError("dlbridge: load_library: no file %s" % real)
    env = os.environ.get("DLBRIDGE_LIB")
    if env and os.path.realpath(env) != real:
        raise RuntimeError("dlbridge: cannot load %s: DLBRIDGE_LIB names another library, %s; %s"
                           % (real, os.path.realpath(env), ONE_RUNTIME))
    _chosen = real


def go_libraries_mapped():
    """The Go-built shared libraries mapped into this process (those with a
    .go.buildinfo section), by resolved path (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    found = []
    for p in sorted(paths):
        if p.startswith("[") or ".so" not in os.path.basename(p):
            continue
        if _is_go_elf(p):
            found.append(os.path.realpath(p))
    return found


_go_elf_cache = {}


def _is_go_elf(path):
    hit = _go_elf_cache.get(path)
    if hit is not None:
        return hit
    hit = False
    try:
        with open(path, "rb") as f:
            h = f.read(64)
            if len(h) == 64 and h[:4] == b"\x7fELF" and h[4] == 2:  # ELF64
                order = "little" if h[5] == 1 else "big"
                shoff = int.from_bytes(h[0x28:0x30], order)
                shentsize = int.from_bytes(h[0x3A:0x3C], order)
                shnum = int.from_bytes(h[0x3C:0x3E], order)
                shstrndx = int.from_bytes(h[0x3E:0x40], order)
                if shoff and 0 < shnum < 65536 and shstrndx < shnum and shentsize >= 64:
                    f.seek(shoff)
                    table = f.read(shentsize * shnum)
                    e = table[shstrndx * shentsize:(shstrndx + 1) * shentsize]
                    stroff = int.from_bytes(e[0x18:0x20], order)
                    strsize = int.from_bytes(e[0x20:0x28], order)
                    f.seek(stroff)
                    names = f.read(min(strsize, 1 << 20))
                    for i in range(shnum):
                        off = int.from_bytes(table[i * shentsize:i * shentsize + 4], order)
                        if names[off:off + 14] == b".go.buildinfo\0":
                            hit = True
                            break
    except OSError:
        hit = False
    if len(_go_elf_cache) < 4096:
        _go_elf_cache[path] = hit
    return hit


def _refuse_second_runtime(path):
    """Refuse to load path beside another Go-built library already in the
    process: two Go runtimes in one process crash it."""
    real = os.path.realpath(path)
    others = [p for p in go_libraries_mapped() if p != real]
    if others:
        raise RuntimeError("dlbridge: cannot load %s: the Go library %s is already loaded in this process; %s"
                           % (real, others[0], ONE_RUNTIME))


def _load_extension():
    """The CPython extension dlbridge._core as the dict _tensor uses: the C
    base type of Tensor and a few C functions; None where it is not built
    (a source checkout without `make ext`), cannot load (ImportError: see
    _loaderr), or DLBRIDGE_NO_FASTPATH=1 turns it off, with core_status
    saying why. Importing it loads no library."""
    global core_status
    if os.environ.get("DLBRIDGE_NO_FASTPATH"):
        core_status = "ctypes: DLBRIDGE_NO_FASTPATH is set"
        return None
    try:
        from . import _core
    except ImportError as e:  # also a missing file: `from . import` raises ImportError
        from ._loaderr import extension_fallback

        core_status = extension_fallback(e)
        return None
    core_status = "extension: dlbridge._core (%s)" % os.path.basename(_core.__file__)
    return {
        "module": _core,
        "CTensor": _core.CTensor,
        "wrap": _core.wrap,
        "take": _core.take,
        "from_dlpack": _core.from_dlpack,
        "copy": _core.copy,
        "copy_host": _core.copy_host,
        "to": _core.to,
        "set_tensor_class": _core.set_tensor_class,
    }


core = _load_extension()

_u64, _i64, _i32, _vp = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
_pu64 = ctypes.POINTER(ctypes.c_uint64)
_pinfo = ctypes.POINTER(Info)
_pi64 = ctypes.POINTER(ctypes.c_int64)
_cstr = ctypes.c_char_p


def _bind():
    """Open the library, declare its functions and bind the extension to it;
    returns the module globals to set."""
    global _opened
    lib, path = _open()
    _opened = True  # the Go runtime is running from here on

    def declare(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)
        return f

    g = {"lib": lib, "path": path}
    g["abi_version"] = abi_version = declare("dlb_abi_version", _i32)
    if abi_version() != ABI_VERSION:
        raise ImportError(
            "dlbridge: %s has ABI version %d, this package needs %d: rebuild the library"
            % (path, abi_version(), ABI_VERSION)
        )
    g["last_error"] = declare("dlb_last_error", _cstr)
    g["py_init"] = py_init = declare("dlb_py_init", ctypes.c_int)
    g["cuda_device_count"] = declare("dlb_cuda_device_count", _i32)
    g["work_stream"] = declare("dlb_work_stream", _i64, _i32)
    g["empty"] = declare("dlb_empty", _i32, _cstr, _i32, _pi64, _i32, _i32, _i32, _pu64, _pinfo)
    g["arange"] = declare("dlb_arange", _i32, _i64, _cstr, _i32, _i32, _pu64, _pinfo)
    g["info_get"] = declare("dlb_info_get", _i32, _u64, _pinfo)
    g["close"] = declare("dlb_close", _i32, _u64)
    g["export"] = declare(
        "dlb_export", _i32, _u64, _i32, _i32, _i64, _i32, _i32, _i32, _i32, ctypes.POINTER(_vp)
    )
    g["import_"] = declare("dlb_import", _i32, _vp, _i32, _i32, _pu64, _pinfo)
    g["import_on"] = declare("dlb_import_on", _i32, _vp, _i32, _i32, _i64, _pu64, _pinfo)
    g["from_memory"] = declare(
        "dlb_from_memory", _i32,
        _i32, _u64, _i32, _cstr, _i32, _pi64, _pi64, _i32, _i32, _i64, _i32, _i32, _i32, _vp,
        _pu64, _pinfo,
    )
    g["typestr"] = declare("dlb_typestr", _i32, _i32, _i32, _i32, _i32, ctypes.c_char_p, _i32)
    g["dtype_name"] = declare("dlb_dtype_name", _i32, _i32, _i32, _i32, ctypes.c_char_p, _i32)
    g["parse_dtype"] = declare(
        "dlb_parse_dtype", _i32, _cstr,
        ctypes.POINTER(_i32), ctypes.POINTER(_i32), ctypes.POINTER(_i32),
    )
    g["fill"] = declare("dlb_fill", _i32, _u64, ctypes.POINTER(Scalar))
    g["sum_"] = declare("dlb_sum", _i32, _u64, ctypes.POINTER(Scalar))
    g["copy"] = declare("dlb_copy", _i32, _u64, _u64)
    g["to"] = declare("dlb_to", _i32, _u64, _i32, _i32, _pu64, _pinfo)
    g["index"] = declare("dlb_index", _i32, _u64, _i32, ctypes.POINTER(IndexItem), _pu64, _pinfo)
    g["permute"] = declare("dlb_permute", _i32, _u64, _i32, ctypes.POINTER(_i32), _pu64, _pinfo)
    g["stats"] = declare("dlb_stats", _i32, _pi64, _pi64, _pi64)
    g["debug_spin_write"] = declare("dlb_debug_spin_write", _i32, _u64, ctypes.c_uint32, _i64)
    g["call_deleter"] = declare("dlb_call_deleter", None, _vp, ctypes.c_int)
    capsule_name = declare("dlb_capsule_name", _vp, ctypes.c_int, ctypes.c_int)
    g["capsule_name"] = capsule_name

    # The capsule destructor is a C function of the library, not a ctypes
    # callback: it stays valid without the GIL and after interpreter shutdown.
    g["CAPSULE_DESTRUCTOR"] = ctypes.cast(lib.dlb_capsule_destructor, _vp).value
    g["NAME_LEGACY"] = capsule_name(0, 0)
    g["NAME_VERSIONED"] = capsule_name(1, 0)
    g["NAME_USED_LEGACY"] = capsule_name(0, 1)
    g["NAME_USED_VERSIONED"] = capsule_name(1, 1)
    g["IN_PYTHON"] = bool(py_init())
    if core is not None:
        table = declare("dlb_pyext_table", _vp)
        core["module"].bind(table())
    return g


# The names _bind sets: reading one of them loads the library.
_LAZY = frozenset([
    "lib", "path", "abi_version", "last_error", "py_init", "cuda_device_count", "work_stream",
    "empty", "arange", "info_get", "close", "export", "import_", "import_on", "from_memory", "typestr",
    "dtype_name", "parse_dtype", "fill", "sum_", "copy", "to", "index", "permute", "stats",
    "debug_spin_write", "call_deleter", "capsule_name", "CAPSULE_DESTRUCTOR", "NAME_LEGACY",
    "NAME_VERSIONED", "NAME_USED_LEGACY", "NAME_USED_VERSIONED", "IN_PYTHON",
])

_lock = _thread.allocate_lock()
_started = False  # the library is being loaded or was loaded in this process
_opened = False   # the library was loaded (Go started), whether or not its names are set
_loaded = False   # the library was loaded and its names are set
_forked = False   # this process was forked after the parent _started


def load():
    """Load the library now, if it is not yet (idempotent, thread-safe).
    RuntimeError in a child forked after the parent loaded it."""
    global _started, _loaded
    if _loaded:
        return
    if _forked:
        raise RuntimeError(FORK_MESSAGE)
    with _lock:
        if _loaded:
            return
        _started = True
        try:
            globals().update(_bind())
        except BaseException:
            _started = _opened
            raise
        _loaded = True


def loaded():
    """Whether this process has loaded the library (and started Go)."""
    return _loaded


def __getattr__(name):
    if name in _LAZY:
        load()
        return globals()[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


class _Function:
    """A function of the library declared for ctypes, bound on its first
    call: modules declare what they call at import time without loading the
    library (lazy start), and a forked child unbinds it (see load)."""

    __slots__ = ("name", "restype", "argtypes", "f")

    def __init__(self, name, restype, argtypes):
        self.name, self.restype, self.argtypes, self.f = name, restype, list(argtypes), None

    def __call__(self, *args):
        f = self.f
        if f is None:
            load()
            f = getattr(lib, self.name)
            f.restype, f.argtypes = self.restype, self.argtypes
            self.f = f
        return f(*args)


_declared = []


def _declare(name, restype, *argtypes):
    """Declare library function name; it is looked up on its first call."""
    fn = _Function(name, restype, argtypes)
    _declared.append(fn)
    return fn


def _after_fork_in_child():
    global _forked, _loaded, _lock
    _lock = _thread.allocate_lock()  # a thread that held it is gone
    if _started:
        _forked, _loaded = True, False
        for name in _LAZY:
            globals().pop(name, None)
        for fn in _declared:
            fn.f = None  # the next call goes through load(), which refuses


os.register_at_fork(after_in_child=_after_fork_in_child)


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
