package dlpack

import (
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestExportRoundTrip(t *testing.T) {
	buf := make([]float64, 64)
	base := uintptr(unsafe.Pointer(&buf[0]))
	cases := []struct {
		name        string
		d           Desc
		wantStrides []int64
	}{
		{"2-d C order", Desc{Data: base, Device: CPUDevice, DType: Float64Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}}, []int64{3, 1}},
		{"nil strides", Desc{Data: base, Device: CPUDevice, DType: Float64Type, Shape: []int64{2, 3, 4}}, []int64{12, 4, 1}},
		{"F order read-only", Desc{Data: base, Device: CPUDevice, DType: Float64Type, Shape: []int64{2, 3}, Strides: []int64{1, 2}, Flags: FlagReadOnly}, []int64{1, 2}},
		{"negative strides", Desc{Data: base + 5*8, Device: CPUDevice, DType: Float64Type, Shape: []int64{2, 3}, Strides: []int64{-3, -1}, Flags: FlagIsCopied}, []int64{-3, -1}},
		{"0-d", Desc{Data: base, Device: CPUDevice, DType: Float64Type}, []int64{}},
		{"zero-size NULL data", Desc{Device: CUDADevice(1), DType: Float16Type, Shape: []int64{0, 5}}, []int64{5, 1}},
		{"device pointer", Desc{Data: 0x7f0000001000, Device: CUDADevice(0), DType: Bfloat16Type, Shape: []int64{4}}, []int64{1}},
		{"padded fp4", Desc{Data: base, Device: CPUDevice, DType: DataType{Float4E2M1FN, 4, 1}, Shape: []int64{8}, Flags: FlagSubbyteTypePadded}, []int64{1}},
		{"10-d (dims outside the block)", Desc{Data: base, Device: CPUDevice, DType: Float64Type, Shape: ones(10)}, ones(10)},
	}
	for _, c := range cases {
		for _, legacy := range []bool{false, true} {
			name := c.name
			if legacy {
				name += " legacy"
			}
			t.Run(name, func(t *testing.T) {
				live := LiveExports()
				rel := &countRel{}
				var p unsafe.Pointer
				var err error
				if legacy {
					p, err = ExportLegacy(&c.d, rel)
				} else {
					p, err = Export(&c.d, rel)
				}
				if err != nil {
					t.Fatal(err)
				}
				if LiveExports() != live+1 {
					t.Errorf("LiveExports = %d, want %d", LiveExports(), live+1)
				}
				if r, ok := LookupExport(p); !ok || r != Releaser(rel) {
					t.Errorf("LookupExport = %v, %v; want our releaser", r, ok)
				}
				// The raw header as a C consumer sees it.
				var tensor *DLTensor
				if legacy {
					m := (*DLManagedTensor)(p)
					tensor = &m.DLTensor
					if m.Deleter != LegacyDeleterPtr() {
						t.Errorf("legacy deleter %#x, want %#x", m.Deleter, LegacyDeleterPtr())
					}
				} else {
					m := (*DLManagedTensorVersioned)(p)
					tensor = &m.DLTensor
					if m.Version != CurrentVersion || m.Flags != c.d.Flags || m.Deleter != DeleterPtr() {
						t.Errorf("header version %v flags %v deleter %#x", m.Version, m.Flags, m.Deleter)
					}
				}
				if tensor.Shape == nil || tensor.Strides == nil {
					t.Errorf("NULL shape or strides in an export")
				}
				if tensor.ByteOffset != 0 || uintptr(tensor.Data) != c.d.Data || int(tensor.NDim) != len(c.d.Shape) {
					t.Errorf("header data %#x offset %d ndim %d", tensor.Data, tensor.ByteOffset, tensor.NDim)
				}
				// Import it back as a Go consumer would.
				var im Imported
				if legacy {
					err = im.FromLegacy(p, nil)
				} else {
					err = im.FromVersioned(p, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := c.d
				want.Strides = c.wantStrides
				if legacy {
					want.Flags = 0
				}
				if diff := cmp.Diff(want, im.Desc, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("round trip (-want +got):\n%s", diff)
				}
				if !im.self {
					t.Errorf("import of our own export did not take the fast path")
				}
				if rel.count() != 0 {
					t.Fatalf("released before the consumer was done")
				}
				im.Release()
				im.Release()
				if rel.count() != 1 {
					t.Errorf("released %d times, want 1", rel.count())
				}
				mustNoLive(t, live)
				if _, ok := LookupExport(p); ok {
					t.Errorf("LookupExport still finds a released export")
				}
			})
		}
	}
}

func TestExportRejects(t *testing.T) {
	cases := []struct {
		name string
		d    Desc
		msg  string
	}{
		{"ndim 65", Desc{Data: 1, Device: CPUDevice, DType: Float32Type, Shape: ones(65)}, "ndim 65 out of range"},
		{"strides length", Desc{Data: 1, Device: CPUDevice, DType: Float32Type, Shape: []int64{2}, Strides: []int64{1, 1}}, "2 strides for 1 dimensions"},
		{"dtype", Desc{Data: 1, Device: CPUDevice, DType: DataType{Float, 8, 1}}, "dtype.bits 8"},
		{"device", Desc{Data: 1, Device: Device{Type: 6}, DType: Float32Type}, "device type 6"},
		{"flags", Desc{Data: 1, Device: CPUDevice, DType: Float32Type, Flags: 1 << 9}, "unknown flag bits 0x200"},
		{"negative extent", Desc{Data: 1, Device: CPUDevice, DType: Float32Type, Shape: []int64{-1}}, "shape[0] = -1 is negative"},
		{"NULL data", Desc{Device: CPUDevice, DType: Float32Type, Shape: []int64{3}}, "NULL for 3 elements"},
		{"span overflow", Desc{Data: 1, Device: CPUDevice, DType: Float32Type, Shape: []int64{3}, Strides: []int64{1 << 62}}, "overflows int64"},
		{"size overflow", Desc{Data: 1, Device: CPUDevice, DType: Float64Type, Shape: []int64{1 << 61}}, "overflows int64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			live := LiveExports()
			rel := &countRel{}
			for _, f := range []func(*Desc, Releaser) (unsafe.Pointer, error){Export, ExportLegacy} {
				p, err := f(&c.d, rel)
				if err == nil || !strings.Contains(err.Error(), c.msg) {
					t.Errorf("err = %v, want one containing %q", err, c.msg)
				}
				if p != nil {
					t.Errorf("a pointer came back with an error")
				}
			}
			if rel.count() != 0 {
				t.Errorf("a rejected export released the caller's reference")
			}
			mustNoLive(t, live)
		})
	}
}

func TestExportDoubleDelete(t *testing.T) {
	live := LiveExports()
	rel := &countRel{}
	d := Desc{Data: 0x1000, Device: CPUDevice, DType: Int32Type, Shape: []int64{4}}
	p, err := Export(&d, rel)
	if err != nil {
		t.Fatal(err)
	}
	ignored := ignoredDelete.Load()
	fn := (*DLManagedTensorVersioned)(p).Deleter
	purego.SyscallN(fn, uintptr(p)) // the consumer's call, through C
	purego.SyscallN(fn, uintptr(p)) // a buggy second call: ignored
	DeleteVersioned(p)              // the deleter field is NULL now: nothing
	if rel.count() != 1 {
		t.Errorf("released %d times, want 1", rel.count())
	}
	if got := ignoredDelete.Load() - ignored; got != 1 {
		t.Errorf("%d ignored deleter calls, want 1", got)
	}
	if (*DLManagedTensorVersioned)(p).Deleter != 0 {
		t.Errorf("deleter field not cleared after the deleter ran")
	}
	// The wrong kind of deleter for the pointer, and a pointer never exported.
	p, _ = Export(&d, rel)
	purego.SyscallN(LegacyDeleterPtr(), uintptr(p))
	var stranger DLManagedTensorVersioned
	purego.SyscallN(DeleterPtr(), uintptr(unsafe.Pointer(&stranger)))
	if rel.count() != 1 || ignoredDelete.Load()-ignored != 3 {
		t.Errorf("wrong-kind or stranger call was not ignored: released %d", rel.count())
	}
	DeleteVersioned(p)
	mustNoLive(t, live)
}

type panicRel struct{}

func (panicRel) Release() { panic("producer bug") }

func TestExportDeleterPanicStaysInGo(t *testing.T) {
	d := Desc{Data: 0x1000, Device: CPUDevice, DType: Int32Type, Shape: []int64{4}}
	p, err := Export(&d, panicRel{})
	if err != nil {
		t.Fatal(err)
	}
	before := deleterPanics.Load()
	purego.SyscallN(DeleterPtr(), uintptr(p)) // must not unwind into C
	if deleterPanics.Load() != before+1 {
		t.Errorf("panic in the release was not recovered and counted")
	}
}

func TestExportReleaseFromGoroutines(t *testing.T) {
	live := LiveExports()
	d := Desc{Data: 0x1000, Device: CPUDevice, DType: Int32Type, Shape: []int64{2, 2}}
	const n = 200
	rels := make([]countRel, n)
	ptrs := make(chan unsafe.Pointer, n)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for p := range ptrs {
				if i%2 == 0 {
					DeleteVersioned(p)
				} else {
					purego.SyscallN(DeleterPtr(), uintptr(p))
				}
			}
		})
	}
	for i := range rels {
		p, err := Export(&d, &rels[i])
		if err != nil {
			t.Fatal(err)
		}
		ptrs <- p
	}
	close(ptrs)
	wg.Wait()
	for i := range rels {
		if rels[i].count() != 1 {
			t.Fatalf("export %d released %d times", i, rels[i].count())
		}
	}
	mustNoLive(t, live)
}

