// dlbridge._core: the CPython extension of the dlbridge package. It holds
// the base type of dlbridge.Tensor (_CTensor) with __dlpack__,
// __dlpack_device__ and the buffer protocol in C, module functions that wrap
// handles and consume capsules in one call, and DLPack 1.3's C exchange API
// (__dlpack_c_exchange_api__) both as a producer (on _CTensor) and as a
// consumer (of PyTorch's).
//
// Loading. The extension does not link against libdlbridge: importing
// dlbridge must not start the Go runtime. dlbridge._lib picks the library
// at the first call that needs it and hands its path to load(), which opens
// it and looks up every export (dlbridge.h's dlb_exports, generated from
// the Go source with the Python function of each, _exports.h); every
// function here that can be a process's first dlbridge call asks
// dlbridge._lib to load it.
//
// Ownership. A handle (pybridge's table) holds one reference on a tensor's
// memory. _CTensor wraps the handle in a keeper: a C refcount that the
// object holds once and every fast DLPack export holds once more, so an
// export costs a malloc and an atomic increment, and no call into Go; the
// last release closes the handle (a call into Go, which may run a foreign
// deleter, with the GIL taken if needed). Exports that need Go (a copy,
// another device, stream ordering) go through the library's export and hold
// a reference of their own.
//
// Fork. In a child forked after the library was loaded the Go runtime is
// gone (capi/pyext.c's dlb_forked_flag): every call that would enter Go raises
// RuntimeError instead, and releasing a keeper there frees nothing of Go's.
//
// Free-threaded CPython: the module does not declare Py_mod_gil, so such an
// interpreter enables the GIL when it imports it (and says so with a
// RuntimeWarning): the object state here relies on the GIL.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>
#include <link.h>

#include "dlbridge.h"
#include "pyapi.h"

_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "the buffer protocol shares the int64 shape array");

// The buffer protocol under the 3.10 limited API (the abi3 floor, cp310).
// Python 3.11 moved Py_buffer, PyObject_GetBuffer, PyBuffer_Release,
// PyObject_CheckBuffer and the Py_bf_* type slots into the limited API
// unchanged: the struct's layout has been fixed since 3.3, the functions are
// exported by every CPython from 3.9 (PyObject_CheckBuffer was a macro
// before), and PyType_FromSpec takes the slots since 3.9. So the
// declarations below, copied from 3.11's pybuffer.h, describe 3.10 exactly,
// and the stable ABI of 3.11 and later keeps them. `make pytest-pythons`
// runs the buffer-protocol tests on 3.10.
#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030B0000
typedef struct {
	void *buf;
	PyObject *obj;
	Py_ssize_t len;
	Py_ssize_t itemsize;
	int readonly;
	int ndim;
	char *format;
	Py_ssize_t *shape;
	Py_ssize_t *strides;
	Py_ssize_t *suboffsets;
	void *internal;
} Py_buffer;
PyAPI_FUNC(int) PyObject_GetBuffer(PyObject *obj, Py_buffer *view, int flags);
PyAPI_FUNC(void) PyBuffer_Release(Py_buffer *view);
PyAPI_FUNC(int) PyObject_CheckBuffer(PyObject *obj);
#define PyBUF_WRITABLE 0x0001
#define PyBUF_FORMAT 0x0004
#define PyBUF_ND 0x0008
#define PyBUF_STRIDES (0x0010 | PyBUF_ND)
#define PyBUF_RECORDS_RO (PyBUF_STRIDES | PyBUF_FORMAT)
#ifndef Py_bf_getbuffer
#define Py_bf_getbuffer 1
#define Py_bf_releasebuffer 2
#endif
#endif

#define DLB_CPU 1
#define DLB_CUDA 2
#define DLB_CUDA_HOST 3
#define DLB_CUDA_MANAGED 13

// The library's entry points, set by load(); and its C functions and
// counters beside the Go exports (pyapi.h, capi/pyext.c).
static dlb_exports E;
static struct {
	int loaded;
	const char *(*last_error)(void);
	_Atomic int64_t *fast_made, *fast_live; // the extension's own DLPack exports: made, still alive
	const _Atomic int *forked;              // set in a child forked after the library was loaded
} L;

static const char fork_msg[] =
	"dlbridge: this process was forked after dlbridge started its library (and the Go runtime) in the "
	"parent; the Go runtime does not survive fork(), so dlbridge cannot be used in this process. To use "
	"dlbridge in subprocesses, use the 'spawn' or 'forkserver' start method of multiprocessing "
	"(multiprocessing.set_start_method('spawn')), or fork before dlbridge's first use";

static int forked(void) { return L.loaded && atomic_load_explicit(L.forked, memory_order_relaxed); }

// load_library makes E usable: loads the library through dlbridge._lib if
// needed; -1 with an exception set if it cannot be (also in a forked child).
static int load_library(void) {
	if (!L.loaded) {
		PyObject *m = PyImport_ImportModule("dlbridge._lib");
		if (!m) return -1;
		PyObject *r = PyObject_CallMethod(m, "load", NULL);
		Py_DECREF(m);
		if (!r) return -1;
		Py_DECREF(r);
		if (!L.loaded) {
			PyErr_SetString(PyExc_RuntimeError, "dlbridge: dlbridge._lib.load() did not load the library");
			return -1;
		}
	}
	if (forked()) {
		PyErr_SetString(PyExc_RuntimeError, fork_msg);
		return -1;
	}
	return 0;
}

#define NEED_LIBRARY(fail)                                 \
	do {                                                   \
		if ((!L.loaded || forked()) && load_library() < 0) fail; \
	} while (0)

// The exception names of the error classes, indexed by the code an entry
// point returns: the one table, generated into dlbridge.h from pyfunc.Class.
static const char *const error_names[DLB_ERROR_CLASS_COUNT] = {DLB_ERROR_CLASSES};

// error_name is the exception name of error class rc, RuntimeError for a
// code outside the table.
static const char *error_name(int32_t rc) {
	return rc > 0 && rc < DLB_ERROR_CLASS_COUNT ? error_names[rc] : error_names[0];
}

// raise_last raises the exception of error class rc (dlbridge.h) that a
// library entry point just returned, with its message; returns NULL.
static PyObject *raise_last(int32_t rc) {
	PyObject *exc = PyDict_GetItemString(PyEval_GetBuiltins(), error_name(rc));
	PyErr_SetString(exc ? exc : PyExc_RuntimeError, L.last_error());
	return NULL;
}

static void call_deleter(void *mt, int versioned) {
	if (!mt) return;
	if (versioned) {
		dlb_DLManagedTensorVersioned *m = mt;
		if (m->deleter) m->deleter(m);
	} else {
		dlb_DLManagedTensor *m = mt;
		if (m->deleter) m->deleter(m);
	}
}

// ---- keepers and fast exports ----

typedef struct {
	_Atomic int64_t refs;
	uint64_t handle;
} keeper;

static keeper *keeper_new(uint64_t h) {
	keeper *k = malloc(sizeof *k);
	if (!k) return NULL;
	atomic_init(&k->refs, 1);
	k->handle = h;
	return k;
}

static void keeper_retain(keeper *k) { atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed); }

// keeper_release may run on any thread, with or without the GIL.
static void keeper_release(keeper *k) {
	if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) == 1) {
		// An error here (none expected) has no one to report to. In a forked
		// child the handle stays open: Go cannot be entered there.
		if (!forked()) E.close(k->handle);
		free(k);
	}
}

static void fast_deleter_versioned(dlb_DLManagedTensorVersioned *mt) {
	keeper *k = mt->manager_ctx;
	free(mt);
	atomic_fetch_sub(L.fast_live, 1);
	keeper_release(k);
}

static void fast_deleter_legacy(dlb_DLManagedTensor *mt) {
	keeper *k = mt->manager_ctx;
	free(mt);
	atomic_fetch_sub(L.fast_live, 1);
	keeper_release(k);
}

// ---- capsules ----

static const char name_legacy[] = "dltensor";
static const char name_versioned[] = "dltensor_versioned";
static const char name_used_legacy[] = "used_dltensor";
static const char name_used_versioned[] = "used_dltensor_versioned";

// capsule_destructor runs the deleter of a capsule we made only while it is
// unconsumed (still named "dltensor" or "dltensor_versioned"). CPython
// calls it holding the GIL, also during finalization; a pending exception
// is kept as it was.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" // PyErr_Fetch on 3.12+ with the 3.11 limited API
#endif
static void capsule_destructor(PyObject *cap) {
#if PY_VERSION_HEX >= 0x030C0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030C0000)
	PyObject *exc = PyErr_GetRaisedException();
#else
	PyObject *et, *ev, *tb;
	PyErr_Fetch(&et, &ev, &tb);
#endif
	const char *name = PyCapsule_GetName(cap);
	int versioned = -1;
	if (name && strcmp(name, name_versioned) == 0) versioned = 1;
	else if (name && strcmp(name, name_legacy) == 0) versioned = 0;
	if (versioned >= 0) call_deleter(PyCapsule_GetPointer(cap, name), versioned);
	PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030C0000)
	PyErr_SetRaisedException(exc);
#else
	PyErr_Restore(et, ev, tb);
#endif
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

// ---- _CTensor ----

#define INLINE_DIMS 8

typedef struct {
	PyObject_HEAD
	keeper *keeper; // NULL once released
	uint64_t handle;
	uint64_t ptr;
	int32_t dev_type, dev_id;
	uint8_t code, bits;
	uint16_t lanes;
	int32_t ndim;
	uint32_t flags; // DLB_INFO_*
	int32_t itemsize;
	uint64_t stream; // Go's pending write (View.Stream) as of epoch: see fresh_stream
	uint64_t epoch;
	int closed; // close() was called
	int pinned; // a consumer holds this object, not a DLPack export: keep the memory until dealloc
	int shared; // the address went out (data_ptr, handle, the exchange API's DLTensor): see exposed()
	int negstride;
	int64_t *shape, *strides;      // in elements
	Py_ssize_t *bstrides;          // in bytes, for the buffer protocol
	PyObject *shape_t, *strides_t, *dev_t; // cached tuples
	int64_t dims[3 * INLINE_DIMS];
} CTensor;

static PyTypeObject *ctensor_type;
static PyObject *tensor_class; // dlbridge.Tensor, for tensors made from C (exchange API)

static int is_ctensor(PyObject *o) { return o && PyObject_TypeCheck(o, ctensor_type); }

// fill sets t from a handle's info; t takes over the handle. -1 with an
// exception set on failure (the handle is then closed).
// Each _CTensor caches the stream of the write pending on its memory, so
// that an export needs no call into Go. A write left in flight through one
// object (copy_ with non_blocking, or between private tensors) is pending on
// the memory, which other objects (views, other handles) share: it bumps
// writes_epoch, and every object whose cache is older asks Go again before
// trusting it (fresh_stream). Without such writes the check is one load.
static _Atomic uint64_t writes_epoch;

static uint64_t epoch_now(void) { return atomic_load_explicit(&writes_epoch, memory_order_acquire); }

static void note_write_in_flight(void) { atomic_fetch_add_explicit(&writes_epoch, 1, memory_order_acq_rel); }

static int fill(CTensor *t, uint64_t h, const dlb_info *info, uint64_t epoch) {
	int n = info->ndim;
	int cap = n > INLINE_DIMS ? n : INLINE_DIMS;
	if (n > INLINE_DIMS) {
		int64_t *d = malloc(3 * sizeof(int64_t) * (size_t)n);
		if (!d) {
			E.close(h);
			PyErr_NoMemory();
			return -1;
		}
		t->shape = d;
	} else {
		t->shape = t->dims;
	}
	t->strides = t->shape + cap;
	t->bstrides = (Py_ssize_t *)(t->strides + cap);
	t->keeper = keeper_new(h);
	if (!t->keeper) {
		E.close(h);
		PyErr_NoMemory();
		return -1;
	}
	t->handle = h;
	t->ptr = info->ptr;
	t->dev_type = info->device_type;
	t->dev_id = info->device_id;
	t->code = info->code;
	t->bits = info->bits;
	t->lanes = info->lanes;
	t->ndim = n;
	t->flags = info->flags;
	t->itemsize = info->itemsize;
	t->stream = info->stream;
	t->epoch = epoch;
	t->negstride = 0;
	for (int i = 0; i < n; i++) {
		t->shape[i] = info->shape[i];
		t->strides[i] = info->strides[i];
		t->bstrides[i] = (Py_ssize_t)(info->strides[i] * info->itemsize);
		if (info->strides[i] < 0 && info->shape[i] > 1) t->negstride = 1;
	}
	return 0;
}

// new_tensor makes an instance of cls (a subclass of _CTensor) owning h.
// new_tensor wraps handle h, whose info Go gave after epoch was read.
static PyObject *new_tensor(PyObject *cls, uint64_t h, const dlb_info *info, uint64_t epoch) {
	if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, ctensor_type)) {
		E.close(h);
		PyErr_SetString(PyExc_TypeError, "dlbridge: the class must be a subclass of _CTensor");
		return NULL;
	}
	CTensor *t = (CTensor *)PyType_GenericAlloc((PyTypeObject *)cls, 0);
	if (!t) {
		E.close(h);
		return NULL;
	}
	if (fill(t, h, info, epoch) < 0) {
		Py_DECREF(t);
		return NULL;
	}
	return (PyObject *)t;
}

// import_tensor hands the DLPack tensor mt to Go and returns a cls
// instance owning the handle. pending, when not 0, is the CUDA stream the
// producer ordered its writes before (1 for the legacy default stream),
// instead of our work stream; Go runs mt's deleter if the import fails.
static PyObject *import_tensor(PyObject *cls, void *mt, int versioned, int64_t pending) {
	uint64_t h, e = epoch_now();
	dlb_info info;
	int32_t rc = pending ? E.import_on(mt, versioned, 1, pending, &h, &info) : E.import(mt, versioned, 1, &h, &info);
	if (rc) return raise_last(rc);
	return new_tensor(cls, h, &info, e);
}

static void ct_dealloc(PyObject *self) {
	CTensor *t = (CTensor *)self;
	PyTypeObject *tp = Py_TYPE(self);
	if (t->keeper) keeper_release(t->keeper);
	t->keeper = NULL;
	if (t->shape && t->shape != t->dims) free(t->shape);
	Py_XDECREF(t->shape_t);
	Py_XDECREF(t->dev_t);
	Py_XDECREF(t->strides_t);
	freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
	tp_free(self);
	Py_DECREF(tp);
}

static int check_open(CTensor *t) {
	if (t->closed || !t->keeper) {
		PyErr_SetString(PyExc_ValueError, "dlbridge: the tensor is closed");
		return -1;
	}
	if (forked()) {
		PyErr_SetString(PyExc_RuntimeError, fork_msg);
		return -1;
	}
	return 0;
}

