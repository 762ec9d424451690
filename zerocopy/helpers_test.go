package zerocopy_test

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/dlbridge/dlbridge/zerocopy"
)

// escape makes every slice given to uintptrOf live on the heap: a stack
// copy could move when the stack grows, and a view holds a bare address.
var escape struct {
	sync.Mutex
	x any
}

// uintptrOf is the address of s's first element, for Spec.Ptr in tests that
// wrap Go memory by hand; keep(s) must follow the last use of the view.
func uintptrOf[T any](s []T) uintptr {
	escape.Lock()
	escape.x = s
	escape.Unlock()
	return uintptr(unsafe.Pointer(unsafe.SliceData(s)))
}

func keep(x any) { runtime.KeepAlive(x) }

// retained gives a derived view a reference of its own (View.Retain), for
// tests in which it outlives its parent.
func retained(v *zerocopy.View, err error) (*zerocopy.View, error) {
	if err != nil {
		return nil, err
	}
	return v.Retain()
}
