package zerocopy_test

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// gcUntil runs the garbage collector until done reports true, at most 100
// times, giving cleanups a moment to run after each cycle.
func gcUntil(done func() bool) bool {
	for i := 0; i < 100; i++ {
		if done() {
			return true
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	return done()
}

// countedView wraps data in a view whose owner counts its releases.
func countedView(t *testing.T, data []float32, label string, released *atomic.Int32) *zerocopy.View {
	t.Helper()
	v, err := zerocopy.Wrap(zerocopy.Spec{Ptr: uintptrOf(data), Device: dlpack.CPUDevice,
		DType: dlpack.Float32Type, Shape: []int64{2, 3}},
		zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { released.Add(1) }), label))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLeakReporter(t *testing.T) {
	data := make([]float32, 6)
	var reports atomic.Pointer[[]zerocopy.LeakInfo]
	reports.Store(&[]zerocopy.LeakInfo{})
	zerocopy.SetLeakReporter(func(l zerocopy.LeakInfo) {
		if l.Label == "leak test" {
			for {
				old := reports.Load()
				n := append(append([]zerocopy.LeakInfo(nil), *old...), l)
				if reports.CompareAndSwap(old, &n) {
					return
				}
			}
		}
	})
	t.Cleanup(func() { zerocopy.SetLeakReporter(nil) })

	var released atomic.Int32
	func() {
		v := countedView(t, data, "leak test", &released)
		sub, err := v.Slice(1, 0, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sub.Retain() // never closed: the leak
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ { // closed: never reported
			u, _ := v.T()
			u.Close()
		}
		v.Close()
		_ = s
	}()
	if !gcUntil(func() bool { return released.Load() == 1 }) {
		t.Fatalf("the leaked view was not released through the GC (released %d times)", released.Load())
	}
	got := *reports.Load()
	if len(got) != 1 {
		t.Fatalf("%d leak reports, want 1: %v", len(got), got)
	}
	l := got[0]
	if diff := cmp.Diff([]int64{2, 2}, l.Shape); diff != "" {
		t.Errorf("leak shape (-want +got):\n%s", diff)
	}
	if l.Ptr != uintptrOf(data) || l.DType != dlpack.Float32Type || l.Device != dlpack.CPUDevice {
		t.Errorf("leak info %+v", l)
	}
	if !strings.Contains(l.Created, "leak_test.go") || !strings.Contains(l.String(), "leaked view float32[2, 2] cpu") {
		t.Errorf("leak report %q does not say where the view was made", l)
	}
	// A few more cycles: nothing else is reported, nothing released twice.
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(*reports.Load()); n != 1 || released.Load() != 1 {
		t.Errorf("after more GC: %d reports, %d releases; want 1, 1", n, released.Load())
	}
	keep(data)
}

// TestLeakReleasedAfterReporterOff: views tracked while the net was on are
// still released by the GC after it is turned off, silently.
func TestLeakReleasedAfterReporterOff(t *testing.T) {
	data := make([]float32, 6)
	var calls atomic.Int32
	zerocopy.SetLeakReporter(func(l zerocopy.LeakInfo) {
		if l.Label == "leak off" {
			calls.Add(1)
		}
	})
	var released atomic.Int32
	func() {
		v := countedView(t, data, "leak off", &released)
		_ = v
	}()
	zerocopy.SetLeakReporter(nil)
	if !gcUntil(func() bool { return released.Load() == 1 }) {
		t.Fatalf("not released after the reporter was turned off")
	}
	if calls.Load() != 0 {
		t.Errorf("reporter called %d times after it was turned off", calls.Load())
	}
	keep(data)
}

// TestLeakUntrackedWhenOff: views made while the net is off stay unreleased
// by the GC (the net is never the plan) and cost no allocation.
func TestLeakUntrackedWhenOff(t *testing.T) {
	zerocopy.SetLeakReporter(nil)
	data := make([]float32, 6)
	var released atomic.Int32
	func() {
		v := countedView(t, data, "untracked", &released)
		_ = v
	}()
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond)
	if released.Load() != 0 {
		t.Errorf("an untracked view was released by the GC")
	}

	v, _ := iotaView(t, 4, 4)
	if n := testing.AllocsPerRun(100, func() {
		s, _ := v.Slice(0, 1, 3, 1)
		s.Close()
	}); n > 1 {
		t.Errorf("Slice+Close with the net off: %v allocations, want 1 (the view)", n)
	}
	keep(data)
}
