// Command userlib is a worked example of a Go library author's own
// c-shared library: it exports a function of its own next to dlbridge's
// whole C ABI (package capi), so Python uses the dlbridge package for the
// tensors and calls the function through ctypes.
//
//	go build -buildmode=c-shared -o build/libuserlib.so ./examples/userlib
//	DLBRIDGE_LIB=build/libuserlib.so python3 examples/userlib/use_userlib.py
//
// userlib_normalize_rows takes a 2-d float32 host tensor from Python (a
// NumPy array, a torch tensor, anything dlbridge.asarray takes, without a
// copy), scales each row in place to unit length, and returns a new tensor
// made in Go: the norms the rows had.
package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"math"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
	_ "github.com/dlbridge/dlbridge/pybridge/capi" // dlbridge's C ABI, in this library too
	"github.com/dlbridge/dlbridge/zerocopy"
)

//export userlib_normalize_rows
func userlib_normalize_rows(h C.uint64_t, out *C.uint64_t) C.int32_t {
	// The fence turns errors and panics into a code and a message that
	// Python raises as the matching exception.
	return C.int32_t(pybridge.Fence(func() error {
		t, err := pybridge.Borrow(pybridge.Handle(h))
		if err != nil {
			return err
		}
		defer t.Return()
		norms, err := normalizeRows(t.View)
		if err != nil {
			return err
		}
		*out = C.uint64_t(pybridge.NewTensor(norms)) // Python owns the handle now
		return nil
	}))
}

// rowsWant is what normalizeRows takes: rows of float32 it scales in place,
// one after the other in memory. Any memory the CPU can touch will do
// (pageable, pinned or managed): HostSlice checks that.
var rowsWant = zerocopy.Want{DType: dlpack.Float32Type, NDim: 2, Order: zerocopy.COrder, Writable: true}

// normalizeRows is plain Go over the tensor's memory: no copy in, none out.
func normalizeRows(v *zerocopy.View) (*zerocopy.View, error) {
	if err := rowsWant.Check(v); err != nil { // every mismatch in one message
		return nil, pybridge.WithCode(pybridge.TypeError, fmt.Errorf("userlib: normalize_rows: %w", err))
	}
	xs, err := zerocopy.HostSlice[float32](v)
	if err != nil {
		return nil, pybridge.WithCode(pybridge.BufferError, err)
	}
	shape := v.Shape()
	rows, cols := int(shape[0]), int(shape[1])
	norms, err := pybridge.Allocate(dlpack.CPUDevice, dlpack.Float32Type, []int64{int64(rows)}, false)
	if err != nil {
		return nil, err
	}
	ns, _ := zerocopy.HostSlice[float32](norms)
	for r := 0; r < rows; r++ {
		row := xs[r*cols : (r+1)*cols]
		var ss float64
		for _, x := range row {
			ss += float64(x) * float64(x)
		}
		n := math.Sqrt(ss)
		ns[r] = float32(n)
		if n > 0 {
			for i := range row {
				row[i] = float32(float64(row[i]) / n)
			}
		}
	}
	return norms, nil
}

func main() {}
