package zerocopy_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The tests in this file need a real GPU: they run with DLBRIDGE_GPU=1 (the
// GPU machine; see docs/development.md) and skip otherwise. Every other CUDA test
// of the package runs there too, against the real driver instead of the
// fake one: TestTransferPathsSizes and TestCopyCUDALayouts cover every copy
// path, TestStreamOrdering the event wait with the spinning kernel.

func needGPU(t testing.TB) {
	t.Helper()
	if os.Getenv("DLBRIDGE_GPU") != "1" {
		t.Skip("GPU test: set DLBRIDGE_GPU=1 on a machine with a GPU")
	}
	if !cuda.Available() {
		t.Fatalf("DLBRIDGE_GPU=1 but no usable driver: %v", cuda.Init())
	}
}

// TestGPUVerifyRealAllocations checks VerifyCUDA against allocations of
// the real driver: inside, one element past the end, and a device other
// than the one the memory is on.
func TestGPUVerifyRealAllocations(t *testing.T) {
	needGPU(t)
	v, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 1000)
	v = mustView(t, v, err)
	if err := zerocopy.VerifyCUDA(v); err != nil {
		t.Fatalf("whole allocation: %v", err)
	}
	inner, err := v.Slice(0, 10, 990, 3)
	inner = mustView(t, inner, err)
	if err := zerocopy.VerifyCUDA(inner); err != nil {
		t.Fatalf("strided inside: %v", err)
	}
	// The driver rounds allocations up (to 512 bytes or more), so "past the
	// end" is measured against the range it reports.
	_, size, err := cuda.MemGetAddressRange(cuda.DevicePtr(v.Ptr()))
	if err != nil {
		t.Fatal(err)
	}
	past, err := zerocopy.Wrap(zerocopy.Spec{Ptr: v.Ptr(), Device: dlpack.CUDADevice(0), DType: dlpack.Float32Type,
		Shape: []int64{int64(size)/4 + 1}}, zerocopy.NewOwner(nil, "past"))
	past = mustView(t, past, err)
	err = zerocopy.VerifyCUDA(past)
	if !errors.Is(err, zerocopy.ErrNotInAllocation) || !strings.Contains(err.Error(), "ends 4 bytes past") {
		t.Fatalf("one element past the end: %v", err)
	}
	wrong, err := zerocopy.Wrap(zerocopy.Spec{Ptr: v.Ptr(), Device: dlpack.CUDADevice(1), DType: dlpack.Float32Type,
		Shape: []int64{10}}, zerocopy.NewOwner(nil, "wrong"))
	wrong = mustView(t, wrong, err)
	if err := zerocopy.VerifyCUDA(wrong); !errors.Is(err, zerocopy.ErrWrongDevice) {
		t.Fatalf("claimed cuda:1: %v", err)
	}
	kind, dev, err := zerocopy.ClassifyPointer(v.Ptr())
	if err != nil || kind != zerocopy.PointerDevice || dev != 0 {
		t.Fatalf("ClassifyPointer: %v %d %v", kind, dev, err)
	}
}

// TestGPULargeTransfers moves 64 MiB through every path and direction,
// with the default options (real chunk sizes and worker counts).
func TestGPULargeTransfers(t *testing.T) {
	needGPU(t)
	n := 64 << 20
	src := pattern(n, 11)
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, int64(n))
	d = mustView(t, d, err)
	c := newCopier(t, zerocopy.CopierOptions{})
	for _, path := range forcedPaths {
		out := make([]byte, n)
		h := goView(t, src, dlpack.Uint8Type)
		if _, err := c.CopyVia(d, h, nil, path); err != nil {
			t.Fatalf("%v H2D: %v", path, err)
		}
		if _, err := c.CopyVia(goView(t, out, dlpack.Uint8Type), d, nil, path); err != nil {
			t.Fatalf("%v D2H: %v", path, err)
		}
		if i := firstDiff(out, src); i != n {
			t.Fatalf("%v: differs at byte %d", path, i)
		}
		if err := zerocopy.UnregisterHost(h); err != nil {
			t.Fatal(err)
		}
	}
}
