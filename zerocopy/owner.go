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
	refs     atomic.Int64
	released atomic.Bool
	// hooks is the OnRelease list, newest first; releasedHooks once the
	// last release took it. A lock-free list keeps Owner small (importers
	// embed one per tensor) and costs nothing when no hook is registered.
	hooks atomic.Pointer[hook]
	// pend is the write queued on a stream into this memory, nil if none
	// (pending.go). It lives here, not on a View, because it belongs to the
	// memory: a write through one view (a slice, a Retain, a Python handle
	// of its own) must order every reader through any other.
	pend  atomic.Pointer[pendingWrite]
	rel   Releaser
	label string
}

// hook is one OnRelease function in an Owner's list.
type hook struct {
	f    func()
	next *hook
}

// releasedHooks marks an owner's hook list as taken by the last release: no
// hook can be added after it.
var releasedHooks = new(hook)

// NewOwner returns an owner with one reference whose last release calls r
// (r may be nil: nothing to free, as for a NULL DLPack deleter).
func NewOwner(r Releaser, label string) *Owner {
	o := &Owner{rel: r, label: label}
	o.refs.Store(1)
	return o
}

// Init initialises an Owner embedded in a larger allocation (so importers
// can place the owner, the view and the shape in one allocation). It must be
// called before the owner is shared.
func (o *Owner) Init(r Releaser, label string) {
	o.rel, o.label = r, label
	// An atomic store costs a locked instruction: fields of a new owner,
	// zero already, are only read (an Init per call argument is common).
	if o.released.Load() {
		o.released.Store(false)
	}
	if o.hooks.Load() != nil {
		o.hooks.Store(nil)
	}
	if o.pend.Load() != nil {
		o.pend.Store(nil)
	}
	o.refs.Store(1)
}

// Retain adds a reference. It fails with ErrReleased once the owner released.
func (o *Owner) Retain() error {
	for {
		n := o.refs.Load()
		if n <= 0 {
			return fmt.Errorf("%w: retain of %s", ErrReleased, o.label)
		}
		if o.refs.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// Release drops a reference; the last one runs the Releaser. A release past
// zero returns ErrReleased (the caller has a double-free bug) and does
// nothing else.
func (o *Owner) Release() error {
	for {
		n := o.refs.Load()
		if n <= 0 {
			return fmt.Errorf("%w: extra release of %s", ErrReleased, o.label)
		}
		if o.refs.CompareAndSwap(n, n-1) {
			if n == 1 && o.released.CompareAndSwap(false, true) {
				for h := o.hooks.Swap(releasedHooks); h != nil && h != releasedHooks; h = h.next {
					h.f()
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
	n := &hook{f: f}
	for {
		h := o.hooks.Load()
		// The last release swaps in releasedHooks only after the count
		// reaches zero. Refusing at a zero count too gives the same answer
		// whichever side of that swap this call lands on.
		if h == releasedHooks || o.refs.Load() <= 0 {
			return fmt.Errorf("%w: OnRelease on %s", ErrReleased, o.label)
		}
		n.next = h
		if o.hooks.CompareAndSwap(h, n) {
			return nil
		}
	}
}

// Alive reports whether the memory is still held.
func (o *Owner) Alive() bool { return o.refs.Load() > 0 }

// Refs is the current reference count (for tests and diagnostics).
func (o *Owner) Refs() int64 { return o.refs.Load() }

// Label names the memory in errors and leak reports ("dlpack import", ...).
func (o *Owner) Label() string { return o.label }
