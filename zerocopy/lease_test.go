package zerocopy_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

type countRelease struct{ n atomic.Int32 }

func (c *countRelease) Release() { c.n.Add(1) }

func f32Spec(s []float32) *zerocopy.Spec {
	return &zerocopy.Spec{Ptr: uintptr(unsafe.Pointer(&s[0])), Device: dlpack.Device{Type: dlpack.CPU},
		DType: dlpack.Float32Type, Shape: []int64{int64(len(s))}}
}

func last(v *zerocopy.View) (float32, error) {
	s, err := zerocopy.HostSliceRO[float32](v)
	if err != nil {
		return 0, err
	}
	return s[len(s)-1], nil
}

// TestLease: the views of a use read their own memory, close at End (and
// stay closed in later uses until they are made again), need no Close of
// their own, and a retained one keeps the use's memory until it is closed,
// after which the Releaser runs once and the lease is spent.
func TestLease(t *testing.T) {
	a, b := []float32{1, 2, 3}, []float32{4, 5, 6, 7}
	var (
		l      zerocopy.Lease
		rel    countRelease
		va, vb zerocopy.View
	)
	for use := 0; use < 3; use++ {
		if err := l.Begin(&rel, "call"); err != nil {
			t.Fatal(err)
		}
		if err := l.Borrow(&va, f32Spec(a)); err != nil {
			t.Fatal(err)
		}
		if err := l.Borrow(&vb, f32Spec(b)); err != nil {
			t.Fatal(err)
		}
		if x, err := last(&va); x != 3 || err != nil {
			t.Fatalf("use %d: view of a reads %v, %v", use, x, err)
		}
		if x, err := last(&vb); x != 7 || err != nil {
			t.Fatalf("use %d: view of b reads %v, %v", use, x, err)
		}
		derived, _ := vb.Slice(0, 1, 3, 1)
		va.Close() // no reference of its own: nothing happens
		if !va.Alive() {
			t.Fatal("Close of a borrowed view closed it")
		}
		if kept := l.End(); kept {
			t.Fatalf("use %d: End reports a kept view; none was retained", use)
		}
		for name, v := range map[string]*zerocopy.View{"a": &va, "b": &vb, "derived": derived} {
			if _, err := last(v); !errors.Is(err, zerocopy.ErrClosed) {
				t.Errorf("use %d: %s after End: err = %v, want ErrClosed", use, name, err)
			}
			if _, err := v.Retain(); !errors.Is(err, zerocopy.ErrClosed) {
				t.Errorf("use %d: Retain of %s after End: err = %v, want ErrClosed", use, name, err)
			}
		}
		if rel.n.Load() != 0 {
			t.Fatalf("use %d: the Releaser ran without a kept view", use)
		}
	}
	// A view borrowed in an earlier use and not made again stays closed.
	if err := l.Begin(&rel, "call"); err != nil {
		t.Fatal(err)
	}
	if err := l.Borrow(&va, f32Spec(b[:3])); err != nil { // same layout: not validated again
		t.Fatal(err)
	}
	if _, err := last(&vb); !errors.Is(err, zerocopy.ErrClosed) {
		t.Errorf("borrowed in an earlier use: err = %v, want ErrClosed", err)
	}
	kept, err := va.Retain()
	if err != nil {
		t.Fatal(err)
	}
	if !l.End() {
		t.Fatal("End does not report the retained view")
	}
	if x, err := last(kept); x != 6 || err != nil {
		t.Fatalf("retained view reads %v, %v; want 6", x, err)
	}
	if rel.n.Load() != 0 {
		t.Fatal("the Releaser ran while a retained view is open")
	}
	kept.Close()
	if rel.n.Load() != 1 {
		t.Fatalf("Releaser ran %d times after the retained view's Close, want 1", rel.n.Load())
	}
	if err := l.Begin(&rel, "call"); err == nil || !strings.Contains(err.Error(), "spent") {
		t.Errorf("Begin of a spent lease: err = %v", err)
	}
}

