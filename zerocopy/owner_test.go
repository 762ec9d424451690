package zerocopy_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"

	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/google/go-cmp/cmp"
)

// TestOnReleaseOrder: hooks run newest first, before the Releaser, once, on
// the last release only.
func TestOnReleaseOrder(t *testing.T) {
	var got []string
	o := zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { got = append(got, "releaser") }), "test")
	for _, name := range []string{"first", "second", "third"} {
		if err := o.OnRelease(func() { got = append(got, name) }); err != nil {
			t.Fatalf("OnRelease(%s): %v", name, err)
		}
	}
	if err := o.Retain(); err != nil {
		t.Fatal(err)
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("hooks ran before the last release: %v", got)
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	if err := o.Release(); !errors.Is(err, zerocopy.ErrReleased) {
		t.Fatalf("extra Release: %v, want ErrReleased", err)
	}
	want := []string{"third", "second", "first", "releaser"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run order (-want +got):\n%s", diff)
	}
}

// TestOnReleaseAfterRelease: registering on a released owner fails and the
// function never runs; a nil function is refused.
func TestOnReleaseAfterRelease(t *testing.T) {
	o := zerocopy.NewOwner(nil, "gone")
	if err := o.OnRelease(nil); err == nil {
		t.Error("OnRelease(nil) succeeded")
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := o.OnRelease(func() { ran = true }); !errors.Is(err, zerocopy.ErrReleased) {
		t.Fatalf("OnRelease after release: %v, want ErrReleased", err)
	}
	if ran {
		t.Error("hook registered after release ran")
	}
}

// TestOnReleaseInit: Init clears the hooks of an owner that was released.
func TestOnReleaseInit(t *testing.T) {
	var o zerocopy.Owner
	o.Init(nil, "embedded")
	n := 0
	if err := o.OnRelease(func() { n++ }); err != nil {
		t.Fatal(err)
	}
	o.Release()
	o.Init(nil, "again")
	if err := o.OnRelease(func() { n += 10 }); err != nil {
		t.Fatalf("OnRelease after Init: %v", err)
	}
	o.Release()
	if n != 11 {
		t.Errorf("hooks ran to %d, want 11 (each once)", n)
	}
}

// TestOnReleaseConcurrent races registrations against the last release:
// every registration that succeeded runs exactly once, before the Releaser,
// and every one that failed never runs.
func TestOnReleaseConcurrent(t *testing.T) {
	const rounds, workers = 200, 8
	for round := range rounds {
		var released atomic.Bool
		var late atomic.Int32 // hooks that ran after the Releaser
		o := zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { released.Store(true) }), "race")
		runs := make([]atomic.Int32, workers)
		ok := make([]bool, workers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range workers {
			wg.Go(func() {
				<-start
				ok[i] = o.OnRelease(func() {
					if released.Load() {
						late.Add(1)
					}
					runs[i].Add(1)
				}) == nil
			})
		}
		wg.Go(func() {
			<-start
			o.Release()
		})
		close(start)
		wg.Wait()
		for i := range workers {
			want := int32(0)
			if ok[i] {
				want = 1
			}
			if got := runs[i].Load(); got != want {
				t.Fatalf("round %d, worker %d: registered=%v, ran %d times", round, i, ok[i], got)
			}
		}
		if late.Load() != 0 || !released.Load() {
			t.Fatalf("round %d: %d hooks ran after the Releaser; released=%v", round, late.Load(), released.Load())
		}
	}
}

// ExampleOwner_OnRelease attaches clean-up that must run while the memory
// is still valid: before the Releaser frees it.
func ExampleOwner_OnRelease() {
	o := zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { fmt.Println("free the memory") }), "buffer")
	o.OnRelease(func() { fmt.Println("unregister the memory") })
	o.Release()
	// Output:
	// unregister the memory
	// free the memory
}

