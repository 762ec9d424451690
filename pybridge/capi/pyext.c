// The library's side of the CPython extension dlbridge._core beside the Go
// exports: the counters of its DLPack exports, and fork safety.
//
// Fork. The Go runtime does not survive fork(): in a child only the forking
// thread exists, and a call into Go there can wait forever for threads that
// are gone. A child handler marks the process; the extension and the Python
// package then refuse every call, and the deleters of DLPack tensors that Go
// exported before the fork (a consumer in the child may still call them)
// do nothing in the child: the memory is left to the exiting process.
#include <stdatomic.h>
#include <stdint.h>

#include "pyapi.h"

#include <pthread.h>

#include "_cgo_export.h"

// The extension's own DLPack exports (no Go call): made, still alive;
// dlb_stats adds them to Go's counts. The extension finds them with dlsym.
_Atomic int64_t dlb_fast_made, dlb_fast_live;
// Non-zero in a process forked after the library was loaded: the Go
// runtime did not survive the fork, so nothing may call into it there.
_Atomic int dlb_forked_flag;

static void on_fork_child(void) { atomic_store(&dlb_forked_flag, 1); }

// Registered when the library is loaded, before any Go code can be called.
__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, on_fork_child); }

void dlb_fast_stats(int64_t *made, int64_t *live) {
	*made = atomic_load(&dlb_fast_made);
	*live = atomic_load(&dlb_fast_live);
}

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
	if (!atomic_load(&dlb_forked_flag)) go_deleter_versioned(mt);
}

void dlb_guarded_deleter_legacy(dlb_DLManagedTensor *mt) {
	if (!atomic_load(&dlb_forked_flag)) go_deleter_legacy(mt);
}
