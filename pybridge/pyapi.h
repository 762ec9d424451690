// C side of package pybridge: the thread-local error of the fence, the
// CPython functions the bridge needs (looked up in the running process at
// run time, so the library links against no libpython and works with any
// CPython 3.9+), and the shim that runs a
// foreign deleter with the GIL held.
#ifndef DLBRIDGE_PYAPI_H
#define DLBRIDGE_PYAPI_H

#include <stddef.h>
#include <stdint.h>

// DLPack 1.3 structs (layout-identical to dlpack.h; dlpack/abi.go mirrors them in Go).
typedef struct { int32_t device_type; int32_t device_id; } dlb_DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } dlb_DLDataType;
typedef struct {
	void *data;
	dlb_DLDevice device;
	int32_t ndim;
	dlb_DLDataType dtype;
	int64_t *shape;
	int64_t *strides;
	uint64_t byte_offset;
} dlb_DLTensor;
typedef struct dlb_DLManagedTensor {
	dlb_DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct dlb_DLManagedTensor *self);
} dlb_DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } dlb_DLPackVersion;
typedef struct dlb_DLManagedTensorVersioned {
	dlb_DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct dlb_DLManagedTensorVersioned *self);
	uint64_t flags;
	dlb_DLTensor dl_tensor;
} dlb_DLManagedTensorVersioned;

// The error of the last failed entry point on this thread (set by the Go
// fence; "" and 0 when the last call succeeded or none failed yet).
void dlb_set_error(int32_t code, const char *msg, size_t n);
const char *dlb_last_error(void);
int32_t dlb_last_error_code(void);

// dlb_py_init looks up the CPython functions in the running process. It
// returns 1 when they were found (the library is loaded into Python), 0
// otherwise. Safe to call from any thread, any number of times.
int dlb_py_init(void);

// dlb_gil_shim wraps a managed tensor we received from Python in a copy of
// its header whose deleter calls the original deleter with the GIL held (and
// not at all once the interpreter is gone), because some producers' deleters
// (NumPy < 1.25) touch Python objects and allocators without taking the GIL.
// The original keeps shape and strides alive until its deleter runs. Returns
// NULL (and leaves mt untouched) when out of memory or when mt is NULL.
void *dlb_gil_shim(void *mt, int versioned);

// dlb_py_decref drops a reference to a PyObject* with the GIL held (taken
// if needed); after the interpreter finalized it does nothing.
void dlb_py_decref(void *obj);

// dlb_call_deleter runs mt's deleter (if any) exactly as a consumer would.
void dlb_call_deleter(void *mt, int versioned);

// dlb_alloc_host returns n bytes (at least 1) of host memory aligned to 64
// bytes, zeroed when zero is set, or NULL.
void *dlb_alloc_host(size_t n, int zero);
void dlb_free_host(void *p);

#endif