// refresh_stream re-reads t's pending stream from Go.
static int refresh_stream(CTensor *t) {
	uint64_t e = epoch_now();
	dlb_info info;
	int32_t rc = E.info_get(t->handle, &info);
	if (rc) {
		raise_last(rc);
		return -1;
	}
	t->stream = info.stream;
	t->epoch = e;
	return 0;
}

// fresh_stream makes t->stream current (see writes_epoch) for a device
// tensor, whose exports order after it; t must be open.
static int fresh_stream(CTensor *t) {
	if (t->dev_type != DLB_CUDA || t->epoch == epoch_now()) return 0;
	return refresh_stream(t);
}

// fast_export builds a managed tensor over t's memory held by t's keeper.
static void *fast_export(CTensor *t, int versioned) {
	int n = t->ndim;
	size_t head = versioned ? sizeof(dlb_DLManagedTensorVersioned) : sizeof(dlb_DLManagedTensor);
	char *p = malloc(head + 2 * sizeof(int64_t) * (size_t)(n ? n : 1));
	if (!p) return NULL;
	int64_t *shape = (int64_t *)(p + head), *strides = shape + n;
	memcpy(shape, t->shape, sizeof(int64_t) * (size_t)n);
	memcpy(strides, t->strides, sizeof(int64_t) * (size_t)n);
	dlb_DLTensor *d;
	if (versioned) {
		dlb_DLManagedTensorVersioned *m = (void *)p;
		m->version.major = 1;
		m->version.minor = 3;
		m->manager_ctx = t->keeper;
		m->deleter = fast_deleter_versioned;
		m->flags = (t->flags & DLB_INFO_READONLY ? 1u : 0u) | (t->flags & DLB_INFO_COPIED ? 2u : 0u) |
			   (t->flags & DLB_INFO_PADDED ? 4u : 0u);
		d = &m->dl_tensor;
	} else {
		dlb_DLManagedTensor *m = (void *)p;
		m->manager_ctx = t->keeper;
		m->deleter = fast_deleter_legacy;
		d = &m->dl_tensor;
	}
	d->data = (void *)(uintptr_t)t->ptr;
	d->device.device_type = t->dev_type;
	d->device.device_id = t->dev_id;
	d->ndim = n;
	d->dtype.code = t->code;
	d->dtype.bits = t->bits;
	d->dtype.lanes = t->lanes;
	d->shape = shape;
	d->strides = n ? strides : shape;
	d->byte_offset = 0;
	keeper_retain(t->keeper);
	atomic_fetch_add(L.fast_made, 1);
	atomic_fetch_add(L.fast_live, 1);
	return p;
}

// ---- integer arguments ----

static PyObject *type_name(PyObject *o) {
	PyObject *n = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
	if (!n) {
		PyErr_Clear();
		n = PyUnicode_FromString("object");
	}
	return n;
}

// show_value is repr(v) cut to 60 characters (a hostile value may be a
// megabyte string), as _convert.show writes it; NULL with an error set.
static PyObject *show_value(PyObject *v) {
	PyObject *r = PyObject_Repr(v);
	if (!r) {
		PyErr_Clear(); // a hostile __repr__
		PyObject *tn = type_name(v);
		if (!tn) return NULL;
		r = PyUnicode_FromFormat("<%U object>", tn);
		Py_DECREF(tn);
		return r;
	}
	if (PyUnicode_GetLength(r) <= 60) return r;
	PyObject *head = PyUnicode_Substring(r, 0, 57);
	Py_DECREF(r);
	if (!head) return NULL;
	r = PyUnicode_FromFormat("%U...", head);
	Py_DECREF(head);
	return r;
}

// bad_value raises exc with "dlbridge: FIELD=VALUE (TYPE) WHAT", the
// message _convert gives for the same value.
static void bad_value(PyObject *exc, const char *field, PyObject *v, const char *what) {
	PyObject *shown = show_value(v);
	PyObject *tn = shown ? type_name(v) : NULL;
	if (tn) PyErr_Format(exc, "dlbridge: %s=%U (%U) %s", field, shown, tn, what);
	Py_XDECREF(shown);
	Py_XDECREF(tn);
}

// bool_like: bool, numpy.bool_ and 0-d bool arrays or tensors, whose
// __index__ may work, but a flag is not an integer here (the Array API
// refuses them); as _convert._is_bool decides.
static int bool_like(PyObject *v) {
	if (PyBool_Check(v)) return 1;
	if (PyType_Check(v)) return 0;
	PyObject *dt = PyObject_GetAttrString(v, "dtype");
	if (!dt) {
		PyErr_Clear();
		return 0;
	}
	PyObject *name = PyObject_Str(dt);
	Py_DECREF(dt);
	if (!name) {
		PyErr_Clear();
		return 0;
	}
	int yes = PyUnicode_CompareWithASCIIString(name, "bool") == 0 ||
		  PyUnicode_CompareWithASCIIString(name, "torch.bool") == 0;
	Py_DECREF(name);
	return yes;
}

// exact_int is int_arg's common case, inline: an exact int in [lo, hi]
// into *out (1), else 0 with nothing set. __dlpack__ runs it per export:
// int_arg's full body (its message buffer, the checks of other types) as
// the only path cost about 60 instructions a call more than 922d2a6's
// PyLong_AsLongLong.
static inline int exact_int(PyObject *v, long long lo, long long hi, long long *out) {
	if (!PyLong_CheckExact(v)) return 0;
	int overflow = 0;
	long long x = PyLong_AsLongLongAndOverflow(v, &overflow); // cannot fail on an exact int
	if (overflow || x < lo || x > hi) return 0;
	*out = x;
	return 1;
}

static int int_arg_checked(PyObject *v, const char *name, int index, long long lo, long long hi,
			   const char *ctype, long long *out);

// int_arg takes v with operator.index semantics (bool, float, str refused)
// into *out, checked against [lo, hi], the range of ctype. name (with
// "[index]" when index >= 0) is the argument as the message shows it
// ("stream", "dl_device[1]"). -1 with TypeError or ValueError set on
// failure, with the messages of dlbridge._convert.
static inline int int_arg(PyObject *v, const char *name, int index, long long lo, long long hi,
			  const char *ctype, long long *out) {
	if (exact_int(v, lo, hi, out)) return 0;
	return int_arg_checked(v, name, index, lo, hi, ctype, out);
}

// int_arg_checked is int_arg for anything but an exact int in range.
static __attribute__((noinline)) int int_arg_checked(PyObject *v, const char *name, int index, long long lo,
							long long hi, const char *ctype, long long *out) {
	PyObject *i;
	if (PyLong_CheckExact(v)) { // the usual case, without a new reference
		int overflow = 0;
		long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
		if (!overflow && x >= lo && x <= hi) {
			*out = x;
			return 0;
		}
		Py_INCREF(v);
		i = v;
	} else {
		i = NULL;
	}
	char field[64];
	if (index < 0) snprintf(field, sizeof field, "%s", name);
	else snprintf(field, sizeof field, "%s[%d]", name, index);
	if (!i) {
		if (bool_like(v) || !PyIndex_Check(v)) {
			bad_value(PyExc_TypeError, field, v, "is not an integer");
			return -1;
		}
		i = PyNumber_Index(v);
		if (!i) return -1;
	}
	int overflow = 0;
	long long x = PyLong_AsLongLongAndOverflow(i, &overflow);
	if (x == -1 && !overflow && PyErr_Occurred()) {
		Py_DECREF(i);
		return -1;
	}
	if (overflow || x < lo || x > hi) {
		PyErr_Format(PyExc_ValueError, "dlbridge: %s=%S out of range for %s (%lld..%lld)", field, i, ctype, lo, hi);
		Py_DECREF(i);
		return -1;
	}
	Py_DECREF(i);
	*out = x;
	return 0;
}

static int pair_arg_checked(PyObject *v, const char *name, long long lo, long long hi, const char *ctype,
			    long long out[2]);

// pair_arg takes v, a sequence of exactly two integers, into out[0..1].
static inline int pair_arg(PyObject *v, const char *name, long long lo, long long hi, const char *ctype,
			   long long out[2]) {
	if (PyTuple_CheckExact(v) && PyTuple_Size(v) == 2 && exact_int(PyTuple_GetItem(v, 0), lo, hi, &out[0]) &&
	    exact_int(PyTuple_GetItem(v, 1), lo, hi, &out[1]))
		return 0;
	return pair_arg_checked(v, name, lo, hi, ctype, out);
}

// pair_arg_checked is pair_arg for anything but an exact tuple of two exact
// ints in range.
static __attribute__((noinline)) int pair_arg_checked(PyObject *v, const char *name, long long lo, long long hi,
							 const char *ctype, long long out[2]) {
	if (PyTuple_Check(v) && PyTuple_Size(v) == 2) { // borrowed items
		for (int k = 0; k < 2; k++)
			if (int_arg(PyTuple_GetItem(v, k), name, k, lo, hi, ctype, &out[k]) < 0) return -1;
		return 0;
	}
	if (!(PyTuple_Check(v) || PyList_Check(v)) || PySequence_Size(v) != 2) {
		bad_value(PyExc_TypeError, name, v, "is not a pair of integers");
		return -1;
	}
	for (int k = 0; k < 2; k++) {
		PyObject *e = PySequence_GetItem(v, k);
		if (!e) return -1;
		int rc = int_arg(e, name, k, lo, hi, ctype, &out[k]);
		Py_DECREF(e);
		if (rc < 0) return -1;
	}
	return 0;
}

// ---- _CTensor methods ----

static PyObject *s_stream, *s_max_version, *s_dl_device, *s_copy, *s_numpy;

static int kw_is(PyObject *name, PyObject *want) { return name == want || PyUnicode_Compare(name, want) == 0; }

// last_max_version is the last max_version __dlpack__ took that is an exact
// tuple of two exact ints, held here so that its identity stands for its
// value (such a tuple cannot change): a consumer passes the same constant
// on every export, which then costs one comparison (the GIL guards both).
static PyObject *last_max_version;
static int last_versioned;

static void remember_max_version(PyObject *mv, int versioned) {
	if (!PyTuple_CheckExact(mv) || !PyLong_CheckExact(PyTuple_GetItem(mv, 0)) ||
	    !PyLong_CheckExact(PyTuple_GetItem(mv, 1)))
		return; // (pair_arg accepted it: two items)
	PyObject *old = last_max_version;
	Py_INCREF(mv);
	last_max_version = mv;
	Py_XDECREF(old); // a tuple of ints: its deallocation runs no Python code
	last_versioned = versioned;
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
static PyObject *ct_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
	CTensor *t = (CTensor *)self;
	if (nargs != 0) {
		PyErr_SetString(PyExc_TypeError,
				"__dlpack__() takes keyword arguments only (stream, max_version, dl_device, copy)");
		return NULL;
	}
	PyObject *stream = NULL, *max_version = NULL, *dl_device = NULL, *copy = NULL;
	if (kwnames) {
		Py_ssize_t nkw = PyTuple_Size(kwnames);
		for (Py_ssize_t i = 0; i < nkw; i++) {
			PyObject *k = PyTuple_GetItem(kwnames, i), *v = args[i];
			if (kw_is(k, s_stream)) stream = v;
			else if (kw_is(k, s_max_version)) max_version = v;
			else if (kw_is(k, s_dl_device)) dl_device = v;
			else if (kw_is(k, s_copy)) copy = v;
			else {
				PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument '%U'", k);
				return NULL;
			}
		}
	}
	if (check_open(t) < 0 || fresh_stream(t) < 0) return NULL;
	int versioned = 0;
	if (max_version && max_version != Py_None) {
		if (max_version == last_max_version) {
			versioned = last_versioned;
		} else {
			long long mv[2];
			if (pair_arg(max_version, "max_version", 0, UINT32_MAX, "uint32", mv) < 0) return NULL;
			versioned = mv[0] >= 1;
			remember_max_version(max_version, versioned);
		}
	}
	int has_stream = 0;
	long long s = 0;
	if (stream && stream != Py_None) {
		if (int_arg(stream, "stream", -1, INT64_MIN, INT64_MAX, "int64", &s) < 0) return NULL;
		has_stream = 1;
	}
	int has_dev = 0;
	long long dev[2] = {0, 0};
	if (dl_device && dl_device != Py_None) {
		if (pair_arg(dl_device, "dl_device", INT32_MIN, INT32_MAX, "int32", dev) < 0)
			return NULL;
		has_dev = dev[0] != t->dev_type || dev[1] != t->dev_id;
	}
	int cm = 0; // pybridge.CopyMode: 0 if needed, 1 never, 2 always
	if (copy && copy != Py_None) {
		int c = PyObject_IsTrue(copy);
		if (c < 0) return NULL;
		cm = c ? 2 : 1;
	}
	// The fast path: no copy, same device, nothing to order, a request a
	// legacy capsule can carry. Everything else (and every error) is Go's.
	int fast = !has_dev && cm != 2;
	if (fast && !versioned && ((t->flags & DLB_INFO_READONLY) || t->negstride)) fast = 0;
	if (fast) {
		if (t->dev_type == DLB_CUDA) {
			uint64_t consumer = has_stream ? (uint64_t)s : 1; // None: the legacy default stream
			if (has_stream && s == 0) fast = 0;                // ambiguous: Go raises
			else if (has_stream && s == -1) {
			} else if (t->stream != 0 && t->stream != consumer) fast = 0; // needs an event
		} else if (has_stream && s != -1) {
			fast = 0; // Go raises for a stream on a host tensor
		} else if (t->dev_type != DLB_CPU && t->dev_type != DLB_CUDA_HOST && t->dev_type != DLB_CUDA_MANAGED) {
			fast = 0;
		}
	}
	void *mt = NULL;
	if (fast) {
		mt = fast_export(t, versioned);
		if (!mt) return PyErr_NoMemory();
	} else {
		int32_t rc = E.export(t->handle, versioned, has_stream, (int64_t)s, has_dev, (int32_t)dev[0],
					(int32_t)dev[1], cm, &mt);
		if (rc) return raise_last(rc);
	}
	PyObject *cap = PyCapsule_New(mt, versioned ? name_versioned : name_legacy, capsule_destructor);
	if (!cap) call_deleter(mt, versioned);
	return cap;
}

static PyObject *tuple_of(const int64_t *v, int n);

// dev_tuple is (device_type, device_id), made once: __dlpack_device__ is
// called for every exchange.
static PyObject *dev_tuple(CTensor *t) {
	if (!t->dev_t) {
		int64_t v[2] = {t->dev_type, t->dev_id};
		if (!(t->dev_t = tuple_of(v, 2))) return NULL;
	}
	Py_INCREF(t->dev_t);
	return t->dev_t;
}

static PyObject *ct_refresh_stream(PyObject *self, PyObject *unused) {
	CTensor *t = (CTensor *)self;
	if (check_open(t) < 0) return NULL;
	if (t->dev_type == DLB_CUDA && refresh_stream(t) < 0) return NULL;
	Py_RETURN_NONE;
}

