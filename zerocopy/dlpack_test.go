package zerocopy_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
	"github.com/ebitengine/purego"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// A C-callable deleter that counts calls per tensor, for producers built
// in Go memory: one purego callback for the whole test binary (purego never
// frees one), working with and without cgo.
var (
	dlpCountOnce sync.Once
	dlpCountFn   uintptr
	dlpCountMu   sync.Mutex
	dlpCountN    = map[uintptr]int{}
)

func dlpCountingDeleter() uintptr {
	dlpCountOnce.Do(func() {
		dlpCountFn = purego.NewCallback(func(p uintptr) uintptr {
			dlpCountMu.Lock()
			dlpCountN[p]++
			dlpCountMu.Unlock()
			return 0
		})
	})
	return dlpCountFn
}

func dlpCalls(p unsafe.Pointer) int {
	dlpCountMu.Lock()
	defer dlpCountMu.Unlock()
	return dlpCountN[uintptr(p)]
}

// dlpProducer is a DLManagedTensorVersioned (and a legacy one) built in Go
// memory the way a C producer would fill it.
type dlpProducer struct {
	ver     dlpack.DLManagedTensorVersioned
	leg     dlpack.DLManagedTensor
	shape   []int64
	strides []int64
}

// newDLPProducer describes float32[2,3] at data (a fake address) with the
// given strides (nil: NULL) and flags.
func newDLPProducer(data uintptr, shape, strides []int64, flags dlpack.Flags) *dlpProducer {
	pr := &dlpProducer{shape: append([]int64{}, shape...), strides: append([]int64(nil), strides...)}
	t := dlpack.DLTensor{NDim: int32(len(shape)), DType: dlpack.Float32Type, Device: dlpack.CUDADevice(0)}
	// data is not Go memory: a fake device address the GC never looks at.
	*(*uintptr)(unsafe.Pointer(&t.Data)) = data
	if len(shape) > 0 {
		t.Shape = &pr.shape[0]
	}
	if strides != nil && len(strides) > 0 {
		t.Strides = &pr.strides[0]
	}
	pr.ver = dlpack.DLManagedTensorVersioned{Version: dlpack.CurrentVersion, Deleter: dlpCountingDeleter(),
		Flags: flags, DLTensor: t}
	pr.leg = dlpack.DLManagedTensor{DLTensor: t, Deleter: dlpCountingDeleter()}
	dlpCountMu.Lock()
	delete(dlpCountN, uintptr(unsafe.Pointer(&pr.ver)))
	delete(dlpCountN, uintptr(unsafe.Pointer(&pr.leg)))
	dlpCountMu.Unlock()
	return pr
}

func (pr *dlpProducer) versioned() unsafe.Pointer { return unsafe.Pointer(&pr.ver) }
func (pr *dlpProducer) legacy() unsafe.Pointer    { return unsafe.Pointer(&pr.leg) }

// dlpLayout is what a view says about itself, for comparisons.
type dlpLayout struct {
	Ptr                               uintptr
	Device                            dlpack.Device
	DType                             dlpack.DataType
	Shape, Strides                    []int64
	ReadOnly, Copied, Padded, Foreign bool
	Stream                            uintptr
}

func dlpLayoutOf(v *zerocopy.View) dlpLayout {
	return dlpLayout{v.Ptr(), v.Device(), v.DType(), v.Shape(), v.Strides(),
		v.ReadOnly(), v.Copied(), v.Padded(), v.Foreign(), v.Stream()}
}

