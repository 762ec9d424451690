// The CPython fast path of libdlbridge: the base type of dlbridge.Tensor
// (_CTensor) with __dlpack__, __dlpack_device__ and the buffer protocol in
// C, module functions that wrap handles and consume capsules in one call,
// and the DLPack 1.3 C exchange API (__dlpack_c_exchange_api__) both as a
// producer (on _CTensor) and as a consumer (of PyTorch's).
//
// Ownership. A handle (pybridge's table) holds one reference on a tensor's
// memory. _CTensor wraps the handle in a keeper: a C refcount that the
// object holds once and every fast DLPack export holds once more, so an
// export costs a malloc and an atomic increment, and no call into Go; the
// last release closes the handle (a call into Go, which may run a foreign
// deleter, with the GIL taken if needed). Exports that need Go (a copy,
// another device, stream ordering) go through dlb_export and hold a
// reference of their own.
#include "pyabi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"
#include "capi.h"
#include "pyapi.h"

// ---- CPython functions, looked up in the running interpreter ----

static struct {
	PyObject *(*PyType_FromSpec)(PyType_Spec *);
	PyObject *(*PyType_GenericAlloc)(PyTypeObject *, Py_ssize_t);
	PyObject *(*PyType_GenericNew)(PyTypeObject *, PyObject *, PyObject *);
	int (*PyType_IsSubtype)(PyTypeObject *, PyTypeObject *);
	void *(*PyType_GetSlot)(PyTypeObject *, int);
	PyObject *(*PyCapsule_New)(void *, const char *, void (*)(PyObject *));
	void *(*PyCapsule_GetPointer)(PyObject *, const char *);
	const char *(*PyCapsule_GetName)(PyObject *);
	int (*PyCapsule_SetName)(PyObject *, const char *);
	void (*PyErr_SetString)(PyObject *, const char *);
	PyObject *(*PyErr_Occurred)(void);
	PyObject *(*PyLong_FromLongLong)(long long);
	PyObject *(*PyLong_FromUnsignedLongLong)(unsigned long long);
	long long (*PyLong_AsLongLong)(PyObject *);
	unsigned long long (*PyLong_AsUnsignedLongLong)(PyObject *);
	PyObject *(*PyTuple_New)(Py_ssize_t);
	int (*PyTuple_SetItem)(PyObject *, Py_ssize_t, PyObject *);
	PyObject *(*PyTuple_GetItem)(PyObject *, Py_ssize_t);
	Py_ssize_t (*PyTuple_Size)(PyObject *);
	PyObject *(*PySequence_GetItem)(PyObject *, Py_ssize_t);
	int (*PyObject_IsTrue)(PyObject *);
	void (*Py_IncRef)(PyObject *);
	void (*Py_DecRef)(PyObject *);
	PyObject *(*PyUnicode_InternFromString)(const char *);
	int (*PyUnicode_Compare)(PyObject *, PyObject *);
	PyObject *(*PyCFunction_NewEx)(PyMethodDef *, PyObject *, PyObject *);
	int (*PyObject_SetAttrString)(PyObject *, const char *, PyObject *);
	PyObject *(*PyDict_New)(void);
	int (*PyDict_SetItemString)(PyObject *, const char *, PyObject *);
	PyObject **exc[7]; // indexed by pybridge.Code; [0] unused
	PyObject *None;
	PyObject *True;
	PyObject *False;
} api;

static int api_ok;

#define SYM(field, name)                                       \
	do {                                                       \
		*(void **)&api.field = dlsym(RTLD_DEFAULT, name);      \
		if (!api.field) {                                      \
			missing = name;                                    \
		}                                                      \
	} while (0)

