package zerocopy

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Spec describes memory to wrap in a View. Strides are in elements; nil
// Strides means compact row-major.
type Spec struct {
	Ptr      uintptr // address of element [0,0,...]; device pointers are not Go pointers
	Device   dlpack.Device
	DType    dlpack.DataType
	Shape    []int64
	Strides  []int64
	ReadOnly bool
	Copied   bool // the producer made this copy for us alone (DLPack IS_COPIED)
	Padded   bool // sub-byte elements stored one per byte (DLPack IS_SUBBYTE_TYPE_PADDED)
	Foreign  bool // came from DLPack/CAI: untrusted until verified
	// Stream is the CUDA stream (CUstream handle) of the last pending write
	// to this memory, or 0 when no write is pending. The legacy default
	// stream is written as 1 and the per-thread default as 2, as in CAI v3.
	Stream uintptr
}

// View is a Layout over memory that an Owner keeps alive: typed, strided
// and zero-copy. A View made by Wrap, FromSlice, an import or an allocator
// holds one reference on its owner; Close drops it (once: a second Close is
// a no-op).
//
// Views derived from it by layout operations (Slice, Select, Transpose, ...)
// are like image.SubImage: they share the memory and borrow the reference
// of the view they came from, so they need no Close (Close on them does
// nothing). The rule: a derived view is valid while the view holding the
// reference is open; after that every use of it fails with ErrClosed. A
// derived view that must outlive its parent (a tensor handed to another
// owner, a Python handle) takes a reference of its own with Retain.
//
// A View is safe to read from several goroutines; Close must not race with
// other use of the view or of views derived from it.
type View struct {
	base     uintptr // the address the layout's byte offset counts from
	lay      Layout
	device   dlpack.Device
	readOnly bool
	copied   bool
	foreign  bool
	// state is even while the view is open and odd once closed; each Init
	// of a closed view (a caller reusing its allocation) starts the next
	// even value, so that views derived from an earlier use, which
	// remember the value they saw (hstate), stay closed.
	state  atomic.Uint32
	hstate uint32
	owner  *Owner
	holder *View       // the view whose reference this one borrows; nil when it holds its own
	leak   *leakRecord // the leak safety net, when SetLeakReporter was on at creation
}

// Wrap makes a View of s owned by owner, taking over one reference the
// caller holds on owner (on error too: the reference is released, so a
// rejected wrap of foreign memory still frees it exactly once).
// The layout is validated: ndim <= 64, no negative extents, no overflow in
// the byte span, a non-null pointer unless the view is empty.
func Wrap(s Spec, owner *Owner) (*View, error) {
	v, err := newView(s, owner)
	if err != nil {
		if owner != nil {
			owner.Release()
		}
		return nil, err
	}
	return v, nil
}

func newView(s Spec, owner *Owner) (*View, error) {
	v := new(View)
	if err := v.init(&s, owner); err != nil {
		return nil, err
	}
	return v, nil
}

// Init makes v, a zero View the caller allocated, a view of s owned by
// owner, as Wrap does (taking over one reference on owner, released on
// error too): for callers that place the view, its owner (Owner.Init) and
// their own state in one allocation, as importers do per tensor. v may
// also be a closed view the caller made this way and is done with (a
// reused allocation): views derived from its earlier use stay closed.
// Init of an open view is an error. s is read, not kept (by pointer: a
// caller that fills one Spec per tensor in a loop passes it without a
// copy, whose wide loads of just-written narrow fields stalled:
// bench/results/callpath-2core).
func (v *View) Init(s *Spec, owner *Owner) error {
	if err := v.init(s, owner); err != nil {
		if owner != nil {
			owner.Release()
		}
		return err
	}
	return nil
}

func (v *View) init(s *Spec, owner *Owner) error {
	if owner == nil {
		return fmt.Errorf("zerocopy: Wrap needs an Owner (use NewOwner(nil, label) for memory nobody frees)")
	}
	reused := false
	if st := v.state.Load(); st != 0 || v.owner != nil {
		if st&1 == 0 {
			return fmt.Errorf("zerocopy: Init of an open view (%s)", v.owner.label)
		}
		if v.holder != nil || v.leak != nil {
			v.holder, v.hstate, v.leak = nil, 0, nil
		}
		v.state.Store(st + 1)
		reused = true
	}
	if err := v.take(s, reused); err != nil {
		v.state.Add(1) // a failed Init leaves the view closed
		return err
	}
	v.owner = owner
	if s.Stream != 0 { // a view of memory that has others keeps their pending write
		v.owner.pend.Store(owner.pendingOn(s.Stream))
	}
	trackLeak(v)
	return nil
}

