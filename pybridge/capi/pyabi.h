// The table of libdlbridge functions that the CPython extension
// dlbridge._core (pybridge/python/src/_core.c) calls. The extension does not
// link against libdlbridge: importing dlbridge must not start the Go runtime.
// The Python package loads the library at its first use and hands the
// extension the address that dlb_pyext_table() returns.
//
// No CPython declarations live here: the extension compiles against the
// interpreter's Python.h, the library against none.
#ifndef DLBRIDGE_PYABI_H
#define DLBRIDGE_PYABI_H

#include <stdatomic.h>
#include <stdint.h>

#include "capi.h"
#include "pyapi.h"

// Bumped when a field changes meaning; fields are only ever appended (size
// says how many the library has).
#define DLB_PYEXT_API_VERSION 4

typedef struct {
	uint32_t version; // DLB_PYEXT_API_VERSION
	uint32_t size;    // sizeof(dlb_pyext_api) of the library
	const char *(*last_error)(void);
	int32_t (*info_get)(uint64_t h, dlb_info *info);
	int32_t (*close)(uint64_t h);
	int32_t (*export_)(uint64_t h, int32_t versioned, int32_t has_stream, int64_t stream, int32_t has_device,
			   int32_t dev_type, int32_t dev_id, int32_t copy_mode, void **out);
	int32_t (*import_)(void *mt, int32_t versioned, int32_t gil, uint64_t *out, dlb_info *info);
	int32_t (*wait_stream)(int32_t dev_id, int64_t producer);
	int32_t (*alloc_export)(int32_t ndim, int64_t *shape, uint8_t code, uint8_t bits, uint16_t lanes,
				int32_t dev_type, int32_t dev_id, void **out);
	int64_t (*work_stream)(int32_t dev_id);
	void (*call_deleter)(void *mt, int versioned);
	// The extension's own DLPack exports (no Go call): made, still alive.
	// dlb_stats adds them to Go's counts.
	_Atomic int64_t *fast_made;
	_Atomic int64_t *fast_live;
	// Non-zero in a process forked after the library was loaded: the Go
	// runtime did not survive the fork, so nothing may call into it there.
	const _Atomic int *forked;
	// Order the write pending on a handle before a stream (dlb_order_before).
	int32_t (*order_before)(uint64_t h, int64_t stream);
	// Import a tensor whose pending write is on stream (dlb_import_on).
	int32_t (*import_on)(void *mt, int32_t versioned, int32_t gil, int64_t stream, uint64_t *out, dlb_info *info);
	// copy_ and to (dlb_copy_on, dlb_to_on), called without ctypes.
	int32_t (*copy_on)(uint64_t dst, uint64_t src, int64_t stream, int32_t non_blocking);
	int32_t (*to_on)(uint64_t h, int32_t dev_type, int32_t dev_id, int64_t stream, int32_t non_blocking, uint64_t *out,
			 dlb_info *info);
	// Version 3: a blocking copy_ from host memory the extension took through the buffer protocol
	// (dlb_copy_from_host; mode 2 for a destination that is alone).
	int32_t (*copy_from_host)(uint64_t dst, uint64_t ptr, uint8_t code, uint8_t bits, uint16_t lanes, int32_t ndim,
				  int64_t *shape, int64_t *strides, int64_t stream, int32_t mode);
	// Version 4: calls of registered Go functions (dlb_call, dlb_call_keep).
	int32_t (*call)(int32_t fn, int32_t nargs, dlb_arg *args, int64_t stream, int32_t stream_dev, int32_t nres,
			dlb_result *res, dlb_info *infos);
	int32_t (*call_keep)(uint64_t token, void *obj);
} dlb_pyext_api;

// dlb_pyext_table returns the library's table (static, never freed).
const dlb_pyext_api *dlb_pyext_table(void);

#endif