// TestViewInitReuse: a closed view made with Init can be made again over
// other memory (a caller reusing one allocation per call); views derived
// from its earlier use stay closed, and Init of an open view is refused.
func TestViewInitReuse(t *testing.T) {
	a, b := []float32{1, 2, 3, 4}, []float32{5, 6, 7, 8}
	spec := func(s []float32) *zerocopy.Spec {
		return &zerocopy.Spec{Ptr: uintptr(unsafe.Pointer(&s[0])), Device: dlpack.Device{Type: dlpack.CPU},
			DType: dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 1}, Shape: []int64{4}}
	}
	var (
		v zerocopy.View
		o zerocopy.Owner
	)
	o.Init(nil, "first")
	if err := v.Init(spec(a), &o); err != nil {
		t.Fatal(err)
	}
	old, err := v.Slice(0, 1, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	o2 := zerocopy.NewOwner(nil, "other")
	if err := v.Init(spec(b), o2); err == nil || !strings.Contains(err.Error(), "open view") {
		t.Fatalf("Init of an open view: err = %v, want a refusal", err)
	}
	v.Close()
	if o.Alive() {
		t.Fatal("the owner outlived the view's Close")
	}
	fromClosed, _ := v.Slice(0, 0, 2, 1) // derived after the Close, before the reuse
	o.Init(nil, "second")
	if err := v.Init(spec(b), &o); err != nil {
		t.Fatalf("Init of a closed view: %v", err)
	}
	if got, err := zerocopy.HostSliceRO[float32](&v); err != nil || got[0] != 5 {
		t.Fatalf("reused view reads %v, %v; want [5 6 7 8]", got, err)
	}
	for name, d := range map[string]*zerocopy.View{"derived before Close": old, "derived after Close": fromClosed} {
		if d.Alive() {
			t.Errorf("%s: alive after the view was made again", name)
		}
		if _, err := zerocopy.HostSliceRO[float32](d); !errors.Is(err, zerocopy.ErrClosed) {
			t.Errorf("%s: read after reuse: err = %v, want ErrClosed", name, err)
		}
		if _, err := d.Retain(); !errors.Is(err, zerocopy.ErrClosed) {
			t.Errorf("%s: Retain after reuse: err = %v, want ErrClosed", name, err)
		}
	}
	cur, _ := v.Slice(0, 1, 2, 1)
	if got, err := zerocopy.HostSliceRO[float32](cur); err != nil || got[0] != 6 {
		t.Errorf("a view derived from the new use reads %v, %v; want [6]", got, err)
	}
	v.Close()
}

// TestViewInitReuseLayout: a reused view keeps the layout it validated
// only when the new spec has exactly that layout; any difference (shape,
// strides, dtype, nil strides that differ from C order) and a spec that
// failed before are validated again, and a NULL pointer is refused either way.
func TestViewInitReuseLayout(t *testing.T) {
	buf := make([]float32, 64)
	f32 := dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 1}
	ptr := uintptr(unsafe.Pointer(&buf[0]))
	cpu := dlpack.Device{Type: dlpack.CPU}
	cases := []struct {
		name    string
		spec    zerocopy.Spec
		wantErr string
		shape   []int64
		strides []int64
	}{
		{"first", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{4, 4}}, "", []int64{4, 4}, []int64{4, 1}},
		{"same, strides spelled out", zerocopy.Spec{Device: cpu, Ptr: ptr + 4, DType: f32, Shape: []int64{4, 4}, Strides: []int64{4, 1}}, "", []int64{4, 4}, []int64{4, 1}},
		{"transposed strides", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{4, 4}, Strides: []int64{1, 4}}, "", []int64{4, 4}, []int64{1, 4}},
		{"nil strides after F order", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{4, 4}}, "", []int64{4, 4}, []int64{4, 1}},
		{"other shape", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{2, 8}}, "", []int64{2, 8}, []int64{8, 1}},
		{"NULL pointer, same layout", zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{2, 8}}, "NULL", nil, nil},
		{"negative extent", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{2, -8}}, "negative", nil, nil},
		{"negative extent again", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{2, -8}}, "negative", nil, nil},
		{"bad dtype", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: dlpack.DataType{Code: dlpack.Float, Bits: 32}, Shape: []int64{2, 8}}, "lanes", nil, nil},
		{"bad dtype again", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: dlpack.DataType{Code: dlpack.Float, Bits: 32}, Shape: []int64{2, 8}}, "lanes", nil, nil},
		{"bad device", zerocopy.Spec{Ptr: ptr, DType: f32, Shape: []int64{2, 8}, Device: dlpack.Device{Type: 99}}, "device type", nil, nil},
		{"after failures", zerocopy.Spec{Device: cpu, Ptr: ptr, DType: f32, Shape: []int64{2, 8}}, "", []int64{2, 8}, []int64{8, 1}},
	}
	var (
		v zerocopy.View
		o zerocopy.Owner
	)
	for _, c := range cases {
		o.Init(nil, c.name)
		err := v.Init(&c.spec, &o)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.wantErr)
			}
			if o.Alive() {
				t.Errorf("%s: a rejected Init kept its owner", c.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := v.Shape(); !cmp.Equal(got, c.shape) {
			t.Errorf("%s: shape %v, want %v", c.name, got, c.shape)
		}
		if got := v.Strides(); !cmp.Equal(got, c.strides) {
			t.Errorf("%s: strides %v, want %v", c.name, got, c.strides)
		}
		if v.Ptr() != c.spec.Ptr {
			t.Errorf("%s: Ptr %#x, want %#x", c.name, v.Ptr(), c.spec.Ptr)
		}
		v.Close()
	}
}