static PyObject *ct_dlpack_device(PyObject *self, PyObject *unused) { return dev_tuple((CTensor *)self); }

static PyObject *ct_close(PyObject *self, PyObject *unused) {
	CTensor *t = (CTensor *)self;
	if (!t->closed) {
		t->closed = 1;
		if (!t->pinned && t->keeper) {
			keeper *k = t->keeper;
			t->keeper = NULL;
			keeper_release(k);
		}
	}
	Py_RETURN_NONE;
}

static PyObject *ct_pin(PyObject *self, PyObject *unused) {
	CTensor *t = (CTensor *)self;
	if (check_open(t) < 0) return NULL;
	t->pinned = 1;
	Py_RETURN_NONE;
}

static PyObject *ct_share(PyObject *self, PyObject *unused) {
	((CTensor *)self)->shared = 1;
	Py_RETURN_NONE;
}

static PyObject *tuple_of(const int64_t *v, int n) {
	PyObject *tup = PyTuple_New(n);
	if (!tup) return NULL;
	for (int i = 0; i < n; i++) {
		PyObject *x = PyLong_FromLongLong(v[i]);
		if (!x) {
			Py_DECREF(tup);
			return NULL;
		}
		PyTuple_SetItem(tup, i, x);
	}
	return tup;
}

static PyObject *get_h(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	return PyLong_FromUnsignedLongLong(t->closed || !t->keeper ? 0 : t->handle);
}
static PyObject *get_ptr(PyObject *self, void *c) { return PyLong_FromUnsignedLongLong(((CTensor *)self)->ptr); }
static PyObject *get_shape(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	if (!t->shape_t && !(t->shape_t = tuple_of(t->shape, t->ndim))) return NULL;
	Py_INCREF(t->shape_t);
	return t->shape_t;
}
static PyObject *get_strides(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	if (!t->strides_t && !(t->strides_t = tuple_of(t->strides, t->ndim))) return NULL;
	Py_INCREF(t->strides_t);
	return t->strides_t;
}
static PyObject *get_code(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	int64_t v[3] = {t->code, t->bits, t->lanes};
	return tuple_of(v, 3);
}
static PyObject *get_dev(PyObject *self, void *c) { return dev_tuple((CTensor *)self); }
static PyObject *get_flags(PyObject *self, void *c) { return PyLong_FromLongLong(((CTensor *)self)->flags); }
static PyObject *get_itemsize(PyObject *self, void *c) { return PyLong_FromLongLong(((CTensor *)self)->itemsize); }
static PyObject *get_stream(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	if (!t->closed && t->keeper && !forked() && fresh_stream(t) < 0) return NULL;
	return PyLong_FromUnsignedLongLong(t->stream);
}
static int set_stream(PyObject *self, PyObject *v, void *c) {
	if (!v) {
		PyErr_SetString(PyExc_TypeError, "cannot delete _stream");
		return -1;
	}
	unsigned long long s = PyLong_AsUnsignedLongLong(v);
	if (s == (unsigned long long)-1 && PyErr_Occurred()) return -1;
	if (s) note_write_in_flight(); // Python read it from Go after queuing a write (_refresh_stream)
	((CTensor *)self)->stream = s;
	((CTensor *)self)->epoch = epoch_now();
	return 0;
}

static const char *buffer_format(CTensor *t) {
	if (t->lanes != 1) return NULL;
	switch (t->code) {
	case 6: return t->bits == 8 ? "?" : NULL;
	case 0: return t->bits == 8 ? "b" : t->bits == 16 ? "h" : t->bits == 32 ? "i" : t->bits == 64 ? "q" : NULL;
	case 1: return t->bits == 8 ? "B" : t->bits == 16 ? "H" : t->bits == 32 ? "I" : t->bits == 64 ? "Q" : NULL;
	case 2: return t->bits == 16 ? "e" : t->bits == 32 ? "f" : t->bits == 64 ? "d" : NULL;
	case 5: return t->bits == 64 ? "Zf" : t->bits == 128 ? "Zd" : NULL;
	}
	return NULL;
}

static int ct_getbuffer(PyObject *self, Py_buffer *view, int flags) {
	CTensor *t = (CTensor *)self;
	view->obj = NULL;
	if (check_open(t) < 0) return -1;
	if (t->dev_type != DLB_CPU && t->dev_type != DLB_CUDA_HOST && t->dev_type != DLB_CUDA_MANAGED) {
		PyErr_SetString(PyExc_BufferError, "dlbridge: the buffer protocol needs host memory; this tensor is on a device");
		return -1;
	}
	const char *fmt = buffer_format(t);
	if (!fmt) {
		PyErr_SetString(PyExc_BufferError,
				"dlbridge: this dtype has no buffer-protocol format (e.g. bfloat16); use DLPack or __array_interface__");
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && (t->flags & DLB_INFO_READONLY)) {
		PyErr_SetString(PyExc_BufferError, "dlbridge: the tensor is read-only");
		return -1;
	}
	if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !(t->flags & DLB_INFO_C_CONTIGUOUS)) {
		PyErr_SetString(PyExc_BufferError,
				"dlbridge: the tensor is not C-contiguous and the consumer did not ask for strides");
		return -1;
	}
	Py_ssize_t n = 1;
	for (int i = 0; i < t->ndim; i++) n *= (Py_ssize_t)t->shape[i];
	t->pinned = 1; // the view holds this object; the memory must outlive close()
	view->buf = (void *)(uintptr_t)t->ptr;
	Py_INCREF(self);
	view->obj = self;
	view->len = n * t->itemsize;
	view->itemsize = t->itemsize;
	view->readonly = (t->flags & DLB_INFO_READONLY) ? 1 : 0;
	view->ndim = t->ndim;
	view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
	view->shape = (flags & PyBUF_ND) == PyBUF_ND ? (Py_ssize_t *)t->shape : NULL;
	view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? t->bstrides : NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	return 0;
}

static void ct_releasebuffer(PyObject *self, Py_buffer *view) { (void)self, (void)view; }

static PyMethodDef ct_methods[] = {
	{"__dlpack__", (PyCFunction)(void (*)(void))ct_dlpack, METH_FASTCALL | METH_KEYWORDS,
	 "A DLPack capsule of this tensor (versioned when max_version >= (1, 0))."},
	{"__dlpack_device__", ct_dlpack_device, METH_NOARGS, "(device_type, device_id)"},
	{"close", ct_close, METH_NOARGS, "Release this tensor's hold on its memory. Idempotent."},
	{"_pin", ct_pin, METH_NOARGS, "Keep the memory until this object is collected."},
	{"_share", ct_share, METH_NOARGS, "Note that the address went out of dlbridge (data_ptr, handle)."},
	{"_refresh_stream", ct_refresh_stream, METH_NOARGS, "Ask Go again for the stream of the write pending (CUDA)."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef ct_getset[] = {
	{"_h", get_h, NULL, NULL, NULL},
	{"_ptr", get_ptr, NULL, NULL, NULL},
	{"_shape", get_shape, NULL, NULL, NULL},
	{"_strides", get_strides, NULL, NULL, NULL},
	{"_code", get_code, NULL, NULL, NULL},
	{"_dev", get_dev, NULL, NULL, NULL},
	{"_flags", get_flags, NULL, NULL, NULL},
	{"_itemsize", get_itemsize, NULL, NULL, NULL},
	{"_stream", get_stream, set_stream, NULL, NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyObject *ct_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
	PyErr_SetString(PyExc_TypeError,
			"dlbridge.Tensor cannot be built directly: use dlbridge.empty, zeros, arange, from_dlpack or asarray");
	return NULL;
}

static PyType_Slot ct_slots[] = {
	{Py_tp_dealloc, (void *)ct_dealloc},
	{Py_tp_methods, ct_methods},
	{Py_tp_getset, ct_getset},
	{Py_tp_new, (void *)ct_new},
	{Py_bf_getbuffer, (void *)ct_getbuffer},
	{Py_bf_releasebuffer, (void *)ct_releasebuffer},
	{Py_tp_doc, "The C base of dlbridge.Tensor (the dlbridge._core extension)."},
	{0, NULL},
};

static PyType_Spec ct_spec = {
	"dlbridge._CTensor", sizeof(CTensor), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, ct_slots,
};

// ---- module functions ----

static int need_args(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *fn) {
	if (nargs < lo || nargs > hi) {
		if (lo == hi) PyErr_Format(PyExc_TypeError, "dlbridge: %s takes %d arguments", fn, (int)lo);
		else PyErr_Format(PyExc_TypeError, "dlbridge: %s takes %d to %d arguments", fn, (int)lo, (int)hi);
		return -1;
	}
	return 0;
}

// wrap(cls, handle) -> cls instance owning handle.
static PyObject *m_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 2, 2, "wrap") < 0) return NULL;
	unsigned long long h = PyLong_AsUnsignedLongLong(args[1]);
	if (h == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
	NEED_LIBRARY(return NULL);
	uint64_t e = epoch_now();
	dlb_info info;
	int32_t rc = E.info_get(h, &info);
	if (rc) return raise_last(rc);
	return new_tensor(args[0], h, &info, e);
}

// take(cls, capsule, producer=None, pending=None) consumes a DLPack
// capsule: checks and renames it, hands the tensor to Go, and returns a cls
// instance. producer, when given, is the object whose __dlpack__ returned
// capsule (named in the error when it is not a capsule); pending, the CUDA
// stream the producer's writes are ordered before when it is not our work
// stream (see from_dlpack).
static PyObject *take_capsule(PyObject *cls, PyObject *cap, PyObject *producer, int64_t pending);

static PyObject *m_take(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 2, 4, "take") < 0) return NULL;
	long long pending = 0;
	if (nargs == 4 && args[3] != Py_None && (pending = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
		return NULL;
	return take_capsule(args[0], args[1], nargs >= 3 ? args[2] : Py_None, pending);
}

// take_capsule is take; pending, when not 0, is the CUDA stream the
// producer's writes are ordered before (see from_dlpack), instead of our
// work stream.
static PyObject *take_capsule(PyObject *cls, PyObject *cap, PyObject *producer, int64_t pending) {
	if (!PyCapsule_CheckExact(cap)) {
		PyObject *rn = type_name(cap);
		if (!rn) return NULL;
		if (producer != Py_None) {
			PyObject *pn = type_name(producer);
			if (pn) {
				PyErr_Format(PyExc_TypeError, "dlbridge: %U.__dlpack__() returned %U, not a PyCapsule", pn, rn);
				Py_DECREF(pn);
			}
		} else {
			PyErr_Format(PyExc_TypeError, "dlbridge: expected a DLPack capsule (PyCapsule), got %U", rn);
		}
		Py_DECREF(rn);
		return NULL;
	}
	const char *name = PyCapsule_GetName(cap);
	if (!name && PyErr_Occurred()) return NULL;
	int versioned;
	if (name && strcmp(name, name_versioned) == 0) versioned = 1;
	else if (name && strcmp(name, name_legacy) == 0) versioned = 0;
	else if (name && strncmp(name, "used_dltensor", 13) == 0) {
		PyErr_Format(PyExc_ValueError,
			     "dlbridge: this DLPack capsule was already consumed (it is named '%s'); a capsule can be "
			     "imported only once: call __dlpack__() again for a new one",
			     name);
		return NULL;
	} else {
		PyErr_SetString(PyExc_TypeError, "dlbridge: this capsule is not a DLPack capsule");
		return NULL;
	}
	NEED_LIBRARY(return NULL);
	void *mt = PyCapsule_GetPointer(cap, name);
	if (!mt) {
		if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dlbridge: DLPack capsule holds a NULL pointer");
		return NULL;
	}
	// Ours now: renamed first, so that the capsule's destructor will not run
	// the deleter that Go owns from here on (Go runs it even if the import fails).
	if (PyCapsule_SetName(cap, versioned ? name_used_versioned : name_used_legacy) < 0) return NULL;
	return import_tensor(cls, mt, versioned, pending);
}

// The DLPack 1.3 exchange API (dlpack.h), consumer and producer sides.
typedef struct dlb_exchange_header {
	dlb_DLPackVersion version;
	struct dlb_exchange_header *prev_api;
} dlb_exchange_header;

typedef struct {
	dlb_exchange_header header;
	int (*managed_tensor_allocator)(dlb_DLTensor *, dlb_DLManagedTensorVersioned **, void *,
					void (*)(void *, const char *, const char *));
	int (*managed_tensor_from_py_object_no_sync)(void *, dlb_DLManagedTensorVersioned **);
	int (*managed_tensor_to_py_object_no_sync)(dlb_DLManagedTensorVersioned *, void **);
	int (*dltensor_from_py_object_no_sync)(void *, dlb_DLTensor *);
	int (*current_work_stream)(int32_t, int32_t, void **);
} dlb_exchange_api;

// exchange_api_of is the DLPack C exchange API in capsule kind, or NULL
// with an exception. The last capsule asked for is remembered (with a
// reference, under the GIL): PyCapsule_GetPointer compares the capsule's
// name, a tenth of a two-tensor call's time in C
// (bench/results/callpath-2core).
static PyObject *last_api_capsule;
static dlb_exchange_api *last_api;

static dlb_exchange_api *exchange_api_of(PyObject *kind) {
	if (kind == last_api_capsule) return last_api;
	dlb_exchange_api *ex = PyCapsule_GetPointer(kind, "dlpack_exchange_api");
	if (ex) {
		PyObject *old = last_api_capsule;
		Py_INCREF(kind);
		last_api_capsule = kind, last_api = ex;
		Py_XDECREF(old);
	}
	return ex;
}

// exchange_stream is the current work stream a producer's C exchange API
// names for CUDA device dev (its NULL, the legacy default stream, as 1).
// 0 on success, -1 with an exception.
static int exchange_stream(dlb_exchange_api *ex, int32_t dev, int64_t *out) {
	void *s = NULL;
	if (ex->current_work_stream(DLB_CUDA, dev, &s) != 0) {
		if (!PyErr_Occurred()) PyErr_SetString(PyExc_BufferError, "dlbridge: the producer's current_work_stream failed");
		return -1;
	}
	*out = s ? (int64_t)(uintptr_t)s : 1;
	return 0;
}

// probe_stream asks a stream probe (see producer_kinds) for the producer's
// current stream on CUDA device dev: *out is its answer, 0 for None or for
// a kind that is no probe. 0 on success, -1 with an exception.
static int probe_stream(PyObject *kind, int32_t dev, int64_t *out) {
	*out = 0;
	if (kind == Py_None || !PyCallable_Check(kind)) return 0;
	PyObject *d = PyLong_FromLong(dev), *r = d ? PyObject_CallFunctionObjArgs(kind, d, NULL) : NULL;
	Py_XDECREF(d);
	if (!r) return -1;
	if (r != Py_None) {
		long long s = PyLong_AsLongLong(r);
		if (s == -1 && PyErr_Occurred()) {
			Py_DECREF(r);
			return -1;
		}
		*out = s;
	}
	Py_DECREF(r);
	return 0;
}

// exchange_import(cls, obj, api_capsule): obj's producer exports through its
// C exchange API (no Python-level __dlpack__). A CUDA tensor's pending
// write is on the producer's current work stream: every reader is ordered
// after it when it reads, nothing waits at import.
static PyObject *exchange_import(PyObject *cls, PyObject *obj, PyObject *api) {
	dlb_exchange_api *ex = exchange_api_of(api);
	if (!ex) return NULL;
	if (ex->header.version.major != 1 || !ex->managed_tensor_from_py_object_no_sync) {
		PyErr_SetString(PyExc_BufferError, "dlbridge: the producer's DLPack exchange API has an unsupported version");
		return NULL;
	}
	NEED_LIBRARY(return NULL);
	dlb_DLManagedTensorVersioned *mt = NULL;
	if (ex->managed_tensor_from_py_object_no_sync(obj, &mt) != 0 || !mt) {
		if (!PyErr_Occurred()) PyErr_SetString(PyExc_BufferError, "dlbridge: the producer's exchange API failed");
		return NULL;
	}
	if (mt->version.major == 1 && mt->dl_tensor.device.device_type == DLB_CUDA && ex->current_work_stream) {
		int64_t s;
		if (exchange_stream(ex, mt->dl_tensor.device.device_id, &s) < 0) {
			call_deleter(mt, 1);
			return NULL;
		}
		return import_tensor(cls, mt, 1, s);
	}
	return import_tensor(cls, mt, 1, 0);
}

// ---- copy_ and to ----

// ctensor_arg returns o as an open _CTensor, or NULL with an exception.
static CTensor *ctensor_arg(PyObject *o, const char *fn) {
	if (!is_ctensor(o)) {
		PyErr_Format(PyExc_TypeError, "dlbridge: %s needs dlbridge tensors", fn);
		return NULL;
	}
	return check_open((CTensor *)o) < 0 ? NULL : (CTensor *)o;
}

// exposed reports whether something outside dlbridge can reach t's memory
// from this object: a DLPack export alive (the keeper's count), an
// interface dictionary handed out (pinned), an address given away
// (shared). A fact for Go's stream policy (pybridge.PlanStream), which
// adds what only it knows.
static int exposed(CTensor *t) {
	return t->pinned || t->shared || atomic_load_explicit(&t->keeper->refs, memory_order_acquire) != 1;
}

// copied_into updates dst's cached stream after a copy into it: none
// pending when it was complete on return (a host destination, or a copy
// that was neither non_blocking nor private: then Go left nothing in
// flight), else what Go left.
static int copied_into(CTensor *dst, int may_pend) {
	if (dst->dev_type != DLB_CUDA) return 0;
	if (!may_pend) {
		dst->stream = 0; // complete on return: no write pending
		return 0;
	}
	note_write_in_flight();
	return refresh_stream(dst);
}

// stream_fact reads the stream= facts Python passes: None (no stream=),
// or (handle, device) from _stream.stream_facts, device -1 for a bare
// handle. Go decides what they mean (pybridge.PlanStream).
static int stream_fact(PyObject *f, int32_t *has, uint64_t *handle, int32_t *dev) {
	*has = f != Py_None;
	*handle = 0;
	*dev = -1;
	if (!*has) return 0;
	unsigned long long h;
	int d;
	if (!PyArg_ParseTuple(f, "Ki", &h, &d)) return -1;
	if (d < -1) {
		PyErr_Format(PyExc_ValueError, "dlbridge: stream device %d is out of range", d);
		return -1;
	}
	*handle = h, *dev = d;
	return 0;
}

// copy(dst, src, stream, non_blocking) is Tensor.copy_ on tensors (stream:
// see stream_fact): one Go call without the GIL, then dst's pending stream
// as Go left it.
static PyObject *m_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 4, 4, "copy") < 0) return NULL;
	CTensor *dst = ctensor_arg(args[0], "copy"), *src = dst ? ctensor_arg(args[1], "copy") : NULL;
	if (!src) return NULL;
	int32_t has, dev;
	uint64_t stream;
	if (stream_fact(args[2], &has, &stream, &dev) < 0) return NULL;
	int nb = PyObject_IsTrue(args[3]);
	if (nb < 0) return NULL;
	int exp = exposed(dst) || exposed(src);
	NEED_LIBRARY(return NULL);
	int32_t rc;
	Py_BEGIN_ALLOW_THREADS
	rc = E.copy_on(dst->handle, src->handle, has, stream, dev, nb, exp);
	Py_END_ALLOW_THREADS
	if (rc) return raise_last(rc);
	if (copied_into(dst, nb || !exp) < 0) return NULL;
	Py_RETURN_NONE;
}

