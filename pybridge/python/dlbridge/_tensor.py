"""dlbridge.Tensor and the functions that make one (over the extension
dlbridge._core: _core.dlb_x is the library's export dlb_x)."""

import ctypes
import datetime
import operator
import struct
import sys

from . import _convert as C
from . import _dtypes, _lib
from ._lib import CPU, CUDA, CUDA_HOST
from ._stream import stream_facts

CapsuleType = type(datetime.datetime_CAPI)

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def _device_name(dev):
    t, i = dev
    name = _lib.DEVICE_NAMES.get(t, "device%d" % t)
    if t == CPU and i == 0:
        return "cpu"
    return "%s:%d" % (name, i)


def _shape_arg(shape):
    """A shape given as an integer or a sequence of them (checked sizes)."""
    if C.is_integer(shape) and not getattr(shape, "ndim", 0):  # an int, not an array of them
        return C.sizes((shape,))
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__"):
        raise TypeError("dlbridge: shape=%s (%s) is not an integer or a sequence of integers"
                        % (C.show(shape), type(shape).__name__))
    if len(shape) > _lib.MAX_NDIM:
        raise ValueError("dlbridge: %d dimensions, at most %d" % (len(shape), _lib.MAX_NDIM))
    return C.sizes(tuple(shape))


_I32_MIN, _I32_MAX = C.INT32[1:]
_U32_MAX = C.UINT32[2]

# The last max_version tuple __dlpack__ checked, and the last exact-int
# __dlpack_device__() pair from_dlpack checked (dlbridge's own tensors return
# the same tuple every time): tuples of ints cannot change, so the same
# object passes again without its checks. Only checked objects are stored.
_checked_version = None
_checked_device = None
# The types __dlpack_device__() pairs hold that pass as plain integers: int,
# and the int subclasses (not bool) C.pair has accepted, such as PyTorch's
# DLDeviceType IntEnum, learned once so that their pairs skip C.pair.
_int_types = {int}

_core = _lib._core
_Base = _core.CTensor


