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

from ._loaderr import load_extension

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
