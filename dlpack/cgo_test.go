//go:build cgo

package dlpack

import (
	"errors"
	"sync"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack/internal/cabi"
	"github.com/google/go-cmp/cmp"
)

// Tensors made by a C producer (malloc'd header, shape, strides and data;
// a C deleter that counts its calls and frees) imported here.

func cSpec() cabi.Spec {
	return cabi.Spec{NDim: 2, Shape: []int64{2, 3}, Strides: []int64{3, 1},
		Code: uint8(Float), Bits: 32, Lanes: 1, DeviceType: int32(CPU),
		Major: 1, Minor: 3, DataBytes: 24}
}

func TestImportFromC(t *testing.T) {
	cases := []struct {
		name   string
		mut    func(*cabi.Spec)
		legacy bool
		want   Desc // Data is relative to the record's data pointer
	}{
		{"versioned", func(*cabi.Spec) {}, false,
			Desc{Device: CPUDevice, DType: Float32Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}}},
		{"versioned read-only byte_offset", func(s *cabi.Spec) { s.Flags, s.ByteOffset = 1, 8 }, false,
			Desc{Data: 8, Device: CPUDevice, DType: Float32Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}, Flags: FlagReadOnly}},
		{"versioned 1.1 NULL strides", func(s *cabi.Spec) { s.Minor, s.Strides = 1, nil }, false,
			Desc{Device: CPUDevice, DType: Float32Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}}},
		{"legacy NULL strides", func(s *cabi.Spec) { s.Strides = nil }, true,
			Desc{Device: CPUDevice, DType: Float32Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}}},
		{"legacy negative strides", func(s *cabi.Spec) { s.Strides, s.ByteOffset = []int64{-3, -1}, 20 }, true,
			Desc{Data: 20, Device: CPUDevice, DType: Float32Type, Shape: []int64{2, 3}, Strides: []int64{-3, -1}}},
		{"0-d", func(s *cabi.Spec) { s.NDim, s.Shape, s.Strides, s.DataBytes = 0, nil, nil, 4 }, false,
			Desc{Device: CPUDevice, DType: Float32Type}},
		{"zero-size NULL data", func(s *cabi.Spec) { s.Shape, s.DataBytes = []int64{0, 3}, 0 }, false,
			Desc{Device: CPUDevice, DType: Float32Type, Shape: []int64{0, 3}, Strides: []int64{3, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := cSpec()
			c.mut(&s)
			var p unsafe.Pointer
			var rec cabi.Record
			var im Imported
			var err error
			if c.legacy {
				p, rec = cabi.NewLegacy(s)
				err = im.FromLegacy(p, nil)
			} else {
				p, rec = cabi.NewVersioned(s)
				err = im.FromVersioned(p, nil)
			}
			defer rec.Free()
			if err != nil {
				t.Fatal(err)
			}
			c.want.Data += rec.Data()
			if diff := cmp.Diff(c.want, im.Desc, cmp.Transformer("nil", func(s []int64) []int64 {
				if len(s) == 0 {
					return nil
				}
				return s
			})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if im.self {
				t.Error("a C deleter was taken for our own")
			}
			if rec.Calls() != 0 {
				t.Fatal("deleter ran before Release")
			}
			im.Release()
			im.Release()
			if rec.Calls() != 1 {
				t.Errorf("C deleter ran %d times, want 1", rec.Calls())
			}
		})
	}
}

func TestImportFromCRejected(t *testing.T) {
	cases := []struct {
		name  string
		mut   func(*cabi.Spec)
		field string
	}{
		{"major 2", func(s *cabi.Spec) { s.Major = 2 }, "version.major"},
		{"NULL strides 1.3", func(s *cabi.Spec) { s.Strides = nil }, "dl_tensor.strides"},
		{"lanes 2", func(s *cabi.Spec) { s.Lanes = 2 }, "dl_tensor.dtype.lanes"},
		{"NULL data", func(s *cabi.Spec) { s.DataBytes = 0 }, "dl_tensor.data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := cSpec()
			c.mut(&s)
			p, rec := cabi.NewVersioned(s)
			defer rec.Free()
			_, err := ImportVersioned(p)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("err = %v, want a FieldError on %s", err, c.field)
			}
			if rec.Calls() != 1 {
				t.Errorf("C deleter ran %d times on a rejected import, want 1", rec.Calls())
			}
		})
	}
}