func TestFromDLPackFlags(t *testing.T) {
	cases := []struct {
		name  string
		flags dlpack.Flags
		want  dlpLayout
	}{
		{"none", 0, dlpLayout{ReadOnly: false}},
		{"read-only", dlpack.FlagReadOnly, dlpLayout{ReadOnly: true}},
		{"copied", dlpack.FlagIsCopied, dlpLayout{Copied: true}},
		{"padded", dlpack.FlagSubbyteTypePadded, dlpLayout{Padded: true}},
		{"all", dlpack.FlagReadOnly | dlpack.FlagIsCopied | dlpack.FlagSubbyteTypePadded,
			dlpLayout{ReadOnly: true, Copied: true, Padded: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pr := newDLPProducer(0x7f0000000100, []int64{2, 3}, []int64{1, 2}, c.flags)
			v, err := zerocopy.FromDLPackVersioned(pr.versioned())
			if err != nil {
				t.Fatal(err)
			}
			want := c.want
			want.Ptr, want.Device, want.DType = 0x7f0000000100, dlpack.CUDADevice(0), dlpack.Float32Type
			want.Shape, want.Strides, want.Foreign = []int64{2, 3}, []int64{1, 2}, true
			if diff := cmp.Diff(want, dlpLayoutOf(v)); diff != "" {
				t.Errorf("view (-want +got):\n%s", diff)
			}
			if !strings.Contains(v.Owner().Label(), "dlpack") {
				t.Errorf("owner label %q does not say dlpack", v.Owner().Label())
			}
			// A retained derived view keeps the memory: the deleter waits for it.
			col, err := retained(v.Select(1, 2))
			if err != nil {
				t.Fatal(err)
			}
			v.Close()
			if n := dlpCalls(pr.versioned()); n != 0 {
				t.Fatalf("deleter ran %d times while a derived view is open", n)
			}
			col.Close()
			col.Close()
			v.Close()
			if n := dlpCalls(pr.versioned()); n != 1 {
				t.Errorf("deleter ran %d times, want 1", n)
			}
		})
	}
}

func TestFromDLPackLegacy(t *testing.T) {
	pr := newDLPProducer(0x7f0000000100, []int64{2, 3}, nil, 0) // NULL strides: row-major
	v, err := zerocopy.FromDLPackLegacy(pr.legacy())
	if err != nil {
		t.Fatal(err)
	}
	want := dlpLayout{Ptr: 0x7f0000000100, Device: dlpack.CUDADevice(0), DType: dlpack.Float32Type,
		Shape: []int64{2, 3}, Strides: []int64{3, 1}, Foreign: true}
	if diff := cmp.Diff(want, dlpLayoutOf(v)); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
	v.Close()
	if n := dlpCalls(pr.legacy()); n != 1 {
		t.Errorf("deleter ran %d times, want 1", n)
	}
}

func TestFromDLPackRejects(t *testing.T) {
	cases := []struct {
		name  string
		pr    *dlpProducer
		mut   func(*dlpProducer)
		field string
	}{
		{"NULL strides at 1.3", newDLPProducer(0x1000, []int64{2, 3}, nil, 0), nil, "dl_tensor.strides"},
		{"negative extent", newDLPProducer(0x1000, []int64{2, -3}, []int64{3, 1}, 0), nil, "dl_tensor.shape[1]"},
		{"unknown flags", newDLPProducer(0x1000, []int64{2}, []int64{1}, 1<<40), nil, "flags"},
		{"major 2", newDLPProducer(0x1000, []int64{2}, []int64{1}, 0),
			func(pr *dlpProducer) { pr.ver.Version.Major = 2 }, "version.major"},
		{"NULL data", newDLPProducer(0, []int64{2}, []int64{1}, 0), nil, "dl_tensor.data"},
		{"lanes", newDLPProducer(0x1000, []int64{2}, []int64{1}, 0),
			func(pr *dlpProducer) { pr.ver.DLTensor.DType.Lanes = 2 }, "dl_tensor.dtype.lanes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.mut != nil {
				c.mut(c.pr)
			}
			v, err := zerocopy.FromDLPackVersioned(c.pr.versioned())
			var fe *dlpack.FieldError
			if v != nil || !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v, %v; want an error naming %s", v, err, c.field)
			}
			if !strings.HasPrefix(err.Error(), "zerocopy: FromDLPackVersioned: dlpack: "+c.field) {
				t.Errorf("error %q", err)
			}
			if n := dlpCalls(c.pr.versioned()); n != 1 {
				t.Errorf("deleter ran %d times on a rejected import, want 1", n)
			}
		})
	}
	if _, err := zerocopy.FromDLPackVersioned(nil); err == nil {
		t.Error("NULL tensor accepted")
	}
	if _, err := zerocopy.FromDLPackLegacy(nil); err == nil {
		t.Error("NULL legacy tensor accepted")
	}
}

