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

// View is a strided, typed window onto memory an Owner keeps alive. A View
// holds one reference on its owner; Close drops it (once: a second Close is
// a no-op). Operations that derive a view (Slice, Transpose, ...) never copy:
// they share the memory and take a reference of their own, so every derived
// view must be closed too. A View is safe to read from several goroutines;
// Close must not race with other use of the same View.
type View struct {
	ptr      uintptr
	device   dlpack.Device
	dtype    dlpack.DataType
	shape    []int64
	strides  []int64
	readOnly bool
	copied   bool
	padded   bool
	foreign  bool
	pend     atomic.Pointer[pendingWrite] // the write queued on a stream, nil if none (pending.go)
	owner    *Owner
	closed   atomic.Bool
	leak     *leakRecord // the leak safety net, when SetLeakReporter was on at creation
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
	if owner == nil {
		return nil, fmt.Errorf("zerocopy: Wrap needs an Owner (use NewOwner(nil, label) for memory nobody frees)")
	}
	if err := validateSpec(&s); err != nil {
		return nil, err
	}
	shape := append([]int64(nil), s.Shape...)
	var strides []int64
	if s.Strides == nil {
		strides = dlpack.CStrides(shape)
	} else {
		strides = append([]int64(nil), s.Strides...)
	}
	v := &View{ptr: s.Ptr, device: s.Device, dtype: s.DType, shape: shape, strides: strides,
		readOnly: s.ReadOnly, copied: s.Copied, padded: s.Padded, foreign: s.Foreign, owner: owner}
	v.pend.Store(newPending(s.Stream, -1))
	trackLeak(v)
	return v, nil
}

// validateSpec checks a layout before any view is built on it.
func validateSpec(s *Spec) error {
	if len(s.Shape) > dlpack.MaxNDim {
		return fmt.Errorf("zerocopy: ndim %d out of range (0..%d)", len(s.Shape), dlpack.MaxNDim)
	}
	if s.Strides != nil && len(s.Strides) != len(s.Shape) {
		return fmt.Errorf("zerocopy: %d strides for %d dimensions", len(s.Strides), len(s.Shape))
	}
	if err := s.DType.Validate(); err != nil {
		return fmt.Errorf("zerocopy: %w", err)
	}
	if !s.Device.Type.Valid() {
		return fmt.Errorf("zerocopy: device type %d is not a DLDeviceType", s.Device.Type)
	}
	n, err := dlpack.NumElements(s.Shape)
	if err != nil {
		return fmt.Errorf("zerocopy: %w", err)
	}
	strides := s.Strides
	if strides == nil {
		strides = dlpack.CStrides(s.Shape)
	}
	if _, _, err := dlpack.ByteSpan(s.DType, s.Shape, strides, s.Padded); err != nil {
		return fmt.Errorf("zerocopy: %w", err)
	}
	if s.Ptr == 0 && n != 0 {
		return fmt.Errorf("zerocopy: data pointer is NULL for %d elements", n)
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
func (v *View) Ptr() uintptr { return v.ptr }

// Device is where the memory lives.
func (v *View) Device() dlpack.Device { return v.device }

// DType is the element type.
func (v *View) DType() dlpack.DataType { return v.dtype }

// NDim is the number of dimensions.
func (v *View) NDim() int { return len(v.shape) }

// Shape returns a copy of the extents.
func (v *View) Shape() []int64 { return append([]int64(nil), v.shape...) }

// Strides returns a copy of the strides, in elements.
func (v *View) Strides() []int64 { return append([]int64(nil), v.strides...) }

// ByteStrides returns the strides in bytes (CAI's and NumPy's unit). For
// packed sub-byte types byte strides are not defined and an error is returned.
func (v *View) ByteStrides() ([]int64, error) {
	if v.dtype.IsSubByte() && !v.padded {
		return nil, fmt.Errorf("zerocopy: %s elements are packed below a byte: no byte strides", v.dtype)
	}
	is := int64(v.dtype.ItemSize())
	out := make([]int64, len(v.strides))
	for i, s := range v.strides {
		out[i] = s * is // cannot overflow: the byte span was checked
	}
	return out, nil
}

// Len is the number of elements.
func (v *View) Len() int64 {
	n, _ := dlpack.NumElements(v.shape) // checked at construction
	return n
}

// ReadOnly reports whether writes through this view are refused.
func (v *View) ReadOnly() bool { return v.readOnly }

// Copied reports whether the producer made this memory for us alone.
func (v *View) Copied() bool { return v.copied }

// Padded reports whether sub-byte elements are stored one per byte.
func (v *View) Padded() bool { return v.padded }

// Foreign reports whether the memory came through DLPack or CAI.
func (v *View) Foreign() bool { return v.foreign }

// Owner returns the owner keeping the memory alive.
func (v *View) Owner() *Owner { return v.owner }

// Alive reports whether the view is open and its memory still held.
func (v *View) Alive() bool { return !v.closed.Load() && v.owner.Alive() }

// IsCContiguous reports compact row-major layout (extent-1 dims ignored).
func (v *View) IsCContiguous() bool { return dlpack.IsCContiguous(v.shape, v.strides) }

// IsFContiguous reports compact column-major layout (extent-1 dims ignored).
func (v *View) IsFContiguous() bool { return dlpack.IsFContiguous(v.shape, v.strides) }

// ByteSpan returns [lo, hi): the bytes relative to Ptr the view may touch.
func (v *View) ByteSpan() (lo, hi int64) {
	lo, hi, _ = dlpack.ByteSpan(v.dtype, v.shape, v.strides, v.padded)
	return lo, hi
}

// ErrClosed is the error (matched with errors.Is) for the use of a view
// after its Close.
var ErrClosed = errors.New("zerocopy: use of a closed view")

// Close drops this view's reference on the owner. Closing twice is a no-op.
func (v *View) Close() error {
	if !v.closed.CompareAndSwap(false, true) {
		return nil
	}
	v.stopLeak()
	return v.owner.Release()
}

// check returns an error when the view is closed or its memory released.
func (v *View) check() error {
	if v.closed.Load() {
		return ErrClosed
	}
	if !v.owner.Alive() {
		return fmt.Errorf("%w: %s", ErrReleased, v.owner.label)
	}
	return nil
}

// derive builds a view that shares v's memory with a new layout and takes a
// reference of its own on the owner.
func (v *View) derive(ptr uintptr, shape, strides []int64) (*View, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	if err := v.owner.Retain(); err != nil {
		return nil, err
	}
	nv := &View{ptr: ptr, device: v.device, dtype: v.dtype, shape: shape, strides: strides,
		readOnly: v.readOnly, copied: v.copied, padded: v.padded, foreign: v.foreign, owner: v.owner}
	nv.pend.Store(v.pend.Load())
	trackLeak(nv)
	return nv, nil
}

// String describes the view: "float32[2,3] cuda:0 strides=[3,1] ptr=0x...".
func (v *View) String() string {
	return fmt.Sprintf("%s%v %s strides=%v ptr=%#x", v.dtype, v.shape, v.device, v.strides, v.ptr)
}