static const char *resolve(void) {
	const char *missing = NULL;
	SYM(PyType_FromSpec, "PyType_FromSpec");
	SYM(PyType_GenericAlloc, "PyType_GenericAlloc");
	SYM(PyType_GenericNew, "PyType_GenericNew");
	SYM(PyType_IsSubtype, "PyType_IsSubtype");
	SYM(PyType_GetSlot, "PyType_GetSlot");
	SYM(PyCapsule_New, "PyCapsule_New");
	SYM(PyCapsule_GetPointer, "PyCapsule_GetPointer");
	SYM(PyCapsule_GetName, "PyCapsule_GetName");
	SYM(PyCapsule_SetName, "PyCapsule_SetName");
	SYM(PyErr_SetString, "PyErr_SetString");
	SYM(PyErr_Occurred, "PyErr_Occurred");
	SYM(PyLong_FromLongLong, "PyLong_FromLongLong");
	SYM(PyLong_FromUnsignedLongLong, "PyLong_FromUnsignedLongLong");
	SYM(PyLong_AsLongLong, "PyLong_AsLongLong");
	SYM(PyLong_AsUnsignedLongLong, "PyLong_AsUnsignedLongLong");
	SYM(PyTuple_New, "PyTuple_New");
	SYM(PyTuple_SetItem, "PyTuple_SetItem");
	SYM(PyTuple_GetItem, "PyTuple_GetItem");
	SYM(PyTuple_Size, "PyTuple_Size");
	SYM(PySequence_GetItem, "PySequence_GetItem");
	SYM(PyObject_IsTrue, "PyObject_IsTrue");
	SYM(Py_IncRef, "Py_IncRef");
	SYM(Py_DecRef, "Py_DecRef");
	SYM(PyUnicode_InternFromString, "PyUnicode_InternFromString");
	SYM(PyUnicode_Compare, "PyUnicode_Compare");
	SYM(PyCFunction_NewEx, "PyCFunction_NewEx");
	SYM(PyObject_SetAttrString, "PyObject_SetAttrString");
	SYM(PyDict_New, "PyDict_New");
	SYM(PyDict_SetItemString, "PyDict_SetItemString");
	static const char *excs[7] = {NULL, "PyExc_BufferError", "PyExc_TypeError", "PyExc_ValueError",
				      "PyExc_MemoryError", "PyExc_RuntimeError", "PyExc_IndexError"};
	for (int i = 1; i < 7; i++) {
		api.exc[i] = dlsym(RTLD_DEFAULT, excs[i]); // address of the PyObject* variable
		if (!api.exc[i]) missing = excs[i];
	}
	api.None = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
	api.True = dlsym(RTLD_DEFAULT, "_Py_TrueStruct");
	api.False = dlsym(RTLD_DEFAULT, "_Py_FalseStruct");
	if (!api.None || !api.True || !api.False) missing = "_Py_NoneStruct";
	return missing;
}

static void py_raise(int code, const char *msg) { api.PyErr_SetString(*api.exc[code >= 1 && code <= 6 ? code : 5], msg); }

// raise_last raises the error a Go entry point just returned.
static void raise_last(int32_t rc) { py_raise(rc, dlb_last_error()); }

static PyObject *none(void) {
	api.Py_IncRef(api.None);
	return api.None;
}

// ---- keepers and fast exports ----

typedef struct {
	_Atomic int64_t refs;
	uint64_t handle;
} keeper;

static _Atomic int64_t fast_made, fast_live;

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
		dlb_close(k->handle); // an error here (none expected) has no one to report to
		free(k);
	}
}

void dlb_fast_stats(int64_t *made, int64_t *live) {
	*made = atomic_load(&fast_made);
	*live = atomic_load(&fast_live);
}

static void fast_deleter_versioned(dlb_DLManagedTensorVersioned *mt) {
	keeper *k = mt->manager_ctx;
	free(mt);
	atomic_fetch_sub(&fast_live, 1);
	keeper_release(k);
}

static void fast_deleter_legacy(dlb_DLManagedTensor *mt) {
	keeper *k = mt->manager_ctx;
	free(mt);
	atomic_fetch_sub(&fast_live, 1);
	keeper_release(k);
}