// The whole path on fake device memory: allocate, view, slice, export,
// re-import, with the same pointer at every step and exactly one free after
// the last release, in every order of closing.
func TestDLPackRoundTripFakemem(t *testing.T) {
	type step struct {
		name string
		make func(t *testing.T, base *zerocopy.View) *zerocopy.View // the view to export
	}
	steps := []step{
		{"read-only", func(t *testing.T, v *zerocopy.View) *zerocopy.View { return v.AsReadOnly() }},
		{"reversed rows", func(t *testing.T, v *zerocopy.View) *zerocopy.View {
			return dlpMust(t)(v.Slice(0, zerocopy.Omit, zerocopy.Omit, -1))
		}},
		{"transposed", func(t *testing.T, v *zerocopy.View) *zerocopy.View { return dlpMust(t)(v.T()) }},
		{"0-d", func(t *testing.T, v *zerocopy.View) *zerocopy.View {
			row := dlpMust(t)(v.Select(0, 1))
			defer row.Close()
			return dlpMust(t)(row.Select(0, 2))
		}},
		{"zero-size", func(t *testing.T, v *zerocopy.View) *zerocopy.View { return dlpMust(t)(v.Slice(1, 2, 2, 1)) }},
		{"6-d", func(t *testing.T, v *zerocopy.View) *zerocopy.View {
			return dlpMust(t)(v.Reshape(1, 2, 2, 1, 2, 3))
		}},
		{"10-d", func(t *testing.T, v *zerocopy.View) *zerocopy.View {
			return dlpMust(t)(v.Reshape(1, 2, 1, 1, 1, 1, 1, 2, 1, 6))
		}},
	}
	for _, s := range steps {
		for _, legacy := range []bool{false, true} {
			for _, closeFirst := range []string{"producer", "consumer"} {
				name := s.name + "/" + closeFirst + " first"
				if legacy {
					name += "/legacy"
				}
				t.Run(name, func(t *testing.T) {
					live := dlpack.LiveExports()
					mem := fakemem.New(fakemem.Options{})
					base, err := mem.View(dlpack.CUDADevice(1), dlpack.Float64Type, 4, 6)
					if err != nil {
						t.Fatal(err)
					}
					v, err := s.make(t, base).Retain() // outlives base
					if err != nil {
						t.Fatal(err)
					}
					base.Close()
					if legacy && v.ReadOnly() {
						v.Close()
						t.Skip("legacy tensors cannot be read-only (TestToDLPackFlagsAndOptions)")
					}
					var p unsafe.Pointer
					if legacy {
						p, err = v.ToDLPackLegacy()
					} else {
						p, err = v.ToDLPack()
					}
					if err != nil {
						t.Fatal(err)
					}
					if o, ok := zerocopy.DLPackOwner(p); !ok || o != v.Owner() {
						t.Errorf("DLPackOwner = %p, %v; want the view's owner %p", o, ok, v.Owner())
					}
					var w *zerocopy.View
					if legacy {
						w, err = zerocopy.FromDLPackLegacy(p)
					} else {
						w, err = zerocopy.FromDLPackVersioned(p)
					}
					if err != nil {
						t.Fatal(err)
					}
					want := dlpLayoutOf(v)
					want.Foreign = true
					if diff := cmp.Diff(want, dlpLayoutOf(w), cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("re-imported view (-want +got):\n%s", diff)
					}
					if closeFirst == "producer" {
						v.Close()
						if mem.Stats().Frees != 0 {
							t.Fatal("memory freed while the consumer holds it")
						}
						w.Close()
					} else {
						w.Close()
						if mem.Stats().Frees != 0 {
							t.Fatal("memory freed while the producer's view is open")
						}
						v.Close()
					}
					st := mem.Stats()
					if st.Frees != 1 || st.FreeCalls != 1 || st.Live != 0 {
						t.Errorf("fakemem stats %+v, want exactly one free", st)
					}
					if got := dlpack.LiveExports(); got != live {
						t.Errorf("LiveExports = %d, want %d", got, live)
					}
				})
			}
		}
	}
}