// ---- copy_ from a NumPy array ----

// ndarray_type is numpy.ndarray, looked up in sys.modules (NumPy is never
// imported here) until NumPy is there. copy_host and the calls of Go
// functions take exactly that type (a subclass or another buffer exporter
// goes the general way, as asarray would take it).
static PyTypeObject *ndarray_type; // a reference, once found

static int is_ndarray(PyObject *obj) {
	if (ndarray_type) return Py_TYPE(obj) == ndarray_type;
	PyObject *np = PyImport_GetModule(s_numpy);
	if (!np) {
		PyErr_Clear();
		return 0;
	}
	PyObject *t = PyObject_GetAttrString(np, "ndarray");
	Py_DECREF(np);
	if (!t || !PyType_Check(t)) {
		PyErr_Clear();
		Py_XDECREF(t);
		return 0;
	}
	ndarray_type = (PyTypeObject *)t;
	return Py_TYPE(obj) == ndarray_type;
}

// buffer_dtype reads a buffer's struct format (native byte order, one
// item) as a DLPack dtype; 0 when it is not one dlbridge has.
static int buffer_dtype(const Py_buffer *b, uint8_t *code, uint8_t *bits) {
	const char *f = b->format ? b->format : "B";
	if (*f == '@' || *f == '=') f++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	else if (*f == '<') f++;
#endif
	Py_ssize_t n = b->itemsize;
	int ok;
	switch (*f) {
	case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
		*code = 0, ok = n == 1 || n == 2 || n == 4 || n == 8;
		break;
	case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
		*code = 1, ok = n == 1 || n == 2 || n == 4 || n == 8;
		break;
	case 'e': *code = 2, ok = n == 2; break;
	case 'f': *code = 2, ok = n == 4; break;
	case 'd': *code = 2, ok = n == 8; break;
	case '?': *code = 6, ok = n == 1; break;
	case 'Z':
		f++;
		*code = 5, ok = (*f == 'f' && n == 8) || (*f == 'd' && n == 16);
		break;
	default: return 0;
	}
	if (!ok || f[1] != '\0') return 0;
	*bits = (uint8_t)(n * 8);
	return 1;
}

// copy_host(dst, src, stream) is a blocking Tensor.copy_ from
// a NumPy array: the array's memory is taken through the buffer protocol
// and copied in one Go call without the GIL, with no DLPack import of the
// array and no tensor made for it. Into a device tensor nothing outside
// dlbridge reaches, Go may leave the copy in flight (as copy's); the array
// is done with on return. NotImplemented when src is not exactly a numpy.ndarray or its
// buffer is not a plain block of a dlbridge dtype: the caller then goes
// through asarray, which has every error message.
static PyObject *m_copy_host(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 3, 3, "copy_host") < 0) return NULL;
	CTensor *dst = ctensor_arg(args[0], "copy_host");
	if (!dst) return NULL;
	int32_t has, dev;
	uint64_t stream;
	if (stream_fact(args[2], &has, &stream, &dev) < 0) return NULL;
	if (!is_ndarray(args[1])) Py_RETURN_NOTIMPLEMENTED;
	NEED_LIBRARY(return NULL);
	Py_buffer b;
	if (PyObject_GetBuffer(args[1], &b, PyBUF_RECORDS_RO) < 0) { // e.g. datetime64: NumPy refuses
		PyErr_Clear();
		Py_RETURN_NOTIMPLEMENTED;
	}
	uint8_t code, bits;
	int64_t shape[64], strides[64];
	int ok = b.ndim <= 64 && buffer_dtype(&b, &code, &bits);
	for (int i = 0; ok && i < b.ndim; i++) {
		shape[i] = b.shape[i];
		strides[i] = b.strides[i] / b.itemsize;
		ok = b.strides[i] % b.itemsize == 0;
	}
	if (!ok) {
		PyBuffer_Release(&b);
		Py_RETURN_NOTIMPLEMENTED;
	}
	int exp = exposed(dst);
	int32_t rc;
	Py_BEGIN_ALLOW_THREADS
	rc = E.copy_from_host(dst->handle, (uint64_t)(uintptr_t)b.buf, code, bits, 1, b.ndim, shape, strides, has, stream, dev, exp);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	if (rc) return raise_last(rc);
	if (copied_into(dst, !exp) < 0) return NULL;
	Py_RETURN_NONE;
}

// to(cls, t, dev_type, dev_id, stream, non_blocking) is Tensor.to's copy
// (stream: see stream_fact): a new cls instance from one Go call without
// the GIL.
static PyObject *m_to(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 6, 6, "to") < 0) return NULL;
	CTensor *t = ctensor_arg(args[1], "to");
	if (!t) return NULL;
	long dt = PyLong_AsLong(args[2]), di = PyLong_AsLong(args[3]);
	if (PyErr_Occurred()) return NULL;
	int32_t has, sdev;
	uint64_t stream;
	if (stream_fact(args[4], &has, &stream, &sdev) < 0) return NULL;
	int nb = PyObject_IsTrue(args[5]);
	if (nb < 0) return NULL;
	NEED_LIBRARY(return NULL);
	uint64_t h, e = epoch_now();
	dlb_info info;
	int32_t rc;
	Py_BEGIN_ALLOW_THREADS
	rc = E.to_on(t->handle, (int32_t)dt, (int32_t)di, has, stream, sdev, nb, &h, &info);
	Py_END_ALLOW_THREADS
	if (rc) return raise_last(rc);
	return new_tensor(args[0], h, &info, e);
}

// ---- from_dlpack's common case ----

static PyObject *s_dlpack, *s_dlpack_device, *max_version_13;

// producer_kinds maps a producer type to what dlbridge._tensor's
// _describe_producer said of it, asked once per type: its DLPack C exchange
// API capsule; a stream probe, probe(device_id) -> the stream its
// __dlpack__ orders its writes from, or None; or None. Types are few; past
// PRODUCER_CACHE_MAX the answer is simply not cached.
static PyObject *producer_kinds;
#define PRODUCER_CACHE_MAX 64

// producer_kind returns a new reference to the kind of tp, or NULL with an
// exception.
static PyObject *producer_kind(PyTypeObject *tp, PyObject *describe) {
	PyObject *kind = PyDict_GetItemWithError(producer_kinds, (PyObject *)tp);
	if (kind) {
		Py_INCREF(kind);
		return kind;
	}
	if (PyErr_Occurred()) return NULL;
	kind = PyObject_CallFunctionObjArgs(describe, (PyObject *)tp, NULL);
	if (kind && PyDict_Size(producer_kinds) < PRODUCER_CACHE_MAX &&
	    PyDict_SetItem(producer_kinds, (PyObject *)tp, kind) < 0)
		Py_CLEAR(kind);
	return kind;
}

// work_streams caches dlb_work_stream, fixed per device for the process.
#define WORK_STREAM_CACHE 64
static _Atomic int64_t work_streams[WORK_STREAM_CACHE];

static int64_t work_stream(int32_t dev_id) {
	if (dev_id < 0 || dev_id >= WORK_STREAM_CACHE) return E.work_stream(dev_id);
	int64_t s = atomic_load_explicit(&work_streams[dev_id], memory_order_relaxed);
	if (!s) atomic_store_explicit(&work_streams[dev_id], s = E.work_stream(dev_id), memory_order_relaxed);
	return s;
}

// device_pair reads a __dlpack_device__() result that is a tuple of two
// ints (or int subclasses such as PyTorch's IntEnum) in int32 range; 0
// for anything else, which the Python path then explains.
static int device_pair(PyObject *v, int32_t out[2]) {
	if (!PyTuple_CheckExact(v) || PyTuple_Size(v) != 2) return 0;
	for (int k = 0; k < 2; k++) {
		PyObject *e = PyTuple_GetItem(v, k);
		if (!PyLong_Check(e) || PyBool_Check(e)) return 0;
		int overflow = 0;
		long long x = PyLong_AsLongLongAndOverflow(e, &overflow);
		if (overflow || x < INT32_MIN || x > INT32_MAX) return 0;
		out[k] = (int32_t)x;
	}
	return 1;
}

// consumer_stream is the stream= that from_dlpack passes to a CUDA
// producer on device dev_id, which is also the stream the imported
// tensor's write is pending on: Go's stream policy decides it
// (dlb_dlpack_stream) from the stream the producer's probe names, if any.
// 0 on success, -1 with an exception.
static int consumer_stream(PyObject *kind, int32_t dev_id, int64_t *stream) {
	int64_t s;
	if (probe_stream(kind, dev_id, &s) < 0) return -1;
	*stream = E.dlpack_stream(dev_id, s > 0 ? s : 0);
	return 0;
}

