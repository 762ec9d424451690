package zerocopy_test

import (
	"runtime"
	"unsafe"
)

// uintptrOf is the address of s's first element, for Spec.Ptr in tests that
// wrap Go memory by hand; keep(s) must follow the last use of the view.
func uintptrOf[T any](s []T) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }

func keep(x any) { runtime.KeepAlive(x) }