// ---- _CTensor ----

#define INLINE_DIMS 8

typedef struct {
	PyObject ob_base;
	keeper *keeper; // NULL once released
	uint64_t handle;
	uint64_t ptr;
	int32_t dev_type, dev_id;
	uint8_t code, bits;
	uint16_t lanes;
	int32_t ndim;
	uint32_t flags; // DLB_INFO_*
	int32_t itemsize;
	uint64_t stream;
	int closed; // close() was called
	int pinned; // a consumer holds this object, not a DLPack export: keep the memory until dealloc
	int negstride;
	int64_t *shape, *strides; // in elements
	Py_ssize_t *bstrides;     // in bytes, for the buffer protocol
	PyObject *shape_t, *strides_t; // cached tuples
	int64_t dims[3 * INLINE_DIMS];
} CTensor;

static PyTypeObject *ctensor_type;
static PyObject *tensor_class; // dlbridge.Tensor, for tensors made from C (exchange API)

static int is_ctensor(PyObject *o) {
	return o && (DLB_Py_TYPE(o) == ctensor_type || api.PyType_IsSubtype(DLB_Py_TYPE(o), ctensor_type));
}

// fill sets t from a handle's info; t takes over the handle. -1 with an
// exception set on failure (the handle is then closed).
static int fill(CTensor *t, uint64_t h, const dlb_info *info) {
	int n = info->ndim;
	if (n > INLINE_DIMS) {
		int64_t *d = malloc(3 * sizeof(int64_t) * (size_t)n);
		if (!d) {
			dlb_close(h);
			py_raise(4, "dlbridge: out of memory");
			return -1;
		}
		t->shape = d;
	} else {
		t->shape = t->dims;
	}
	t->strides = t->shape + (n > INLINE_DIMS ? n : INLINE_DIMS);
	t->bstrides = (Py_ssize_t *)(t->strides + (n > INLINE_DIMS ? n : INLINE_DIMS));
	t->keeper = keeper_new(h);
	if (!t->keeper) {
		dlb_close(h);
		py_raise(4, "dlbridge: out of memory");
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
static PyObject *new_tensor(PyObject *cls, uint64_t h, const dlb_info *info) {
	CTensor *t = (CTensor *)api.PyType_GenericAlloc((PyTypeObject *)cls, 0);
	if (!t) {
		dlb_close(h);
		return NULL;
	}
	if (fill(t, h, info) < 0) {
		api.Py_DecRef((PyObject *)t);
		return NULL;
	}
	return (PyObject *)t;
}

static void ct_dealloc(PyObject *self) {
	CTensor *t = (CTensor *)self;
	PyTypeObject *tp = DLB_Py_TYPE(self);
	if (t->keeper) keeper_release(t->keeper);
	t->keeper = NULL;
	if (t->shape && t->shape != t->dims) free(t->shape);
	if (t->shape_t) api.Py_DecRef(t->shape_t);
	if (t->strides_t) api.Py_DecRef(t->strides_t);
	void (*tp_free)(void *) = api.PyType_GetSlot(tp, Py_tp_free);
	tp_free(self);
	api.Py_DecRef((PyObject *)tp);
}

static int check_open(CTensor *t) {
	if (t->closed || !t->keeper) {
		py_raise(3, "dlbridge: the tensor is closed");
		return -1;
	}
	return 0;
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
	atomic_fetch_add(&fast_made, 1);
	atomic_fetch_add(&fast_live, 1);
	return p;
}

static PyObject *s_stream, *s_max_version, *s_dl_device, *s_copy;

static int kw_is(PyObject *name, PyObject *want) {
	return name == want || api.PyUnicode_Compare(name, want) == 0;
}

#define DLB_CUDA 2
#define DLB_CPU 1

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
static PyObject *ct_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
	CTensor *t = (CTensor *)self;
	if (nargs != 0) {
		py_raise(2, "__dlpack__() takes keyword arguments only (stream, max_version, dl_device, copy)");
		return NULL;
	}
	PyObject *stream = NULL, *max_version = NULL, *dl_device = NULL, *copy = NULL;
	Py_ssize_t nkw = 0;
	if (kwnames) {
		nkw = api.PyTuple_Size(kwnames);
		for (Py_ssize_t i = 0; i < nkw; i++) {
			PyObject *k = api.PyTuple_GetItem(kwnames, i), *v = args[i];
			if (kw_is(k, s_stream)) stream = v;
			else if (kw_is(k, s_max_version)) max_version = v;
			else if (kw_is(k, s_dl_device)) dl_device = v;
			else if (kw_is(k, s_copy)) copy = v;
			else {
				py_raise(2, "__dlpack__() got an unexpected keyword argument");
				return NULL;
			}
		}
	}
	if (check_open(t) < 0) return NULL;
	int versioned = 0;
	if (max_version && max_version != api.None) {
		PyObject *major = api.PySequence_GetItem(max_version, 0);
		if (!major) return NULL;
		long long m = api.PyLong_AsLongLong(major);
		api.Py_DecRef(major);
		if (m == -1 && api.PyErr_Occurred()) return NULL;
		versioned = m >= 1;
	}
	int has_stream = 0;
	long long s = 0;
	if (stream && stream != api.None) {
		s = api.PyLong_AsLongLong(stream);
		if (s == -1 && api.PyErr_Occurred()) return NULL;
		has_stream = 1;
	}
	int has_dev = 0;
	long long dt = 0, di = 0;
	if (dl_device && dl_device != api.None) {
		PyObject *a = api.PySequence_GetItem(dl_device, 0);
		if (!a) return NULL;
		dt = api.PyLong_AsLongLong(a);
		api.Py_DecRef(a);
		PyObject *b = api.PySequence_GetItem(dl_device, 1);
		if (!b) return NULL;
		di = api.PyLong_AsLongLong(b);
		api.Py_DecRef(b);
		if (api.PyErr_Occurred()) return NULL;
		has_dev = dt != t->dev_type || di != t->dev_id;
	}
	int cm = 0; // pybridge.CopyMode: 0 if needed, 1 never, 2 always
	if (copy && copy != api.None) {
		int c = api.PyObject_IsTrue(copy);
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
		} else if (t->dev_type != DLB_CPU && t->dev_type != 3 && t->dev_type != 13) {
			fast = 0;
		}
	}
	void *mt = NULL;
	if (fast) {
		mt = fast_export(t, versioned);
		if (!mt) {
			py_raise(4, "dlbridge: out of memory exporting a DLPack tensor");
			return NULL;
		}
	} else {
		int32_t rc = dlb_export(t->handle, versioned, has_stream, s, has_dev, (int32_t)dt, (int32_t)di, cm, &mt);
		if (rc) {
			raise_last(rc);
			return NULL;
		}
	}
	PyObject *cap = api.PyCapsule_New(mt, dlb_capsule_name(versioned, 0), (void (*)(PyObject *))dlb_capsule_destructor);
	if (!cap) dlb_call_deleter(mt, versioned);
	return cap;
}