class Tensor(_Base):
    """A tensor whose memory Go code owns or borrows, exchanged without copies.

    Make one with dlbridge.empty, zeros, arange, from_dlpack or asarray. It
    speaks DLPack (__dlpack__, __dlpack_device__, and DLPack 1.3's C
    exchange API), the CUDA Array Interface (CUDA tensors), NumPy's array
    interface and the buffer protocol (host tensors). close() (or a with
    block) releases it early; otherwise it is released when collected.
    Memory exported to another library stays alive until that library
    releases it, whatever happens to this object.
    """

    __slots__ = ("__weakref__",)

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "dlbridge.Tensor cannot be built directly: use dlbridge.empty, zeros, arange, "
            "from_dlpack or asarray"
        )

    @property
    def handle(self):
        """The library's handle for this tensor, for Go functions of your own
        (see dlbridge.library); valid while the tensor is open."""
        h = self._handle()
        self._share()
        return h

    def _handle(self):
        h = self._h
        if not h:
            raise ValueError("dlbridge: the tensor is closed")
        return h

    # ---- lifetime ----

    @property
    def closed(self):
        return not self._h

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _pinned(self):
        self._pin()
        return self._ptr

    # ---- layout ----

    @property
    def shape(self):
        return self._shape

    @property
    def strides(self):
        """Strides in elements (DLPack's unit; NumPy's are in bytes)."""
        return self._strides

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def size(self):
        n = 1
        for e in self._shape:
            n *= e
        return n

    def numel(self):
        return self.size

    @property
    def itemsize(self):
        return self._itemsize

    @property
    def nbytes(self):
        return self.size * self._itemsize

    @property
    def dtype(self):
        """The dtype as a string: "float32", "bfloat16", "bool", ..."""
        return _dtypes.name(*self._code)

    @property
    def device(self):
        """"cpu" or "cuda:N" (other DLPack devices as "type:N")."""
        return _device_name(self._dev)

    @property
    def readonly(self):
        return bool(self._flags & _lib.INFO_READONLY)

    @property
    def is_copy(self):
        """True when the producer made this memory for us alone (IS_COPIED)."""
        return bool(self._flags & _lib.INFO_COPIED)

    def data_ptr(self):
        """The address of element [0, ..., 0]."""
        self._handle()
        self._share()  # whoever uses it is not ordered by dlbridge: copy_ completes from now on
        return self._ptr

    def is_contiguous(self):
        return bool(self._flags & _lib.INFO_C_CONTIGUOUS)

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __repr__(self):
        state = " closed" if not self._h else ""
        return "dlbridge.Tensor(shape=%s, dtype=%s, device=%s, ptr=%#x%s)" % (
            self._shape, self.dtype, self.device, self._ptr, state)

    # ---- array interfaces ----

    def _interface(self, cuda):
        typestr = _dtypes.typestr(*self._code, bool(self._flags & _lib.INFO_PADDED))
        ptr = self._pinned()
        d = {
            "shape": self._shape,
            "typestr": typestr,
            "descr": [("", typestr)],
            # CAI asks for 0 as the pointer of zero-size arrays; NumPy
            # refuses a NULL pointer, and ours is never NULL.
            "data": (ptr if (self.size or not cuda) else 0, self.readonly),
            "version": 3,
            "strides": None,
        }
        if not (self._flags & _lib.INFO_C_CONTIGUOUS):
            d["strides"] = tuple(s * self._itemsize for s in self._strides)
        if cuda:
            d["stream"] = self._stream or None
        return d

    @property
    def __cuda_array_interface__(self):
        """CAI v3 for CUDA tensors; absent (AttributeError) for host ones."""
        if self._dev[0] != CUDA:
            raise AttributeError(
                "dlbridge: __cuda_array_interface__ is only defined for CUDA tensors (this one is on %s)"
                % self.device)
        self._handle()
        return self._interface(True)

    @property
    def __array_interface__(self):
        """NumPy's array interface v3 for host tensors; absent otherwise."""
        if self._dev[0] not in (CPU, CUDA_HOST):
            raise AttributeError(
                "dlbridge: __array_interface__ is only defined for host tensors (this one is on %s)"
                % self.device)
        self._handle()
        return self._interface(False)

    def memoryview(self):
        """A memoryview of a C-contiguous host tensor (no copy): the buffer
        protocol for code without NumPy."""
        self._require_host("memoryview")
        if not self.is_contiguous():
            raise BufferError("dlbridge: memoryview() needs a C-contiguous tensor; copy it first")
        fmt = _dtypes.STRUCT_FORMATS.get(self.dtype)
        if fmt is None:
            raise BufferError("dlbridge: dtype %s has no buffer-protocol format" % self.dtype)
        ptr = self._pinned()
        # A subclass instance has a __dict__: the buffer keeps this tensor
        # (and its pin on the memory) alive as long as any view of it.
        raw = type("_TensorBytes", (ctypes.c_char * max(self.nbytes, 1),), {}).from_address(ptr)
        raw.tensor = self
        mv = memoryview(raw).cast("B")[: self.nbytes].cast(fmt, self._shape)
        return mv.toreadonly() if self.readonly else mv

    def _require_host(self, op):
        self._handle()
        if self._dev[0] not in (CPU, CUDA_HOST):
            raise BufferError("dlbridge: %s needs a host tensor; this one is on %s (use .to('cpu'))"
                              % (op, self.device))

    def tolist(self):
        """The elements as nested Python lists (host tensors)."""
        self._require_host("tolist")
        name = self.dtype
        item = self._itemsize
        if name in ("complex64", "complex128"):
            half = "f" if name == "complex64" else "d"
            unpack = struct.Struct("<" + half * 2).unpack_from

            def read(buf, off):
                re, im = unpack(buf, off)
                return complex(re, im)
        elif name == "bfloat16":
            u16 = struct.Struct("<H").unpack_from
            f32 = struct.Struct("<f").unpack
            u32 = struct.Struct("<I").pack

            def read(buf, off):
                return f32(u32(u16(buf, off)[0] << 16))[0]
        else:
            fmt = _dtypes.STRUCT_FORMATS.get(name)
            if fmt is None:
                raise TypeError("dlbridge: tolist() does not support dtype %s" % name)
            s = struct.Struct("<" + fmt).unpack_from

            def read(buf, off):
                return s(buf, off)[0]
        lo = hi = 0
        if self.size:
            for e, st in zip(self._shape, self._strides):
                reach = (e - 1) * st * item
                if reach < 0:
                    lo += reach
                else:
                    hi += reach
            hi += item
        buf = (ctypes.c_char * max(hi - lo, 1)).from_address(self._ptr + lo)
        base = -lo

        def build(dim, off):
            if dim == len(self._shape):
                return read(buf, off)
            st = self._strides[dim] * item
            return [build(dim + 1, off + k * st) for k in range(self._shape[dim])]

        return build(0, base)

    def numpy(self):
        """A NumPy array sharing this host tensor's memory."""
        import numpy

        return numpy.asarray(self)

    # ---- Go-side operations ----

    def fill_(self, value):
        """Write value into every element (in Go); returns self. Only the
        elements are written (a strided view's gaps are not touched), and
        the write is complete when fill_ returns."""
        _core.dlb_fill(self._handle(), _scalar(value))
        self._refresh_stream()
        return self

    def sum(self):
        """The sum of all elements, computed in Go: int for integer and bool
        tensors (wrapping at 64 bits), float, or complex."""
        kind, i, u, re, im = _core.dlb_sum(self._handle())
        if kind == 0 or kind == 4:
            return i
        if kind == 1:
            return u
        if kind == 3:
            return complex(re, im)
        return re

    def copy_(self, src, *, non_blocking=False, stream=None):
        """Copy src (same shape; any dtype, converted; a Tensor or anything
        asarray takes, e.g. a NumPy array) into self; returns self. The copy
        runs on stream (None: dlbridge's work stream of the device; an int
        handle, a torch/cupy stream or an object with __cuda_stream__). It
        is complete on return unless non_blocking=True, which leaves a
        device destination in flight: dlbridge's own readers and every
        export then wait for it. A pageable source may be reused at once.
        A copy into a device tensor that only dlbridge can reach (allocated
        by dlbridge; never exported, viewed, or given out by data_ptr or an
        interface dictionary), from another such tensor or from a NumPy
        array, may stay in flight too, as PyTorch's does: nothing can tell
        it from a complete one."""
        nb = 1 if non_blocking else 0
        s = None if stream is None else stream_facts(stream)  # Go decides what they mean
        if isinstance(src, Tensor):
            _core.copy(self, src, s, nb)  # it updates self._stream
            return self
        # src is host data: a NumPy array goes through the buffer protocol,
        # anything else through asarray's CPU tensor.
        if not nb and _core.copy_host(self, src, s) is None:
            return self
        with asarray(src) as t:
            _core.copy(self, t, s, nb)
        return self

    def to(self, device, *, non_blocking=False, stream=None, copy=False):
        """This tensor on device ("cpu", "cuda:N", "cuda_host"): self when
        it is there already (unless copy=True), else a new C-contiguous copy
        made in Go, on stream (as for copy_). A new device tensor comes from
        the device's memory pool and may still be filling when to returns
        (dlbridge's readers and exports wait for it); a new host array from
        the device is pinned memory from the pinned pool and holds the data
        on return."""
        want = C.device(device)
        if want == self._dev and not copy:
            return self
        s = None if stream is None else stream_facts(stream)
        return _core.to(Tensor, self, want[0], want[1], s, 1 if non_blocking else 0)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False, *, stream=None):
        return self.to((CUDA, 0 if device is None else operator.index(device)),
                       non_blocking=non_blocking, stream=stream)

    def clone(self):
        return self.to(self._dev, copy=True)

    def pin_memory(self):
        """This tensor's elements in page-locked host memory, a cpu tensor
        (self when it is pinned already), as PyTorch's Tensor.pin_memory."""
        if self.is_pinned():
            return self
        return _core.dlb_pin_memory(self._handle())

    def is_pinned(self):
        """Whether the memory is page-locked host memory: a cuda_host
        tensor, or cpu memory that is pinned (pin_memory, arrays made from
        device data, torch's pinned tensors)."""
        return bool(_core.dlb_is_pinned(self._handle()))

    # ---- zero-copy views ----

    def permute(self, *dims):
        if len(dims) == 1 and not C.is_integer(dims[0]):
            dims = C.sequence(dims[0], "dims", _lib.MAX_NDIM)
        dims = C.integers(dims, "dims", C.INT32)
        return _core.dlb_permute(self._handle(), len(dims), dims)

    def reshape(self, *shape):
        """The same elements in row-major order with a new shape, as
        torch.reshape: a view sharing this memory when the strides allow
        one, else a C-contiguous copy on the same device (as clone() makes
        it). One extent may be -1, inferred from the element count. The
        shape is given as integers or as one tuple or list of them."""
        if len(shape) == 1 and not C.is_integer(shape[0]):
            shape = C.sequence(shape[0], "shape", _lib.MAX_NDIM)
        elif not shape:
            raise TypeError("dlbridge: reshape() needs a shape, e.g. reshape(-1) or reshape(()) for 0-d")
        shape = C.integers(shape, "shape", C.INT64)
        return _core.dlb_reshape(self._handle(), len(shape), shape)

    def contiguous(self):
        """self when C-contiguous (is_contiguous()), else a C-contiguous copy
        on the same device (clone()), as torch's Tensor.contiguous."""
        self._handle()  # a closed tensor raises, contiguous or not
        return self if self.is_contiguous() else self.clone()

    def transpose(self, dim0=None, dim1=None):
        """Swap two dimensions, or reverse them all when none are given
        (NumPy's a.T). No copy: the result shares memory."""
        nd = len(self._shape)
        if dim0 is None and dim1 is None:
            return self.permute(tuple(range(nd - 1, -1, -1)))
        if dim0 is None or dim1 is None:
            raise TypeError("dlbridge: transpose() takes no dimensions or two")
        order = list(range(nd))
        dim0, dim1 = C.integer(dim0, "dim0"), C.integer(dim1, "dim1")
        for d in (dim0, dim1):
            if not -nd <= d < nd:
                raise IndexError("dlbridge: transpose: dim %d out of range for a %d-d tensor" % (d, nd))
        a, b = dim0 % nd, dim1 % nd
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self):
        return self.transpose()

    def __getitem__(self, key):
        items = _index_items(key, len(self._shape))
        return _core.dlb_index(self._handle(), len(items), items)

    def __setitem__(self, key, value):
        with self[key] as view:
            if isinstance(value, (int, float, complex, bool)) or (
                    hasattr(value, "__float__") and not hasattr(value, "__len__")
                    and not hasattr(value, "__dlpack__")):
                view.fill_(value)
            else:
                view.copy_(value)

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self._shape[0]):
            yield self[i]

    def item(self):
        if self.size != 1:
            raise ValueError("dlbridge: item() needs a tensor with one element, this one has %d" % self.size)
        return self.sum() if self._code[0] != 6 else bool(self.sum())