// A C tensor imported, re-exported with the import as its Releaser, and
// deleted by a C consumer on a thread Go did not create: the chain ends in
// exactly one call of the C producer's deleter, made from that thread.
func TestChainDeletedOnForeignThread(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		live := LiveExports()
		p, rec := cabi.NewVersioned(cSpec())
		im, err := ImportVersioned(p)
		if err != nil {
			t.Fatal(err)
		}
		export := Export
		if legacy {
			export = ExportLegacy
		}
		q, err := export(&im.Desc, im)
		if err != nil {
			t.Fatal(err)
		}
		if err := cabi.DeleteOnNewThread(q, legacy); err != nil {
			t.Fatal(err)
		}
		if rec.Calls() != 1 {
			t.Errorf("legacy=%v: producer deleter ran %d times, want 1", legacy, rec.Calls())
		}
		// The header's deleter is NULL now: a second C delete calls nothing.
		if err := cabi.DeleteOnNewThread(q, legacy); err != nil {
			t.Fatal(err)
		}
		if rec.Calls() != 1 {
			t.Errorf("legacy=%v: producer deleter ran %d times after a second delete", legacy, rec.Calls())
		}
		mustNoLive(t, live)
		rec.Free()
	}
}

// Exports released from many foreign threads at once, and a second call of
// the deleter function with the same pointer from a foreign thread.
func TestExportReleasedOnForeignThreads(t *testing.T) {
	live := LiveExports()
	const n = 64
	rels := make([]countRel, n)
	ptrs := make([]unsafe.Pointer, n)
	d := Desc{Data: 0x1000, Device: CUDADevice(0), DType: Float32Type, Shape: []int64{8, 8}}
	for i := range ptrs {
		var err error
		if ptrs[i], err = Export(&d, &rels[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range ptrs {
		wg.Go(func() {
			if err := cabi.CallOnNewThread(DeleterPtr(), uintptr(ptrs[i])); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	ignored := ignoredDelete.Load()
	if err := cabi.CallOnNewThread(DeleterPtr(), uintptr(ptrs[0])); err != nil {
		t.Fatal(err)
	}
	if ignoredDelete.Load() != ignored+1 {
		t.Errorf("second deleter call from a foreign thread was not ignored")
	}
	for i := range rels {
		if rels[i].count() != 1 {
			t.Errorf("export %d released %d times", i, rels[i].count())
		}
	}
	mustNoLive(t, live)
}

// C imports released from many goroutines at once: each C deleter runs
// exactly once and the producer's total agrees.
func TestTotalCDeleterCalls(t *testing.T) {
	before := cabi.TotalDeleterCalls()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				p, rec := cabi.NewLegacy(cSpec())
				im, err := ImportLegacy(p)
				if err != nil {
					t.Error(err)
					return
				}
				im.Release()
				if rec.Calls() != 1 {
					t.Errorf("calls %d", rec.Calls())
				}
				rec.Free()
			}
		})
	}
	wg.Wait()
	if got := cabi.TotalDeleterCalls() - before; got != 400 {
		t.Errorf("%d C deleter calls, want 400", got)
	}
}

// cgo's pointer checks scan the Go object a pointer passed to C lies in
// and panic on pointers to unpinned Go memory. Exports live in recycled,
// pinned blocks that point at Go-memory data and dims outside the block:
// handing any of them to C must pass the checks, while other exports come
// and go.
func TestExportPassesCgoPointerChecks(t *testing.T) {
	// First prove the checks are on: Go memory holding an unpinned Go
	// pointer must be refused.
	func() {
		defer func() {
			if recover() == nil {
				t.Skip("cgo pointer checks are off (GODEBUG=cgocheck=0?)")
			}
		}()
		type holder struct{ p *int }
		h := &holder{p: new(int)}
		cabi.PassToC(unsafe.Pointer(h))
	}()
	live := LiveExports()
	bufs := make([][]float32, 40)
	var ptrs []unsafe.Pointer
	for i := range bufs {
		bufs[i] = make([]float32, 8)
		d := Desc{Data: uintptr(unsafe.Pointer(&bufs[i][0])), Device: CPUDevice, DType: Float32Type,
			Shape: []int64{2, 4}}
		if i%3 == 0 {
			d.Shape = ones(12) // dims outside the block, pinned separately
			d.Shape[0] = 8
		}
		p, err := Export(&d, &countRel{})
		if err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, p)
		cabi.PassToC(p)
		if i%2 == 0 { // release every other one: their blocks are reused
			DeleteVersioned(p)
		}
	}
	for i, p := range ptrs {
		if i%2 == 1 {
			cabi.PassToC(p)
			DeleteVersioned(p)
		}
	}
	mustNoLive(t, live)
}
