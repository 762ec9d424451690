package fakemem_test

import (
	"errors"
	"fmt"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
)

// A fake cuda:0 tensor goes through view operations; it is freed exactly
// once, when the last view is closed, and a late second free is caught.
func ExampleTracker_View() {
	tr := fakemem.New(fakemem.Options{HostAccess: true})
	v, err := tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 2, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	sel, _ := v.Select(1, 2)         // borrows v's reference
	col, _ := sel.Retain()           // holds one of its own
	zerocopy.Set[float32](col, 5, 1) // allowed: Options.HostAccess
	ptr := v.Ptr()
	v.Close()
	fmt.Println(tr.Stats().Frees) // col still holds the memory
	col.Close()
	fmt.Println(tr.Stats().Frees)
	fmt.Println(errors.Is(tr.Free(ptr), fakemem.ErrDoubleFree))
	fmt.Println(tr.Close())
	// Output:
	// 0
	// 1
	// true
	// <nil>
}