static PyObject *ct_dlpack_device(PyObject *self, PyObject *unused) {
	CTensor *t = (CTensor *)self;
	PyObject *tup = api.PyTuple_New(2);
	if (!tup) return NULL;
	api.PyTuple_SetItem(tup, 0, api.PyLong_FromLongLong(t->dev_type));
	api.PyTuple_SetItem(tup, 1, api.PyLong_FromLongLong(t->dev_id));
	return tup;
}

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
	return none();
}

static PyObject *ct_pin(PyObject *self, PyObject *unused) {
	CTensor *t = (CTensor *)self;
	if (check_open(t) < 0) return NULL;
	t->pinned = 1;
	return none();
}

static PyObject *tuple_of(const int64_t *v, int n) {
	PyObject *tup = api.PyTuple_New(n);
	if (!tup) return NULL;
	for (int i = 0; i < n; i++) {
		PyObject *x = api.PyLong_FromLongLong(v[i]);
		if (!x) {
			api.Py_DecRef(tup);
			return NULL;
		}
		api.PyTuple_SetItem(tup, i, x);
	}
	return tup;
}

static PyObject *get_h(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	return api.PyLong_FromUnsignedLongLong(t->closed || !t->keeper ? 0 : t->handle);
}
static PyObject *get_ptr(PyObject *self, void *c) { return api.PyLong_FromUnsignedLongLong(((CTensor *)self)->ptr); }
static PyObject *get_shape(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	if (!t->shape_t && !(t->shape_t = tuple_of(t->shape, t->ndim))) return NULL;
	api.Py_IncRef(t->shape_t);
	return t->shape_t;
}
static PyObject *get_strides(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	if (!t->strides_t && !(t->strides_t = tuple_of(t->strides, t->ndim))) return NULL;
	api.Py_IncRef(t->strides_t);
	return t->strides_t;
}
static PyObject *get_code(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	int64_t v[3] = {t->code, t->bits, t->lanes};
	return tuple_of(v, 3);
}
static PyObject *get_dev(PyObject *self, void *c) {
	CTensor *t = (CTensor *)self;
	int64_t v[2] = {t->dev_type, t->dev_id};
	return tuple_of(v, 2);
}
static PyObject *get_flags(PyObject *self, void *c) { return api.PyLong_FromLongLong(((CTensor *)self)->flags); }
static PyObject *get_itemsize(PyObject *self, void *c) { return api.PyLong_FromLongLong(((CTensor *)self)->itemsize); }
static PyObject *get_stream(PyObject *self, void *c) { return api.PyLong_FromUnsignedLongLong(((CTensor *)self)->stream); }
static int set_stream(PyObject *self, PyObject *v, void *c) {
	if (!v) {
		py_raise(2, "cannot delete _stream");
		return -1;
	}
	unsigned long long s = api.PyLong_AsUnsignedLongLong(v);
	if (s == (unsigned long long)-1 && api.PyErr_Occurred()) return -1;
	((CTensor *)self)->stream = s;
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
	if (t->dev_type != DLB_CPU && t->dev_type != 3 && t->dev_type != 13) {
		py_raise(1, "dlbridge: the buffer protocol needs host memory; this tensor is on a device");
		return -1;
	}
	const char *fmt = buffer_format(t);
	if (!fmt) {
		py_raise(1, "dlbridge: this dtype has no buffer-protocol format (e.g. bfloat16); use DLPack or __array_interface__");
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && (t->flags & DLB_INFO_READONLY)) {
		py_raise(1, "dlbridge: the tensor is read-only");
		return -1;
	}
	if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !(t->flags & DLB_INFO_C_CONTIGUOUS)) {
		py_raise(1, "dlbridge: the tensor is not C-contiguous and the consumer did not ask for strides");
		return -1;
	}
	Py_ssize_t n = 1;
	for (int i = 0; i < t->ndim; i++) n *= (Py_ssize_t)t->shape[i];
	t->pinned = 1; // the view holds this object; the memory must outlive close()
	view->buf = (void *)(uintptr_t)t->ptr;
	view->obj = self;
	api.Py_IncRef(self);
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
	{"__dlpack__", (void *)ct_dlpack, METH_FASTCALL | METH_KEYWORDS,
	 "A DLPack capsule of this tensor (versioned when max_version >= (1, 0))."},
	{"__dlpack_device__", (void *)ct_dlpack_device, METH_NOARGS, "(device_type, device_id)"},
	{"close", (void *)ct_close, METH_NOARGS, "Release this tensor's hold on its memory. Idempotent."},
	{"_pin", (void *)ct_pin, METH_NOARGS, "Keep the memory until this object is collected."},
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
	py_raise(2, "dlbridge.Tensor cannot be built directly: use dlbridge.empty, zeros, arange, from_dlpack or asarray");
	return NULL;
}