_core.set_tensor_class(Tensor)  # the class of the tensors _core makes


def _scalar(value):
    """value as a dlb_scalar: (kind, i, u, re, im)."""
    if isinstance(value, bool):
        return (4, int(value), 0, 0.0, 0.0)
    if isinstance(value, int) or (hasattr(value, "__index__") and not isinstance(value, float)):
        v = operator.index(value)
        if v > _INT64_MAX:
            if v >= 2**64:
                raise OverflowError("dlbridge: fill value %d does not fit 64 bits" % v)
            return (1, 0, v, 0.0, 0.0)
        if v < _INT64_MIN:
            raise OverflowError("dlbridge: fill value %d does not fit 64 bits" % v)
        return (0, v, 0, 0.0, 0.0)
    if isinstance(value, complex):
        return (3, 0, 0, value.real, value.imag)
    if isinstance(value, float) or hasattr(value, "__float__"):
        return (2, 0, 0, float(value), 0.0)
    if hasattr(value, "__complex__"):
        z = complex(value)
        return (3, 0, 0, z.real, z.imag)
    raise TypeError("dlbridge: fill value must be a number, got %s" % type(value).__name__)


def _bound(v, field):
    """A slice bound: OMIT for None, else clamped off OMIT (INT64_MIN)."""
    return _lib.OMIT if v is None else C.clamped(v, field, _INT64_MIN + 1, _INT64_MAX)


