package dlpack_test

import (
	"fmt"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
)

type printRelease struct{}

func (printRelease) Release() { fmt.Println("memory released") }

// Export a Go buffer as a DLManagedTensorVersioned, take it over again as a
// consumer would, and release it: the owner's release runs exactly once.
func Example() {
	buf := make([]float32, 6)
	desc := dlpack.Desc{
		Data:   uintptr(unsafe.Pointer(&buf[0])),
		Device: dlpack.CPUDevice,
		DType:  dlpack.Float32Type,
		Shape:  []int64{2, 3},
	}
	p, err := dlpack.Export(&desc, printRelease{})
	if err != nil {
		fmt.Println(err)
		return
	}
	im, err := dlpack.ImportVersioned(p) // what a consumer does with p
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(im.DType, im.Shape, im.Strides, im.Data == desc.Data)
	im.Release()
	im.Release() // once only
	fmt.Println("live exports:", dlpack.LiveExports())
	// Output:
	// float32 [2 3] [3 1] true
	// memory released
	// live exports: 0
}

// A tensor that breaks the rules is refused with an error naming the field;
// its deleter still runs.
func ExampleImported_FromVersioned() {
	shape := []int64{2, -3}
	t := &dlpack.DLManagedTensorVersioned{
		Version: dlpack.CurrentVersion,
		DLTensor: dlpack.DLTensor{
			NDim: 2, DType: dlpack.Float32Type, Device: dlpack.CPUDevice,
			Shape: &shape[0], Strides: &shape[0],
		},
	}
	var im dlpack.Imported
	err := im.FromVersioned(unsafe.Pointer(t), nil)
	fmt.Println(err)
	// Output:
	// dlpack: dl_tensor.shape[1]: -3 is negative
}