// TestLeaseRefusals: Borrow outside a use, of memory with a pending write,
// on a view with its own reference, and of a bad layout (twice, the second
// after the first left the view's layout behind) are refused; a refused
// Borrow leaves the view closed.
func TestLeaseRefusals(t *testing.T) {
	a := []float32{1, 2, 3}
	var (
		l zerocopy.Lease
		v zerocopy.View
	)
	if err := l.Borrow(&v, f32Spec(a)); err == nil || !strings.Contains(err.Error(), "outside a use") {
		t.Errorf("Borrow before Begin: err = %v", err)
	}
	if err := l.Begin(nil, "call"); err != nil {
		t.Fatal(err)
	}
	if err := l.Begin(nil, "call"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second Begin: err = %v", err)
	}
	if err := l.Borrow(&v, f32Spec(a)); err != nil {
		t.Fatal(err)
	}
	s := f32Spec(a)
	s.Stream = 7
	if err := l.Borrow(&v, s); err == nil || !strings.Contains(err.Error(), "pending write") {
		t.Errorf("Borrow with a stream: err = %v", err)
	}
	bad := f32Spec(a)
	bad.Shape = []int64{-1}
	for i := 0; i < 2; i++ {
		if err := l.Borrow(&v, bad); err == nil {
			t.Errorf("Borrow of a negative extent (%d): no error", i)
		}
		if _, err := last(&v); !errors.Is(err, zerocopy.ErrClosed) {
			t.Errorf("after a refused Borrow: err = %v, want ErrClosed", err)
		}
	}
	var own zerocopy.View
	if err := own.Init(f32Spec(a), zerocopy.NewOwner(nil, "own")); err != nil {
		t.Fatal(err)
	}
	if err := l.Borrow(&own, f32Spec(a)); err == nil || !strings.Contains(err.Error(), "reference of its own") {
		t.Errorf("Borrow of a view with its own reference: err = %v", err)
	}
	own.Close()
	l.End()
}

// TestLeaseRetainRacesEnd: a goroutine retains the current use's views
// without pause while uses begin and end. Each Retain either succeeds,
// and End reports the kept view (whose memory then lives until it is
// closed), or fails with ErrClosed and takes nothing; the Releaser runs
// once for each use that reported a kept view and never otherwise. Run it
// with -race.
func TestLeaseRetainRacesEnd(t *testing.T) {
	a := make([]float32, 8)
	type useRec struct {
		d      *zerocopy.View // derived in the use
		mu     sync.Mutex
		views  []*zerocopy.View // the retained views, open until the use is checked
		active atomic.Int64     // Retains of it under way
	}
	var (
		rel   countRelease
		spent int32
		cur   atomic.Pointer[useRec]
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			u := cur.Load()
			if u == nil {
				continue
			}
			u.active.Add(1)
			r, err := u.d.Retain()
			if err == nil {
				u.mu.Lock()
				u.views = append(u.views, r)
				u.mu.Unlock()
			} else if !errors.Is(err, zerocopy.ErrClosed) {
				t.Errorf("Retain: %v", err)
			}
			u.active.Add(-1)
		}
	}()
	l := new(zerocopy.Lease)
	var v zerocopy.View
	keptUses := 0
	for use := 0; use < 20000; use++ {
		if err := l.Begin(&rel, "race"); err != nil {
			t.Fatal(err)
		}
		if err := l.Borrow(&v, f32Spec(a)); err != nil {
			t.Fatal(err)
		}
		u := &useRec{}
		u.d, _ = v.Slice(0, 1, 4, 1)
		cur.Store(u)
		for i := 0; i < use%7; i++ {
			_, _ = last(u.d)
		}
		kept := l.End()
		cur.Store(nil)
		for u.active.Load() != 0 {
		}
		u.mu.Lock()
		if len(u.views) > 0 && !kept {
			t.Fatalf("use %d: %d views retained and open, End reports none", use, len(u.views))
		}
		for _, r := range u.views {
			if x, err := last(r); err != nil || x != 0 {
				t.Fatalf("use %d: a retained view reads %v, %v", use, x, err)
			}
			r.Close()
		}
		u.mu.Unlock()
		if kept {
			keptUses++
			spent++
			l, v = new(zerocopy.Lease), zerocopy.View{}
		}
	}
	stop.Store(true)
	wg.Wait()
	if got := rel.n.Load(); got != spent {
		t.Fatalf("Releaser ran %d times for %d spent leases", got, spent)
	}
	t.Logf("%d of 20000 uses ended with a kept view", keptUses)
}