def _index_items(key, ndim):
    in_tuple = isinstance(key, tuple)
    if not in_tuple:
        key = (key,)
    # Types first, over the whole key: a wrong type is a TypeError whatever
    # else is wrong with the key.
    for pos, k in enumerate(key):
        field = "index[%d]" % pos if in_tuple else "index"
        if isinstance(k, slice):
            for name in ("start", "stop", "step"):
                b = getattr(k, name)
                if b is not None and not C.is_integer(b):
                    raise C.not_integer("%s.%s" % (field, name), b)
        elif k is not None and k is not Ellipsis and not C.is_integer(k):
            raise TypeError(
                "dlbridge: only integers, slices (`:`), None and ellipsis (`...`) are valid "
                "indices (basic indexing, no copies); got %s" % type(k).__name__)
    consuming = 0
    ellipses = 0
    for k in key:
        if k is Ellipsis:
            ellipses += 1
        elif k is not None:
            consuming += 1
    if ellipses > 1:
        raise IndexError("dlbridge: an index can only have a single ellipsis ('...')")
    if consuming > ndim:
        raise IndexError("dlbridge: too many indices for a %d-d tensor: %d were given" % (ndim, consuming))
    items = []
    for pos, k in enumerate(key):
        field = "index[%d]" % pos if in_tuple else "index"
        if k is Ellipsis:
            for _ in range(ndim - consuming):
                items.append((_lib.INDEX_SLICE, _lib.OMIT, _lib.OMIT, 1))
        elif k is None:
            items.append((_lib.INDEX_NEWAXIS, 0, 0, 0))
        elif isinstance(k, slice):
            start, stop = _bound(k.start, field + ".start"), _bound(k.stop, field + ".stop")
            step = 1 if k.step is None else _bound(k.step, field + ".step")
            if step == 0:
                raise ValueError("dlbridge: slice step cannot be zero")
            items.append((_lib.INDEX_SLICE, start, stop, step))
        else:
            items.append((_lib.INDEX_INT, C.integer(k, field, exc=IndexError), 0, 0))
    return items


# ---- constructors ----