static PyType_Slot ct_slots[] = {
	{Py_tp_dealloc, (void *)ct_dealloc},
	{Py_tp_methods, ct_methods},
	{Py_tp_getset, ct_getset},
	{Py_tp_new, (void *)ct_new},
	{Py_bf_getbuffer, (void *)ct_getbuffer},
	{Py_bf_releasebuffer, (void *)ct_releasebuffer},
	{Py_tp_doc, "The C base of dlbridge.Tensor (libdlbridge's CPython fast path)."},
	{0, NULL},
};

static PyType_Spec ct_spec = {
	"dlbridge._CTensor", sizeof(CTensor), 0, Py_TPFLAGS_HAVE_VERSION_TAG | Py_TPFLAGS_BASETYPE, ct_slots,
};

// ---- module functions ----

static int need_args(Py_ssize_t nargs, Py_ssize_t want, const char *fn) {
	if (nargs != want) {
		char msg[128];
		snprintf(msg, sizeof msg, "dlbridge: %s takes %d arguments", fn, (int)want);
		py_raise(2, msg);
		return -1;
	}
	return 0;
}

// wrap(cls, handle) -> cls instance owning handle.
static PyObject *m_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 2, "wrap") < 0) return NULL;
	unsigned long long h = api.PyLong_AsUnsignedLongLong(args[1]);
	if (h == (unsigned long long)-1 && api.PyErr_Occurred()) return NULL;
	dlb_info info;
	int32_t rc = dlb_info_get(h, &info);
	if (rc) {
		raise_last(rc);
		return NULL;
	}
	return new_tensor(args[0], h, &info);
}