// take makes v a view of s's memory, layout and flags (not its owner):
// the step Init and Lease.Borrow share. A reused allocation usually views
// memory of the layout it had (a call in a loop): that layout was
// validated then, and comparing costs a fraction of validating again; the
// null-pointer test is the one check that depends on more than the
// layout. On error v's layout matches no spec (offset -1), so that the
// same bad spec is validated, and rejected, again.
func (v *View) take(s *Spec, reused bool) error {
	if reused && s.Device.Type.Valid() && v.lay.same(s.DType, s.Shape, s.Strides, s.Padded) {
		if s.Ptr == 0 && v.lay.Len() != 0 {
			return fmt.Errorf("zerocopy: data pointer is NULL for %d elements", v.lay.Len())
		}
	} else if err := validateSpec(s, &v.lay); err != nil {
		v.lay = Layout{offset: -1}
		return err
	}
	v.base, v.device = s.Ptr, s.Device
	v.readOnly, v.copied, v.foreign = s.ReadOnly, s.Copied, s.Foreign
	return nil
}

// validateSpec checks a spec before any view is built on it and makes l its
// layout (in place; l is left partly written on error).
func validateSpec(s *Spec, l *Layout) error {
	if err := l.set(s.DType, s.Shape, s.Strides, s.Padded); err != nil {
		return err
	}
	if !s.Device.Type.Valid() {
		return fmt.Errorf("zerocopy: device type %d is not a DLDeviceType", s.Device.Type)
	}
	if s.Ptr == 0 {
		if n := l.Len(); n != 0 {
			return fmt.Errorf("zerocopy: data pointer is NULL for %d elements", n)
		}
	}
	return nil
}

// shapeElements checks a shape a caller hands in (ndim within 0..64, no
// negative extent, no overflow) and returns its element count; errors
// start with "zerocopy: op: ".
func shapeElements(op string, shape []int64) (int64, error) {
	if len(shape) > dlpack.MaxNDim {
		return 0, fmt.Errorf("zerocopy: %s: ndim %d out of range (0..%d)", op, len(shape), dlpack.MaxNDim)
	}
	n, err := dlpack.NumElements(shape)
	if err != nil {
		return 0, fmt.Errorf("zerocopy: %s: %w", op, err)
	}
	return n, nil
}

// Ptr is the address of the element at index [0, 0, ...].
func (v *View) Ptr() uintptr { return v.base + uintptr(v.lay.offset) } // wraps for negative offsets, as intended

// Layout returns the view's layout, relative to Ptr (offset 0).
func (v *View) Layout() Layout {
	l := v.lay
	l.offset = 0
	return l
}

// Device is where the memory lives.
func (v *View) Device() dlpack.Device { return v.device }

// DType is the element type.
func (v *View) DType() dlpack.DataType { return v.lay.dtype }

// NDim is the number of dimensions.
func (v *View) NDim() int { return v.lay.NDim() }

// Shape returns a copy of the extents.
func (v *View) Shape() []int64 { return v.lay.Shape() }

// Strides returns a copy of the strides, in elements.
func (v *View) Strides() []int64 { return v.lay.Strides() }

// ByteStrides returns the strides in bytes (CAI's and NumPy's unit). For
// packed sub-byte types byte strides are not defined and an error is returned.
func (v *View) ByteStrides() ([]int64, error) {
	if v.lay.dtype.IsSubByte() && !v.lay.padded {
		return nil, fmt.Errorf("zerocopy: %s elements are packed below a byte: no byte strides", v.lay.dtype)
	}
	is := int64(v.lay.dtype.ItemSize())
	out := v.lay.Strides()
	for i := range out {
		out[i] *= is // cannot overflow: the byte span was checked
	}
	return out, nil
}

// Dim is the extent and stride (in elements) of dimension d, without the
// copies Shape and Strides make.
func (v *View) Dim(d int) (extent, stride int64) { return v.lay.Dim(d) }

// Len is the number of elements.
func (v *View) Len() int64 { return v.lay.Len() }

// ReadOnly reports whether writes through this view are refused.
func (v *View) ReadOnly() bool { return v.readOnly }