def empty(shape, dtype="float32", device="cpu"):
    """A new uninitialized tensor allocated by Go: "cpu" on the C heap,
    "cuda:N" from the device's stream-ordered pool, "cuda_host" page-locked
    host memory from the pinned pool."""
    dims = _shape_arg(shape)
    dev = C.device(device)
    return _core.dlb_empty(_dtype_bytes(dtype), len(dims), dims, dev[0], dev[1], 0)


def zeros(shape, dtype="float32", device="cpu"):
    """A new zero-filled tensor allocated by Go."""
    dims = _shape_arg(shape)
    dev = C.device(device)
    return _core.dlb_empty(_dtype_bytes(dtype), len(dims), dims, dev[0], dev[1], 1)


def arange(n, dtype="int64", device="cpu"):
    """0, 1, ..., n-1 as a 1-d tensor made in Go (int64 by default, as in
    NumPy and PyTorch)."""
    dev = C.device(device)
    return _core.dlb_arange(n, _dtype_bytes(dtype), dev[0], dev[1])  # the binding checks n


def _dtype_bytes(dtype):
    return _dtypes.name(*_dtypes.parse(dtype)).encode()


def cuda_available():
    """Whether a CUDA driver and at least one device were found."""
    return _core.dlb_cuda_device_count() > 0


def cuda_device_count():
    return _core.dlb_cuda_device_count()


def debug_stats():
    """Counters for tests: live tensor handles, live DLPack exports, how
    many of our DLPack deleters ran, and the memory pools: the pinned host
    pool (bytes cached, in use, limit) and each CUDA device's stream-ordered
    pool (bytes reserved from the device and in use; zeros for a device
    dlbridge has not used)."""
    a, b, c = _core.dlb_stats()
    out = {"live_tensors": a, "live_exports": b, "deleter_calls": c}
    p = _core.dlb_pool_stats(-1)
    out["pinned_pool"] = {"cached": p[0], "in_use": p[1], "limit": p[2]}
    devices = {}
    for d in range(_core.dlb_cuda_device_count()):
        p = _core.dlb_pool_stats(d)
        devices[d] = {"reserved": p[3], "used": p[4]}
    out["device_pool"] = devices
    return out


def set_pinned_pool_limit(nbytes):
    """Set how many bytes of page-locked host memory the pinned pool may
    hold, in use and cached together (0: none). New host arrays made from
    device data come from it while it has room, else from pageable memory;
    cached blocks beyond the limit are freed at once."""
    _core.dlb_set_pinned_pool_limit(nbytes)


def _debug_spin_write(t, bits, seconds):
    """Queue on the work stream a CUDA kernel that spins for `seconds`, then
    writes the 32-bit pattern `bits` into every element of t (a contiguous
    CUDA tensor of a 4-byte dtype). Returns at once: for ordering tests."""
    _core.dlb_debug_spin_write(t._handle(), bits, int(seconds * 1e9))
    t._refresh_stream()


# ---- consumers ----

def _take_capsule(cap, producer=None, pending=None):
    """Consume a DLPack capsule: check and rename it, hand the pointer to Go.
    producer is the object whose __dlpack__ returned cap, if any; pending
    the CUDA stream its writes are ordered before, if not our work stream."""
    return _core.take(Tensor, cap, producer, pending)


def _from_handle(h):
    """A Tensor owning handle h (made by a Go function of the library)."""
    return _core.wrap(Tensor, h)


# Types whose __dlpack__ refused max_version once: called the legacy way
# from then on, without paying for a TypeError every time.
_legacy_producers = set()


def _describe_producer(tp, exchange=True):
    """What _core.from_dlpack needs to know of a producer type, asked once
    per type: its DLPack C exchange API capsule (unless exchange is false:
    _stream_probe asks for the probe alone); or a stream probe, probe(device_id) ->
    the stream the producer's __dlpack__ orders its writes from (passed back
    as stream=, the producer has nothing to order: no event, as with the
    exchange API), or None when unknown; or None."""
    api = getattr(tp, "__dlpack_c_exchange_api__", None) if exchange else None
    if api is not None:
        return api
    module = (getattr(tp, "__module__", None) or "").partition(".")[0]
    if module == "cupy":
        return _cupy_stream_probe()
    if module == "torch":
        return _torch_stream_probe()
    return None


_stream_probes = {}


def _stream_probe(tp):
    """The stream probe of producer type tp where _describe_producer gives
    one (probe(device_id) -> the producer's current stream on cuda:device_id,
    or None), else None; remembered per type in _stream_probes, which
    from_dlpack reads first."""
    kind = _describe_producer(tp, exchange=False)
    probe = kind if callable(kind) else None
    if len(_stream_probes) < 64:
        _stream_probes[tp] = probe
    return probe