// from_dlpack(cls, obj, legacy, describe) is dlbridge.from_dlpack(obj)
// without device= or copy=, in one call: a capsule is taken; a producer
// with a C exchange API exports through it; any other producer is asked
// for __dlpack__(stream=<see consumer_stream for CUDA, else None>,
// max_version=(1, 3)), or for __dlpack__(stream=...) when its type is in
// the set legacy (producers that refuse max_version). describe(type) says
// what a producer type offers (producer_kinds). A dlbridge tensor whose
// write is pending on another library's stream goes through __dlpack__,
// not the exchange API. It returns NotImplemented where the Python path
// must decide (no __dlpack_device__, a device pair that is not two ints, a
// TypeError from a producer not yet known as legacy), so that every error
// message and retry has one home, in Python.
static PyObject *m_from_dlpack(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 4, 4, "from_dlpack") < 0) return NULL;
	PyObject *cls = args[0], *obj = args[1], *legacy = args[2];
	if (PyCapsule_CheckExact(obj)) return take_capsule(cls, obj, Py_None, 0);
	PyObject *kind = producer_kind(Py_TYPE(obj), args[3]);
	if (!kind) return NULL;
	PyObject *result = NULL;
	int pending_elsewhere = 0;
	if (is_ctensor(obj)) {
		CTensor *t = (CTensor *)obj;
		if (t->dev_type == DLB_CUDA && !t->closed && t->keeper) {
			NEED_LIBRARY(goto done);
			if (fresh_stream(t) < 0) goto done;
			pending_elsewhere = t->stream && (int64_t)t->stream != work_stream(t->dev_id);
		}
	}
	// A dlbridge tensor with a write pending on another library's stream
	// goes through __dlpack__, which orders it: the exchange API's consumer
	// orders itself after the producer's work stream only.
	if (PyCapsule_CheckExact(kind) && !pending_elsewhere) {
		result = exchange_import(cls, obj, kind);
		goto done;
	}
	PyObject *dev = PyObject_CallMethodObjArgs(obj, s_dlpack_device, NULL);
	if (!dev) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto done;
		PyErr_Clear(); // no __dlpack_device__: the Python path says what is missing
		goto not_implemented;
	}
	int32_t pair[2];
	int ok = device_pair(dev, pair);
	Py_DECREF(dev);
	if (!ok) goto not_implemented;
	PyObject *stream = Py_None;
	int64_t pending = 0;
	if (pair[0] == DLB_CUDA) {
		NEED_LIBRARY(goto done);
		if (consumer_stream(kind, pair[1], &pending) < 0) goto done;
		if (!(stream = PyLong_FromLongLong(pending))) goto done;
	} else {
		Py_INCREF(stream);
	}
	int is_legacy = PySet_Contains(legacy, (PyObject *)Py_TYPE(obj));
	PyObject *cap = NULL;
	if (is_legacy == 1 && stream == Py_None) {
		cap = PyObject_CallMethodObjArgs(obj, s_dlpack, NULL);
	} else if (is_legacy >= 0) {
		PyObject *kw = PyDict_New(), *meth = PyObject_GetAttr(obj, s_dlpack), *empty = PyTuple_New(0);
		if (kw && meth && empty && PyDict_SetItem(kw, s_stream, stream) == 0 &&
		    (is_legacy || PyDict_SetItem(kw, s_max_version, max_version_13) == 0))
			cap = PyObject_Call(meth, empty, kw);
		Py_XDECREF(kw);
		Py_XDECREF(meth);
		Py_XDECREF(empty);
	}
	Py_DECREF(stream);
	if (!cap) {
		if (is_legacy == 0 && PyErr_ExceptionMatches(PyExc_TypeError)) {
			PyErr_Clear(); // perhaps a producer older than DLPack 1.0: Python retries and records it
			goto not_implemented;
		}
		goto done;
	}
	result = take_capsule(cls, cap, obj, pending);
	Py_DECREF(cap);
	goto done;
not_implemented:
	result = Py_NotImplemented;
	Py_INCREF(result);
done:
	Py_DECREF(kind);
	return result;
}

static PyObject *m_set_tensor_class(PyObject *mod, PyObject *cls) {
	if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, ctensor_type)) {
		PyErr_SetString(PyExc_TypeError, "dlbridge: set_tensor_class needs a subclass of _CTensor");
		return NULL;
	}
	PyObject *old = tensor_class;
	Py_INCREF(cls);
	tensor_class = cls;
	Py_XDECREF(old);
	Py_RETURN_NONE;
}

// The names m_load binds beyond the generated exports.
#define DLB_RUNTIME_NAMES "dlb_last_error", "dlb_fast_made", "dlb_fast_live", "dlb_forked_flag"

// load(path) opens the library at path and looks up its exports; a second
// load of another library is refused (tensors close their handles through
// the first). OSError when the library cannot be opened. dlopen runs a
// library's initialisers (a Go library starts its runtime, for good) and
// maps a file that a truncation made shorter than its headers say (SIGBUS
// when touched): dlbridge._loaderr.check_library reads the file first and
// refuses what is not a whole dlbridge library of this machine, so the
// dlsym failures below are only a backstop.
static PyObject *m_load(PyObject *mod, PyObject *arg) {
	const char *path = PyUnicode_AsUTF8AndSize(arg, NULL);
	if (!path) return NULL;
	if (L.loaded) Py_RETURN_NONE;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *err = dlerror();
		PyErr_SetString(PyExc_OSError, err ? err : path);
		return NULL;
	}
	static const char *const names[] = {DLB_EXPORT_NAMES};
	_Static_assert(sizeof names / sizeof names[0] * sizeof(void (*)(void)) == sizeof(dlb_exports), "one name a field");
	void (**slot)(void) = (void (**)(void))&E;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!(*(void **)&slot[i] = dlsym(h, names[i]))) {
			PyErr_Format(PyExc_ImportError,
				     "dlbridge: %s has no function %s: it was built from another version of dlbridge; "
				     "rebuild the library and the package together",
				     path, names[i]);
			return NULL;
		}
	}
	if (!(*(void **)&L.last_error = dlsym(h, "dlb_last_error")) ||
	    !(L.fast_made = dlsym(h, "dlb_fast_made")) || !(L.fast_live = dlsym(h, "dlb_fast_live")) ||
	    !(L.forked = dlsym(h, "dlb_forked_flag"))) {
		PyErr_Format(PyExc_ImportError, "dlbridge: %s lacks dlbridge's C functions: rebuild it", path);
		return NULL;
	}
	L.loaded = 1;
	Py_RETURN_NONE;
}

// export_names() is every symbol m_load binds, for dlbridge._loaderr to
// find in a library's dynamic symbol table before dlopen runs its code.
static PyObject *m_export_names(PyObject *mod, PyObject *unused) {
	static const char *const names[] = {DLB_EXPORT_NAMES DLB_RUNTIME_NAMES}; // the first ends with a comma
	size_t n = sizeof names / sizeof names[0];
	PyObject *t = PyTuple_New((Py_ssize_t)n);
	for (size_t i = 0; t && i < n; i++) {
		PyObject *s = PyUnicode_FromString(names[i]);
		if (!s) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SetItem(t, (Py_ssize_t)i, s);
	}
	return t;
}

// ---- Go runtimes in the process ----
//
// Symbols that every Go-built shared library exports, from the cgo runtime
// that starts Go in it (runtime/cgo): a c-shared library has no other way
// in. Looked up in what the dynamic loader has mapped, not in files, so a
// library is found whatever its file is named and after its file was
// deleted.
static const char *const go_runtime_syms[] = {"x_cgo_init", "_cgo_topofstack", "_cgo_wait_runtime_init_done"};

typedef struct {
	char **names;
	size_t n, cap;
	int nomem;
} obj_names;

// collect_object keeps the name of each mapped object; dlopen may not run
// inside dl_iterate_phdr (it holds the loader's lock), so go_runtimes asks
// afterwards.
static int collect_object(struct dl_phdr_info *info, size_t size, void *data) {
	(void)size;
	obj_names *o = data;
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 64;
		char **p = realloc(o->names, cap * sizeof *p);
		if (!p) {
			o->nomem = 1;
			return 1;
		}
		o->names = p, o->cap = cap;
	}
	// "" is the program itself (dlopen(NULL) below: its global scope).
	char *s = strdup(info->dlpi_name ? info->dlpi_name : "");
	if (!s) {
		o->nomem = 1;
		return 1;
	}
	o->names[o->n++] = s;
	return 0;
}

// go_runtimes() lists the files of the mapped objects that export Go's cgo
// runtime symbols (each once, as the loader names them: the path given to
// dlopen, which may no longer exist).
static PyObject *m_go_runtimes(PyObject *mod, PyObject *unused) {
	obj_names o = {NULL, 0, 0, 0};
	dl_iterate_phdr(collect_object, &o);
	PyObject *out = o.nomem ? PyErr_NoMemory() : PyList_New(0);
	for (size_t i = 0; out && i < o.n; i++) {
		// RTLD_NOLOAD: only an object already mapped, matched by the name
		// the loader keeps, so a deleted file is found without opening it.
		void *h = o.names[i][0] ? dlopen(o.names[i], RTLD_LAZY | RTLD_NOLOAD) : dlopen(NULL, RTLD_LAZY);
		if (!h) continue; // unloaded since, or the vDSO
		for (size_t k = 0; k < sizeof go_runtime_syms / sizeof go_runtime_syms[0]; k++) {
			void *sym = dlsym(h, go_runtime_syms[k]);
			Dl_info di;
			// The symbol may come from a dependency of this object, or
			// from the global scope: dladdr names the object that has it.
			if (!sym || !dladdr(sym, &di) || !di.dli_fname || !di.dli_fname[0]) continue;
			PyObject *p = PyUnicode_DecodeFSDefault(di.dli_fname);
			int has = p ? PySequence_Contains(out, p) : -1;
			if (has == 0) has = PyList_Append(out, p);
			Py_XDECREF(p);
			if (has < 0) Py_CLEAR(out);
			break;
		}
		dlclose(h);
	}
	for (size_t i = 0; i < o.n; i++) free(o.names[i]);
	free(o.names);
	return out;
}

// bound() reports whether a library is bound (for tests of lazy loading).
static PyObject *m_bound(PyObject *mod, PyObject *unused) { return PyBool_FromLong(L.loaded); }

