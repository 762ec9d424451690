// The library's side of the CPython extension dlbridge._core: the table of
// entry points it calls (pyabi.h), the counters of its DLPack exports, and
// fork safety.
//
// Fork. The Go runtime does not survive fork(): in a child only the forking
// thread exists, and a call into Go there can wait forever for threads that
// are gone. A child handler marks the process; the extension and the Python
// package then refuse every call, and the deleters of DLPack tensors that Go
// exported before the fork (a consumer in the child may still call them)
// do nothing in the child: the memory is left to the exiting process.
#include "pyabi.h"

#include <pthread.h>

#include "_cgo_export.h"

static _Atomic int64_t fast_made, fast_live;
static _Atomic int forked;

static void on_fork_child(void) { atomic_store(&forked, 1); }

// Registered when the library is loaded, before any Go code can be called.
__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, on_fork_child); }

int dlb_forked(void) { return atomic_load(&forked); }

void dlb_fast_stats(int64_t *made, int64_t *live) {
	*made = atomic_load(&fast_made);
	*live = atomic_load(&fast_live);
}

static const dlb_pyext_api table = {
	.version = DLB_PYEXT_API_VERSION,
	.size = sizeof(dlb_pyext_api),
	.last_error = dlb_last_error,
	.info_get = dlb_info_get,
	.close = dlb_close,
	.export_ = dlb_export,
	.import_ = dlb_import,
	.wait_stream = dlb_wait_stream,
	.alloc_export = dlb_alloc_export,
	.work_stream = dlb_work_stream,
	.call_deleter = dlb_call_deleter,
	.fast_made = &fast_made,
	.fast_live = &fast_live,
	.forked = &forked,
	.order_before = dlb_order_before,
	.import_on = dlb_import_on,
	.copy_on = dlb_copy_on,
	.to_on = dlb_to_on,
	.copy_from_host = dlb_copy_from_host,
	.call = dlb_call,
	.call_keep = dlb_call_keep,
};

const dlb_pyext_api *dlb_pyext_table(void) { return &table; }

// Go's shared DLPack deleters, set once by guard_init.
static void (*go_deleter_versioned)(dlb_DLManagedTensorVersioned *);
static void (*go_deleter_legacy)(dlb_DLManagedTensor *);

void dlb_guard_init(uintptr_t versioned, uintptr_t legacy) {
	go_deleter_versioned = (void (*)(dlb_DLManagedTensorVersioned *))versioned;
	go_deleter_legacy = (void (*)(dlb_DLManagedTensor *))legacy;
}

// The deleters of the tensors the library exports: Go's, except in a child
// forked after the library was loaded.
void dlb_guarded_deleter_versioned(dlb_DLManagedTensorVersioned *mt) {
	if (!atomic_load(&forked)) go_deleter_versioned(mt);
}

void dlb_guarded_deleter_legacy(dlb_DLManagedTensor *mt) {
	if (!atomic_load(&forked)) go_deleter_legacy(mt);
}
