package zerocopy_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

var numericTypes = []dlpack.DataType{dlpack.BoolType, dlpack.Int8Type, dlpack.Int16Type, dlpack.Int32Type,
	dlpack.Int64Type, dlpack.Uint8Type, dlpack.Uint16Type, dlpack.Uint32Type, dlpack.Uint64Type,
	dlpack.Float16Type, dlpack.Bfloat16Type, dlpack.Float32Type, dlpack.Float64Type,
	dlpack.Complex64Type, dlpack.Complex128Type}

// TestFillSumEveryDType fills a 3x4 tensor of every numeric dtype on the
// host and on the (fake) device, then every other column, and sums.
func TestFillSumEveryDType(t *testing.T) {
	devs := []string{"host"}
	if fakeErr == nil {
		devs = append(devs, "cuda")
	}
	for _, where := range devs {
		for _, dt := range numericTypes {
			t.Run(where+"/"+dt.String(), func(t *testing.T) {
				var v *zerocopy.View
				var err error
				if where == "host" {
					v, err = zerocopy.FromBytes(make([]byte, 12*dt.ItemSize()), dt, 3, 4)
				} else {
					needCUDA(t)
					v, err = zerocopy.AllocCUDA(0, dt, 3, 4)
				}
				v = mustView(t, v, err)
				if err := zerocopy.Fill(v, zerocopy.Int(1), nil); err != nil {
					t.Fatal(err)
				}
				s, err := zerocopy.Sum(v, nil)
				if err != nil || s.Complex128() != 12 {
					t.Fatalf("sum = %v, %v; want 12", s, err)
				}
				col, err := v.Slice(1, 0, zerocopy.Omit, 2)
				col = mustView(t, col, err)
				if err := zerocopy.Fill(col, zerocopy.Float(0), nil); err != nil {
					t.Fatal(err)
				}
				if s, err := zerocopy.Sum(v, nil); err != nil || s.Complex128() != 6 {
					t.Fatalf("sum after a strided fill = %v, %v; want 6", s, err)
				}
				if s, _ := zerocopy.Sum(col, nil); s.Complex128() != 0 {
					t.Fatalf("sum of the filled columns = %v", s)
				}
			})
		}
	}
}

func TestSumKindsAreExact(t *testing.T) {
	i64, _ := zerocopy.FromSlice([]int64{math.MaxInt64/4 + 1, math.MaxInt64/4 + 1, math.MaxInt64/4 + 1})
	defer i64.Close()
	if s, _ := zerocopy.Sum(i64, nil); s.Kind != zerocopy.IntValue || s.I != 3*(math.MaxInt64/4+1) {
		t.Errorf("int64 sum %+v", s)
	}
	u64, _ := zerocopy.FromSlice([]uint64{math.MaxUint64})
	defer u64.Close()
	if s, _ := zerocopy.Sum(u64, nil); s.Kind != zerocopy.UintValue || s.U != math.MaxUint64 {
		t.Errorf("uint64 sum %+v", s)
	}
	b, _ := zerocopy.FromSlice([]bool{true, false, true})
	defer b.Close()
	if s, _ := zerocopy.Sum(b, nil); s.Kind != zerocopy.IntValue || s.I != 2 {
		t.Errorf("bool sum %+v", s)
	}
	c, _ := zerocopy.FromSlice([]complex64{1 + 2i, 3 - 1i})
	defer c.Close()
	if s, _ := zerocopy.Sum(c, nil); s.Kind != zerocopy.ComplexValue || s.C != 4+1i {
		t.Errorf("complex sum %+v", s)
	}
	f8, _ := zerocopy.FromBytes(make([]byte, 2), dlpack.DataType{Code: dlpack.Float8E4M3FN, Bits: 8, Lanes: 1})
	defer f8.Close()
	if _, err := zerocopy.Sum(f8, nil); err == nil {
		t.Error("float8 sum: no error")
	}
}

