// The few pieces of CPython's C ABI that pyext.c uses, declared here instead
// of including Python.h: the library is built once, without Python headers,
// and loaded by any CPython 3.9+ with the GIL (the default build). Every
// struct below has had this layout in every CPython 3.x; the functions are
// looked up in the running interpreter with dlsym.
#ifndef DLBRIDGE_PYABI_H
#define DLBRIDGE_PYABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef ssize_t Py_ssize_t;
typedef struct _typeobject PyTypeObject; // opaque

// The object header of the GIL build: refcount then type (3.12 made the
// refcount a union of the same size).
typedef struct _object {
	Py_ssize_t ob_refcnt;
	PyTypeObject *ob_type;
} PyObject;

#define DLB_Py_TYPE(o) (((PyObject *)(o))->ob_type)

typedef struct {
	const char *ml_name;
	void *ml_meth;
	int ml_flags;
	const char *ml_doc;
} PyMethodDef;

#define METH_VARARGS 0x0001
#define METH_KEYWORDS 0x0002
#define METH_NOARGS 0x0004
#define METH_O 0x0008
#define METH_FASTCALL 0x0080

typedef PyObject *(*dlb_getter)(PyObject *, void *);
typedef int (*dlb_setter)(PyObject *, PyObject *, void *);

typedef struct {
	const char *name;
	dlb_getter get;
	dlb_setter set;
	const char *doc;
	void *closure;
} PyGetSetDef;

typedef struct {
	int slot;
	void *pfunc;
} PyType_Slot;

typedef struct {
	const char *name;
	int basicsize;
	int itemsize;
	unsigned int flags;
	PyType_Slot *slots;
} PyType_Spec;

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

// typeslots.h
#define Py_bf_getbuffer 1
#define Py_bf_releasebuffer 2
#define Py_tp_dealloc 52
#define Py_tp_doc 56
#define Py_tp_methods 64
#define Py_tp_new 65
#define Py_tp_getset 73
#define Py_tp_free 74

#define Py_TPFLAGS_BASETYPE (1UL << 10)
#define Py_TPFLAGS_HAVE_VERSION_TAG (1UL << 18)

// Buffer request flags.
#define PyBUF_WRITABLE 0x0001
#define PyBUF_FORMAT 0x0004
#define PyBUF_ND 0x0008
#define PyBUF_STRIDES (0x0010 | PyBUF_ND)

#endif
