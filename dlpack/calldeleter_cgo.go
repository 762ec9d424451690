//go:build cgo

package dlpack

/*
#include <stdint.h>

// Calls a producer's deleter. Both DLPack deleter types take one pointer
// and return nothing, so one trampoline serves both.
static void dlbridge_call_deleter(uintptr_t fn, uintptr_t arg) {
  ((void (*)(void *))fn)((void *)arg);
}
*/
import "C"

// callDeleter calls the C function fn(arg). With cgo a direct cgo call is
// about three times cheaper than purego.SyscallN. arg goes as an integer:
// it is C memory, or one of our exports that is already pinned.
func callDeleter(fn, arg uintptr) { C.dlbridge_call_deleter(C.uintptr_t(fn), C.uintptr_t(arg)) }