// take(cls, capsule) consumes a DLPack capsule: checks and renames it, hands
// the tensor to Go, and returns a cls instance.
static PyObject *m_take(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 2, "take") < 0) return NULL;
	PyObject *cap = args[1];
	const char *name = api.PyCapsule_GetName(cap);
	if (!name && api.PyErr_Occurred()) return NULL;
	int versioned;
	if (name && strcmp(name, "dltensor_versioned") == 0) versioned = 1;
	else if (name && strcmp(name, "dltensor") == 0) versioned = 0;
	else if (name && strncmp(name, "used_dltensor", 13) == 0) {
		char msg[256];
		snprintf(msg, sizeof msg,
			 "dlbridge: this DLPack capsule was already consumed (it is named '%s'); a capsule can be "
			 "imported only once: call __dlpack__() again for a new one",
			 name);
		py_raise(3, msg);
		return NULL;
	} else {
		py_raise(2, "dlbridge: this capsule is not a DLPack capsule");
		return NULL;
	}
	void *mt = api.PyCapsule_GetPointer(cap, name);
	if (!mt) {
		if (!api.PyErr_Occurred()) py_raise(3, "dlbridge: DLPack capsule holds a NULL pointer");
		return NULL;
	}
	if (api.PyCapsule_SetName(cap, dlb_capsule_name(versioned, 1)) < 0) return NULL;
	uint64_t h;
	dlb_info info;
	int32_t rc = dlb_import(mt, versioned, 1, &h, &info);
	if (rc) {
		raise_last(rc);
		return NULL;
	}
	return new_tensor(args[0], h, &info);
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