// Producer side, installed as _CTensor.__dlpack_c_exchange_api__.
static int ex_from_py(void *obj, dlb_DLManagedTensorVersioned **out) {
	if (!is_ctensor(obj)) {
		PyErr_SetString(PyExc_TypeError, "dlbridge: exchange API called with an object that is not a dlbridge.Tensor");
		return -1;
	}
	CTensor *t = obj;
	if (check_open(t) < 0 || fresh_stream(t) < 0) return -1;
	if (t->dev_type == DLB_CUDA && t->stream) {
		// The consumer orders itself after the current_work_stream it was
		// told only: Go puts the tensor's pending write before that.
		int32_t rc = E.order_before_exchange(t->handle);
		if (rc) {
			raise_last(rc);
			return -1;
		}
	}
	*out = fast_export(t, 1);
	if (!*out) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

static int ex_to_py(dlb_DLManagedTensorVersioned *mt, void **out) {
	if (!tensor_class) {
		call_deleter(mt, 1);
		PyErr_SetString(PyExc_RuntimeError, "dlbridge: the Python package did not register its Tensor class");
		return -1;
	}
	if ((!L.loaded || forked()) && load_library() < 0) {
		call_deleter(mt, 1);
		return -1;
	}
	PyObject *o = import_tensor(tensor_class, mt, 1, 0);
	if (!o) return -1;
	*out = o;
	return 0;
}

static int ex_dltensor(void *obj, dlb_DLTensor *out) {
	if (!is_ctensor(obj)) {
		PyErr_SetString(PyExc_TypeError, "dlbridge: exchange API called with an object that is not a dlbridge.Tensor");
		return -1;
	}
	CTensor *t = obj;
	if (check_open(t) < 0) return -1;
	t->shared = 1; // the consumer reads the address with no reference of ours
	out->data = (void *)(uintptr_t)t->ptr;
	out->device.device_type = t->dev_type;
	out->device.device_id = t->dev_id;
	out->ndim = t->ndim;
	out->dtype.code = t->code;
	out->dtype.bits = t->bits;
	out->dtype.lanes = t->lanes;
	out->shape = t->shape;
	out->strides = t->strides;
	out->byte_offset = 0;
	return 0;
}

// Called by consumers holding the GIL.
static int ex_stream(int32_t dev_type, int32_t dev_id, void **out) {
	if (dev_type != DLB_CUDA) {
		*out = NULL;
		return 0;
	}
	if ((!L.loaded || forked()) && load_library() < 0) return -1;
	*out = (void *)(uintptr_t)E.work_stream(dev_id);
	return 0;
}

// May be called without the GIL: errors go through set_error only.
static int ex_alloc(dlb_DLTensor *proto, dlb_DLManagedTensorVersioned **out, void *ctx,
		    void (*set_error)(void *, const char *, const char *)) {
	if (!L.loaded || forked()) {
		if (set_error)
			set_error(ctx, "RuntimeError",
				  L.loaded ? fork_msg : "dlbridge: the library is not loaded (no dlbridge call was made yet)");
		return -1;
	}
	void *mt = NULL;
	int32_t rc = E.alloc_export(proto->ndim, proto->shape, proto->dtype.code, proto->dtype.bits, proto->dtype.lanes,
				     proto->device.device_type, proto->device.device_id, &mt);
	if (rc) {
		if (set_error) set_error(ctx, error_name(rc), L.last_error());
		return -1;
	}
	*out = mt;
	return 0;
}

static dlb_exchange_api producer_api = {
	{{1, 3}, NULL}, ex_alloc, ex_from_py, ex_to_py, ex_dltensor, ex_stream,
};

// ---- calls of registered Go functions (dlbridge.ops) ----
//
// Each registered function is a builtin function object (METH_FASTCALL |
// METH_KEYWORDS) whose self is a capsule holding a gofn: the parameter
// names and kinds that Python binds arguments to, in C. A tensor argument
// is lent to Go for the call without a DLPack import where the object
// allows: a dlbridge tensor by its handle, a buffer-protocol exporter
// (NumPy) by its buffer, a producer with the DLPack C exchange API
// (PyTorch 2.11) by the DLTensor it describes itself with; anything else
// goes through dlbridge.asarray. The Go body runs without the GIL.

#define GOFN_MAX_PARAMS 16 // pyfunc.maxSlots
#define GOFN_MAX_RESULTS 16 // pyfunc.maxSlots

enum { P_TENSOR = 1, P_BOOL, P_INT, P_UINT, P_FLOAT, P_STR };
#define P_WRITABLE 0x100 // or'ed into a tensor's kind by dlbridge._ops

typedef struct {
	int32_t index;
	int32_t nparams, nresults;
	int32_t has_tensor_results;
	PyObject *name;               // "mylib.scale"
	PyObject *names[GOFN_MAX_PARAMS]; // interned
	int32_t kinds[GOFN_MAX_PARAMS];
	int32_t writable[GOFN_MAX_PARAMS]; // a tensor the function writes
	int32_t required[GOFN_MAX_PARAMS];
} gofn;

// The Python helpers of every call (set_call_helpers): asarray(obj) for
// arguments that are neither a dlbridge tensor nor a NumPy array read here; stream_of(obj) -> (handle, device) for an
// explicit stream=; finish(results, like, result_type) turning tensor
// results into the caller's framework's; describe(type), the producer
// kinds of from_dlpack.
static PyObject *h_asarray, *h_stream_of, *h_finish, *h_describe;
static PyObject *s_result_type;


#define ARG_INLINE_DIMS 8

// One tensor argument during a call: what must be given back after it.
typedef struct {
	PyObject *obj;     // the argument (borrowed from the call)
	PyObject *temp;    // a dlbridge tensor made for it (asarray), or NULL
	Py_buffer buf;     // held when has_buf
	int has_buf;
	PyObject *ex_kind; // the producer's exchange API capsule (borrowed from kinds), for a kept DLTensor
	PyObject *held;    // an ndarray read directly (a reference), or NULL
	int64_t strides[ARG_INLINE_DIMS]; // a buffer's strides in elements, up to ARG_INLINE_DIMS dimensions
	int64_t shape[ARG_INLINE_DIMS];   // an ndarray's shape, copied
} argkeep;

// call_stream_of_kind is the stream the caller works on for a CUDA tensor of
// obj's producer on device dev: the exchange API's current work stream,
// or the stream probe's answer (CuPy, PyTorch before the exchange API);
// 0 when the producer does not say.
static int call_stream_of_kind(PyObject *kind, int32_t dev, int64_t *out) {
	*out = 0;
	if (PyCapsule_CheckExact(kind)) {
		dlb_exchange_api *ex = exchange_api_of(kind);
		if (!ex) return -1;
		if (ex->header.version.major == 1 && ex->current_work_stream) return exchange_stream(ex, dev, out);
		return 0;
	}
	return probe_stream(kind, dev, out);
}

// ---- NumPy arrays read directly ----
//
// The buffer protocol costs NumPy a format string, an allocation and a
// comparison with its cached copy each time (about a tenth of a Go
// function call over two small arrays, bench/results/gofunc-2core). An exact
// numpy.ndarray is read from its fields instead, which NumPy keeps
// stable across 1.x and 2.x (PyArrayObject_fields, and a descriptor's
// byteorder and type_num); anything unusual (another byte order, a dtype
// dlbridge lacks, strides that are not whole items, more than
// ARG_INLINE_DIMS dimensions) takes the buffer protocol as before.
typedef struct {
	PyObject_HEAD
	char *data;
	int nd;
	Py_ssize_t *dimensions;
	Py_ssize_t *strides;
	PyObject *base;
	PyObject *descr;
	int flags;
} np_array_head;

typedef struct {
	PyObject_HEAD
	PyTypeObject *typeobj;
	char kind, type, byteorder, flags;
	int type_num;
} np_descr_head;

#define NPY_WRITEABLE_FLAG 0x0400

// ndarray_dtype maps a NumPy type number (LP64: long is 64 bits) to a
// DLPack dtype; 0 for the ones the buffer path should judge.
static int ndarray_dtype(int type_num, uint8_t *code, uint8_t *bits) {
	static const uint8_t codes[24] = {6, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 0xff, 5, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2};
	static const uint8_t widths[24] = {8, 8, 8, 16, 16, 32, 32, 64, 64, 64, 64, 32, 64, 0, 64, 128, 0, 0, 0, 0, 0, 0, 0, 16};
	if (type_num < 0 || type_num >= 24 || codes[type_num] == 0xff || sizeof(long) != 8) return 0;
	*code = codes[type_num], *bits = widths[type_num];
	return 1;
}

// ndarray_arg fills a for an exact ndarray, copying its shape and strides
// into k (another thread may reshape the array while the call runs without
// the GIL). 0 when the array needs the buffer path.
static int ndarray_arg(PyObject *obj, dlb_arg *a, argkeep *k) {
	np_array_head *arr = (np_array_head *)obj;
	np_descr_head *d = (np_descr_head *)arr->descr;
	uint8_t code, bits;
	int nd = arr->nd;
	if (nd < 0 || nd > ARG_INLINE_DIMS || !d || d->byteorder == '>' || !ndarray_dtype(d->type_num, &code, &bits)) return 0;
	// Item sizes here are powers of two: a mask and a shift instead of a
	// division per dimension (a division costs tens of cycles).
	int shift = __builtin_ctz(bits / 8u);
	int64_t mask = ((int64_t)1 << shift) - 1;
	for (int i = 0; i < nd; i++) {
		int64_t st = arr->strides[i];
		if (st & mask) return 0;
		k->shape[i] = arr->dimensions[i];
		k->strides[i] = st >> shift; // exact: st is a multiple of 1 << shift
	}
	Py_INCREF(obj); // held for the call, as a buffer export would be
	k->held = obj;
	a->kind = DLB_ARG_MEMORY;
	a->handle = (uint64_t)(uintptr_t)arr->data;
	a->device_type = DLB_CPU;
	a->device_id = 0;
	a->code = code, a->bits = bits, a->lanes = 1;
	a->ndim = nd;
	a->flags = arr->flags & NPY_WRITEABLE_FLAG ? 0 : DLB_INFO_READONLY;
	a->shape = k->shape;
	a->strides = k->strides;
	return 1;
}

// tensor_arg fills a for obj, recording in k what to give back. *stream is
// set to the caller's stream when the argument is the first CUDA tensor
// whose producer names one and the caller named none.
// The current stream a producer named for a device, asked once a call.
typedef struct {
	PyObject *kind; // the producer's kind (a reference go_call drops), NULL if none yet
	int32_t dev;
	int64_t stream;
} stream_cache;

static int tensor_arg(gofn *g, int i, PyObject *obj, dlb_arg *a, argkeep *k, int64_t *stream, int *stream_known,
		      stream_cache *cache) {
	k->obj = obj;
	// An exact ndarray first: one pointer comparison, where is_ctensor
	// walks the type's bases.
	if (is_ndarray(obj) && ndarray_arg(obj, a, k)) return 0;
	if (is_ctensor(obj)) {
		CTensor *t = (CTensor *)obj;
		if (check_open(t) < 0) return -1;
		a->kind = DLB_ARG_HANDLE;
		a->handle = t->handle;
		return 0;
	}
	PyObject *kind = NULL;
	if (PyObject_CheckBuffer(obj)) {
		if (PyObject_GetBuffer(obj, &k->buf, PyBUF_RECORDS_RO) == 0) {
			uint8_t code, bits;
			Py_buffer *b = &k->buf;
			k->has_buf = 1;
			int ok = b->ndim <= 64 && b->itemsize > 0 && buffer_dtype(b, &code, &bits);
			for (int d = 0; ok && d < b->ndim; d++) ok = b->strides[d] % b->itemsize == 0;
			if (ok) {
				// Strides in elements, in place: the buffer's own array
				// (Py_ssize_t is int64_t here) stays the exporter's.
				int64_t *st = b->ndim <= ARG_INLINE_DIMS ? k->strides : PyMem_Malloc(sizeof(int64_t) * (size_t)b->ndim);
				if (!st) {
					PyErr_NoMemory();
					return -1;
				}
				for (int d = 0; d < b->ndim; d++) st[d] = b->strides[d] / b->itemsize;
				a->kind = DLB_ARG_MEMORY;
				a->handle = (uint64_t)(uintptr_t)b->buf;
				a->device_type = DLB_CPU;
				a->device_id = 0;
				a->code = code, a->bits = bits, a->lanes = 1;
				a->ndim = b->ndim;
				a->flags = b->readonly ? DLB_INFO_READONLY : 0;
				a->shape = (const int64_t *)b->shape;
				a->strides = st;
				return 0;
			}
			PyBuffer_Release(b);
			k->has_buf = 0;
		} else {
			PyErr_Clear(); // e.g. a dtype the buffer protocol has no format for: asarray explains
		}
	} else {
		kind = producer_kind(Py_TYPE(obj), h_describe);
		if (!kind) return -1;
		if (PyCapsule_CheckExact(kind)) {
			dlb_exchange_api *ex = exchange_api_of(kind);
			if (!ex) goto fail;
			if (ex->header.version.major == 1 && ex->dltensor_from_py_object_no_sync) {
				dlb_DLTensor dl;
				if (ex->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
					if (!PyErr_Occurred())
						PyErr_SetString(PyExc_BufferError, "dlbridge: the producer's exchange API failed");
					goto fail;
				}
				a->kind = DLB_ARG_MEMORY;
				a->handle = (uint64_t)(uintptr_t)dl.data + dl.byte_offset;
				a->device_type = dl.device.device_type;
				a->device_id = dl.device.device_id;
				a->code = dl.dtype.code, a->bits = dl.dtype.bits, a->lanes = dl.dtype.lanes;
				a->ndim = dl.ndim;
				a->flags = 0;
				a->shape = dl.shape;
				a->strides = dl.strides;
				k->ex_kind = kind;
				if (dl.device.device_type == DLB_CUDA) {
					// Its writes are queued on the producer's current stream:
					// asked once a call per producer and device.
					int64_t s = 0;
					if (cache->kind == kind && cache->dev == dl.device.device_id) {
						s = cache->stream;
					} else {
						if (ex->current_work_stream && exchange_stream(ex, dl.device.device_id, &s) < 0) goto fail;
						Py_INCREF(kind);
						Py_XDECREF(cache->kind);
						cache->kind = kind, cache->dev = dl.device.device_id, cache->stream = s;
					}
					a->stream = s;
					if (!*stream_known && s) *stream = s, *stream_known = 1;
				}
				Py_DECREF(kind);
				return 0;
			}
		}
	}
	// Anything else becomes a dlbridge tensor first (DLPack, the CUDA Array
	// Interface, the array interface), which says what is wrong with it.
	{
		PyObject *t = PyObject_CallFunctionObjArgs(h_asarray, obj, NULL);
		if (!t) {
			// Say which argument of which function it was.
			PyObject *et, *ev, *tb;
			PyErr_Fetch(&et, &ev, &tb);
			PyErr_NormalizeException(&et, &ev, &tb);
			PyObject *tn = type_name(obj);
			PyErr_Format(et ? et : PyExc_TypeError, "%U: argument %U: want a tensor, got %U (%S)", g->name,
				     g->names[i], tn ? tn : Py_None, ev ? ev : Py_None);
			Py_XDECREF(tn);
			Py_XDECREF(et);
			Py_XDECREF(ev);
			Py_XDECREF(tb);
			goto fail;
		}
		if (!is_ctensor(t)) {
			Py_DECREF(t);
			PyErr_SetString(PyExc_TypeError, "dlbridge: asarray did not give a dlbridge tensor");
			goto fail;
		}
		k->temp = t;
		CTensor *ct = (CTensor *)t;
		if (check_open(ct) < 0) goto fail;
		a->kind = DLB_ARG_HANDLE;
		a->handle = ct->handle;
		if (ct->dev_type == DLB_CUDA && !*stream_known) {
			if (!kind && !(kind = producer_kind(Py_TYPE(obj), h_describe))) goto fail;
			int64_t s = 0;
			if (call_stream_of_kind(kind, ct->dev_id, &s) < 0) goto fail;
			if (s) *stream = s, *stream_known = 1;
		}
	}
	Py_XDECREF(kind);
	return 0;
fail:
	Py_XDECREF(kind);
	return -1;
}

// What a scalar argument is, as a number: a flag, an integer, a real
// number, or none of them (a complex number, a date or a duration, bytes,
// text, an object, a tensor of more than one element).
enum { N_NONE, N_BOOL, N_INT, N_REAL };

// dtype_class is num_class for a dtype: NumPy's (CuPy's, JAX's) by its
// one-letter kind, read in C (str() of a NumPy dtype runs Python code and
// cost a NumPy scalar argument a microsecond); others, and NumPy's
// extension types (ml_dtypes' bfloat16 is kind 'V'), by name: PyTorch's
// "torch.float32".
static int dtype_class(PyObject *dt) {
	PyObject *k = PyObject_GetAttrString(dt, "kind");
	if (!k) {
		PyErr_Clear();
	} else {
		Py_ssize_t n = 0;
		const char *s = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, &n) : NULL;
		int c = -1;
		if (!s) PyErr_Clear();
		else if (n == 1) switch (s[0]) {
			case 'b': c = N_BOOL; break;
			case 'i': case 'u': c = N_INT; break;
			case 'f': c = N_REAL; break;
			case 'V': break; // an extension type: by name
			default: c = N_NONE; // complex, dates, durations, text, bytes, objects
			}
		Py_DECREF(k);
		if (c >= 0) return c;
	}
	PyObject *name = PyObject_Str(dt);
	if (!name) {
		PyErr_Clear();
		return N_NONE;
	}
	const char *s = PyUnicode_AsUTF8AndSize(name, NULL);
	int c = N_NONE;
	if (!s) {
		PyErr_Clear();
	} else {
		if (strncmp(s, "torch.", 6) == 0) s += 6;
		if (strcmp(s, "bool") == 0) c = N_BOOL;
		else if (strncmp(s, "int", 3) == 0 || strncmp(s, "uint", 4) == 0) c = N_INT;
		else if (strncmp(s, "float", 5) == 0 || strncmp(s, "bfloat", 6) == 0 || strcmp(s, "half") == 0 ||
			 strcmp(s, "double") == 0 || strcmp(s, "longdouble") == 0)
			c = N_REAL;
	}
	Py_DECREF(name);
	return c;
}

// num_class says what v is for a scalar parameter. Python's own numbers
// are what their type says; anything else with a dtype (NumPy's scalars
// and 0-d arrays, PyTorch's and CuPy's 0-d tensors) is what its dtype's
// name says, so that numpy.complex64, whose __float__ drops the imaginary
// part, and numpy.timedelta64, whose __index__ gives a count of unknown
// units, are not taken for real numbers; other objects are integers by
// __index__ and real numbers by __float__ (Fraction, Decimal), never by
// __complex__ alone.
static int num_class(PyObject *v) {
	if (PyBool_Check(v)) return N_BOOL;
	if (PyLong_Check(v)) return N_INT;
	if (PyFloat_Check(v)) return N_REAL; // numpy.float64 too
	if (PyComplex_Check(v) || PyUnicode_Check(v) || PyBytes_Check(v) || PyByteArray_Check(v) || PyType_Check(v)) return N_NONE;
	PyObject *dt = PyObject_GetAttrString(v, "dtype");
	if (!dt) {
		PyErr_Clear();
		if (PyIndex_Check(v)) return N_INT;
		return PyType_GetSlot(Py_TYPE(v), Py_nb_float) ? N_REAL : N_NONE; // static types too, from 3.10
	}
	int c = dtype_class(dt);
	Py_DECREF(dt);
	if (c == N_NONE) return N_NONE;
	// One value, not a tensor that happens to have one element (NumPy
	// 1.25 deprecates float() of those).
	PyObject *nd = PyObject_GetAttrString(v, "ndim");
	if (!nd) {
		PyErr_Clear();
		return c; // a scalar type without ndim
	}
	long n = PyLong_Check(nd) ? PyLong_AsLong(nd) : -1;
	Py_DECREF(nd);
	if (n == -1) PyErr_Clear();
	return n == 0 ? c : N_NONE;
}

// scalar_refuse raises a TypeError naming the function, the argument, what
// the parameter takes and what came: "gofunc.scale: argument factor: want
// float, got complex (1j)".
static int scalar_refuse(gofn *g, int i, PyObject *v) {
	static const char *want[] = {"", "tensor", "bool", "int", "int", "float", "str"};
	PyObject *shown = show_value(v);
	PyObject *tn = shown ? type_name(v) : NULL;
	if (tn)
		PyErr_Format(PyExc_TypeError, "%U: argument %U: want %s, got %U (%U)", g->name, g->names[i], want[g->kinds[i]], tn,
			     shown);
	Py_XDECREF(shown);
	Py_XDECREF(tn);
	return -1;
}

