package pybridge

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// fakeGPU is a gpuBackend over host memory: "device" allocations are Go
// byte slices, copies are memmoves, and it records what was asked of it.
// It exercises the CUDA paths of pybridge without a driver.
type fakeGPU struct {
	mu     sync.Mutex
	allocs map[uintptr][]byte
	waits  [][2]uintptr
	syncs  int
	frees  int
}

func withFakeGPU(t *testing.T) *fakeGPU {
	f := &fakeGPU{allocs: map[uintptr][]byte{}}
	old := gpu
	gpu = f
	t.Cleanup(func() { gpu = old })
	return f
}

func (f *fakeGPU) DeviceCount() int            { return 2 }
func (f *fakeGPU) Unavailable() error          { return nil }
func (f *fakeGPU) WorkStream(id int32) uintptr { return 1 }
func (f *fakeGPU) PointerDevice(p uintptr) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for base, b := range f.allocs {
		if p >= base && p < base+uintptr(len(b)) {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("fake: %#x unknown", p)
}

func (f *fakeGPU) Alloc(id int32, n int64) (uintptr, error) {
	b := make([]byte, n+1)
	p := uintptr(unsafe.Pointer(&b[0]))
	f.mu.Lock()
	f.allocs[p] = b // keeps the slice alive (Go's heap does not move it)
	f.mu.Unlock()
	return p, nil
}

func (f *fakeGPU) Free(id int32, p uintptr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.allocs[p]; !ok {
		panic(fmt.Sprintf("fake: free of unknown %#x", p))
	}
	delete(f.allocs, p)
	f.frees++
}

func (f *fakeGPU) CopyHtoD(id int32, dst uintptr, src []byte, s uintptr) error {
	copy(unsafeBytes(at(dst, 0), int64(len(src))), src)
	return nil
}

func (f *fakeGPU) CopyDtoH(id int32, dst []byte, src uintptr, s uintptr) error {
	copy(dst, unsafeBytes(at(src, 0), int64(len(dst))))
	return nil
}

func (f *fakeGPU) CopyDtoD(id int32, dst, src uintptr, n int64, s uintptr) error {
	copy(unsafeBytes(at(dst, 0), n), unsafeBytes(at(src, 0), n))
	return nil
}

func (f *fakeGPU) Memset8(id int32, dst uintptr, b byte, n int64, s uintptr) error {
	m := unsafeBytes(at(dst, 0), n)
	for i := range m {
		m[i] = b
	}
	return nil
}

func (f *fakeGPU) Sync(id int32, s uintptr) error {
	f.mu.Lock()
	f.syncs++
	f.mu.Unlock()
	return nil
}

func (f *fakeGPU) Wait(id int32, producer, consumer uintptr) error {
	f.mu.Lock()
	f.waits = append(f.waits, [2]uintptr{producer, consumer})
	f.mu.Unlock()
	return nil
}

func TestGPUOpsOnFakeDevice(t *testing.T) {
	f := withFakeGPU(t)
	cuda0 := dlpack.CUDADevice(0)
	src, err := Arange(12, dlpack.Float32Type, cuda0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Device() != cuda0 {
		t.Fatalf("arange on %v", src.Device())
	}
	ts := tensorOf(src)
	if s, err := Sum(ts); err != nil || s.F != 66 {
		t.Fatalf("Sum = %v, %v; want 66", s, err)
	}
	// Contiguous fills: a memset for zero, a host pattern otherwise.
	if err := Fill(ts, Float(0)); err != nil {
		t.Fatal(err)
	}
	if ts.Stream() != 1 {
		t.Fatalf("pending stream after fill = %d, want the work stream", ts.Stream())
	}
	if err := Fill(ts, Float(2)); err != nil {
		t.Fatal(err)
	}
	if s, _ := Sum(ts); s.F != 24 {
		t.Fatalf("sum after fill = %v", s)
	}
	// Strided fill goes through host staging and keeps the gaps.
	odd, _ := src.Slice(0, 1, zerocopy.Omit, 2)
	defer odd.Close()
	if err := Fill(tensorOf(odd), Float(-1)); err != nil {
		t.Fatal(err)
	}
	host, err := CopyToDevice(src, dlpack.CPUDevice)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	want := []float64{2, -1, 2, -1, 2, -1, 2, -1, 2, -1, 2, -1}
	if diff := cmp.Diff(want, values(t, host)); diff != "" {
		t.Fatalf("after strided fill (-want +got):\n%s", diff)
	}
	// Strided, converting copy device -> device.
	dst := mustAlloc(t, cuda0, dlpack.Float64Type, 6)
	if err := CopyInto(tensorOf(dst), tensorOf(odd)); err != nil {
		t.Fatal(err)
	}
	back, _ := CopyToDevice(dst, dlpack.CPUDevice)
	defer back.Close()
	if diff := cmp.Diff([]float64{-1, -1, -1, -1, -1, -1}, values(t, back)); diff != "" {
		t.Fatalf("strided device copy (-want +got):\n%s", diff)
	}
	// Host -> device contiguous.
	h, _ := Arange(6, dlpack.Float64Type, dlpack.CPUDevice)
	defer h.Close()
	if err := CopyInto(tensorOf(dst), tensorOf(h)); err != nil {
		t.Fatal(err)
	}
	if s, _ := Sum(tensorOf(dst)); s.F != 15 {
		t.Fatalf("sum after H2D = %v", s)
	}
	if f.syncs == 0 {
		t.Fatal("no stream synchronization for device-to-host results")
	}
}

func TestExportOrdersPendingWrites(t *testing.T) {
	f := withFakeGPU(t)
	v := mustAlloc(t, dlpack.CUDADevice(0), dlpack.Float32Type, 4)
	tv := tensorOf(v)
	if err := Fill(tv, Float(1)); err != nil { // pending on the work stream (1)
		t.Fatal(err)
	}
	cases := []struct {
		req   ExportRequest
		waits [][2]uintptr
		code  Code
	}{
		{ExportRequest{Versioned: true}, nil, OK},                              // None: legacy default, same stream
		{ExportRequest{Versioned: true, HasStream: true, Stream: 1}, nil, OK},  // same stream
		{ExportRequest{Versioned: true, HasStream: true, Stream: -1}, nil, OK}, // no sync asked
		{ExportRequest{Versioned: true, HasStream: true, Stream: 0x7f00}, [][2]uintptr{{1, 0x7f00}}, OK},
		{ExportRequest{Versioned: true, HasStream: true, Stream: 2}, [][2]uintptr{{1, 2}}, OK},
		{ExportRequest{Versioned: true, HasStream: true, Stream: 0}, nil, ValueError}, // ambiguous
	}
	for _, c := range cases {
		f.waits = nil
		p, err := Export(tv, c.req)
		if CodeOf(err) != c.code {
			t.Errorf("stream %d: err %v, want %v", c.req.Stream, err, c.code)
		}
		if !cmp.Equal(f.waits, c.waits) {
			t.Errorf("stream %d: waits %v, want %v", c.req.Stream, f.waits, c.waits)
		}
		if p != nil {
			dlpack.DeleteVersioned(p)
		}
	}
}

func TestExportToOtherDeviceCopies(t *testing.T) {
	withFakeGPU(t)
	v, _ := Arange(4, dlpack.Int32Type, dlpack.CPUDevice)
	defer v.Close()
	p, err := Export(tensorOf(v), ExportRequest{Versioned: true, HasDevice: true, Device: dlpack.CUDADevice(1)})
	if err != nil {
		t.Fatal(err)
	}
	m := (*dlpack.DLManagedTensorVersioned)(p)
	if m.DLTensor.Device != dlpack.CUDADevice(1) || m.Flags&dlpack.FlagIsCopied == 0 {
		t.Fatalf("export to cuda:1 gave device %v flags %v", m.DLTensor.Device, m.Flags)
	}
	w, err := Import(p, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, _ := Sum(tensorOf(w)); s.I != 6 {
		t.Fatalf("sum of the copy = %v", s)
	}
}

func TestWaitForProducer(t *testing.T) {
	f := withFakeGPU(t)
	if err := WaitForProducer(dlpack.CUDADevice(0), 1); err != nil || len(f.waits) != 0 {
		t.Fatalf("same stream: %v %v", err, f.waits)
	}
	if err := WaitForProducer(dlpack.CUDADevice(0), 0x1234); err != nil || !cmp.Equal(f.waits, [][2]uintptr{{0x1234, 1}}) {
		t.Fatalf("other stream: %v %v", err, f.waits)
	}
}

func TestCUDAWithoutDriver(t *testing.T) {
	old := gpu
	gpu = nil
	defer func() { gpu = old }()
	if _, err := Allocate(dlpack.CUDADevice(0), dlpack.Float32Type, []int64{2}, false); CodeOf(err) != RuntimeError {
		t.Fatalf("Allocate on cuda without a driver: %v", err)
	}
	if CUDAAvailable() || WorkStream(0) != 1 {
		t.Fatal("no driver, yet CUDA looks available")
	}
}
