package zerocopy_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/cai"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
)

// The whole path on fake CUDA memory: a foreign allocation is wrapped,
// viewed, sliced, exported to DLPack, re-imported, described as a
// __cuda_array_interface__ (through its JSON form) and imported back. The
// data pointer must be the same at every step, the bytes must be the ones
// the allocation holds, and the allocation must be freed exactly once,
// after the last release, whichever goroutine (or the GC) makes it.

const e2eRows, e2eCols = 6, 8

// fakeForeign allocates a float32[6 8] of 0, 1, 2, ... on fake cuda:0 and
// wraps it as a foreign allocation whose deleter is the tracker's Free.
func fakeForeign(t *testing.T, tr *fakemem.Tracker) (*zerocopy.View, fakemem.Allocation) {
	t.Helper()
	a, err := tr.Alloc(dlpack.CUDADevice(0), e2eRows*e2eCols*4)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tr.Bytes(a.Ptr, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < e2eRows*e2eCols; i++ {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(i)))
	}
	base, err := zerocopy.Wrap(zerocopy.Spec{Ptr: a.Ptr, Device: dlpack.CUDADevice(0), DType: dlpack.Float32Type,
		Shape: []int64{e2eRows, e2eCols}, Foreign: true}, zerocopy.NewOwner(tr.Releaser(a.Ptr), "foreign cuda"))
	if err != nil {
		t.Fatal(err)
	}
	return base, a
}

// roundTrip takes v out through DLPack (versioned or legacy) and back, then
// out through the CUDA Array Interface's JSON form and back, checking the
// pointer and layout at each step. It returns every view it made; the last
// one is the CAI import.
func roundTrip(t *testing.T, v *zerocopy.View, legacy bool) []*zerocopy.View {
	t.Helper()
	ptr, strides := v.Ptr(), v.Strides()
	same := func(step string, got uintptr) {
		t.Helper()
		if got != ptr {
			t.Fatalf("%s: data pointer %#x, want %#x (a copy was made)", step, got, ptr)
		}
	}
	var im *zerocopy.View
	if legacy {
		p, err := v.ToDLPackLegacy()
		if err != nil {
			t.Fatal(err)
		}
		mt := (*dlpack.DLManagedTensor)(p)
		same("DLManagedTensor", uintptr(mt.DLTensor.Data)+uintptr(mt.DLTensor.ByteOffset))
		if im, err = zerocopy.FromDLPackLegacy(p); err != nil {
			t.Fatal(err)
		}
	} else {
		p, err := v.ToDLPack()
		if err != nil {
			t.Fatal(err)
		}
		mt := (*dlpack.DLManagedTensorVersioned)(p)
		same("DLManagedTensorVersioned", uintptr(mt.DLTensor.Data)+uintptr(mt.DLTensor.ByteOffset))
		if mt.Version != dlpack.CurrentVersion {
			t.Errorf("exported version %v", mt.Version)
		}
		if im, err = zerocopy.FromDLPackVersioned(p); err != nil {
			t.Fatal(err)
		}
	}
	same("DLPack import", im.Ptr())
	if diff := cmp.Diff(strides, im.Strides()); diff != "" || !im.Foreign() || im.Device() != v.Device() {
		t.Fatalf("DLPack import: strides diff %s, foreign %t, device %s", diff, im.Foreign(), im.Device())
	}

	iface, err := im.CUDAArrayInterface()
	if err != nil {
		t.Fatal(err)
	}
	same("__cuda_array_interface__", iface.Data.Ptr)
	js, err := iface.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := cai.DecodeJSON(js, cai.CUDA)
	if err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	same("CAI JSON", dec.Data.Ptr)
	// The CAI consumer holds a reference of its own on the producer (here,
	// on the DLPack import's owner), which FromCAI takes over.
	if err := im.Owner().Retain(); err != nil {
		t.Fatal(err)
	}
	back, err := zerocopy.FromCAI(dec, im.Device(), im.Owner())
	if err != nil {
		t.Fatalf("FromCAI(%s): %v", js, err)
	}
	same("CAI import", back.Ptr())
	if diff := cmp.Diff(strides, back.Strides()); diff != "" {
		t.Fatalf("CAI import strides (-want +got):\n%s", diff)
	}
	return []*zerocopy.View{im, back}
}

func TestEndToEndZeroCopy(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		for _, viaGC := range []bool{false, true} {
			t.Run(fmt.Sprintf("legacy=%t/gc=%t", legacy, viaGC), func(t *testing.T) {
				e2e(t, legacy, viaGC)
			})
		}
	}
}

