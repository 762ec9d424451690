package zerocopy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/google/go-cmp/cmp"
)

// specView wraps s over memory nothing reads (Check looks at the layout
// only); Ptr is made up.
func specView(t *testing.T, s zerocopy.Spec) *zerocopy.View {
	t.Helper()
	s.Ptr = 0x10000
	v, err := zerocopy.Wrap(s, zerocopy.NewOwner(nil, "want test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func TestWantCheck(t *testing.T) {
	f32, i64 := dlpack.Float32Type, dlpack.Int64Type
	cpu, cuda0, cuda1 := dlpack.CPUDevice, dlpack.CUDADevice(0), dlpack.CUDADevice(1)
	c42 := zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{4, 2}} // C-contiguous
	f42 := zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{4, 2}, Strides: []int64{1, 4}}
	strided := zerocopy.Spec{Device: cpu, DType: i64, Shape: []int64{4, 2}, Strides: []int64{4, 2}, ReadOnly: true}
	with := func(s zerocopy.Spec, f func(*zerocopy.Spec)) zerocopy.Spec { f(&s); return s }
	tests := []struct {
		name   string
		want   zerocopy.Want
		view   zerocopy.Spec
		got    string   // MismatchError.Got; "" for a match
		fields []string // MismatchError.Fields
	}{
		{"zero Want takes anything", zerocopy.Want{}, strided, "", nil},
		{"all met", zerocopy.Want{DType: f32, Shape: []int64{-1, 2}, Order: zerocopy.COrder, Device: cpu, Writable: true}, c42, "", nil},
		{"ndim met", zerocopy.Want{NDim: 2}, c42, "", nil},
		{"any CUDA device", zerocopy.Want{Device: dlpack.Device{Type: dlpack.CUDA, ID: -1}}, with(c42, func(s *zerocopy.Spec) { s.Device = cuda1 }), "", nil},
		{"F order met", zerocopy.Want{Order: zerocopy.FOrder}, f42, "", nil},
		{"1-d is both orders", zerocopy.Want{Order: zerocopy.FOrder}, zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{5}}, "", nil},
		{"0-d asked with an empty Shape", zerocopy.Want{Shape: []int64{}}, zerocopy.Spec{Device: cpu, DType: f32}, "", nil},
		{"every mismatch at once",
			zerocopy.Want{DType: f32, Shape: []int64{-1, 3}, Order: zerocopy.COrder, Device: cuda0, Writable: true}, strided,
			"int64 [4 2] strided cpu read-only", []string{"dtype", "shape[1] (2 != 3)", "order", "device", "read-only"}},
		{"dtype", zerocopy.Want{DType: i64}, c42, "float32 [4 2] C-contiguous cpu writable", []string{"dtype"}},
		{"ndim", zerocopy.Want{NDim: 3}, c42, "float32 [4 2] C-contiguous cpu writable", []string{"ndim (2 != 3)"}},
		{"shape fixes ndim", zerocopy.Want{Shape: []int64{4}}, c42, "float32 [4 2] C-contiguous cpu writable", []string{"ndim (2 != 1)"}},
		{"every extent", zerocopy.Want{Shape: []int64{3, 3}}, c42, "float32 [4 2] C-contiguous cpu writable", []string{"shape[0] (4 != 3)", "shape[1] (2 != 3)"}},
		{"C order", zerocopy.Want{Order: zerocopy.COrder}, f42, "float32 [4 2] F-contiguous cpu writable", []string{"order"}},
		{"F order", zerocopy.Want{Order: zerocopy.FOrder}, c42, "float32 [4 2] C-contiguous cpu writable", []string{"order"}},
		{"device type", zerocopy.Want{Device: dlpack.Device{Type: dlpack.CUDA, ID: -1}}, c42, "float32 [4 2] C-contiguous cpu writable", []string{"device"}},
		{"device ordinal", zerocopy.Want{Device: cuda0}, with(c42, func(s *zerocopy.Spec) { s.Device = cuda1 }), "float32 [4 2] C-contiguous cuda:1 writable", []string{"device"}},
		{"writable", zerocopy.Want{Writable: true}, with(c42, func(s *zerocopy.Spec) { s.ReadOnly = true }), "float32 [4 2] C-contiguous cpu read-only", []string{"read-only"}},
		{"0-d against 1-d", zerocopy.Want{Shape: []int64{}}, zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{1}}, "float32 [1] C/F-contiguous cpu writable", []string{"ndim (1 != 0)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.want.Check(specView(t, tc.view))
			if tc.got == "" {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			var me *zerocopy.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("Check: %v, want a *MismatchError", err)
			}
			want := &zerocopy.MismatchError{Want: tc.want, Got: tc.got, Fields: tc.fields}
			if diff := cmp.Diff(want, me); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "zerocopy: want "+tc.want.String()+"; got "+tc.got+": ") {
				t.Errorf("message %q", msg)
			}
		})
	}
}

func TestWantString(t *testing.T) {
	for want, s := range map[string]zerocopy.Want{
		"any tensor": {},
		"float32 [-1 3] C-contiguous cuda:0 writable": {DType: dlpack.Float32Type, Shape: []int64{-1, 3}, Order: zerocopy.COrder, Device: dlpack.CUDADevice(0), Writable: true},
		"2-d F-contiguous cuda":                       {NDim: 2, Order: zerocopy.FOrder, Device: dlpack.Device{Type: dlpack.CUDA, ID: -1}},
		"[] cpu":                                      {Shape: []int64{}, Device: dlpack.CPUDevice},
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", s, got, want)
		}
	}
}

// Check reports a closed view as such, not as a mismatch.
func TestWantCheckClosed(t *testing.T) {
	v, err := zerocopy.FromSlice([]float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	err = zerocopy.Want{DType: dlpack.Float32Type}.Check(v)
	var me *zerocopy.MismatchError
	if err == nil || errors.As(err, &me) {
		t.Errorf("Check of a closed view: %v", err)
	}
}

// A Want that contradicts itself is a caller's bug: Check panics.
func TestWantCheckPanicsOnBadWant(t *testing.T) {
	v, err := zerocopy.FromSlice([]float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, w := range []zerocopy.Want{
		{NDim: 2, Shape: []int64{2}},
		{NDim: -1},
		{Shape: []int64{-2}},
		{Order: zerocopy.FOrder + 1},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Check with %+v did not panic", w)
				}
			}()
			w.Check(v)
		}()
	}
}

// A function states what it needs once; the error names every mismatch.
func ExampleWant_Check() {
	need := zerocopy.Want{DType: dlpack.Float32Type, Shape: []int64{-1, 3}, Order: zerocopy.COrder, Writable: true}

	ok, _ := zerocopy.FromSlice(make([]float32, 6), 2, 3)
	defer ok.Close()
	fmt.Println(need.Check(ok))

	bad, _ := zerocopy.FromSlice(make([]int64, 8), 2, 4)
	defer bad.Close()
	t, _ := bad.T() // [4 2], strided
	defer t.Close()
	ro := t.AsReadOnly() // borrows t's reference: no Close
	fmt.Println(need.Check(ro))
	// Output:
	// <nil>
	// zerocopy: want float32 [-1 3] C-contiguous writable; got int64 [4 2] F-contiguous cpu read-only: dtype, shape[1] (2 != 3), order, read-only
}