func dlpMust(t *testing.T) func(*zerocopy.View, error) *zerocopy.View {
	return func(v *zerocopy.View, err error) *zerocopy.View {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestToDLPackFlagsAndOptions(t *testing.T) {
	data := make([]float32, 6)
	v, err := zerocopy.FromSlice(data, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ro := v.AsReadOnly()
	defer ro.Close()
	cases := []struct {
		name string
		v    *zerocopy.View
		opts []zerocopy.DLPackOption
		want dlpack.Flags
	}{
		{"writable", v, nil, 0},
		{"read-only view", ro, nil, dlpack.FlagReadOnly},
		{"read-only option", v, []zerocopy.DLPackOption{zerocopy.DLPackReadOnly()}, dlpack.FlagReadOnly},
		{"copied option", v, []zerocopy.DLPackOption{zerocopy.DLPackCopied()}, dlpack.FlagIsCopied},
	}
	for _, c := range cases {
		p, err := c.v.ToDLPack(c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		m := (*dlpack.DLManagedTensorVersioned)(p)
		if m.Flags != c.want {
			t.Errorf("%s: flags %v, want %v", c.name, m.Flags, c.want)
		}
		if uintptr(m.DLTensor.Data) != uintptr(unsafe.Pointer(&data[0])) || m.DLTensor.Strides == nil {
			t.Errorf("%s: header data %p strides %p", c.name, m.DLTensor.Data, m.DLTensor.Strides)
		}
		dlpack.DeleteVersioned(p)
	}
	if _, err := ro.ToDLPackLegacy(); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("legacy export of a read-only view: %v", err)
	}
}

func TestToDLPackClosedView(t *testing.T) {
	v, err := zerocopy.FromSlice([]int32{1, 2, 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	live := dlpack.LiveExports()
	if _, err := v.ToDLPack(); err == nil {
		t.Error("closed view exported")
	}
	if _, err := v.ToDLPackLegacy(); err == nil {
		t.Error("closed view exported as legacy")
	}
	if dlpack.LiveExports() != live {
		t.Error("a refused export is live")
	}
}

// The export holds the memory after the view is closed, and is released
// from other goroutines, some through the C function pointer.
func TestToDLPackReleasedFromGoroutines(t *testing.T) {
	live := dlpack.LiveExports()
	mem := fakemem.New(fakemem.Options{})
	v, err := mem.View(dlpack.CUDADevice(0), dlpack.Int32Type, 16)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	ptrs := make(chan unsafe.Pointer, n)
	for range n {
		p, err := v.ToDLPack()
		if err != nil {
			t.Fatal(err)
		}
		ptrs <- p
	}
	close(ptrs)
	v.Close()
	if mem.Stats().Frees != 0 {
		t.Fatal("freed while exports are live")
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for p := range ptrs {
				if i%2 == 0 {
					dlpack.DeleteVersioned(p)
				} else {
					purego.SyscallN(dlpack.DeleterPtr(), uintptr(p))
				}
			}
		})
	}
	wg.Wait()
	if st := mem.Stats(); st.Frees != 1 || st.FreeCalls != 1 {
		t.Errorf("stats %+v, want one free", st)
	}
	if dlpack.LiveExports() != live {
		t.Errorf("LiveExports = %d, want %d", dlpack.LiveExports(), live)
	}
}

func TestFromDLPackAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counting")
	}
	pr := newDLPProducer(0x7f0000000100, []int64{2, 3}, []int64{3, 1}, 0)
	pr.ver.Deleter = 0 // nothing to call: the loop re-imports the same tensor
	allocs := testing.AllocsPerRun(100, func() {
		v, err := zerocopy.FromDLPackVersioned(pr.versioned())
		if err != nil {
			panic(err)
		}
		v.Close()
	})
	if allocs > 1 {
		t.Errorf("import into a view made %.1f allocations, want 1", allocs)
	}
}

// Export a Go slice to a DLPack consumer and take the tensor back in as a
// view: the same memory, no copy; the slice's owner is released when both
// the view and the consumer are done.
func ExampleView_ToDLPack() {
	data := []float32{0, 1, 2, 3, 4, 5}
	v, err := zerocopy.FromSlice(data, 2, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	before := dlpack.LiveExports()
	p, err := v.ToDLPack() // a DLManagedTensorVersioned* for C; its deleter releases the export
	if err != nil {
		fmt.Println(err)
		return
	}
	v.Close() // the export keeps the memory

	w, err := zerocopy.FromDLPackVersioned(p) // what a Go consumer does with p
	if err != nil {
		fmt.Println(err)
		return
	}
	x, _ := zerocopy.At[float32](w, 1, 2)
	fmt.Println(w.DType(), w.Shape(), w.Ptr() == uintptr(unsafe.Pointer(&data[0])), x)
	w.Close() // runs the export's deleter: the last reference goes
	fmt.Println("exports still live:", dlpack.LiveExports()-before)
	// Output:
	// float32 [2 3] true 5
	// exports still live: 0
}

// A producer's tensor that breaks the rules is refused with an error that
// names the field; the producer's deleter has run.
func ExampleFromDLPackVersioned() {
	shape := []int64{4}
	t := &dlpack.DLManagedTensorVersioned{
		Version: dlpack.Version{Major: 1, Minor: 3},
		DLTensor: dlpack.DLTensor{NDim: 1, DType: dlpack.Float32Type, Device: dlpack.CPUDevice,
			Shape: &shape[0]}, // strides NULL: not allowed since DLPack 1.2
	}
	_, err := zerocopy.FromDLPackVersioned(unsafe.Pointer(t))
	var fe *dlpack.FieldError
	fmt.Println(errors.As(err, &fe), fe.Field)
	// Output:
	// true dl_tensor.strides
}

// With the leak net on, an imported view dropped without Close is found by
// the GC, reported, and its producer's deleter runs: the view must not share
// an allocation with the Owner the net's cleanup holds.
func TestFromDLPackLeakNet(t *testing.T) {
	var mu sync.Mutex
	var reports []zerocopy.LeakInfo
	zerocopy.SetLeakReporter(func(l zerocopy.LeakInfo) {
		mu.Lock()
		reports = append(reports, l)
		mu.Unlock()
	})
	defer zerocopy.SetLeakReporter(nil)
	for _, shape := range [][]int64{{2, 3}, {1, 1, 1, 1, 2, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 2, 3}} {
		strides := make([]int64, len(shape))
		dlpack.FillCStrides(strides, shape)
		pr := newDLPProducer(0x7f0000000100, shape, strides, 0)
		func() {
			if _, err := zerocopy.FromDLPackVersioned(pr.versioned()); err != nil { // dropped unclosed
				t.Fatal(err)
			}
		}()
		for i := 0; i < 50 && dlpCalls(pr.versioned()) == 0; i++ {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		if n := dlpCalls(pr.versioned()); n != 1 {
			t.Errorf("ndim %d: a leaked import's deleter ran %d times, want 1", len(shape), n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 3 || reports[0].Label != "dlpack import" {
		t.Errorf("leak reports %v, want 3 for dlpack imports", reports)
	}
}