// Copied reports whether the producer made this memory for us alone.
func (v *View) Copied() bool { return v.copied }

// Padded reports whether sub-byte elements are stored one per byte.
func (v *View) Padded() bool { return v.lay.padded }

// Foreign reports whether the memory came through DLPack or CAI.
func (v *View) Foreign() bool { return v.foreign }

// Owner returns the owner keeping the memory alive.
func (v *View) Owner() *Owner { return v.owner }

// Alive reports whether the view (or the view whose reference it borrows)
// is open and its memory still held.
func (v *View) Alive() bool { return !v.isClosed() && v.owner.Alive() }

// isClosed reports whether v, or the view whose reference it borrows, is
// closed (or was, in an earlier use of a reused allocation).
func (v *View) isClosed() bool {
	if v.holder == nil {
		return v.state.Load()&1 != 0
	}
	st := v.holder.state.Load()
	return st&1 != 0 || st != v.hstate
}

// IsCContiguous reports compact row-major layout (extent-1 dims ignored).
func (v *View) IsCContiguous() bool { return v.lay.IsCContiguous() }

// IsFContiguous reports compact column-major layout (extent-1 dims ignored).
func (v *View) IsFContiguous() bool { return v.lay.IsFContiguous() }

// ByteSpan returns [lo, hi): the bytes relative to Ptr the view may touch.
func (v *View) ByteSpan() (lo, hi int64) { return v.lay.ByteSpan() }

// ErrClosed is the error (matched with errors.Is) for the use of a view
// after its Close, or of a derived view after the Close of the view whose
// reference it borrows.
var ErrClosed = errors.New("zerocopy: use of a closed view")

// Close drops this view's reference on the owner. Closing twice is a no-op,
// and so is closing a derived view, which holds no reference of its own.
func (v *View) Close() error {
	if v.holder != nil {
		return nil
	}
	st := v.state.Load()
	if st&1 != 0 || !v.state.CompareAndSwap(st, st+1) {
		return nil
	}
	v.stopLeak()
	return v.owner.Release()
}

// ref is the view whose reference keeps v's memory alive.
func (v *View) ref() *View {
	if v.holder != nil {
		return v.holder
	}
	return v
}

// check returns an error when the view is closed or its memory released.
func (v *View) check() error {
	if v.isClosed() {
		return ErrClosed
	}
	if !v.owner.Alive() {
		return fmt.Errorf("%w: %s", ErrReleased, v.owner.label)
	}
	return nil
}

// Retain returns a view of the same memory and layout that holds a
// reference of its own on the owner: it stays valid after v, and the view v
// borrows from, are closed, and it must be closed itself.
func (v *View) Retain() (*View, error) {
	if err := v.check(); err != nil {
		return nil, fmt.Errorf("zerocopy: Retain: %w", err)
	}
	if err := v.owner.Retain(); err != nil {
		return nil, fmt.Errorf("zerocopy: Retain: %w", err)
	}
	if v.isClosed() {
		// Closed while the reference was taken (a Lease's End, which
		// reads the count after it closes its views): give it back.
		v.owner.Release()
		return nil, fmt.Errorf("zerocopy: Retain: %w", ErrClosed)
	}
	nv := v.sub(&v.lay)
	nv.holder = nil
	trackLeak(nv)
	return nv, nil
}

// sub returns a view of v's memory with layout l (nil: the caller fills
// it in) that borrows v's reference (see View). It never fails: a view
// derived from a closed view reports ErrClosed when it is used.
func (v *View) sub(l *Layout) *View {
	h := v.ref()
	nv := &View{base: v.base, device: v.device, readOnly: v.readOnly, copied: v.copied,
		foreign: v.foreign, owner: v.owner, holder: h, hstate: h.state.Load()}
	if v.holder != nil && v.hstate != nv.hstate {
		nv.hstate = h.state.Load() | 1 // derived from a view of an earlier use: closed too
	}
	if l != nil {
		nv.lay = *l
	}
	return nv
}

// String describes the view: "float32[2, 3] cuda:0 strides=[3, 1] ptr=0x...".
func (v *View) String() string {
	return fmt.Sprintf("%s%s %s strides=%s ptr=%#x", v.lay.dtype, FormatShape(v.lay.shape()), v.device, FormatShape(v.lay.strides()), v.Ptr())
}