func TestDeleteForeign(t *testing.T) {
	g, p := goodSpec().versioned()
	DeleteVersioned(p)
	if deleterCalls(p) != 1 {
		t.Errorf("foreign deleter not called")
	}
	g2, q := goodSpec().legacy()
	DeleteLegacy(q)
	if deleterCalls(q) != 1 {
		t.Errorf("foreign legacy deleter not called")
	}
	DeleteVersioned(nil)
	DeleteLegacy(nil)
	_, _ = g, g2
}

// A released block is handed out again only after blockQuarantine later
// releases, so a consumer's late second deleter call finds nothing.
func TestExportQuarantine(t *testing.T) {
	d := Desc{Data: 0x1000, Device: CPUDevice, DType: Int32Type, Shape: []int64{4}}
	rel := &countRel{}
	first, err := Export(&d, rel)
	if err != nil {
		t.Fatal(err)
	}
	DeleteVersioned(first)
	for i := range blockQuarantine {
		p, err := Export(&d, rel)
		if err != nil {
			t.Fatal(err)
		}
		if p == first {
			t.Fatalf("block reused after %d exports, want at least %d", i, blockQuarantine)
		}
		DeleteVersioned(p)
	}
	purego.SyscallN(DeleterPtr(), uintptr(first)) // late second call: ignored
	if rel.count() != blockQuarantine+1 {
		t.Errorf("released %d times, want %d", rel.count(), blockQuarantine+1)
	}
}

// Exports and releases from many goroutines at once, legacy and versioned,
// with Go-memory data: every release exactly once, nothing left live.
func TestExportStress(t *testing.T) {
	live := LiveExports()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			buf := make([]int64, 64)
			d := Desc{Data: uintptr(unsafe.Pointer(&buf[0])), Device: CPUDevice, DType: Int64Type, Shape: []int64{8, 8}}
			var held []unsafe.Pointer
			rel := &countRel{}
			for i := range 300 {
				export := Export
				if (g+i)%3 == 0 {
					export = ExportLegacy
				}
				p, err := export(&d, rel)
				if err != nil {
					t.Error(err)
					return
				}
				held = append(held, p)
				if len(held) > 20 {
					q := held[0]
					held = held[1:]
					if _, ok := LookupExport(q); !ok {
						t.Error("live export not found")
					}
					purego.SyscallN(deleterOf(q), uintptr(q))
				}
			}
			for _, q := range held {
				purego.SyscallN(deleterOf(q), uintptr(q))
			}
			if rel.count() != 300 {
				t.Errorf("released %d times, want 300", rel.count())
			}
		})
	}
	wg.Wait()
	mustNoLive(t, live)
}
