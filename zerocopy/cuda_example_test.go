package zerocopy_test

import (
	"fmt"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Allocate a device tensor, fill it from Go memory and read a column block
// back (a 2D pitched copy). The copies order themselves after each other's
// writes with events; the Go destination holds the data on return.
func ExampleCopyCUDA() {
	host := make([]float32, 64*64)
	for i := range host {
		host[i] = float32(i)
	}
	src, _ := zerocopy.FromSlice(host, 64, 64)
	defer src.Close()
	dev, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 64, 64)
	if err != nil {
		fmt.Println(err) // e.g. no CUDA driver
		return
	}
	defer dev.Close()
	if err := zerocopy.CopyCUDA(dev, src, nil); err != nil {
		fmt.Println(err)
		return
	}
	block, _ := dev.Slice(1, 16, 48, 1) // columns 16..47: float32[64 32], row stride 64; no Close
	out, _ := zerocopy.FromSlice(make([]float32, 64*32), 64, 32)
	defer out.Close()
	if err := zerocopy.CopyCUDA(out, block, nil); err != nil {
		fmt.Println(err)
		return
	}
	x, _ := zerocopy.At[float32](out, 1, 0)
	fmt.Println(x) // 80: row 1, column 16
}

// A Copier with the staged path forced and bigger staging buffers; the
// path it took is returned.
func ExampleCopier_CopyVia() {
	c := zerocopy.NewCopier(zerocopy.CopierOptions{ChunkBytes: 16 << 20, Workers: 8})
	defer c.Close()
	buf := make([]byte, 256<<20)
	src, _ := zerocopy.FromBytes(buf, dlpack.Uint8Type)
	defer src.Close()
	dev, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, int64(len(buf)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	path, err := c.CopyVia(dev, src, nil, zerocopy.PathStaged)
	fmt.Println(path, err)
}

// Check a device view that came from elsewhere against the driver's idea
// of the allocation before trusting it.
func ExampleVerifyCUDA() {
	ptr := uintptr(0) // e.g. a pointer handed over by a C++ library
	v, err := zerocopy.Wrap(zerocopy.Spec{Ptr: ptr, Device: dlpack.CUDADevice(0), DType: dlpack.Float32Type,
		Shape: []int64{1024}, Foreign: true}, zerocopy.NewOwner(nil, "from the engine"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	if err := zerocopy.VerifyCUDA(v); err != nil {
		fmt.Println(err) // names the bound that is violated
	}
	kind, dev, _ := zerocopy.ClassifyPointer(ptr)
	fmt.Println(kind, dev)
}

// Order a copy after a kernel that some other library queued on its own
// stream: record the stream on the view, and the copy waits with an event.
func ExampleView_SetStream() {
	ctx, err := cuda.Retain(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Release()
	theirs, _ := ctx.NewStream(cuda.StreamNonBlocking, 0)
	defer theirs.Destroy()
	dev, _ := zerocopy.AllocCUDA(0, dlpack.Float32Type, 1<<20)
	defer dev.Close()
	// ... a kernel writing dev is queued on theirs ...
	dev.SetStream(theirs.Handle())
	out, _ := zerocopy.FromSlice(make([]float32, 1<<20))
	defer out.Close()
	fmt.Println(zerocopy.CopyCUDA(out, dev, nil)) // waits for theirs, not for the device
}
