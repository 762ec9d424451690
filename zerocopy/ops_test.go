package zerocopy_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// iotaView returns a float32 view of 0, 1, 2, ... with shape, over a Go
// slice, and the slice.
func iotaView(t testing.TB, shape ...int64) (*zerocopy.View, []float32) {
	t.Helper()
	if shape == nil {
		shape = []int64{} // 0-d: FromSlice reads a nil shape as [len(s)]
	}
	n, err := dlpack.NumElements(shape)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i)
	}
	v, err := zerocopy.FromSlice(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, data
}

// elems lists a float32 view's elements in row-major index order.
func elems(t testing.TB, v *zerocopy.View) []float32 {
	t.Helper()
	out := []float32{}
	err := zerocopy.Each(v, func(_ []int64, x float32) bool {
		out = append(out, x)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// layout is what a view op is expected to produce.
type layout struct {
	Shape, Strides []int64
	Offset         int64 // elements from the parent's pointer
}

func layoutOf(v, parent *zerocopy.View) layout {
	return layout{v.Shape(), v.Strides(), int64(v.Ptr()-parent.Ptr()) / int64(v.DType().ItemSize())}
}

func closeAll(t testing.TB, vs ...*zerocopy.View) {
	t.Helper()
	for _, v := range vs {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	}
}

func parseIdx(s string) int64 {
	if s == "_" {
		return zerocopy.Omit
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// TestSlicePython checks Slice against CPython's slicing of list(range(n))
// for every combination of bounds and steps in slicecases_test.go.
func TestSlicePython(t *testing.T) {
	parents := map[int64]*zerocopy.View{}
	for _, c := range pythonSlices {
		head, res, _ := strings.Cut(c, ":")
		f := strings.Fields(head)
		n := parseIdx(f[0])
		start, stop, step := parseIdx(f[1]), parseIdx(f[2]), parseIdx(f[3])
		want := []float32{}
		for _, s := range strings.Fields(res) {
			want = append(want, float32(parseIdx(s)))
		}
		v := parents[n]
		if v == nil {
			v, _ = iotaView(t, n)
			parents[n] = v
		}
		s, err := v.Slice(0, start, stop, step)
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		if got := elems(t, s); !cmp.Equal(got, want) {
			t.Errorf("[%s] = %v, Python says %v", c, got, want)
		}
		if lo, hi := s.ByteSpan(); s.Len() > 0 && (s.Ptr()+uintptr(lo) < v.Ptr() || s.Ptr()+uintptr(hi) > v.Ptr()+uintptr(4*n)) {
			t.Errorf("[%s]: span escapes the parent", c)
		}
		closeAll(t, s)
	}
	for _, v := range parents {
		if r := v.Owner().Refs(); r != 1 {
			t.Errorf("owner refs %d after closing every slice, want 1", r)
		}
	}
}

func TestSliceLayout(t *testing.T) {
	v, _ := iotaView(t, 4, 6)
	tests := []struct {
		dim               int
		start, stop, step int64
		want              layout
		wantElems         []float32
	}{
		{1, 1, 5, 2, layout{[]int64{4, 2}, []int64{6, 2}, 1}, []float32{1, 3, 7, 9, 13, 15, 19, 21}},
		{-1, zerocopy.Omit, zerocopy.Omit, -1, layout{[]int64{4, 6}, []int64{6, -1}, 5}, nil},
		{0, -1, zerocopy.Omit, -3, layout{[]int64{2, 6}, []int64{-18, 1}, 18}, []float32{18, 19, 20, 21, 22, 23, 0, 1, 2, 3, 4, 5}},
		{0, 2, 2, 1, layout{[]int64{0, 6}, []int64{6, 1}, 0}, []float32{}},
		{1, 5, 100, 1 << 62, layout{[]int64{4, 1}, []int64{6, 1 << 62}, 5}, []float32{5, 11, 17, 23}},
	}
	for _, tc := range tests {
		s, err := v.Slice(tc.dim, tc.start, tc.stop, tc.step)
		if err != nil {
			t.Errorf("Slice(%d, %d, %d, %d): %v", tc.dim, tc.start, tc.stop, tc.step, err)
			continue
		}
		if diff := cmp.Diff(tc.want, layoutOf(s, v)); diff != "" {
			t.Errorf("Slice(%d, %d, %d, %d) layout (-want +got):\n%s", tc.dim, tc.start, tc.stop, tc.step, diff)
		}
		if tc.wantElems != nil {
			if diff := cmp.Diff(tc.wantElems, elems(t, s)); diff != "" {
				t.Errorf("Slice(%d, %d, %d, %d) elements (-want +got):\n%s", tc.dim, tc.start, tc.stop, tc.step, diff)
			}
		}
		closeAll(t, s)
	}
}

// errOf runs op and returns its error text, closing a view it made.
func errOf(v *zerocopy.View, err error) string {
	if err == nil {
		v.Close()
		return ""
	}
	return err.Error()
}

func TestOpErrors(t *testing.T) {
	v, _ := iotaView(t, 2, 3)
	s0, _ := iotaView(t)
	tests := []struct {
		name string
		err  string
		want string // substring
	}{
		{"slice step 0", errOf(v.Slice(1, 0, 3, 0)), "step 0 for dim 1"},
		{"slice dim", errOf(v.Slice(2, 0, 1, 1)), "dim 2 out of range for a 2-d view (-2..1)"},
		{"slice 0-d", errOf(s0.Slice(0, 0, 1, 1)), "dim 0 out of range for a 0-d view"},
		{"select index", errOf(v.Select(1, 3)), "index 3 out of range for dim 1 with extent 3"},
		{"select negative", errOf(v.Select(0, -3)), "index -3 out of range for dim 0 with extent 2"},
		{"permute count", errOf(v.Permute(0)), "order has 1 dims, the view has 2"},
		{"permute twice", errOf(v.Permute(1, -1)), "dim 1 appears twice"},
		{"permute range", errOf(v.Permute(0, 2)), "dim 2 out of range"},
		{"transpose", errOf(v.Transpose(0, -3)), "dim -3 out of range"},
		{"reshape count", errOf(v.Reshape(4, 2)), "shape [4, 2] has 8 elements, the view [2, 3] has 6"},
		{"reshape two -1", errOf(v.Reshape(-1, -1)), "dims 0 and 1 are both -1"},
		{"reshape negative", errOf(v.Reshape(-2, -3)), "extent -2 for dim 0 is negative"},
		{"reshape infer", errOf(v.Reshape(-1, 4)), "shape [-1, 4] is invalid for 6 elements"},
		{"squeeze extent", errOf(v.Squeeze(1)), "dim 1 has extent 3, not 1"},
		{"unsqueeze range", errOf(v.Unsqueeze(4)), "dim 4 out of range for a 2-d view (-3..2)"},
		{"broadcast extent", errOf(v.Broadcast(2, 4)), "dim 1 has extent 3, cannot broadcast to 4"},
		{"broadcast fewer", errOf(v.Broadcast(6)), "has 1 dims, fewer than the view's 2"},
		{"broadcast negative", errOf(v.Broadcast(-2, 2, 3)), "extent -2 for new dim 0"},
		{"broadcast overflow", errOf(v.Broadcast(1<<40, 1<<40, 2, 3)), "overflows int64"},
		{"T 3-d", errOf(func() (*zerocopy.View, error) {
			u, _ := iotaView(t, 1, 2, 3)
			return u.T()
		}()), "view is 3-d"},
	}
	for _, tc := range tests {
		if !strings.Contains(tc.err, tc.want) {
			t.Errorf("%s: error %q, want it to contain %q", tc.name, tc.err, tc.want)
		}
	}
	if r := v.Owner().Refs(); r != 1 {
		t.Errorf("failed ops left refs = %d, want 1", r)
	}
}

func TestSelectPermuteTranspose(t *testing.T) {
	v, _ := iotaView(t, 2, 3, 4)
	type op func() (*zerocopy.View, error)
	tests := []struct {
		name  string
		op    op
		want  layout
		elems []float32
	}{
		{"select(1,-1)", func() (*zerocopy.View, error) { return v.Select(1, -1) }, layout{[]int64{2, 4}, []int64{12, 1}, 8},
			[]float32{8, 9, 10, 11, 20, 21, 22, 23}},
		{"select(2,1)", func() (*zerocopy.View, error) { return v.Select(2, 1) }, layout{[]int64{2, 3}, []int64{12, 4}, 1},
			[]float32{1, 5, 9, 13, 17, 21}},
		{"permute(2,0,1)", func() (*zerocopy.View, error) { return v.Permute(2, 0, 1) }, layout{[]int64{4, 2, 3}, []int64{1, 12, 4}, 0}, nil},
		{"permute(-1,-2,-3)", func() (*zerocopy.View, error) { return v.Permute(-1, -2, -3) }, layout{[]int64{4, 3, 2}, []int64{1, 4, 12}, 0}, nil},
		{"transpose(0,2)", func() (*zerocopy.View, error) { return v.Transpose(0, 2) }, layout{[]int64{4, 3, 2}, []int64{1, 4, 12}, 0}, nil},
		{"transpose(1,1)", func() (*zerocopy.View, error) { return v.Transpose(1, 1) }, layout{[]int64{2, 3, 4}, []int64{12, 4, 1}, 0}, nil},
	}
	for _, tc := range tests {
		s, err := tc.op()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, layoutOf(s, v)); diff != "" {
			t.Errorf("%s layout (-want +got):\n%s", tc.name, diff)
		}
		if tc.elems != nil {
			if diff := cmp.Diff(tc.elems, elems(t, s)); diff != "" {
				t.Errorf("%s elements (-want +got):\n%s", tc.name, diff)
			}
		}
		closeAll(t, s)
	}

	m, _ := iotaView(t, 2, 3)
	mt, err := m.T()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{0, 3, 1, 4, 2, 5}, elems(t, mt)); diff != "" {
		t.Errorf("T elements (-want +got):\n%s", diff)
	}
	if mt.IsCContiguous() || !mt.IsFContiguous() {
		t.Errorf("T of a C-contiguous matrix: C=%t F=%t, want false true", mt.IsCContiguous(), mt.IsFContiguous())
	}
	closeAll(t, mt)
	one, _ := iotaView(t, 5)
	ot, err := one.T()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(layout{[]int64{5}, []int64{1}, 0}, layoutOf(ot, one)); diff != "" {
		t.Errorf("T of 1-d (-want +got):\n%s", diff)
	}
	closeAll(t, ot)
}

// derivation makes the view a reshape case starts from, out of a
// C-contiguous iota view.
type derivation func(v *zerocopy.View) (*zerocopy.View, error)

// TestReshape: Reshape gives a view whenever the strides allow one (its
// strides as NumPy's and PyTorch's), reports ErrNeedsCopy when only a
// C-contiguous copy can take the shape (and a Clone then reshapes), and
// reports every other bad shape with the shape and the element count, not
// as ErrNeedsCopy, so that no caller copies for a shape that cannot be.
func TestReshape(t *testing.T) {
	contig := func(v *zerocopy.View) (*zerocopy.View, error) { return v.AsReadOnly(), nil }
	transposed := func(v *zerocopy.View) (*zerocopy.View, error) { return v.T() }
	cols := func(v *zerocopy.View) (*zerocopy.View, error) { return v.Slice(1, 0, 3, 1) }
	rows2 := func(v *zerocopy.View) (*zerocopy.View, error) { return v.Slice(0, 0, zerocopy.Omit, 2) }
	bcast := func(v *zerocopy.View) (*zerocopy.View, error) { return v.Broadcast(2, 3) }
	const (
		view   = iota // a view with the strides given
		copies        // ErrNeedsCopy: a C-contiguous copy reshapes
		fails         // a shape error (errWant), not ErrNeedsCopy
	)
	tests := []struct {
		name    string
		base    []int64
		derive  derivation
		to      []int64
		outcome int
		strides []int64 // of the view; of the copy, its C strides are checked
		errWant string  // the error's text: a substring
	}{
		{"merge", []int64{2, 3, 4}, contig, []int64{6, 4}, view, []int64{4, 1}, ""},
		{"flat", []int64{2, 3, 4}, contig, []int64{-1}, view, []int64{1}, ""},
		{"split", []int64{2, 3, 4}, contig, []int64{4, -1, 2}, view, []int64{6, 2, 1}, ""},
		{"ones", []int64{2, 3}, contig, []int64{1, 2, 1, 3, 1}, view, []int64{6, 3, 3, 1, 1}, ""},
		{"same shape", []int64{2, 3}, transposed, []int64{3, 2}, view, []int64{1, 3}, ""},
		{"transposed flat", []int64{2, 3}, transposed, []int64{6}, copies, nil,
			"view with shape [3, 2] and strides [1, 3] cannot be reshaped to [6] without a copy"},
		{"transposed -1", []int64{2, 3}, transposed, []int64{-1, 3}, copies, nil, "cannot be reshaped to [2, 3]"},
		{"transposed unsqueeze", []int64{2, 3}, transposed, []int64{3, 2, 1}, view, []int64{1, 3, 3}, ""},
		{"transposed batch", []int64{2, 3, 4}, func(v *zerocopy.View) (*zerocopy.View, error) { return v.Permute(1, 2, 0) },
			[]int64{12, 2}, view, []int64{1, 12}, ""},
		{"transposed batch split", []int64{2, 3, 4}, func(v *zerocopy.View) (*zerocopy.View, error) { return v.Permute(1, 2, 0) },
			[]int64{3, 8}, copies, nil, "without a copy"},
		{"column slice split", []int64{4, 6}, cols, []int64{2, 2, 3}, view, []int64{12, 6, 1}, ""},
		{"column slice flat", []int64{4, 6}, cols, []int64{12}, copies, nil, "without a copy"},
		{"row step", []int64{4, 6}, rows2, []int64{2, 2, 3}, view, []int64{12, 3, 1}, ""},
		{"row step flat", []int64{4, 6}, rows2, []int64{-1}, copies, nil, "without a copy"},
		{"reversed", []int64{6}, func(v *zerocopy.View) (*zerocopy.View, error) { return v.Slice(0, zerocopy.Omit, zerocopy.Omit, -1) },
			[]int64{2, 3}, view, []int64{-3, -1}, ""},
		{"broadcast rows flat", []int64{3}, bcast, []int64{6}, copies, nil, "without a copy"},
		{"broadcast rows split", []int64{3}, bcast, []int64{2, 1, 3}, view, []int64{0, 3, 1}, ""},
		{"empty", []int64{0, 3}, contig, []int64{3, 0}, view, []int64{1, 1}, ""},
		{"empty -1", []int64{0, 3}, contig, []int64{-1}, view, []int64{1}, ""},
		{"empty -1 kept", []int64{0, 3}, contig, []int64{-1, 3, 1}, view, []int64{3, 1, 1}, ""},
		{"empty same shape", []int64{0, 3}, transposed, []int64{3, 0}, view, []int64{1, 3}, ""},
		{"empty transposed", []int64{0, 3}, transposed, []int64{0, 3}, view, []int64{3, 1}, ""},
		{"0-d", []int64{}, contig, []int64{1, 1}, view, []int64{1, 1}, ""},
		{"0-d -1", []int64{}, contig, []int64{-1}, view, []int64{1}, ""},
		{"to 0-d", []int64{1, 1}, contig, []int64{}, view, []int64{}, ""},
		{"strided row", []int64{3, 3}, func(v *zerocopy.View) (*zerocopy.View, error) { return v.Slice(0, 1, 2, 1) },
			[]int64{1, -1}, view, []int64{3, 1}, ""},
		{"strided element to 0-d", []int64{3, 3}, func(v *zerocopy.View) (*zerocopy.View, error) {
			r, err := v.Slice(0, 1, 2, 1)
			if err != nil {
				return nil, err
			}
			return r.Slice(1, 2, 3, 1)
		}, []int64{}, view, []int64{}, ""},
		{"ambiguous", []int64{0, 3}, contig, []int64{0, -1}, fails, nil,
			"cannot infer dim 1 of [0, -1] for 0 elements: -1 is ambiguous"},
		{"count", []int64{2, 3}, contig, []int64{4, 2}, fails, nil, "shape [4, 2] has 8 elements, the view [2, 3] has 6"},
		{"count of a copy", []int64{2, 3}, transposed, []int64{4, 2}, fails, nil, "shape [4, 2] has 8 elements, the view [3, 2] has 6"},
		{"infer", []int64{2, 3}, transposed, []int64{-1, 4}, fails, nil, "shape [-1, 4] is invalid for 6 elements"},
		{"two -1", []int64{2, 3}, transposed, []int64{-1, -1}, fails, nil,
			"shape [-1, -1] for 6 elements: dims 0 and 1 are both -1"},
		{"negative", []int64{2, 3}, contig, []int64{-2, -3}, fails, nil,
			"shape [-2, -3] for 6 elements: extent -2 for dim 0 is negative"},
		{"0-d count", []int64{}, contig, []int64{2}, fails, nil, "shape [2] has 2 elements, the view [] has 1"},
		{"overflow", []int64{2, 3}, contig, []int64{1 << 40, 1 << 40}, fails, nil,
			"shape [1099511627776, 1099511627776] for 6 elements overflows int64 at dim 1"},
		{"ndim", []int64{1}, contig, make([]int64, 65), fails, nil, "shape of 65 dims for 1 elements: ndim out of range (0..64)"},
	}
	for _, tc := range tests {
		v, _ := iotaView(t, tc.base...)
		d, err := tc.derive(v)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		before := elems(t, d)
		r, err := d.Reshape(tc.to...)
		switch tc.outcome {
		case view:
			if err != nil {
				t.Errorf("%s: Reshape(%v): %v", tc.name, tc.to, err)
				continue
			}
			if diff := cmp.Diff(tc.strides, r.Strides(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: strides (-want +got):\n%s", tc.name, diff)
			}
			if r.Ptr() != d.Ptr() || r.Owner() != d.Owner() {
				t.Errorf("%s: a view moved the pointer or changed the owner", tc.name)
			}
		case copies:
			if !errors.Is(err, zerocopy.ErrNeedsCopy) || !strings.Contains(fmt.Sprint(err), tc.errWant) {
				t.Errorf("%s: Reshape(%v) error %v, want ErrNeedsCopy saying %q", tc.name, tc.to, err, tc.errWant)
				continue
			}
			c := must(t)(zerocopy.Clone(d))
			t.Cleanup(func() { c.Close() })
			if r, err = c.Reshape(tc.to...); err != nil {
				t.Errorf("%s: Reshape(%v) of a C-contiguous copy: %v", tc.name, tc.to, err)
				continue
			}
			if !r.IsCContiguous() {
				t.Errorf("%s: the copy reshaped to strides %v, not C-contiguous", tc.name, r.Strides())
			}
		case fails:
			if err == nil || errors.Is(err, zerocopy.ErrNeedsCopy) || !strings.Contains(err.Error(), tc.errWant) {
				t.Errorf("%s: Reshape(%v) error %v, want a shape error saying %q", tc.name, tc.to, err, tc.errWant)
			}
			continue
		}
		// A reshape keeps the row-major order of the elements.
		if diff := cmp.Diff(before, elems(t, r)); diff != "" {
			t.Errorf("%s: elements changed (-before +after):\n%s", tc.name, diff)
		}
		if got, want := r.Shape(), inferred(tc.to, d.Len()); !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
			t.Errorf("%s: shape %v, want %v", tc.name, got, want)
		}
	}
}

// inferred is shape with its -1 (if any) replaced by what n elements leave.
func inferred(shape []int64, n int64) []int64 {
	out := slices.Clone(shape)
	known := int64(1)
	for _, e := range shape {
		if e != -1 {
			known *= e
		}
	}
	for i, e := range out {
		if e == -1 {
			out[i] = n / known
		}
	}
	return out
}

func TestFlatten(t *testing.T) {
	v, _ := iotaView(t, 2, 3)
	f, err := v.Flatten()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{6}, f.Shape()); diff != "" {
		t.Errorf("shape (-want +got):\n%s", diff)
	}
	closeAll(t, f)
	tr, _ := v.T()
	defer tr.Close()
	if _, err := tr.Flatten(); err == nil || !strings.Contains(err.Error(), "Flatten") || !strings.Contains(err.Error(), "copy") {
		t.Errorf("Flatten of a transposed view: %v, want an error that says a copy is needed", err)
	}
}

func TestSqueezeUnsqueeze(t *testing.T) {
	v, _ := iotaView(t, 1, 3, 1, 2)
	tests := []struct {
		name string
		op   func() (*zerocopy.View, error)
		want layout
	}{
		{"squeeze all", func() (*zerocopy.View, error) { return v.Squeeze() }, layout{[]int64{3, 2}, []int64{2, 1}, 0}},
		{"squeeze 0", func() (*zerocopy.View, error) { return v.Squeeze(0) }, layout{[]int64{3, 1, 2}, []int64{2, 2, 1}, 0}},
		{"squeeze -2,0", func() (*zerocopy.View, error) { return v.Squeeze(-2, 0) }, layout{[]int64{3, 2}, []int64{2, 1}, 0}},
		{"unsqueeze 0", func() (*zerocopy.View, error) { return v.Unsqueeze(0) }, layout{[]int64{1, 1, 3, 1, 2}, []int64{6, 6, 2, 2, 1}, 0}},
		{"unsqueeze 2", func() (*zerocopy.View, error) { return v.Unsqueeze(2) }, layout{[]int64{1, 3, 1, 1, 2}, []int64{6, 2, 2, 2, 1}, 0}},
		{"unsqueeze -1", func() (*zerocopy.View, error) { return v.Unsqueeze(-1) }, layout{[]int64{1, 3, 1, 2, 1}, []int64{6, 2, 2, 1, 1}, 0}},
		{"unsqueeze 4", func() (*zerocopy.View, error) { return v.Unsqueeze(4) }, layout{[]int64{1, 3, 1, 2, 1}, []int64{6, 2, 2, 1, 1}, 0}},
		{"unsqueeze -5", func() (*zerocopy.View, error) { return v.Unsqueeze(-5) }, layout{[]int64{1, 1, 3, 1, 2}, []int64{6, 6, 2, 2, 1}, 0}},
	}
	for _, tc := range tests {
		s, err := tc.op()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, layoutOf(s, v)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
		if !s.IsCContiguous() {
			t.Errorf("%s: no longer C-contiguous", tc.name)
		}
		closeAll(t, s)
	}
	if _, err := v.Squeeze(0, 0); err == nil || !strings.Contains(err.Error(), "dim 0 given twice") {
		t.Errorf("Squeeze(0, 0): %v", err)
	}
}

func TestBroadcast(t *testing.T) {
	row, _ := iotaView(t, 3)
	col, _ := iotaView(t, 2, 1)
	tests := []struct {
		name  string
		op    func() (*zerocopy.View, error)
		want  []int64 // shape then strides
		elems []float32
	}{
		{"row", func() (*zerocopy.View, error) { return row.Broadcast(2, 3) }, []int64{2, 3, 0, 1}, []float32{0, 1, 2, 0, 1, 2}},
		{"col", func() (*zerocopy.View, error) { return col.Broadcast(2, 4) }, []int64{2, 4, 1, 0}, []float32{0, 0, 0, 0, 1, 1, 1, 1}},
		{"keep -1", func() (*zerocopy.View, error) { return col.Broadcast(3, -1, 2) }, []int64{3, 2, 2, 0, 1, 0}, nil},
		{"to empty", func() (*zerocopy.View, error) { return row.Broadcast(0, 3) }, []int64{0, 3, 0, 1}, []float32{}},
		{"same", func() (*zerocopy.View, error) { return row.Broadcast(3) }, []int64{3, 1}, []float32{0, 1, 2}},
	}
	for _, tc := range tests {
		s, err := tc.op()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, append(s.Shape(), s.Strides()...)); diff != "" {
			t.Errorf("%s shape+strides (-want +got):\n%s", tc.name, diff)
		}
		if tc.elems != nil {
			if diff := cmp.Diff(tc.elems, elems(t, s)); diff != "" {
				t.Errorf("%s elements (-want +got):\n%s", tc.name, diff)
			}
		}
		closeAll(t, s)
	}
	// A broadcast view stays writable; Set writes the one shared element.
	b, err := row.Broadcast(4, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := zerocopy.Set[float32](b, 42, 3, 1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{0, 42, 2}, elems(t, row)); diff != "" {
		t.Errorf("after Set through broadcast (-want +got):\n%s", diff)
	}
}

func TestSubByteSlice(t *testing.T) {
	int4 := dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}
	v, err := zerocopy.FromBytes(make([]byte, 6), int4, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	s, err := v.Slice(0, 1, 3, 1) // 4 elements = 2 bytes per row: fine
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Ptr() - v.Ptr(); got != 2 {
		t.Errorf("row 1 of packed int4[3 4] at byte %d, want 2", got)
	}
	s.Close()
	if _, err := v.Slice(1, 1, 3, 1); err == nil || !strings.Contains(err.Error(), "does not start on a byte") {
		t.Errorf("slice starting mid-byte: %v", err)
	}
}

// Derived views borrow the reference of the view they come from: they work
// while it is open, need no Close (Close does nothing), and report
// ErrClosed once it is closed. Retain gives one a reference of its own.
func TestDerivedViewLifetime(t *testing.T) {
	var released atomic.Int32
	data := []float32{0, 1, 2, 3, 4, 5}
	v := countedView(t, data, "lifetime", &released)
	col, err := v.Select(1, -1)
	if err != nil {
		t.Fatal(err)
	}
	row, err := col.Unsqueeze(0) // derived from a derived view: still v's reference
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Close(); err != nil { // a no-op
		t.Fatal(err)
	}
	if x, err := zerocopy.At[float32](row, 0, 1); err != nil || x != 5 {
		t.Fatalf("At(row, 0, 1) = %v, %v after a Close of its parent col; want 5", x, err)
	}
	kept, err := row.Retain()
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	if released.Load() != 0 {
		t.Fatal("memory released while a retained view is open")
	}
	if _, err := zerocopy.At[float32](row, 0, 0); !errors.Is(err, zerocopy.ErrClosed) {
		t.Errorf("At on a view derived from a closed one: %v, want ErrClosed", err)
	}
	if row.Alive() || !kept.Alive() {
		t.Errorf("Alive: derived %t (want false), retained %t (want true)", row.Alive(), kept.Alive())
	}
	// Deriving from a closed view is layout maths: it succeeds, and the
	// result reports ErrClosed when used.
	s, err := row.Slice(1, 0, 1, 1)
	if err != nil {
		t.Fatalf("Slice of a view derived from a closed one: %v", err)
	}
	if _, err := zerocopy.Clone(s); !errors.Is(err, zerocopy.ErrClosed) {
		t.Errorf("Clone of it: %v, want ErrClosed", err)
	}
	if _, err := s.Retain(); !errors.Is(err, zerocopy.ErrClosed) {
		t.Errorf("Retain of it: %v, want ErrClosed", err)
	}
	if x, err := zerocopy.At[float32](kept, 0, 0); err != nil || x != 2 {
		t.Errorf("At(kept, 0, 0) = %v, %v; want 2", x, err)
	}
	kept.Close()
	kept.Close()
	if released.Load() != 1 {
		t.Fatalf("released %d times after the last reference, want 1", released.Load())
	}
}

func TestAsReadOnly(t *testing.T) {
	v, data := iotaView(t, 2, 3)
	ro := v.AsReadOnly()
	defer ro.Close()
	s, _ := ro.Slice(1, 0, 2, 1)
	defer s.Close()
	if !ro.ReadOnly() || !s.ReadOnly() || v.ReadOnly() {
		t.Fatalf("read-only flags: ro=%t slice=%t parent=%t", ro.ReadOnly(), s.ReadOnly(), v.ReadOnly())
	}
	if _, err := zerocopy.HostSlice[float32](ro); err == nil || !strings.Contains(err.Error(), "HostSliceRO") {
		t.Errorf("HostSlice of a read-only view: %v", err)
	}
	if err := zerocopy.Set[float32](s, 1, 0, 0); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("Set on a read-only view: %v", err)
	}
	got, err := zerocopy.HostSliceRO[float32](ro)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &data[0] {
		t.Errorf("HostSliceRO copied")
	}
}

// TestReleaseFromManyGoroutines derives views concurrently, closes them
// from other goroutines, and checks the release runs exactly once, last.
func TestReleaseFromManyGoroutines(t *testing.T) {
	for round := 0; round < 20; round++ {
		var released atomic.Int32
		data := make([]float32, 64)
		v, err := zerocopy.Wrap(zerocopy.Spec{
			Ptr: uintptrOf(data), Device: dlpack.CPUDevice, DType: dlpack.Float32Type, Shape: []int64{8, 8},
		}, zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { released.Add(1) }), "counted"))
		if err != nil {
			t.Fatal(err)
		}
		views := make(chan *zerocopy.View, 64)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 8; i++ {
					s, err := v.Slice(0, int64(g), 8, 1)
					if err != nil {
						t.Error(err)
						return
					}
					u, err := s.T()
					if err != nil {
						t.Error(err)
						return
					}
					s.Close()
					views <- u
				}
			}(g)
		}
		var closers sync.WaitGroup
		for c := 0; c < 4; c++ {
			closers.Add(1)
			go func() {
				defer closers.Done()
				for u := range views {
					if released.Load() != 0 {
						t.Error("released while views were open")
					}
					u.Close()
				}
			}()
		}
		wg.Wait()
		close(views)
		closers.Wait()
		if n := released.Load(); n != 0 {
			t.Fatalf("released %d times before the base view was closed", n)
		}
		v.Close()
		if n := released.Load(); n != 1 {
			t.Fatalf("released %d times, want 1", n)
		}
		keep(data)
	}
}