// scalar_failed names the function and the argument in the error that
// converting v raised (a __float__ or __index__ that fails), keeping its
// class.
static int scalar_failed(gofn *g, int i, PyObject *v) {
	PyObject *et, *ev, *tb;
	PyErr_Fetch(&et, &ev, &tb);
	PyErr_NormalizeException(&et, &ev, &tb);
	PyObject *tn = type_name(v);
	if (tn)
		PyErr_Format(et ? et : PyExc_TypeError, "%U: argument %U: cannot convert %U: %S", g->name, g->names[i], tn,
			     ev ? ev : Py_None);
	Py_XDECREF(tn);
	Py_XDECREF(et);
	Py_XDECREF(ev);
	Py_XDECREF(tb);
	return -1;
}

// scalar_arg fills a for a scalar parameter of kind pk. Python's own bool,
// int, float and str go to Go as they are, which judges them against the
// Go type (pyfunc's Value.store: a float parameter takes a float or an
// int, an int parameter an int in range, a bool a bool, a str a str) and
// names what came; any other object is converted here only to what the
// parameter takes (an integer for an int, an integer or a real number for
// a float, a flag for a bool) and refused otherwise.
static int scalar_arg(gofn *g, int i, PyObject *v, dlb_arg *a) {
	int pk = g->kinds[i];
	if (PyBool_Check(v)) {
		a->kind = DLB_ARG_BOOL;
		a->i = v == Py_True;
		return 0;
	}
	if (PyUnicode_Check(v)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(v, &n);
		if (!s) return -1;
		a->kind = DLB_ARG_STR, a->s = s, a->slen = n;
		return 0;
	}
	if (PyFloat_CheckExact(v)) {
		a->kind = DLB_ARG_FLOAT;
		a->f = PyFloat_AsDouble(v);
		return 0;
	}
	int c = PyLong_CheckExact(v) ? N_INT : num_class(v);
	int own = PyLong_Check(v) || PyFloat_Check(v); // Python's numbers: Go judges them
	if (!own) {
		int fits = (c == N_BOOL && pk == P_BOOL) || (c == N_INT && (pk == P_INT || pk == P_UINT || pk == P_FLOAT)) ||
			   (c == N_REAL && pk == P_FLOAT);
		if (!fits) return scalar_refuse(g, i, v);
	}
	if (c == N_BOOL) {
		int t = PyObject_IsTrue(v);
		if (t < 0) return scalar_failed(g, i, v);
		a->kind = DLB_ARG_BOOL, a->i = t;
		return 0;
	}
	if (c == N_REAL) {
		double x = PyFloat_AsDouble(v);
		if (x == -1.0 && PyErr_Occurred()) return scalar_failed(g, i, v);
		a->kind = DLB_ARG_FLOAT, a->f = x;
		return 0;
	}
	PyObject *n = PyLong_Check(v) ? (Py_INCREF(v), v) : PyNumber_Index(v);
	if (!n) return scalar_failed(g, i, v);
	int overflow = 0;
	long long x = PyLong_AsLongLongAndOverflow(n, &overflow);
	if (!overflow) {
		Py_DECREF(n);
		if (x == -1 && PyErr_Occurred()) return scalar_failed(g, i, v);
		a->kind = DLB_ARG_INT, a->i = x;
		return 0;
	}
	unsigned long long u = overflow > 0 ? PyLong_AsUnsignedLongLong(n) : (unsigned long long)-1;
	if (overflow > 0 && !(u == (unsigned long long)-1 && PyErr_Occurred())) {
		Py_DECREF(n);
		a->kind = DLB_ARG_UINT, a->u = u;
		return 0;
	}
	PyErr_Clear();
	if (pk == P_FLOAT) {
		// An integer beyond 64 bits is still a real number.
		double f = PyLong_AsDouble(n);
		Py_DECREF(n);
		if (f == -1.0 && PyErr_Occurred()) {
			PyErr_Clear();
			PyObject *r = show_value(v);
			if (r) PyErr_Format(PyExc_ValueError, "%U: argument %U: %U is out of range for a float", g->name, g->names[i], r);
			Py_XDECREF(r);
			return -1;
		}
		a->kind = DLB_ARG_FLOAT, a->f = f;
		return 0;
	}
	Py_DECREF(n);
	if (pk != P_INT && pk != P_UINT) return scalar_refuse(g, i, v);
	PyObject *r = show_value(v);
	if (r) PyErr_Format(PyExc_ValueError, "%U: argument %U: %U is out of range for a 64-bit integer", g->name, g->names[i], r);
	Py_XDECREF(r);
	return -1;
}

// give_back ends the call's hold on tensor argument k: memory the Go body
// kept (a->kept) is handed to Go with a Python object that keeps it alive.
static void give_back(argkeep *k, dlb_arg *a) {
	if (a->kept) {
		PyObject *keep = NULL;
		PyObject *et, *ev, *tb;
		PyErr_Fetch(&et, &ev, &tb);
		if (k->has_buf || k->held) {
			keep = PyMemoryView_FromObject(k->obj); // its own export of the buffer
		} else if (k->ex_kind) {
			keep = exchange_import(tensor_class, k->obj, k->ex_kind); // its own reference on the memory
		}
		if (!keep) {
			// Without an object to hold it, hold the argument itself: it
			// keeps its memory unless it is resized or reassigned.
			PyErr_Clear();
			keep = k->obj;
			Py_INCREF(keep);
		}
		PyErr_Restore(et, ev, tb);
		E.call_keep(a->kept, keep); // Go owns the reference now
	}
	if (k->has_buf) PyBuffer_Release(&k->buf);
	if (a->kind == DLB_ARG_MEMORY && k->has_buf && a->strides != k->strides) PyMem_Free((void *)a->strides);
	Py_XDECREF(k->temp);
	Py_XDECREF(k->held);
}

static int kw_index(gofn *g, PyObject *key) {
	for (int i = 0; i < g->nparams; i++)
		if (g->names[i] == key) return i;
	for (int i = 0; i < g->nparams; i++)
		if (PyUnicode_Compare(g->names[i], key) == 0) return i;
	return -1;
}

static PyObject *go_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
	gofn **gp = PyModule_GetState(self);
	if (!gp) return NULL;
	gofn *g = *gp;
	NEED_LIBRARY(return NULL);
	PyObject *slot[GOFN_MAX_PARAMS];
	PyObject *stream_obj = NULL, *result_type = NULL;
	int np = g->nparams;
	if (nargs > np) {
		PyErr_Format(PyExc_TypeError, "%U() takes %d positional arguments but %zd were given", g->name, np, nargs);
		return NULL;
	}
	for (int i = 0; i < np; i++) slot[i] = i < nargs ? args[i] : NULL; // not a memset (rep stos, as below)
	Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
	for (Py_ssize_t j = 0; j < nkw; j++) {
		PyObject *key = PyTuple_GetItem(kwnames, j), *val = args[nargs + j];
		if (key == s_stream || PyUnicode_Compare(key, s_stream) == 0) {
			stream_obj = val;
			continue;
		}
		if (key == s_result_type || PyUnicode_Compare(key, s_result_type) == 0) {
			result_type = val;
			continue;
		}
		int i = kw_index(g, key);
		if (i < 0) {
			PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%U'", g->name, key);
			return NULL;
		}
		if (slot[i]) {
			PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%U'", g->name, key);
			return NULL;
		}
		slot[i] = val;
	}
	for (int i = 0; i < np; i++)
		if (!slot[i] && g->required[i]) {
			PyErr_Format(PyExc_TypeError, "%U() missing required argument '%U' (pos %d)", g->name, g->names[i], i + 1);
			return NULL;
		}
	dlb_arg a[GOFN_MAX_PARAMS];
	argkeep k[GOFN_MAX_PARAMS];
	// Only the fields that some paths leave unset (tensor_arg and
	// scalar_arg fill the rest for the kind they set): a memset here
	// compiles to rep stos, whose start-up cost was a fifth of this
	// function's time.
	for (int i = 0; i < np; i++) {
		a[i].kind = DLB_ARG_MISSING, a[i].stream = 0, a[i].kept = 0;
		k[i].obj = k[i].temp = k[i].ex_kind = k[i].held = NULL, k[i].has_buf = 0;
	}
	// The call's stream facts for Go's policy: stream= (given), else the
	// current stream the first CUDA argument's producer names.
	int64_t stream = 0;
	int32_t stream_dev = -1;
	int stream_known = 0, given = 0;
	PyObject *like = NULL, *result = NULL;
	if (stream_obj && stream_obj != Py_None) {
		PyObject *r = PyObject_CallFunctionObjArgs(h_stream_of, stream_obj, NULL);
		if (!r) return NULL;
		unsigned long long h = 0;
		long long d = -1;
		if (!PyArg_ParseTuple(r, "KL", &h, &d)) {
			Py_DECREF(r);
			return NULL;
		}
		Py_DECREF(r);
		stream = (int64_t)h, stream_dev = (int32_t)d, stream_known = 1, given = 1;
	}
	stream_cache scache = {NULL, -1, 0};
	int done = 0;
	for (; done < np; done++) {
		int i = done;
		if (!slot[i]) continue;
		if (g->kinds[i] == P_TENSOR) {
			if (tensor_arg(g, i, slot[i], &a[i], &k[i], &stream, &stream_known, &scache) < 0) {
				done++;
				goto out;
			}
			if (!like) like = slot[i];
		} else if (scalar_arg(g, i, slot[i], &a[i]) < 0) {
			done++;
			goto out;
		}
	}
	dlb_result res[GOFN_MAX_RESULTS];
	dlb_info *infos = NULL;
	int nr = g->nresults;
	if (nr) {
		memset(res, 0, sizeof(dlb_result) * (size_t)nr);
		if (g->has_tensor_results && !(infos = PyMem_Malloc(sizeof(dlb_info) * (size_t)nr))) {
			PyErr_NoMemory();
			goto out;
		}
	}
	uint64_t epoch = epoch_now();
	int32_t rc;
	dlb_info one;
	Py_BEGIN_ALLOW_THREADS
	rc = E.call(g->index, np, a, given, (uint64_t)stream, stream_dev, nr, nr ? res : NULL, infos ? infos : (nr ? &one : NULL));
	Py_END_ALLOW_THREADS
	if (rc) {
		raise_last(rc);
		PyMem_Free(infos);
		goto out;
	}
	// A dlbridge tensor the function writes now has a write pending on the
	// call's stream: tensors of its memory ask Go again before an export.
	for (int i = 0; i < np; i++)
		if (a[i].kind == DLB_ARG_HANDLE && g->writable[i]) {
			note_write_in_flight();
			break;
		}
	if (nr == 0) {
		result = Py_None;
		Py_INCREF(result);
	} else {
		PyObject *tup = PyTuple_New(nr);
		int failed = !tup;
		for (int r = 0; r < nr; r++) {
			PyObject *v = NULL;
			dlb_result *x = &res[r];
			if (!failed) switch (x->kind) {
				case DLB_RES_TENSOR: v = new_tensor(tensor_class, x->handle, &infos[r], epoch); x->handle = 0; break;
				case DLB_ARG_BOOL: v = PyBool_FromLong((long)x->i); break;
				case DLB_ARG_INT: v = PyLong_FromLongLong(x->i); break;
				case DLB_ARG_UINT: v = PyLong_FromUnsignedLongLong(x->u); break;
				case DLB_ARG_FLOAT: v = PyFloat_FromDouble(x->f); break;
				case DLB_ARG_STR: v = PyUnicode_DecodeUTF8(x->s ? x->s : "", x->slen, "surrogateescape"); break;
				default: PyErr_SetString(PyExc_RuntimeError, "dlbridge: a Go result of an unknown kind");
				}
			if (x->kind == DLB_RES_TENSOR && x->handle) E.close(x->handle); // not wrapped: give it back
			free(x->s);
			if (!failed && !v) failed = 1;
			if (!failed) PyTuple_SetItem(tup, r, v);
		}
		PyMem_Free(infos);
		if (failed) {
			Py_XDECREF(tup);
			goto out;
		}
		if (g->has_tensor_results) {
			result = PyObject_CallFunctionObjArgs(h_finish, tup, like ? like : Py_None, result_type ? result_type : Py_None, NULL);
			Py_DECREF(tup);
		} else if (nr == 1) {
			result = PyTuple_GetItem(tup, 0);
			Py_INCREF(result);
			Py_DECREF(tup);
		} else {
			result = tup;
		}
	}
out:
	for (int i = 0; i < done; i++)
		if (g->kinds[i] == P_TENSOR && slot[i]) give_back(&k[i], &a[i]);
	Py_XDECREF(scache.kind);
	return result;
}

static PyMethodDef go_call_def_proto = {NULL, (PyCFunction)(void (*)(void))go_call, METH_FASTCALL | METH_KEYWORDS, NULL};

