package pybridge

import (
	"math"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func mustAlloc(t testing.TB, d dlpack.Device, dt dlpack.DataType, shape ...int64) *zerocopy.View {
	t.Helper()
	v, err := Allocate(d, dt, shape, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func tensorOf(v *zerocopy.View) *Tensor { return &Tensor{View: v} }

// values reads a view's elements as float64 (the real part), in C order.
func values(t testing.TB, v *zerocopy.View) []float64 {
	t.Helper()
	out := make([]float64, v.Len())
	ov, err := zerocopy.FromSlice(out, v.Shape()...)
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if err := zerocopy.Convert(ov, v, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestF16Conversions(t *testing.T) {
	cases := []struct {
		f    float32
		bits uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {5.960464477539063e-08, 0x0001}, // smallest subnormal
		{6.097555160522461e-05, 0x03ff}, {0.333251953125, 0x3555},
	}
	for _, c := range cases {
		if got := uint16(zerocopy.Float16From(c.f)); got != c.bits {
			t.Errorf("Float16From(%v) = %#04x, want %#04x", c.f, got, c.bits)
		}
		if c.f != 1e6 {
			if back := zerocopy.Float16(c.bits).Float32(); back != c.f {
				t.Errorf("Float16(%#04x).Float32() = %v, want %v", c.bits, back, c.f)
			}
		}
	}
	if !math.IsNaN(float64(zerocopy.Float16From(float32(math.NaN())).Float32())) {
		t.Error("NaN does not survive float16")
	}
	// Every float16 survives a round trip through float32.
	for h := 0; h < 1<<16; h++ {
		f := zerocopy.Float16(h).Float32()
		if f != f { // NaN
			continue
		}
		if back := uint16(zerocopy.Float16From(f)); back != uint16(h) {
			t.Fatalf("round trip of %#04x gives %#04x", h, back)
		}
	}
	if got := uint16(zerocopy.BFloat16From(1.0 / 3)); got != 0x3eab {
		t.Errorf("BFloat16From(1/3) = %#04x, want 0x3eab", got)
	}
	if got := uint16(zerocopy.BFloat16From(float32(math.NaN()))); got&0x7fff <= 0x7f80 {
		t.Errorf("bfloat16 NaN lost: %#04x", got)
	}
}

func TestHostFillSumEveryDType(t *testing.T) {
	types := []dlpack.DataType{dlpack.BoolType, dlpack.Int8Type, dlpack.Int16Type, dlpack.Int32Type,
		dlpack.Int64Type, dlpack.Uint8Type, dlpack.Uint16Type, dlpack.Uint32Type, dlpack.Uint64Type,
		dlpack.Float16Type, dlpack.Bfloat16Type, dlpack.Float32Type, dlpack.Float64Type,
		dlpack.Complex64Type, dlpack.Complex128Type}
	for _, dt := range types {
		t.Run(dt.String(), func(t *testing.T) {
			v := mustAlloc(t, dlpack.CPUDevice, dt, 3, 4)
			tv := tensorOf(v)
			if err := Fill(tv, zerocopy.Int(1)); err != nil {
				t.Fatal(err)
			}
			s, err := Sum(tv)
			if err != nil {
				t.Fatal(err)
			}
			if z := s.Complex128(); z != 12 {
				t.Fatalf("sum = %v, want 12", s)
			}
			// A strided view: every other column.
			col, err := v.Slice(1, 0, zerocopy.Omit, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer col.Close()
			if err := Fill(tensorOf(col), zerocopy.Int(0)); err != nil {
				t.Fatal(err)
			}
			if s, _ := Sum(tv); s.Complex128() != 6 {
				t.Fatalf("sum after strided fill = %v, want 6", s)
			}
		})
	}
}

func TestIntegerSumsAreExact(t *testing.T) {
	v := mustAlloc(t, dlpack.CPUDevice, dlpack.Int64Type, 3)
	if err := Fill(tensorOf(v), zerocopy.Int(math.MaxInt64/4+1)); err != nil {
		t.Fatal(err)
	}
	s, _ := Sum(tensorOf(v))
	if want := 3 * (int64(math.MaxInt64/4) + 1); s.Kind != zerocopy.IntValue || s.I != want {
		t.Fatalf("sum = %+v, want %d", s, want)
	}
	u := mustAlloc(t, dlpack.CPUDevice, dlpack.Uint64Type, 1)
	Fill(tensorOf(u), zerocopy.Uint(math.MaxUint64))
	if s, _ := Sum(tensorOf(u)); s.Kind != zerocopy.UintValue || s.U != math.MaxUint64 {
		t.Fatalf("uint64 sum = %+v", s)
	}
}

func TestHostCopyConvertsAndHandlesOverlap(t *testing.T) {
	src, err := Arange(6, dlpack.Float64Type, dlpack.CPUDevice)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := mustAlloc(t, dlpack.CPUDevice, dlpack.Int16Type, 6)
	if err := CopyInto(tensorOf(dst), tensorOf(src), CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float64{0, 1, 2, 3, 4, 5}, values(t, dst)); diff != "" {
		t.Fatalf("converted copy (-want +got):\n%s", diff)
	}
	rev, _ := dst.Slice(0, zerocopy.Omit, zerocopy.Omit, -1)
	defer rev.Close()
	if err := CopyInto(tensorOf(dst), tensorOf(rev), CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float64{5, 4, 3, 2, 1, 0}, values(t, dst)); diff != "" {
		t.Fatalf("overlapping reversed copy (-want +got):\n%s", diff)
	}
	other := mustAlloc(t, dlpack.CPUDevice, dlpack.Int16Type, 5)
	if err := CopyInto(tensorOf(other), tensorOf(dst), CopyOptions{}); CodeOf(err) != ValueError {
		t.Fatalf("shape mismatch: err %v, want ValueError", err)
	}
}

// The messages are zerocopy.Want's, as a Go function's checks give them
// (one format): the method, the tensor, what it wants, what came, and
// every mismatch.
func TestCopyIntoMismatch(t *testing.T) {
	a := mustAlloc(t, dlpack.CPUDevice, dlpack.Float32Type, 3)
	defer a.Close()
	b := mustAlloc(t, dlpack.CPUDevice, dlpack.Float32Type, 4)
	defer b.Close()
	err := CopyInto(tensorOf(a), tensorOf(b), CopyOptions{})
	if CodeOf(err) != ValueError || err.Error() != "dlbridge: copy_: argument self: want [4] writable; got float32 [3] C/F cpu writable: shape[0] (3 != 4)" {
		t.Errorf("copy_ between shapes [3] and [4]: %v", err)
	}
	err = CopyInto(tensorOf(b.AsReadOnly()), tensorOf(a), CopyOptions{})
	if CodeOf(err) != ValueError || err.Error() != "dlbridge: copy_: argument self: want [3] writable; got float32 [4] C/F cpu read-only: shape[0] (4 != 3), read-only" {
		t.Errorf("copy_ into a read-only tensor of another shape: %v", err)
	}
}

func TestReadOnlyAndUnsupported(t *testing.T) {
	v := mustAlloc(t, dlpack.CPUDevice, dlpack.Float32Type, 2)
	ro := v.AsReadOnly()
	defer ro.Close()
	if err := Fill(tensorOf(ro), zerocopy.Float(1)); CodeOf(err) != ValueError || err.Error() != "dlbridge: fill_: argument self: want writable; got float32 [2] C/F cpu read-only: read-only" {
		t.Fatalf("fill of read-only: %v", err)
	}
	f8 := mustAlloc(t, dlpack.CPUDevice, dlpack.DataType{Code: dlpack.Float8E4M3FN, Bits: 8, Lanes: 1}, 2)
	if _, err := Sum(tensorOf(f8)); CodeOf(err) != TypeError {
		t.Fatalf("sum of float8: %v", err)
	}
}

func TestAllocateErrors(t *testing.T) {
	cases := []struct {
		d     dlpack.Device
		dt    dlpack.DataType
		shape []int64
		code  Code
	}{
		{dlpack.CPUDevice, dlpack.Float32Type, []int64{-1}, ValueError},
		{dlpack.CPUDevice, dlpack.Float32Type, make([]int64, 65), ValueError},
		{dlpack.CPUDevice, dlpack.DataType{Code: 99, Bits: 8, Lanes: 1}, nil, TypeError},
		{dlpack.Device{Type: dlpack.CPU, ID: 3}, dlpack.Float32Type, nil, ValueError},
		{dlpack.Device{Type: dlpack.Metal}, dlpack.Float32Type, nil, ValueError},
		{dlpack.CPUDevice, dlpack.Float64Type, []int64{1 << 40, 1 << 40}, ValueError},
	}
	for _, c := range cases {
		if _, err := Allocate(c.d, c.dt, c.shape, false); CodeOf(err) != c.code {
			t.Errorf("Allocate(%v, %v, %v): err %v, want %v", c.d, c.dt, c.shape, err, c.code)
		}
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	v := mustAlloc(t, dlpack.CPUDevice, dlpack.Float32Type, 2, 3)
	tv := tensorOf(v)
	for _, versioned := range []bool{false, true} {
		before := DeleterCalls()
		p, err := Export(tv, ExportRequest{Versioned: versioned})
		if err != nil {
			t.Fatal(err)
		}
		w, err := Import(p, versioned, true)
		if err != nil {
			t.Fatal(err)
		}
		if w.Ptr() != v.Ptr() || !cmp.Equal(w.Shape(), v.Shape()) {
			t.Fatalf("round trip changed the view: %v vs %v", w, v)
		}
		w.Close()
		if got := DeleterCalls() - before; got != 1 {
			t.Fatalf("deleter calls after close = %d, want 1", got)
		}
	}
}

func TestExportRequests(t *testing.T) {
	v := mustAlloc(t, dlpack.CPUDevice, dlpack.Int32Type, 4)
	tv := tensorOf(v)
	ro := v.AsReadOnly()
	rev, _ := v.Slice(0, zerocopy.Omit, zerocopy.Omit, -1)
	defer rev.Close()
	cuda0 := dlpack.CUDADevice(0)
	cases := []struct {
		name string
		t    *Tensor
		req  ExportRequest
		code Code
	}{
		{"legacy read-only", tensorOf(ro), ExportRequest{}, BufferError},
		{"legacy negative strides", tensorOf(rev), ExportRequest{}, BufferError},
		{"cpu stream", tv, ExportRequest{Versioned: true, HasStream: true, Stream: 7}, ValueError},
		{"no copy across devices", tv, ExportRequest{Versioned: true, HasDevice: true, Device: cuda0, Copy: CopyNever}, BufferError},
		{"cpu:0 as asked", tv, ExportRequest{Versioned: true, HasDevice: true, Device: dlpack.CPUDevice, Copy: CopyNever}, OK},
		{"versioned read-only", tensorOf(ro), ExportRequest{Versioned: true}, OK},
		{"no sync", tv, ExportRequest{HasStream: true, Stream: -1}, OK},
	}
	for _, c := range cases {
		p, err := Export(c.t, c.req)
		if CodeOf(err) != c.code {
			t.Errorf("%s: err %v, want %v", c.name, err, c.code)
		}
		if p != nil {
			if c.req.Versioned {
				if c.name == "versioned read-only" {
					if f := (*dlpack.DLManagedTensorVersioned)(p).Flags; f&dlpack.FlagReadOnly == 0 {
						t.Errorf("%s: flags %v lack READ_ONLY", c.name, f)
					}
				}
				dlpack.DeleteVersioned(p)
			} else {
				dlpack.DeleteLegacy(p)
			}
		}
	}
}

func TestExportCopy(t *testing.T) {
	v, _ := Arange(3, dlpack.Float64Type, dlpack.CPUDevice)
	defer v.Close()
	p, err := Export(tensorOf(v), ExportRequest{Versioned: true, Copy: CopyAlways})
	if err != nil {
		t.Fatal(err)
	}
	m := (*dlpack.DLManagedTensorVersioned)(p)
	if m.Flags&dlpack.FlagIsCopied == 0 || uintptr(m.DLTensor.Data) == v.Ptr() {
		t.Fatalf("copy=True gave flags %v data %p (source %#x)", m.Flags, m.DLTensor.Data, v.Ptr())
	}
	// Sound: Data is the export's host copy of 3 float64s, alive until the
	// deleter runs below.
	got := unsafe.Slice((*float64)(m.DLTensor.Data), 3)
	if !cmp.Equal(got, []float64{0, 1, 2}) {
		t.Fatalf("copied data %v", got)
	}
	dlpack.DeleteVersioned(p)
}

func TestTensorHandles(t *testing.T) {
	before := LiveTensors()
	v, _ := Allocate(dlpack.CPUDevice, dlpack.Uint8Type, []int64{8}, true)
	h := NewTensor(v)
	tv, err := Borrow(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := CloseTensor(h); err != nil {
		t.Fatal(err)
	}
	// The borrow keeps the memory: still usable until Return.
	if err := Fill(tv, zerocopy.Int(3)); err != nil && CodeOf(err) != ValueError {
		t.Fatal(err)
	}
	if !v.Owner().Alive() {
		t.Fatal("memory freed while borrowed")
	}
	tv.Return()
	if v.Owner().Alive() {
		t.Fatal("memory kept after the last reference")
	}
	if _, err := Borrow(h); CodeOf(err) != ValueError {
		t.Fatalf("Borrow of a closed handle: %v", err)
	}
	if err := CloseTensor(h); CodeOf(err) != ValueError {
		t.Fatalf("double close: %v", err)
	}
	if LiveTensors() != before {
		t.Fatalf("live tensors %d, want %d", LiveTensors(), before)
	}
}

func TestPyInitOutsidePython(t *testing.T) {
	if PyInit() {
		t.Fatal("PyInit found CPython in a Go test binary")
	}
}

func BenchmarkExportImport(b *testing.B) {
	v, _ := Allocate(dlpack.CPUDevice, dlpack.Float32Type, []int64{4, 4}, false)
	defer v.Close()
	tv := tensorOf(v)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p, err := Export(tv, ExportRequest{Versioned: true})
		if err != nil {
			b.Fatal(err)
		}
		w, err := Import(p, true, true)
		if err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
}
