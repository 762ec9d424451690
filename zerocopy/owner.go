package zerocopy

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrReleased is returned when memory is used or retained after its owner
// released it, or released more often than it was retained.
var ErrReleased = errors.New("zerocopy: owner already released")

// Releaser frees memory someone owns. Release is called exactly once, from
// whichever goroutine or foreign thread drops the last reference.
type Releaser interface {
	Release()
}

// ReleaseFunc adapts a function to Releaser.
type ReleaseFunc func()

// Release calls f.
func (f ReleaseFunc) Release() { f() }

// Owner keeps memory alive for the views over it. It is reference counted:
// NewOwner starts at one reference; Retain adds one; Release drops one and the
// last drop runs the functions registered with OnRelease, then the Releaser,
// exactly once. Retain after the last Release and a Release past zero return
// ErrReleased and never run the Releaser again.
type Owner struct {
	// refs is read and changed with sync/atomic's functions; Init alone
	// writes it plainly, before the owner is shared. Each locked
	// instruction costs as much as the rest of a call argument's view, so
	// the life of an owner without hooks takes three: Init's none, View
	// Close's CAS, Release's CAS.
	refs int64
	// hooks is the OnRelease list, newest first. An OnRelease holds a
	// reference while it adds to the list, so the last release, which
	// takes the list, never races with an addition. A lock-free list
	// keeps Owner small (importers embed one per tensor) and costs nothing
	// when no hook is registered.
	hooks atomic.Pointer[hook]
	// pend is the write queued on a stream into this memory, nil if none
	// (pending.go). It lives here, not on a View, because it belongs to the
	// memory: a write through one view (a slice, a Retain, a Python handle
	// of its own) must order every reader through any other.
	pend atomic.Pointer[pendingWrite]
	// spare is the pending write of this owner's last use, kept by Init
	// for the next when no event marked it: an owner reused per call (a
	// call's argument) then allocates none (pending.go: pendingOn).
	spare *pendingWrite
	rel   Releaser
	label string
}

// hook is one OnRelease function in an Owner's list.
type hook struct {
	f    func()
	next *hook
}

// NewOwner returns an owner with one reference whose last release calls r
// (r may be nil: nothing to free, as for a NULL DLPack deleter).
func NewOwner(r Releaser, label string) *Owner {
	return &Owner{refs: 1, rel: r, label: label}
}

// Init initialises an Owner embedded in a larger allocation (so importers
// can place the owner, the view and the shape in one allocation). It must be
// called before the owner is shared.
func (o *Owner) Init(r Releaser, label string) {
	o.rel, o.label = r, label
	// An atomic store costs a locked instruction: fields of a new owner,
	// zero already, are only read (an Init per call argument is common).
	if o.hooks.Load() != nil {
		o.hooks.Store(nil)
	}
	if p := o.pend.Load(); p != nil {
		if p.reusable() {
			o.spare = p
		}
		o.pend.Store(nil)
	}
	o.refs = 1 // not shared yet: no other goroutine reads it
}

// Retain adds a reference. It fails with ErrReleased once the owner released.
func (o *Owner) Retain() error {
	for {
		n := atomic.LoadInt64(&o.refs)
		if n <= 0 {
			return fmt.Errorf("%w: retain of %s", ErrReleased, o.label)
		}
		if atomic.CompareAndSwapInt64(&o.refs, n, n+1) {
			return nil
		}
	}
}

// Release drops a reference; the last one runs the Releaser. A release past
// zero returns ErrReleased (the caller has a double-free bug) and does
// nothing else.
func (o *Owner) Release() error {
	for {
		n := atomic.LoadInt64(&o.refs)
		if n <= 0 {
			return fmt.Errorf("%w: extra release of %s", ErrReleased, o.label)
		}
		if atomic.CompareAndSwapInt64(&o.refs, n, n-1) {
			// Only one release takes the count from 1 to 0 (Retain
			// refuses at 0), and no OnRelease is adding to the list then
			// (it would hold a reference).
			if n == 1 {
				if h := o.hooks.Load(); h != nil {
					o.hooks.Store(nil)
					for ; h != nil; h = h.next {
						h.f()
					}
				}
				if o.rel != nil {
					o.rel.Release()
				}
			}
			return nil
		}
	}
}

// OnRelease registers f to run once when the last reference is dropped, in
// the goroutine (or foreign thread) that drops it, just before the Releaser:
// for work that must happen while the memory is still valid, such as
// unregistering page-locked memory. Functions run newest first, like
// deferred calls. OnRelease fails with ErrReleased (and f never runs) if the
// owner has already released; a caller holding a reference never sees that.
// It is safe to call concurrently with Retain, Release and itself.
func (o *Owner) OnRelease(f func()) error {
	if f == nil {
		return fmt.Errorf("zerocopy: OnRelease of %s: nil function", o.label)
	}
	// A reference held while adding keeps the last release (which takes
	// the list) after the addition; if this one turns out to be the last,
	// the hooks run here, as in any goroutine that drops the last.
	if err := o.Retain(); err != nil {
		return fmt.Errorf("%w: OnRelease on %s", ErrReleased, o.label)
	}
	n := &hook{f: f}
	for {
		h := o.hooks.Load()
		n.next = h
		if o.hooks.CompareAndSwap(h, n) {
			break
		}
	}
	return o.Release()
}

// Alive reports whether the memory is still held.
func (o *Owner) Alive() bool { return atomic.LoadInt64(&o.refs) > 0 }

// Refs is the current reference count (for tests and diagnostics).
func (o *Owner) Refs() int64 { return atomic.LoadInt64(&o.refs) }

// Label names the memory in errors and leak reports ("dlpack import", ...).
func (o *Owner) Label() string { return o.label }
