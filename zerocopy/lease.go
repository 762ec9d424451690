package zerocopy

import (
	"fmt"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Lease lends memory that others own to a bounded use, such as one call of
// a Go function with several arrays: the views made in a use (Borrow) are
// valid until End and closed after it, as views derived from a view are
// after its Close. A use holds one reference for all its views, and a
// Lease is reused from use to use, so that a call in a loop costs one
// locked instruction (End's) however many arrays it is given, where a view
// with an owner of its own costs four (Init, Close and the owner's two).
//
// A view kept past End must be retained (View.Retain) before End. End
// reports whether one was: then the memory of every view of that use must
// stay alive until the retained views are closed, when the Releaser given
// to Begin runs, and the Lease is spent (a new one serves the next use).
// Otherwise the Releaser never runs and the Lease is ready for the next
// Begin.
//
// A Lease is used by one goroutine at a time; its views, like others, may
// be read from several while the use lasts.
type Lease struct {
	holder View // of no memory: the reference the use's views borrow
	owner  Owner
	open   bool
	spent  bool
}

// leaseHolder is the spec of a Lease's holder: an empty view.
var leaseHolder = Spec{Device: dlpack.Device{Type: dlpack.CPU}, DType: dlpack.Uint8Type, Shape: []int64{0}}

// Begin starts a use; r (which may be nil) runs if End reports a retained
// view, once the last one is closed. label names the memory in errors.
func (l *Lease) Begin(r Releaser, label string) error {
	switch {
	case l.open:
		return fmt.Errorf("zerocopy: Lease.Begin of a lease in use (%s)", l.owner.label)
	case l.spent:
		return fmt.Errorf("zerocopy: Lease.Begin of a spent lease (%s): a view of its last use was kept", l.owner.label)
	}
	if l.holder.owner == nil {
		l.owner.Init(r, label)
		if err := l.holder.Init(&leaseHolder, &l.owner); err != nil {
			return err
		}
		// The holder stays open for the Lease's life, and a Lease dropped
		// between uses leaks nothing: no leak report for it.
		l.holder.stopLeak()
		l.holder.leak = nil
	} else {
		// The holder's reference is the only one (End saw to it), so no
		// release can read these while they change.
		l.owner.rel, l.owner.label = r, label
	}
	l.open = true
	return nil
}

// Borrow makes v, a View the caller allocated, a view of *s in the current
// use (s is read, not kept: a pointer, because a call argument's Spec,
// copied by value, costs a store-forwarding stall per call): it holds no
// reference, needs no Close (Close does nothing), and every use of it
// fails with ErrClosed after End. s may not carry a
// pending write (Stream): the use has one owner, whose pending write would
// be every view's. v must be zero or a view Borrow made before (a reused
// allocation: as with View.Init, a layout equal to the one it had is not
// validated again).
func (l *Lease) Borrow(v *View, s *Spec) error {
	if !l.open {
		return fmt.Errorf("zerocopy: Lease.Borrow outside a use (Begin first)")
	}
	if v.holder == nil && (v.owner != nil || v.state.Load() != 0) {
		return fmt.Errorf("zerocopy: Lease.Borrow of a view that holds a reference of its own (%s)", v.owner.label)
	}
	if s.Stream != 0 {
		return fmt.Errorf("zerocopy: Lease.Borrow of memory with a pending write (stream %#x): a lease's views share one owner", s.Stream)
	}
	h := &l.holder
	if v.holder != nil {
		v.hstate = h.state.Load() | 1 // closed until this succeeds
	}
	if err := v.take(s, v.owner != nil); err != nil {
		return err
	}
	v.owner, v.holder, v.hstate, v.leak = h.owner, h, h.state.Load(), nil
	return nil
}

// End ends the use: its views, and views derived from them, are closed
// from now on. It reports whether one was retained (see Lease).
func (l *Lease) End() (kept bool) {
	if !l.open {
		return false
	}
	l.open = false
	// The holder stays open: a step of two in its state closes the views
	// that remember the state they saw (View.isClosed). The step is seq-cst
	// and View.Retain checks the state again after it takes its reference,
	// so a Retain racing with End either counts below or gives its
	// reference back and fails.
	l.holder.state.Add(2)
	if l.owner.Refs() == 1 {
		return false
	}
	l.spent = true
	l.holder.Close() // the retained views' references keep the memory
	return true
}
