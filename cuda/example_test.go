package cuda_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/dlbridge/dlbridge/cuda"
)

// The examples run against whatever driver the tests use: the fake built
// from testdata/fakecuda, or the real one with DLBRIDGE_GPU=1.

func Example() {
	ctx, err := cuda.Retain(0)
	if errors.Is(err, cuda.ErrNoDriver) {
		fmt.Println("no CUDA driver:", err)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer ctx.Release()

	in := []float32{1, 2, 3, 4}
	p, err := ctx.MemAlloc(int64(4 * len(in)))
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.MemFree(p)
	if err := ctx.MemcpyHtoD(p, cuda.SliceBytes(in)); err != nil {
		log.Fatal(err)
	}
	out := make([]float32, len(in))
	if err := ctx.MemcpyDtoH(cuda.SliceBytes(out), p); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output: [1 2 3 4]
}

// Kernels run on a stream; their errors surface when the stream is
// synchronized.
func ExampleContext_LoadKernels() {
	ctx, err := cuda.Retain(0)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Release()
	k, err := ctx.LoadKernels()
	if err != nil {
		log.Fatal(err)
	}
	defer k.Unload()
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Destroy()

	const n = 6
	p, err := s.MemAllocAsync(4 * n)
	if err != nil {
		log.Fatal(err)
	}
	k.IotaF32(s, p, n, 0, 1) // 0 1 2 3 4 5
	k.ScaleF32(s, p, n, 10)  // 0 10 20 ...
	out := make([]float32, n)
	s.MemcpyDtoHAsync(cuda.SliceBytes(out), p)
	s.MemFreeAsync(p)
	if err := s.Synchronize(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output: [0 10 20 30 40 50]
}

// An event orders work across streams without blocking the host: the copy
// on b waits for the kernel on a.
func ExampleStream_WaitEvent() {
	ctx, err := cuda.Retain(0)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Release()
	k, err := ctx.LoadKernels()
	if err != nil {
		log.Fatal(err)
	}
	defer k.Unload()
	a, _ := ctx.NewStream(cuda.StreamNonBlocking, 0)
	defer a.Destroy()
	b, _ := ctx.NewStream(cuda.StreamNonBlocking, 0)
	defer b.Destroy()
	done, _ := ctx.NewEvent(0)
	defer done.Destroy()
	pinned, err := ctx.MemAllocHost(16, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer pinned.Free()

	p, _ := ctx.MemAlloc(16)
	defer ctx.MemFree(p)
	k.FillF32(a, p, 4, 7)
	done.Record(a)
	b.WaitEvent(done)
	b.MemcpyDtoHAsync(pinned.Bytes(), p)
	if err := b.Synchronize(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(pinned.Bytes()[:4]) // 7.0f is 0x40e00000
	// Output: [0 0 224 64]
}

// PointerGetAttributes tells device, managed and pinned memory apart, and
// says which allocation an address belongs to.
func ExamplePointerGetAttributes() {
	ctx, err := cuda.Retain(0)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Release()
	p, err := ctx.MemAlloc(1 << 10)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.MemFree(p)
	a, err := cuda.PointerGetAttributes(p + 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Kind(), a.DeviceOrdinal, a.RangeStart == p)
	_, err = cuda.VerifyDeviceRange(p+1000, 100, 0)
	fmt.Println(errors.Is(err, cuda.ErrInvalidValue))
	// Output:
	// device 0 true
	// true
}

// Registering a Go buffer makes copies from and to it run at pinned speed.
func ExampleRegisterSlice() {
	ctx, err := cuda.Retain(0)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Release()
	buf := make([]int32, 1024)
	reg, err := cuda.RegisterSlice(ctx, buf, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()
	s, _ := ctx.NewStream(0, 0)
	defer s.Destroy()
	p, _ := ctx.MemAlloc(4 * 1024)
	defer ctx.MemFree(p)
	s.MemsetD32Async(p, 42, 1024)
	s.MemcpyDtoHAsync(cuda.SliceBytes(buf), p) // async for real: buf is pinned
	s.Synchronize()
	fmt.Println(buf[0], buf[1023])
	// Output: 42 42
}