def _check_device_pair(obj, src):
    """from_dlpack's check of a __dlpack_device__() pair that is not two
    exact ints in range: C.pair converts it or explains what is wrong. An
    int subclass it takes (an IntEnum member) is remembered in _int_types."""
    src_checked = C.pair(src, "%s.__dlpack_device__()" % type(obj).__name__, C.INT32)
    if len(_int_types) < 16:
        for e in src:
            if isinstance(e, int) and type(e) is not bool:
                _int_types.add(type(e))
    return src_checked


def _cupy_stream_probe():
    """CuPy's __dlpack__(stream=s) records an event on CuPy's current stream
    (of the current device) and makes s wait for it unless s is that stream.
    The probe names that stream (CuPy's legacy default stream 0 is 1 in
    DLPack), or None when the array is on another device than the current
    one."""
    try:
        from cupy.cuda import runtime, stream as cupy_stream
    except ImportError:
        return None
    get_device = runtime.getDevice
    current = getattr(cupy_stream, "get_current_stream_ptr", None)
    if current is None:
        def current():
            return cupy_stream.get_current_stream().ptr

    def probe(device_id):
        if get_device() != device_id:
            return None
        return current() or 1

    return probe


def _torch_stream_probe():
    """PyTorch's current stream on a device, for PyTorch before 2.11 (2.11's
    C exchange API names it itself) and imports that do not take the C
    exchange API. Asked for __dlpack__(stream=<that stream>) PyTorch records
    no event: with our work stream instead, every import paid for a
    torch.cuda.ExternalStream, an Event, its record and a stream wait (about
    8 us on the H100). The
    import is then pending on that stream, and readers on other streams are
    ordered after it when they need it (one event, lazily), as with the
    exchange API. PyTorch's default stream (raw handle 0) is the legacy
    default stream, 1 in DLPack; any other value below 3 (the per-thread
    default stream of a build that uses it) is left to our work stream."""
    torch = sys.modules.get("torch")
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is None:
        return None

    def probe(device_id):
        s = raw(device_id)
        return 1 if s == 0 else (s if s > 2 else None)

    return probe


def from_dlpack(obj, *, device=None, copy=None):
    """A dlbridge.Tensor from any __dlpack__ producer or a DLPack capsule,
    zero-copy unless a copy is asked for (copy=True) or needed (device
    differs). copy=False makes a needed copy a BufferError."""
    global _checked_device
    if device is None and copy is None:
        # The common case in one C call (_core.c's from_dlpack: capsules,
        # DLPack 1.3's C exchange API of PyTorch 2.11 and dlbridge, and
        # __dlpack__); it leaves the unusual cases and every error message to
        # the code below.
        t = _core.from_dlpack(Tensor, obj, _legacy_producers, _describe_producer)
        if t is not NotImplemented:
            return t
    want = None if device is None else C.device(device)
    if isinstance(obj, CapsuleType):
        t = _take_capsule(obj)
    else:
        producer = getattr(obj, "__dlpack__", None)
        if producer is None:
            raise TypeError(
                "dlbridge.from_dlpack: %s has no __dlpack__ method and is not a DLPack capsule"
                % type(obj).__name__)
        src = obj.__dlpack_device__()
        if src is not _checked_device:
            # C.pair's common case written out (and the field named only on
            # error): this runs on every import.
            if type(src) is tuple and len(src) == 2:
                dt, di = src
                tt, ti = type(dt), type(di)
                if (tt in _int_types and ti in _int_types
                        and _I32_MIN <= dt <= _I32_MAX and _I32_MIN <= di <= _I32_MAX):
                    if tt is int and ti is int:
                        _checked_device = src
                    else:
                        src = (int(dt), int(di))  # IntEnum members, as C.pair makes them
                else:
                    src = _check_device_pair(obj, src)
            else:
                src = _check_device_pair(obj, src)
        stream = pending = None
        if src[0] == CUDA:
            # Go's stream policy picks stream= from what the producer's
            # probe names (as _core.c's consumer_stream asks it); the write
            # is pending there unless the producer copies to another device.
            probed, here = 0, want is None or want == src
            if here:
                probe = _stream_probes.get(type(obj), False)
                if probe is False:
                    probe = _stream_probe(type(obj))
                if probe is not None:
                    probed = probe(src[1]) or 0
            stream = _core.dlb_dlpack_stream(src[1], probed)
            if here:
                pending = stream
        kwargs = {"stream": stream, "max_version": (1, 3)}
        if want is not None and want != src:
            kwargs["dl_device"] = want
        if copy is not None:
            kwargs["copy"] = copy
        try:
            if type(obj) in _legacy_producers:  # known to refuse max_version
                cap = producer(stream=stream) if stream is not None else producer()
            else:
                cap = producer(**kwargs)
        except TypeError:
            # A producer older than DLPack 1.0 (NumPy < 2, PyTorch < 2.3):
            # no max_version, dl_device or copy; it makes a legacy capsule.
            cap = producer(stream=stream) if stream is not None else producer()
            if len(_legacy_producers) < 64:
                _legacy_producers.add(type(obj))
        except BufferError:
            if "dl_device" not in kwargs or copy is False:
                raise
            # The producer cannot copy across devices: take it as it is and
            # copy in Go below.
            del kwargs["dl_device"]
            kwargs.pop("copy", None)
            cap = producer(**kwargs)
        t = _take_capsule(cap, obj, pending)
    if want is not None and t._dev != want:
        if copy is False:
            where = t.device
            t.close()
            raise BufferError(
                "dlbridge.from_dlpack: the tensor is on %s, device=%s was asked for, and "
                "copy=False forbids the copy" % (where, _device_name(want)))
        moved = t.to(want)
        t.close()
        return moved
    if copy is True and not t.is_copy:
        c = t.clone()
        t.close()
        return c
    return t