// make_function(index, name, pyname, doc, names, kinds, required, result_kinds) is a builtin
// function that calls registered Go function index. doc is the whole
// docstring, "pyname(sig)\n--\n\n..." so that inspect.signature reads it.
static PyObject *m_make_function(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 8, 8, "make_function") < 0) return NULL;
	long index = PyLong_AsLong(args[0]);
	if (index == -1 && PyErr_Occurred()) return NULL;
	PyObject *names = args[4], *kinds = args[5], *req = args[6], *rk = args[7];
	if (!PyTuple_Check(names) || !PyTuple_Check(kinds) || !PyTuple_Check(req) || !PyTuple_Check(rk) ||
	    PyTuple_Size(names) != PyTuple_Size(kinds) || PyTuple_Size(names) != PyTuple_Size(req)) {
		PyErr_SetString(PyExc_TypeError, "dlbridge: make_function needs tuples of equal length");
		return NULL;
	}
	Py_ssize_t np = PyTuple_Size(names), nr = PyTuple_Size(rk);
	if (np > GOFN_MAX_PARAMS || nr > GOFN_MAX_RESULTS) {
		PyErr_Format(PyExc_ValueError, "dlbridge: %S: at most %d parameters and %d results", args[1], GOFN_MAX_PARAMS,
			     GOFN_MAX_RESULTS);
		return NULL;
	}
	gofn *g = calloc(1, sizeof(gofn));
	if (!g) return PyErr_NoMemory();
	g->index = (int32_t)index;
	g->nparams = (int32_t)np;
	g->nresults = (int32_t)nr;
	Py_INCREF(args[1]);
	g->name = args[1];
	for (Py_ssize_t i = 0; i < np; i++) {
		PyObject *n = PyTuple_GetItem(names, i);
		Py_INCREF(n);
		PyUnicode_InternInPlace(&n);
		g->names[i] = n;
		long kind = PyLong_AsLong(PyTuple_GetItem(kinds, i));
		g->kinds[i] = (int32_t)(kind & 0xff);
		g->writable[i] = (kind & P_WRITABLE) != 0;
		g->required[i] = PyObject_IsTrue(PyTuple_GetItem(req, i));
	}
	for (Py_ssize_t r = 0; r < nr; r++)
		if (PyLong_AsLong(PyTuple_GetItem(rk, r)) == P_TENSOR) g->has_tensor_results = 1;
	if (PyErr_Occurred()) {
		for (Py_ssize_t i = 0; i < np; i++) Py_XDECREF(g->names[i]);
		Py_DECREF(g->name);
		free(g);
		return NULL;
	}
	// The function's self is a module of its own whose state points at g:
	// a builtin bound to a module reads as a plain function
	// ("<built-in function scale>"), and its state costs no lookup per
	// call. The definitions must outlive the function: made once per
	// function and library load, never freed (as static ones would not be).
	PyMethodDef *def = malloc(sizeof(PyMethodDef));
	PyModuleDef *mdef = calloc(1, sizeof(PyModuleDef));
	const char *pyname = PyUnicode_AsUTF8AndSize(args[2], NULL), *doc = PyUnicode_AsUTF8AndSize(args[3], NULL);
	const char *fullname = PyUnicode_AsUTF8AndSize(args[1], NULL);
	PyObject *self = NULL, *modname = NULL, *f = NULL;
	if (!def || !mdef || !pyname || !doc || !fullname) {
		if (!PyErr_Occurred()) PyErr_NoMemory();
		goto fail;
	}
	*def = go_call_def_proto;
	def->ml_name = strdup(pyname);
	def->ml_doc = strdup(doc);
	PyModuleDef proto = {PyModuleDef_HEAD_INIT, strdup(fullname), NULL, sizeof(gofn *), NULL};
	*mdef = proto;
	if (!def->ml_name || !def->ml_doc || !mdef->m_name) {
		PyErr_NoMemory();
		goto fail;
	}
	if (!(self = PyModule_Create(mdef))) goto fail;
	*(gofn **)PyModule_GetState(self) = g;
	// __module__: dlbridge.ops.<namespace>
	const char *dot = strrchr(fullname, '.');
	modname = PyUnicode_FromFormat("dlbridge.ops.%s", fullname);
	if (modname && dot) {
		PyObject *cut = PyUnicode_Substring(modname, 0, (Py_ssize_t)strlen("dlbridge.ops.") + (dot - fullname));
		Py_DECREF(modname);
		modname = cut;
	}
	f = PyCFunction_NewEx(def, self, modname);
	Py_XDECREF(modname);
	Py_DECREF(self);
	return f;
fail:
	free(def);
	free(mdef);
	for (Py_ssize_t i = 0; i < np; i++) Py_XDECREF(g->names[i]);
	Py_DECREF(g->name);
	free(g);
	return NULL;
}

// set_call_helpers(asarray, stream_of, finish, describe): see h_asarray.
static PyObject *m_set_call_helpers(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 4, 4, "set_call_helpers") < 0) return NULL;
	PyObject **dst[] = {&h_asarray, &h_stream_of, &h_finish, &h_describe};
	for (int i = 0; i < 4; i++) {
		PyObject *old = *dst[i];
		Py_INCREF(args[i]);
		*dst[i] = args[i];
		Py_XDECREF(old);
	}
	Py_RETURN_NONE;
}

// ---- module ----

// ---- the Python functions of the exports (_exports.h, generated) ----

// X_INT and X_UINT take an integer argument of a generated function into v,
// with int_arg's rules and messages (the range of ctype).
static int x_uint(PyObject *v, const char *name, unsigned long long hi, const char *ctype, unsigned long long *out) {
	if (!PyLong_CheckExact(v) && (bool_like(v) || !PyIndex_Check(v))) {
		bad_value(PyExc_TypeError, name, v, "is not an integer");
		return -1;
	}
	PyObject *i = PyNumber_Index(v);
	if (!i) return -1;
	unsigned long long x = PyLong_AsUnsignedLongLong(i);
	int over = x == (unsigned long long)-1 && PyErr_Occurred(); // i is an int: negative or past 64 bits
	if (over) PyErr_Clear();
	if (over || x > hi) PyErr_Format(PyExc_ValueError, "dlbridge: %s=%S out of range for %s (0..%llu)", name, i, ctype, hi);
	else *out = x;
	Py_DECREF(i);
	return over || x > hi ? -1 : 0;
}

#define X_INT(o, name, ctype, lo, hi, v)                                                   \
	do {                                                                               \
		long long t_;                                                              \
		if (int_arg(o, name, -1, lo, hi, ctype, &t_) < 0) return NULL;             \
		v = (__typeof__(v))t_;                                                     \
	} while (0)
#define X_UINT(o, name, ctype, hi, v)                                                      \
	do {                                                                               \
		unsigned long long t_;                                                     \
		if (x_uint(o, name, hi, ctype, &t_) < 0) return NULL;                      \
		v = (__typeof__(v))t_;                                                     \
	} while (0)

// x_str: bytes or str (UTF-8), None for NULL; valid while v lives.
static int x_str(PyObject *v, const char *name, const char **out) {
	if (v == Py_None) *out = NULL;
	else if (PyBytes_Check(v)) *out = PyBytes_AsString(v);
	else if (PyUnicode_Check(v)) *out = PyUnicode_AsUTF8AndSize(v, NULL);
	else {
		PyErr_Format(PyExc_TypeError, "dlbridge: %s must be bytes or str, not %R", name, (PyObject *)Py_TYPE(v));
		return -1;
	}
	return *out || v == Py_None ? 0 : -1;
}

// x_seq: v as a tuple of at most 64 items (None: NULL), a new reference in *fast.
static int x_seq(PyObject *v, const char *name, PyObject **fast, Py_ssize_t *n) {
	*fast = NULL;
	*n = 0;
	if (v == Py_None) return 0;
	if (!(*fast = PySequence_Tuple(v))) return -1;
	if ((*n = PyTuple_Size(*fast)) > 64) {
		PyErr_Format(PyExc_ValueError, "dlbridge: %s has %zd items, at most 64", name, *n);
		Py_CLEAR(*fast);
		return -1;
	}
	return 0;
}

#define X_INTS(T, LO, HI)                                                                             \
	static int x_ints_##T(PyObject *v, const char *name, T##_t *buf, T##_t **out) {               \
		PyObject *f;                                                                          \
		Py_ssize_t n;                                                                         \
		if (x_seq(v, name, &f, &n) < 0) return -1;                                            \
		*out = f ? buf : NULL;                                                                \
		for (Py_ssize_t i = 0; i < n; i++) {                                                  \
			long long x;                                                                  \
			if (int_arg(PyTuple_GetItem(f, i), name, (int)i, LO, HI, #T, &x) < 0) { \
				Py_DECREF(f);                                                         \
				return -1;                                                            \
			}                                                                             \
			buf[i] = (T##_t)x;                                                            \
		}                                                                                     \
		Py_XDECREF(f);                                                                        \
		return 0;                                                                             \
	}
X_INTS(int64, INT64_MIN, INT64_MAX)
X_INTS(int32, INT32_MIN, INT32_MAX)

// x_items: a basic index as (kind, start, stop, step) tuples.
static int x_items(PyObject *v, const char *name, dlb_index_item *buf, dlb_index_item **out) {
	PyObject *f;
	Py_ssize_t n;
	if (x_seq(v, name, &f, &n) < 0) return -1;
	*out = f ? buf : NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		long long k;
		dlb_index_item *it = &buf[i];
		memset(it, 0, sizeof *it);
		if (!PyArg_ParseTuple(PyTuple_GetItem(f, i), "LLLL", &k, &it->start, &it->stop, &it->step)) {
			Py_DECREF(f);
			return -1;
		}
		it->kind = (int32_t)k;
	}
	Py_XDECREF(f);
	return 0;
}

// A dlb_scalar as (kind, i, u, re, im).
static int x_scalar_in(PyObject *v, const char *name, dlb_scalar *s) {
	memset(s, 0, sizeof *s);
	return PyArg_ParseTuple(v, "iLKdd", &s->kind, &s->i, &s->u, &s->re, &s->im) ? 0 : -1;
}

static PyObject *x_scalar_out(const dlb_scalar *s) { return Py_BuildValue("(iLKdd)", s->kind, (long long)s->i, (unsigned long long)s->u, s->re, s->im); }

static PyObject *x_tensor(uint64_t h, const dlb_info *info, uint64_t epoch) {
	return new_tensor(tensor_class ? tensor_class : (PyObject *)ctensor_type, h, info, epoch);
}

// x_string returns the string at buf and frees it unless it is the
// inline buffer; with rc non-zero it raises instead.
static PyObject *x_string(char *buf, char *inline_buf, int32_t rc) {
	PyObject *r = rc ? raise_last(rc) : PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
	if (buf != inline_buf) PyMem_Free(buf);
	return r;
}

// check(rc) raises the exception of a status a Go function of the user's
// own returned (pybridge.Fence), with Go's message.
static PyObject *m_check(PyObject *mod, PyObject *arg) {
	long rc = PyLong_AsLong(arg);
	if (rc == -1 && PyErr_Occurred()) return NULL;
	if (!rc) Py_RETURN_NONE;
	NEED_LIBRARY(return NULL);
	return raise_last((int32_t)rc);
}

// buffer(obj, full): obj's buffer as (pointer, length, readonly) and, when
// full, also (shape, strides or None, format, itemsize).
static PyObject *m_buffer(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 2, 2, "buffer") < 0) return NULL;
	int full = PyObject_IsTrue(args[1]);
	if (full < 0) return NULL;
	Py_buffer b;
	if (PyObject_GetBuffer(args[0], &b, full ? PyBUF_RECORDS_RO : 0) < 0) return NULL;
	PyObject *r;
	if (!full) r = Py_BuildValue("(KnO)", (unsigned long long)(uintptr_t)b.buf, b.len, b.readonly ? Py_True : Py_False);
	else {
		PyObject *shape = tuple_of((const int64_t *)b.shape, b.ndim);
		PyObject *strides = b.strides && b.ndim ? tuple_of((const int64_t *)b.strides, b.ndim) : Py_NewRef(Py_None);
		r = shape && strides ? Py_BuildValue("(KnOOOsn)", (unsigned long long)(uintptr_t)b.buf, b.len,
						     b.readonly ? Py_True : Py_False, shape, strides, b.format ? b.format : "B",
						     b.itemsize)
				     : NULL;
		Py_XDECREF(shape);
		Py_XDECREF(strides);
	}
	PyBuffer_Release(&b);
	return r;
}

#include "_exports.h"

static PyMethodDef module_methods[] = {
	{"wrap", (PyCFunction)(void (*)(void))m_wrap, METH_FASTCALL, "wrap(cls, handle): a cls instance owning handle."},
	{"take", (PyCFunction)(void (*)(void))m_take, METH_FASTCALL,
	 "take(cls, capsule, producer=None, pending=None): consume a DLPack capsule into a cls instance."},
	{"copy", (PyCFunction)(void (*)(void))m_copy, METH_FASTCALL,
	 "copy(dst, src, stream, non_blocking): Tensor.copy_ between tensors."},
	{"copy_host", (PyCFunction)(void (*)(void))m_copy_host, METH_FASTCALL,
	 "copy_host(dst, src, stream): a blocking Tensor.copy_ from a NumPy array; NotImplemented for anything else."},
	{"to", (PyCFunction)(void (*)(void))m_to, METH_FASTCALL,
	 "to(cls, t, dev_type, dev_id, stream, non_blocking): Tensor.to's copy."},
	{"from_dlpack", (PyCFunction)(void (*)(void))m_from_dlpack, METH_FASTCALL,
	 "from_dlpack(cls, obj, legacy, describe): dlbridge.from_dlpack(obj) in one call, or NotImplemented."},
	{"set_tensor_class", m_set_tensor_class, METH_O, "set_tensor_class(cls): the class of tensors made from C."},
	{"make_function", (PyCFunction)(void (*)(void))m_make_function, METH_FASTCALL,
	 "make_function(index, name, pyname, doc, names, kinds, required, result_kinds): a registered Go function."},
	{"set_call_helpers", (PyCFunction)(void (*)(void))m_set_call_helpers, METH_FASTCALL,
	 "set_call_helpers(asarray, stream_of, finish, describe): what calls of Go functions use."},
	{"check", m_check, METH_O, "check(rc): raise the exception of a non-zero status, with Go's message."},
	{"buffer", (PyCFunction)(void (*)(void))m_buffer, METH_FASTCALL, "buffer(obj, full): obj's buffer protocol view."},
	{"load", m_load, METH_O, "load(path): open the library at path and bind its exports."},
	{"bound", m_bound, METH_NOARGS, "Whether a library is bound."},
	{"export_names", m_export_names, METH_NOARGS, "export_names(): every symbol load() binds."},
	{"go_runtimes", m_go_runtimes, METH_NOARGS, "go_runtimes(): the mapped files that export Go's cgo runtime symbols."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "dlbridge._core",
	"The CPython extension of dlbridge: the binding of libdlbridge and the C base of dlbridge.Tensor.", -1,
	module_methods,
};

PyMODINIT_FUNC PyInit__core(void) {
	s_stream = PyUnicode_InternFromString("stream");
	s_max_version = PyUnicode_InternFromString("max_version");
	s_dl_device = PyUnicode_InternFromString("dl_device");
	s_copy = PyUnicode_InternFromString("copy");
	s_numpy = PyUnicode_InternFromString("numpy");
	s_result_type = PyUnicode_InternFromString("result_type");
	s_dlpack = PyUnicode_InternFromString("__dlpack__");
	s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
	max_version_13 = Py_BuildValue("(ii)", 1, 3);
	producer_kinds = PyDict_New();
	if (!s_stream || !s_numpy || !s_result_type || !s_max_version || !s_dl_device || !s_copy || !s_dlpack || !s_dlpack_device || !max_version_13 ||
	    !producer_kinds)
		return NULL;
	PyObject *m = PyModule_Create(&module_def);
	if (!m) return NULL;
	PyObject *tp = PyType_FromSpec(&ct_spec);
	if (!tp) goto fail;
	ctensor_type = (PyTypeObject *)tp;
	PyObject *cap = PyCapsule_New(&producer_api, "dlpack_exchange_api", NULL);
	if (!cap) goto fail;
	int rc = PyObject_SetAttrString(tp, "__dlpack_c_exchange_api__", cap);
	Py_DECREF(cap);
	if (rc < 0) goto fail;
	Py_INCREF(tp);
	if (PyModule_AddObject(m, "CTensor", tp) < 0) { // steals the reference only on success (3.9+)
		Py_DECREF(tp);
		goto fail;
	}
	if (PyModule_AddFunctions(m, export_methods) < 0) goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
