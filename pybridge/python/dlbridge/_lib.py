"""Loading libdlbridge.so into the extension dlbridge._core.

The extension is the only way Python reaches the library: _core.dlb_x is
the library's export dlb_x (declared once, in Go; pybridge/capi's generated
dlbridge.h and _exports.h); _core's own functions (from_dlpack, copy, the
ops call) do in one C call what would otherwise take several.

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
import os

from ._loaderr import check_library, load_extension

_core = load_extension()

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
        problem = check_library(path, _core.export_names())
        if problem:
            if not (_chosen or os.environ.get("DLBRIDGE_LIB")):  # the package's own library
                problem += ("; reinstall dlbridge (pip install --force-reinstall dlbridge), or in a source "
                            "checkout rebuild it (make ext)")
            raise ImportError("dlbridge: cannot load %s: %s" % (path, problem))
        try:
            _core.load(path)
            return path
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


def drop_choice():
    """Forget the library use_library chose when it did not load (a file
    refused before dlopen, which started nothing): the process may load
    another, or its default library."""
    global _chosen
    if not _opened:
        _chosen = None


def _refuse_second_runtime(path):
    """Refuse to load path beside another Go-built library already in the
    process: two Go runtimes in one process crash it. The extension finds
    them among the objects the dynamic loader has mapped, by the symbols of
    Go's cgo runtime, whatever their files are named and whether those
    still exist."""
    real = os.path.realpath(path)
    for other in _core.go_runtimes():
        try:
            if os.path.samefile(other, real):
                continue  # path itself, already mapped (ctypes.CDLL): dlopen gives that one
        except OSError:
            pass
        shown = os.path.realpath(other) if os.path.exists(other) else other + " (its file was deleted since)"
        raise RuntimeError("dlbridge: cannot load %s: the Go library %s is already loaded in this process; %s"
                           % (real, shown, ONE_RUNTIME))


def _bind():
    """Open the library in the extension and check its ABI; returns the
    module globals to set."""
    global _opened
    path = _open()
    _opened = True  # the Go runtime is running from here on
    version = _core.dlb_abi_version()
    if version != ABI_VERSION:
        raise ImportError("dlbridge: %s has ABI version %d, this package needs %d: rebuild the library"
                          % (path, version, ABI_VERSION))
    return {"path": path}


# The names _bind sets: reading one of them loads the library.
_LAZY = frozenset(["path"])

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


def _after_fork_in_child():
    global _forked, _loaded, _lock
    _lock = _thread.allocate_lock()  # a thread that held it is gone
    if _started:
        _forked, _loaded = True, False
        for name in _LAZY:
            globals().pop(name, None)


os.register_at_fork(after_in_child=_after_fork_in_child)