// exchange_import(cls, obj, api_capsule): obj's producer exports through its
// C exchange API (no Python-level __dlpack__); its current stream is
// ordered before our work stream.
static PyObject *m_exchange_import(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 3, "exchange_import") < 0) return NULL;
	dlb_exchange_api *ex = api.PyCapsule_GetPointer(args[2], "dlpack_exchange_api");
	if (!ex) return NULL;
	if (ex->header.version.major != 1 || !ex->managed_tensor_from_py_object_no_sync) {
		py_raise(1, "dlbridge: the producer's DLPack exchange API has an unsupported version");
		return NULL;
	}
	dlb_DLManagedTensorVersioned *mt = NULL;
	if (ex->managed_tensor_from_py_object_no_sync(args[1], &mt) != 0 || !mt) {
		if (!api.PyErr_Occurred()) py_raise(1, "dlbridge: the producer's exchange API failed");
		return NULL;
	}
	if (mt->version.major == 1 && mt->dl_tensor.device.device_type == DLB_CUDA && ex->current_work_stream) {
		void *s = NULL;
		if (ex->current_work_stream(DLB_CUDA, mt->dl_tensor.device.device_id, &s) != 0) {
			dlb_call_deleter(mt, 1);
			return NULL;
		}
		int32_t rc = dlb_wait_stream(mt->dl_tensor.device.device_id, (int64_t)(uintptr_t)s);
		if (rc) {
			dlb_call_deleter(mt, 1);
			raise_last(rc);
			return NULL;
		}
	}
	uint64_t h;
	dlb_info info;
	int32_t rc = dlb_import(mt, 1, 1, &h, &info);
	if (rc) {
		raise_last(rc);
		return NULL;
	}
	return new_tensor(args[0], h, &info);
}

static PyObject *m_set_tensor_class(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
	if (need_args(nargs, 1, "set_tensor_class") < 0) return NULL;
	if (tensor_class) api.Py_DecRef(tensor_class);
	tensor_class = args[0];
	api.Py_IncRef(tensor_class);
	return none();
}

static PyMethodDef m_wrap_def = {"wrap", (void *)m_wrap, METH_FASTCALL, "wrap(cls, handle)"};
static PyMethodDef m_take_def = {"take", (void *)m_take, METH_FASTCALL, "take(cls, capsule)"};
static PyMethodDef m_exchange_def = {"exchange_import", (void *)m_exchange_import, METH_FASTCALL,
				     "exchange_import(cls, obj, api_capsule)"};
static PyMethodDef m_set_class_def = {"set_tensor_class", (void *)m_set_tensor_class, METH_FASTCALL,
				      "set_tensor_class(cls)"};

// Producer side, installed as _CTensor.__dlpack_c_exchange_api__.
static int ex_from_py(void *obj, dlb_DLManagedTensorVersioned **out) {
	if (!is_ctensor(obj)) {
		py_raise(2, "dlbridge: exchange API called with an object that is not a dlbridge.Tensor");
		return -1;
	}
	CTensor *t = obj;
	if (check_open(t) < 0) return -1;
	*out = fast_export(t, 1);
	if (!*out) {
		py_raise(4, "dlbridge: out of memory exporting a DLPack tensor");
		return -1;
	}
	return 0;
}

static int ex_to_py(dlb_DLManagedTensorVersioned *mt, void **out) {
	if (!tensor_class) {
		dlb_call_deleter(mt, 1);
		py_raise(5, "dlbridge: the Python package did not register its Tensor class");
		return -1;
	}
	uint64_t h;
	dlb_info info;
	int32_t rc = dlb_import(mt, 1, 1, &h, &info);
	if (rc) {
		raise_last(rc);
		return -1;
	}
	PyObject *o = new_tensor(tensor_class, h, &info);
	if (!o) return -1;
	*out = o;
	return 0;
}