def _from_interface(obj, d, kind):
    """A tensor over memory described by __cuda_array_interface__ (kind 0)
    or __array_interface__ (kind 1); it keeps obj alive. Every field is
    converted and checked before the reference on obj is taken, so that an
    error leaves obj's reference count as it was."""
    if kind == 0 and type(d) is dict:
        t = _cai_common(obj, d)
        if t is not None:
            return t
    what = "__cuda_array_interface__" if kind == 0 else "__array_interface__"
    if not isinstance(d, dict):
        raise TypeError("dlbridge: %s is a %s, not a dict" % (what, type(d).__name__))
    for key in ("shape", "typestr"):
        if key not in d:
            raise BufferError("dlbridge: %s has no %r" % (what, key))
    data = d.get("data")
    buf = None
    if kind == 1 and not isinstance(data, tuple):
        buf = _interface_buffer(obj if data is None else data, d, what)
        owner, ptr, ro = buf[0], buf[1], buf[3]
    elif not isinstance(data, tuple) or len(data) != 2:
        raise BufferError("dlbridge: %s 'data' must be a (pointer, read_only) tuple, got %s"
                          % (what, C.show(data)))
    else:
        owner, ptr, ro = obj, C.integer(data[0], "data[0]", C.UINT64), bool(data[1])
    shape = C.sizes(C.sequence(d["shape"], "shape", _lib.MAX_NDIM))
    nd = len(shape)
    strides = d.get("strides")
    if strides is not None:
        strides = C.integers(C.sequence(strides, "strides", _lib.MAX_NDIM), "strides")
        if len(strides) != nd:
            raise BufferError("dlbridge: %s has %d strides for %d dimensions" % (what, len(strides), nd))
    stream = d.get("stream") if kind == 0 else None
    if stream is not None:
        stream = C.as_int64_bits(C.integer(stream, "stream", C.UINT64))
    version = C.integer(d.get("version", 3), "version", C.INT32)
    typestr = d["typestr"]
    if isinstance(typestr, str):
        typestr = typestr.encode("utf-8", "replace")
    if not isinstance(typestr, bytes) or b"\0" in typestr:
        raise TypeError("dlbridge: %s 'typestr'=%s is not a type string such as '<f4'" % (what, C.show(typestr)))
    has_mask = int(d.get("mask") is not None)
    # The tensor takes a reference on owner, dropped when the memory is released.
    t = _core.dlb_from_memory(kind, ptr, int(ro), typestr, nd, shape, strides, version, int(stream is not None),
                              stream or 0, has_mask, CUDA if kind == 0 else CPU, -1 if kind == 0 else 0, owner)
    if buf is not None:
        _check_within(t, buf, what)
    return t


_U64_MAX = C.UINT64[2]