func e2e(t *testing.T, legacy, viaGC bool) {
	tr := fakemem.New(fakemem.Options{HostAccess: true})
	base, a := fakeForeign(t, tr)
	var leaks atomic.Int32
	if viaGC {
		zerocopy.SetLeakReporter(func(l zerocopy.LeakInfo) {
			if l.Device == dlpack.CUDADevice(0) && l.Ptr-a.Ptr < uintptr(a.Size) {
				leaks.Add(1)
			}
		})
		t.Cleanup(func() { zerocopy.SetLeakReporter(nil) })
	}

	// Rows 1..4, every other column from the last: float32[4 4], strides
	// [8 -2], starting at element [1, 7].
	rows, err := base.Slice(0, 1, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := rows.Slice(1, zerocopy.Omit, zerocopy.Omit, -2)
	if err != nil {
		t.Fatal(err)
	}
	wantPtr := a.Ptr + 4*(1*e2eCols+7)
	if sl.Ptr() != wantPtr {
		t.Fatalf("slice at %#x, want %#x", sl.Ptr(), wantPtr)
	}
	views := roundTrip(t, sl, legacy)
	im, back := views[0], views[1]

	// The final view reads the allocation's bytes, and writes land there.
	for i := int64(0); i < 4; i++ {
		for j := int64(0); j < 4; j++ {
			got, err := zerocopy.At[float32](back, i, j)
			if want := float32((1+i)*e2eCols + 7 - 2*j); err != nil || got != want {
				t.Fatalf("back[%d,%d] = %v, %v; want %v", i, j, got, err, want)
			}
		}
	}
	if err := zerocopy.Set[float32](back, -1, 3, 3); err != nil {
		t.Fatal(err)
	}
	raw, _ := tr.Bytes(a.Ptr, a.Size)
	if x := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(4*e2eCols+1):])); x != -1 {
		t.Errorf("write through the CAI import not in the allocation: element [4,1] = %v", x)
	}
	if err := tr.CheckView(back); err != nil {
		t.Fatal(err)
	}

	// Release everything but the CAI import, from several goroutines.
	var wg sync.WaitGroup
	for _, v := range []*zerocopy.View{base, rows, sl, im} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if s := tr.Stats(); s.FreeCalls != 0 {
		t.Fatalf("freed while the CAI import still holds the memory: %+v", s)
	}

	// The last release: from another goroutine, or through the GC.
	if viaGC {
		back = nil
		views = nil
		if !gcUntil(func() bool { return tr.Stats().FreeCalls > 0 }) {
			t.Fatalf("the GC did not release the leaked CAI import")
		}
		if n := leaks.Load(); n != 1 {
			t.Errorf("%d leak reports, want 1", n)
		}
	} else {
		done := make(chan error)
		go func() { done <- back.Close() }()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	want := fakemem.Stats{Allocs: 1, Frees: 1, FreeCalls: 1}
	if diff := cmp.Diff(want, tr.Stats()); diff != "" {
		t.Errorf("tracker stats (-want +got):\n%s", diff)
	}
	if ev := tr.Events(); len(ev) != 0 {
		t.Errorf("tracker events: %v", ev)
	}
	if err := tr.Check(wantPtr, 4); err == nil {
		t.Errorf("the allocation is still live after the last release")
	}
}

// TestEndToEndConcurrent runs many round trips over one allocation at once,
// closing views from other goroutines and leaving some to the GC; the
// allocation is freed once, after everything is gone.
func TestEndToEndConcurrent(t *testing.T) {
	tr := fakemem.New(fakemem.Options{HostAccess: true})
	zerocopy.SetLeakReporter(func(zerocopy.LeakInfo) {})
	t.Cleanup(func() { zerocopy.SetLeakReporter(nil) })
	base, a := fakeForeign(t, tr)
	closing := make(chan *zerocopy.View, 64)
	var closers sync.WaitGroup
	for c := 0; c < 3; c++ {
		closers.Add(1)
		go func() {
			defer closers.Done()
			for v := range closing {
				if err := v.Close(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				row, err := base.Select(0, int64((g+i)%e2eRows))
				if err != nil {
					t.Error(err)
					return
				}
				want := a.Ptr + uintptr(4*e2eCols*((g+i)%e2eRows))
				if row.Ptr() != want {
					t.Errorf("row at %#x, want %#x", row.Ptr(), want)
				}
				vs := append(roundTrip(t, row, i%3 == 0), row) // DLPack import, CAI import, row
				for k, v := range vs {
					// Drop some CAI imports and rows: the GC releases them.
					// (Not DLPack imports: see TestLeakNetDLPackImport.)
					if k > 0 && (g+i+k)%3 == 0 {
						continue
					}
					closing <- v
				}
			}
		}(g)
	}
	wg.Wait()
	close(closing)
	closers.Wait()
	if s := tr.Stats(); s.FreeCalls != 0 {
		t.Fatalf("freed while the base view is open: %+v", s)
	}
	base.Close()
	if !gcUntil(func() bool { return tr.Stats().FreeCalls > 0 }) {
		t.Fatalf("views left to the GC were never released: %+v", tr.Stats())
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	if diff := cmp.Diff(fakemem.Stats{Allocs: 1, Frees: 1, FreeCalls: 1}, tr.Stats()); diff != "" {
		t.Errorf("tracker stats (-want +got):\n%s", diff)
	}
}

// TestLeakNetDLPackImport leaves a DLPack import itself (not a view derived
// from it) to the garbage collector. FromDLPackVersioned places the view
// and its Owner in one allocation; a leak cleanup must hold the Owner to
// release it, which then keeps the view reachable, so the safety net can
// neither report nor release such a view. Until the import allocates the
// view apart from the owner while the net is on, the test reports the gap
// as a skip; once it does, the test asserts the release.
func TestLeakNetDLPackImport(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	var reports atomic.Int32
	zerocopy.SetLeakReporter(func(l zerocopy.LeakInfo) {
		if l.Label == "dlpack import" && l.Device == dlpack.CUDADevice(0) {
			reports.Add(1)
		}
	})
	t.Cleanup(func() { zerocopy.SetLeakReporter(nil) })
	base, _ := fakeForeign(t, tr)
	func() {
		p, err := base.ToDLPack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zerocopy.FromDLPackVersioned(p); err != nil { // dropped unclosed
			t.Fatal(err)
		}
	}()
	base.Close()
	if !gcUntil(func() bool { return tr.Stats().FreeCalls > 0 }) {
		t.Fatal("a leaked DLPack import was never collected by the leak net")
	}
	if diff := cmp.Diff(fakemem.Stats{Allocs: 1, Frees: 1, FreeCalls: 1}, tr.Stats()); diff != "" {
		t.Errorf("tracker stats (-want +got):\n%s", diff)
	}
	if reports.Load() != 1 {
		t.Errorf("%d leak reports, want 1", reports.Load())
	}
}