// TestConvert copies between dtypes and devices, strided and overlapping.
func TestConvert(t *testing.T) {
	src, _ := zerocopy.FromSlice([]float64{0, 1.9, -2.5, 3, 4, 5})
	defer src.Close()
	dst := make([]int16, 6)
	dv, _ := zerocopy.FromSlice(dst)
	defer dv.Close()
	if err := zerocopy.Convert(dv, src, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int16{0, 1, -2, 3, 4, 5}, dst); diff != "" {
		t.Fatalf("float64 -> int16 (-want +got):\n%s", diff)
	}
	// Overlap: a view of the same memory reversed, another dtype of it.
	raw := make([]byte, 8)
	a, _ := zerocopy.FromBytes(raw[:4], dlpack.Uint8Type)
	defer a.Close()
	copy(raw, []byte{1, 2, 3, 4})
	w, _ := zerocopy.FromBytes(raw[:8], dlpack.Int16Type)
	defer w.Close()
	if err := zerocopy.Convert(w, a, nil); err != nil {
		t.Fatal(err)
	}
	if want := []byte{1, 0, 2, 0, 3, 0, 4, 0}; !bytes.Equal(raw, want) {
		t.Fatalf("overlapping widening: %v, want %v", raw, want)
	}
	if fakeErr != nil {
		return
	}
	needCUDA(t)
	// Host float64 -> strided device int32 columns, then back to float32.
	d, err := zerocopy.AllocCUDA(0, dlpack.Int32Type, 3, 4)
	d = mustView(t, d, err)
	if err := zerocopy.Fill(d, zerocopy.Int(-1), nil); err != nil {
		t.Fatal(err)
	}
	cols, _ := d.Slice(1, 1, 3, 1)
	cols = mustView(t, cols, nil)
	six, _ := src.Reshape(3, 2)
	defer six.Close()
	if err := zerocopy.Convert(cols, six, nil); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, 12)
	bv, _ := zerocopy.FromSlice(back, 3, 4)
	defer bv.Close()
	if err := zerocopy.Convert(bv, d, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{-1, 0, 1, -1, -1, -2, 3, -1, -1, 4, 5, -1}, back); diff != "" {
		t.Fatalf("device round trip (-want +got):\n%s", diff)
	}
}

// TestStridedDeviceWritesSkipGaps: fills, copies and converting copies into
// a strided device view write its elements only, never the gaps between
// them, which another stream writes meanwhile (after a spin, on a GPU).
// With the fake driver every write to a gap byte is also counted.
func TestStridedDeviceWritesSkipGaps(t *testing.T) {
	needCUDA(t)
	ctx := retain(t, 0)
	k := loadKernels(t, ctx)
	other := newStream(t, ctx)
	const rows, cols = 64, 256
	base := zeroedU32(t, rows*cols)
	m, err := base.Reshape(rows, cols)
	m = mustView(t, m, err)
	even, err := m.Slice(1, 0, zerocopy.Omit, 2) // the view written
	even = mustView(t, even, err)
	odd, err := m.Slice(1, 1, zerocopy.Omit, 2) // the gaps
	odd = mustView(t, odd, err)
	scratch := zeroedU32(t, 1)
	if err := k.SpinThenWrite(other, cuda.DevicePtr(scratch.Ptr()), 1, 0, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.Fill(odd, zerocopy.Int(7), other); err != nil {
		t.Fatal(err)
	}
	odd.SetStream(0) // nothing below is ordered after the other stream
	if fakeLib != "" {
		mask := make([]byte, 4*rows*cols)
		for i := range mask {
			mask[i] = byte(i / 4 % 2) // the odd columns' bytes
		}
		fakeCall(t, "fakecuda_guard", base.Ptr(), uintptr(len(mask)), uintptr(unsafe.Pointer(&mask[0])))
		runtime.KeepAlive(mask)
		t.Cleanup(func() { fakeCall(t, "fakecuda_guard", 0, 0, 0) })
	}
	half := rows * cols / 2
	u32 := make([]uint32, half)
	f64 := make([]float64, half)
	for i := range u32 {
		u32[i], f64[i] = 9, 11
	}
	uv, _ := zerocopy.FromSlice(u32, rows, cols/2)
	defer uv.Close()
	fv, _ := zerocopy.FromSlice(f64, rows, cols/2)
	defer fv.Close()
	steps := []struct {
		name string
		run  func() error
		want uint32
	}{
		{"Fill", func() error { return zerocopy.Fill(even, zerocopy.Int(5), nil) }, 5},
		{"CopyCUDA", func() error { return zerocopy.CopyCUDA(even, uv, nil) }, 9},
		{"Convert", func() error { return zerocopy.Convert(even, fv, nil) }, 11},
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if err := even.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if fakeLib != "" {
			if hits := int(fakeCall(t, "fakecuda_guard_hits")); hits != 0 {
				t.Fatalf("%s wrote %d bytes of the gaps between the view's elements", st.name, hits)
			}
		}
		h := make([]uint32, even.Len())
		hv, _ := zerocopy.FromSlice(h, even.Shape()...)
		if err := zerocopy.CopyCUDA(hv, even, nil); err != nil {
			t.Fatal(err)
		}
		hv.Close()
		for i, x := range h {
			if x != st.want {
				t.Fatalf("%s: element %d of the view is %d, want %d", st.name, i, x, st.want)
			}
		}
	}
	if fakeLib != "" {
		fakeCall(t, "fakecuda_guard", 0, 0, 0)
	}
	if err := other.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := devBytes(t, base)
	for i := 0; i < rows*cols; i++ {
		x := binary.LittleEndian.Uint32(got[4*i:])
		want := uint32(11)
		if i%2 == 1 {
			want = 7
		}
		if x != want {
			t.Fatalf("element %d = %d, want %d (a write to the strided view touched the gaps, or lost its own)", i, x, want)
		}
	}
}
