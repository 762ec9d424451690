package pybridge

/*
#include "pyapi.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Fence runs fn for an exported entry point and turns its outcome into the
// Code the entry point returns to C: OK when fn returns nil; otherwise the
// code CodeOf gives, with the error's message stored for LastError on this
// OS thread. A panic in fn never crosses into C: it is recovered and reported
// as RuntimeError with the panic value and where it happened.
//
// Call Fence directly in the body of an //export function, so that the
// message lands on the C caller's thread (cgo runs a callback on the thread
// that called it):
//
//	//export mylib_scale
//	func mylib_scale(h C.uint64_t, f C.double) C.int32_t {
//		return C.int32_t(pybridge.Fence(func() error { return scale(pybridge.Handle(h), float64(f)) }))
//	}
func Fence(fn func() error) (code Code) {
	defer func() {
		if r := recover(); r != nil {
			code = RuntimeError
			setLastError(code, fmt.Sprintf("dlbridge: internal error: Go panic: %v%s", r, panicSite()))
		}
	}()
	err := fn()
	if err == nil {
		return OK
	}
	code = CodeOf(err)
	setLastError(code, err.Error())
	return code
}

// panicSite names the first frame below the panic that is not the runtime,
// so a bug report says where the panic came from.
func panicSite() string {
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") && f.Function != "" {
			return fmt.Sprintf(" (at %s %s:%d)", f.Function, f.File, f.Line)
		}
		if !more {
			return ""
		}
	}
}

// SetLastError records code and msg as this OS thread's last error, for
// entry points that report failure without Fence.
func SetLastError(code Code, msg string) { setLastError(code, msg) }

func setLastError(code Code, msg string) {
	// The message is copied into a C thread-local buffer before returning;
	// C keeps no pointer to Go memory.
	C.dlb_set_error(C.int32_t(code), (*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// LastError returns the code and message of the last failed entry point on
// the calling OS thread (lock the goroutine to its thread to use it from Go).
func LastError() (Code, string) {
	return Code(C.dlb_last_error_code()), C.GoString(C.dlb_last_error())
}
