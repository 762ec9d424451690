// See pyapi.h. No Python header is needed: the few CPython functions used are
// part of the stable ABI and are looked up with dlsym in the running process.
#define _GNU_SOURCE
#include "pyapi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// Thread-local state is kept tiny (a code and a pointer): a library loaded
// with dlopen has little static TLS space to spare, and Go's runtime uses
// some of it. The message buffer is allocated per thread on first error.
#define DLB_TLS __thread __attribute__((tls_model("global-dynamic")))
#define ERR_CAP 4096
static DLB_TLS int32_t err_code;
static DLB_TLS char *err_msg;

void dlb_set_error(int32_t code, const char *msg, size_t n) {
	err_code = code;
	if (!err_msg) {
		err_msg = malloc(ERR_CAP); // freed with the process: one per thread that ever failed
		if (!err_msg) return;
	}
	if (n >= ERR_CAP) n = ERR_CAP - 1;
	if (n > 0) memcpy(err_msg, msg, n);
	err_msg[n] = 0;
}

const char *dlb_last_error(void) { return err_msg ? err_msg : ""; }
int32_t dlb_last_error_code(void) { return err_code; }

typedef void PyObject;

static struct {
	int ready;
	int (*Py_IsInitialized)(void);
	int (*Py_IsFinalizing)(void); // NULL on interpreters that have neither spelling
	int (*PyGILState_Check)(void);
	int (*PyGILState_Ensure)(void); // returns PyGILState_STATE, an enum
	void (*PyGILState_Release)(int);
	void (*Py_DecRef)(PyObject *);
} py;

static pthread_once_t py_once = PTHREAD_ONCE_INIT;

static void *sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

static void py_resolve(void) {
	// Assigning a void* to a function pointer is what POSIX dlsym requires.
	*(void **)&py.Py_IsInitialized = sym("Py_IsInitialized");
	*(void **)&py.Py_IsFinalizing = sym("Py_IsFinalizing");
	if (!py.Py_IsFinalizing) *(void **)&py.Py_IsFinalizing = sym("_Py_IsFinalizing");
	*(void **)&py.PyGILState_Check = sym("PyGILState_Check");
	*(void **)&py.PyGILState_Ensure = sym("PyGILState_Ensure");
	*(void **)&py.PyGILState_Release = sym("PyGILState_Release");
	*(void **)&py.Py_DecRef = sym("Py_DecRef");
	py.ready = py.Py_IsInitialized && py.PyGILState_Check && py.PyGILState_Ensure &&
		   py.PyGILState_Release && py.Py_DecRef;
}

int dlb_py_init(void) {
	pthread_once(&py_once, py_resolve);
	return py.ready;
}

void dlb_call_deleter(void *p, int versioned) {
	if (!p) return;
	if (versioned) {
		dlb_DLManagedTensorVersioned *mt = p;
		if (mt->deleter) mt->deleter(mt);
	} else {
		dlb_DLManagedTensor *mt = p;
		if (mt->deleter) mt->deleter(mt);
	}
}

typedef void (*gil_fn)(void *arg, int flag);

// with_gil runs fn(arg, flag) holding the GIL when Python is around. Once
// the interpreter has finalized, touching Python state would crash, so fn is
// skipped and what it would free leaks: the process is exiting anyway.
static void with_gil(gil_fn fn, void *arg, int flag) {
	if (!dlb_py_init()) { fn(arg, flag); return; }
	if (!py.Py_IsInitialized()) return;
	if (py.PyGILState_Check()) { fn(arg, flag); return; }
	// A thread without the GIL that asks for it during finalization is made
	// to exit (3.9-3.13) or hang (3.14): leak instead.
	if (py.Py_IsFinalizing && py.Py_IsFinalizing()) return;
	int st = py.PyGILState_Ensure();
	fn(arg, flag);
	py.PyGILState_Release(st);
}

static void deleter_cb(void *mt, int versioned) { dlb_call_deleter(mt, versioned); }
static void decref_cb(void *obj, int unused) { (void)unused; py.Py_DecRef(obj); }

void dlb_py_decref(void *obj) {
	if (!obj || !dlb_py_init()) return;
	with_gil(decref_cb, obj, 0);
}

static void shim_deleter_legacy(dlb_DLManagedTensor *s) {
	void *orig = s->manager_ctx;
	free(s);
	with_gil(deleter_cb, orig, 0);
}

static void shim_deleter_versioned(dlb_DLManagedTensorVersioned *s) {
	void *orig = s->manager_ctx;
	free(s);
	with_gil(deleter_cb, orig, 1);
}

void *dlb_gil_shim(void *p, int versioned) {
	if (!p) return NULL;
	if (versioned) {
		dlb_DLManagedTensorVersioned *o = p, *s = malloc(sizeof *s);
		if (!s) return NULL;
		*s = *o;
		s->manager_ctx = o;
		s->deleter = shim_deleter_versioned;
		return s;
	}
	dlb_DLManagedTensor *o = p, *s = malloc(sizeof *s);
	if (!s) return NULL;
	*s = *o;
	s->manager_ctx = o;
	s->deleter = shim_deleter_legacy;
	return s;
}

void *dlb_alloc_host(size_t n, int zero) {
	if (n == 0) n = 1;
	size_t rounded = (n + 63) & ~(size_t)63;
	if (rounded < n) return NULL;
	void *p = aligned_alloc(64, rounded);
	if (p && zero) memset(p, 0, n);
	return p;
}

void dlb_free_host(void *p) { free(p); }

