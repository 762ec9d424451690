package zerocopy_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func TestNewLayout(t *testing.T) {
	tests := []struct {
		name           string
		shape, strides []int64
		err            string
	}{
		{"C default", []int64{2, 3}, nil, ""},
		{"strided", []int64{2, 3}, []int64{1, 2}, ""},
		{"0-d", []int64{}, nil, ""},
		{"stride count", []int64{2, 3}, []int64{1}, "1 strides for 2 dimensions"},
		{"negative extent", []int64{2, -3}, nil, "negative"},
		{"too many dims", make([]int64, 65), nil, "ndim 65 out of range"},
		{"span overflows", []int64{2, 2}, []int64{1 << 62, 1}, "overflow"},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			l, err := zerocopy.NewLayout(dlpack.Float32Type, c.shape, c.strides)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("NewLayout(%v, %v) = %v, want an error containing %q", c.shape, c.strides, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := c.strides
			if want == nil {
				want = dlpack.CStrides(c.shape)
			}
			if diff := cmp.Diff(want, l.Strides()); diff != "" || l.NDim() != len(c.shape) || l.Offset() != 0 {
				t.Errorf("layout %v: strides (-want +got):\n%s", &l, diff)
			}
		})
	}
}

// The layout algebra on Layout values: offsets in bytes, the receiver left
// alone, and no allocation for up to 6 dimensions.
func TestLayoutAlgebra(t *testing.T) {
	l, err := zerocopy.NewLayout(dlpack.Float64Type, []int64{4, 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	col, err := l.Select(1, -1) // column 5: offset 5 elements
	if err != nil {
		t.Fatal(err)
	}
	if col.Offset() != 5*8 || !cmp.Equal(col.Shape(), []int64{4}) || !cmp.Equal(col.Strides(), []int64{6}) {
		t.Errorf("Select(1, -1) = %v", &col)
	}
	rev, err := col.Slice(0, zerocopy.Omit, zerocopy.Omit, -1) // its last element first
	if err != nil {
		t.Fatal(err)
	}
	if rev.Offset() != (3*6+5)*8 || !cmp.Equal(rev.Strides(), []int64{-6}) {
		t.Errorf("reversed column %v", &rev)
	}
	if lo, hi := rev.ByteSpan(); lo != -18*8 || hi != 8 {
		t.Errorf("reversed column span [%d, %d), want [-144, 8)", lo, hi)
	}
	tr, _ := l.T()
	if !tr.IsFContiguous() || tr.IsCContiguous() || !l.IsCContiguous() {
		t.Errorf("contiguity of %v and its transpose %v", &l, &tr)
	}
	if _, err := tr.Reshape(24); err == nil || !strings.Contains(err.Error(), "without a copy") {
		t.Errorf("Reshape of a transpose: %v", err)
	}
	if !cmp.Equal(l.Shape(), []int64{4, 6}) || l.Offset() != 0 {
		t.Errorf("receiver changed: %v", &l)
	}
	if _, err := l.Select(0, 4); err == nil || !strings.Contains(err.Error(), "index 4 out of range for dim 0 with extent 4") {
		t.Errorf("Select past the end: %v", err)
	}

	allocs := testing.AllocsPerRun(100, func() {
		a, _ := l.Slice(1, 1, 5, 2)
		b, _ := a.Transpose(0, 1)
		c, _ := b.Select(0, 1)
		d, _ := c.Unsqueeze(0)
		e, _ := d.Broadcast(3, -1)
		f, _ := l.Reshape(2, -1, 3)
		g, _ := f.Squeeze()
		_, _ = e, g
	})
	if allocs != 0 {
		t.Errorf("layout operations allocated %v times per run, want 0", allocs)
	}
}

// Layouts of more than 6 dimensions keep their dims on the heap, shared
// between copies: an operation must never write into its receiver's.
func TestLayoutManyDims(t *testing.T) {
	shape := []int64{2, 1, 3, 1, 1, 1, 1, 1, 1, 2}
	l, err := zerocopy.NewLayout(dlpack.Int8Type, shape, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := l.Strides()
	tr, err := l.Transpose(0, -1)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := l.Slice(2, 1, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(l.Shape(), shape) || !cmp.Equal(l.Strides(), st) {
		t.Fatalf("receiver changed: %v", &l)
	}
	if tr.Shape()[0] != 2 || tr.Strides()[0] != 1 || sl.Shape()[2] != 2 || sl.Offset() != 2 {
		t.Errorf("Transpose %v, Slice %v", &tr, &sl)
	}
	sq, err := l.Squeeze() // 10 dims down to 3: inline again
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(sq.Shape(), []int64{2, 3, 2}) || !cmp.Equal(sq.Strides(), []int64{6, 2, 1}) {
		t.Errorf("Squeeze: %v", &sq)
	}
}

// Each walks a view of many dimensions (past the inline 6) in row-major
// order with the right indices, whatever its strides.
func TestEachManyDims(t *testing.T) {
	shape := []int64{2, 1, 3, 1, 1, 1, 1, 1, 1, 2}
	v, data := iotaView(t, 12)
	r, err := v.Reshape(shape...)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := r.Permute(9, 1, 2, 3, 4, 5, 6, 7, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	err = zerocopy.Each(tr, func(idx []int64, x float32) bool {
		want := data[idx[9]*6+idx[2]*2+idx[0]]
		if x != want {
			t.Errorf("element %v = %v, want %v", idx, x, want)
		}
		got = append(got, x)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Each order (-want +got):\n%s", diff)
	}
	c, err := zerocopy.Clone(tr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	xs, _ := zerocopy.HostSliceRO[float32](c)
	if diff := cmp.Diff(want, xs); diff != "" {
		t.Errorf("Clone (-want +got):\n%s", diff)
	}
	if s, err := zerocopy.Sum(tr, nil); err != nil || s != zerocopy.Float(66) {
		t.Errorf("Sum = %v, %v; want 66", s, err)
	}
}

// Deriving a view allocates the View and nothing else.
func TestDeriveAllocs(t *testing.T) {
	v, _ := iotaView(t, 4, 6)
	allocs := testing.AllocsPerRun(100, func() {
		c, _ := v.Select(1, 2)
		_ = c
	})
	if allocs != 1 {
		t.Errorf("Select allocated %v times, want 1 (the View)", allocs)
	}
}

// Layout.ByteSpan skips dlpack.ByteSpan's overflow checks (they passed when
// the layout was made); the results must agree.
func TestLayoutByteSpan(t *testing.T) {
	int4 := dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}
	cases := []struct {
		dt             dlpack.DataType
		shape, strides []int64
	}{
		{dlpack.Float32Type, []int64{2, 3}, nil},
		{dlpack.Float64Type, []int64{4, 5}, []int64{-5, 1}},
		{dlpack.Int16Type, []int64{3, 4}, []int64{0, -2}},
		{dlpack.Uint8Type, []int64{3, 0}, []int64{-7, 1}},
		{dlpack.Complex128Type, []int64{}, nil},
		{int4, []int64{3, 4}, nil},
		{int4, []int64{3, 4}, []int64{-4, 1}},
	}
	for _, c := range cases {
		l, err := zerocopy.NewLayout(c.dt, c.shape, c.strides)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := l.ByteSpan()
		wlo, whi, err := dlpack.ByteSpan(c.dt, l.Shape(), l.Strides(), false)
		if err != nil || lo != wlo || hi != whi {
			t.Errorf("%v: ByteSpan [%d, %d), dlpack says [%d, %d) %v", &l, lo, hi, wlo, whi, err)
		}
	}
}

// NewLayout accepts exactly the layouts whose extents are not negative and
// whose element count and byte span dlpack finds in int64 range, and
// reports dlpack's span: its one-pass check agrees with dlpack's at the
// limits too.
func FuzzNewLayoutAgreesWithDLPack(f *testing.F) {
	f.Add(uint8(2), int64(3), int64(4), int64(1), int64(-2), uint8(4))
	f.Add(uint8(2), int64(2), int64(2), int64(1)<<62, int64(1), uint8(4))
	f.Add(uint8(1), int64(2), int64(0), int64(-1)<<63, int64(0), uint8(1))
	f.Add(uint8(2), int64(1)<<32, int64(1)<<31, int64(0), int64(1), uint8(8))
	f.Add(uint8(2), int64(3), int64(-1), int64(1), int64(1), uint8(2))
	f.Add(uint8(2), int64(0), int64(1)<<62, int64(5), int64(1)<<62, uint8(8))
	f.Fuzz(func(t *testing.T, nd uint8, e0, e1, s0, s1 int64, item uint8) {
		shape := []int64{e0, e1}[:nd%3]
		strides := []int64{s0, s1}[:nd%3]
		dt := dlpack.DataType{Code: dlpack.UInt, Bits: 8 << (item % 4), Lanes: 1}
		l, err := zerocopy.NewLayout(dt, shape, strides)
		_, nerr := dlpack.NumElements(shape)
		lo, hi, serr := dlpack.ByteSpan(dt, shape, strides, false)
		neg := false
		for _, e := range shape {
			neg = neg || e < 0
		}
		wantOK := !neg && nerr == nil && serr == nil
		if (err == nil) != wantOK {
			t.Fatalf("NewLayout(%v, %v, %v) = %v; dlpack: count %v, span %v", dt, shape, strides, err, nerr, serr)
		}
		if err == nil {
			if glo, ghi := l.ByteSpan(); glo != lo || ghi != hi {
				t.Fatalf("ByteSpan of %v = [%d, %d), dlpack's [%d, %d)", &l, glo, ghi, lo, hi)
			}
		}
	})
}