static int ex_dltensor(void *obj, dlb_DLTensor *out) {
	if (!is_ctensor(obj)) {
		py_raise(2, "dlbridge: exchange API called with an object that is not a dlbridge.Tensor");
		return -1;
	}
	CTensor *t = obj;
	if (check_open(t) < 0) return -1;
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

static int ex_stream(int32_t dev_type, int32_t dev_id, void **out) {
	*out = dev_type == DLB_CUDA ? (void *)(uintptr_t)dlb_work_stream(dev_id) : NULL;
	return 0;
}

static int ex_alloc(dlb_DLTensor *proto, dlb_DLManagedTensorVersioned **out, void *ctx,
		    void (*set_error)(void *, const char *, const char *)) {
	void *mt = NULL;
	int32_t rc = dlb_alloc_export(proto->ndim, proto->shape, proto->dtype.code, proto->dtype.bits,
				      proto->dtype.lanes, proto->device.device_type, proto->device.device_id, &mt);
	if (rc) {
		static const char *names[7] = {"RuntimeError", "BufferError", "TypeError", "ValueError",
					       "MemoryError", "RuntimeError", "IndexError"};
		if (set_error) set_error(ctx, names[rc >= 1 && rc <= 6 ? rc : 0], dlb_last_error());
		return -1;
	}
	*out = mt;
	return 0;
}

static dlb_exchange_api producer_api = {
	{{1, 3}, NULL}, ex_alloc, ex_from_py, ex_to_py, ex_dltensor, ex_stream,
};

// ---- init ----

static PyObject *module_dict;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

static int put(PyObject *d, const char *name, PyObject *v) {
	if (!v) return -1;
	int rc = api.PyDict_SetItemString(d, name, v);
	api.Py_DecRef(v);
	return rc;
}

// dlb_pyext_init returns a new reference to a dict with the fast path's
// type and functions, or NULL with a Python exception set (or NULL without
// one when CPython's functions cannot be found). Called with the GIL held.
void *dlb_pyext_init(void) {
	pthread_mutex_lock(&init_mu);
	if (module_dict) {
		api.Py_IncRef(module_dict);
		pthread_mutex_unlock(&init_mu);
		return module_dict;
	}
	const char *missing = resolve();
	if (missing) {
		pthread_mutex_unlock(&init_mu);
		return NULL;
	}
	api_ok = 1;
	dlb_py_init();
	PyObject *d = NULL, *tp = NULL;
	s_stream = api.PyUnicode_InternFromString("stream");
	s_max_version = api.PyUnicode_InternFromString("max_version");
	s_dl_device = api.PyUnicode_InternFromString("dl_device");
	s_copy = api.PyUnicode_InternFromString("copy");
	if (!s_stream || !s_max_version || !s_dl_device || !s_copy) goto fail;
	tp = api.PyType_FromSpec(&ct_spec);
	if (!tp) goto fail;
	ctensor_type = (PyTypeObject *)tp;
	PyObject *cap = api.PyCapsule_New(&producer_api, "dlpack_exchange_api", NULL);
	if (!cap) goto fail;
	int rc = api.PyObject_SetAttrString(tp, "__dlpack_c_exchange_api__", cap);
	api.Py_DecRef(cap);
	if (rc < 0) goto fail;
	d = api.PyDict_New();
	if (!d) goto fail;
	api.Py_IncRef(tp);
	if (put(d, "CTensor", tp) < 0 || put(d, "wrap", api.PyCFunction_NewEx(&m_wrap_def, NULL, NULL)) < 0 ||
	    put(d, "take", api.PyCFunction_NewEx(&m_take_def, NULL, NULL)) < 0 ||
	    put(d, "exchange_import", api.PyCFunction_NewEx(&m_exchange_def, NULL, NULL)) < 0 ||
	    put(d, "set_tensor_class", api.PyCFunction_NewEx(&m_set_class_def, NULL, NULL)) < 0)
		goto fail;
	module_dict = d;
	api.Py_IncRef(d);
	pthread_mutex_unlock(&init_mu);
	return d;
fail:
	if (d) api.Py_DecRef(d);
	pthread_mutex_unlock(&init_mu);
	return NULL;
}