def _cai_common(obj, d):
    """_from_interface's common case of a CUDA interface written out, as
    C.pair's in from_dlpack: exact ints, tuples and a str, each in range,
    checked inline without a _convert call per field (about 1 us per import
    on the H100 machine, +10% on dlbridge.asarray(torch cuda, CAI) against
    922d2a6, which checked nothing). None for anything else: the checked
    path then converts it or explains what is wrong."""
    data = d.get("data")
    shape = d.get("shape")
    typestr = d.get("typestr")
    strides = d.get("strides")
    stream = d.get("stream")
    version = d.get("version", 3)
    if not (type(data) is tuple and len(data) == 2 and type(data[0]) is int and type(data[1]) is bool
            and 0 <= data[0] <= _U64_MAX and type(shape) is tuple and len(shape) <= _lib.MAX_NDIM
            and type(typestr) is str and typestr.isascii() and "\0" not in typestr
            and type(version) is int and _I32_MIN <= version <= _I32_MAX
            and (stream is None or (type(stream) is int and 0 <= stream <= _U64_MAX))):
        return None
    for e in shape:
        if type(e) is not int or not 0 <= e <= _INT64_MAX:
            return None
    nd = len(shape)
    if strides is not None:
        if type(strides) is not tuple or len(strides) != nd:
            return None
        for e in strides:
            if type(e) is not int or not _INT64_MIN <= e <= _INT64_MAX:
                return None
    has_stream = stream is not None
    if has_stream and stream > _INT64_MAX:
        stream -= 2**64  # C.as_int64_bits: the handle's bits as int64
    # The tensor takes a reference on obj, dropped when the memory is released.
    return _core.dlb_from_memory(0, data[0], int(data[1]), typestr, nd, shape, strides, version, int(has_stream),
                                 stream or 0, int(d.get("mask") is not None), CUDA, -1, obj)


def _interface_buffer(src, d, what):
    """(memoryview, pointer, size, read_only) for an __array_interface__
    whose 'data' is None (obj's own buffer) or a buffer object: NumPy's
    rules, with 'offset' bytes into it."""
    try:
        mv = memoryview(src)  # our own view: the source cannot be released under us
    except TypeError:
        raise TypeError("dlbridge: %s 'data'=%s (%s) is neither a (pointer, read_only) tuple nor a buffer"
                        % (what, C.show(src), type(src).__name__)) from None
    if not mv.c_contiguous:
        raise BufferError("dlbridge: %s 'data' is a buffer that is not C-contiguous" % what)
    base, size, ro = _core.buffer(mv, False)[:3]
    off = C.integer(d.get("offset", 0), "offset", C.INT64)
    if not 0 <= off <= size:
        raise BufferError("dlbridge: %s offset=%d outside its %d-byte buffer (0..%d)" % (what, off, size, size))
    return mv, base + off, size, ro, base


def _check_within(t, buf, what):
    """Close t and raise unless every element of t lies inside buf."""
    lo = hi = 0
    if t.size:
        for e, st in zip(t._shape, t._strides):
            reach = (e - 1) * st * t._itemsize
            lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
        hi += t._itemsize
    _, _, size, _, base = buf
    first, end = t._ptr + lo - base, t._ptr + hi - base
    if t.size and (first < 0 or end > size):
        t.close()
        raise BufferError("dlbridge: %s describes bytes %d..%d of a %d-byte buffer" % (what, first, end, size))


def _from_buffer(obj):
    """A host tensor over obj's memory through the buffer protocol."""
    mv = memoryview(obj)  # our own view: a caller's memoryview cannot be released under us
    ptr, _, ro, shape, strides, fmt, itemsize = _core.buffer(mv, True)
    typestr = _dtypes.typestr_of_format(fmt, itemsize).encode()
    # The tensor takes a reference on mv, dropped when the memory is released.
    return _core.dlb_from_memory(1, ptr, int(bool(ro)), typestr, len(shape), shape, strides, 3,
                                 0, 0, 0, CPU, 0, mv)


def asarray(obj):
    """A dlbridge.Tensor sharing obj's memory: through DLPack first, then
    __cuda_array_interface__, then __array_interface__ or the buffer
    protocol. A dlbridge.Tensor comes back as it is."""
    if isinstance(obj, Tensor):
        return obj
    first_error = None
    if isinstance(obj, CapsuleType):
        return from_dlpack(obj)
    if hasattr(obj, "__dlpack__"):
        try:
            return from_dlpack(obj)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            first_error = e  # e.g. NumPy 1.24 refuses bool and read-only arrays
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(obj, cai, 0)
    if first_error is not None and type(obj).__module__.startswith("torch") and hasattr(obj, "numpy"):
        # PyTorch < 2 exports no bool through DLPack, but NumPy's view of a
        # CPU tensor shares its memory (and keeps it alive).
        try:
            a = obj.detach().numpy()
        except (RuntimeError, TypeError):
            a = None
        if a is not None:
            return _from_interface(a, a.__array_interface__, 1)
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        return _from_interface(obj, ai, 1)
    try:
        memoryview(obj).release()
        has_buffer = True
    except TypeError:
        has_buffer = False
    if has_buffer:
        return _from_buffer(obj)
    if first_error is not None:
        raise first_error
    raise TypeError(
        "dlbridge.asarray: %s supports none of DLPack, __cuda_array_interface__, "
        "__array_interface__ or the buffer protocol" % type(obj).__name__)
