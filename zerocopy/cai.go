package zerocopy

import (
	"fmt"

	"github.com/dlbridge/dlbridge/cai"
	"github.com/dlbridge/dlbridge/dlpack"
)

// CUDAArrayInterface describes v as a __cuda_array_interface__ (version 3)
// dictionary: the same pointer (zero-copy; 0 for an empty view, as the
// protocol asks), byte strides (None when v is C-contiguous), read-only
// from the view, and the stream of v's pending write (None when there is
// none) so that the consumer orders its work after it.
//
// The view must be open and on a CUDA device (CUDA or managed memory).
// Host views are refused (use ArrayInterface), and so are dtypes NumPy
// cannot name: packed sub-byte types, int128, float128, complex32. The
// typestr conventions are cai.TypestrOf's: bfloat16 is "<V2", float8
// types and padded sub-byte types go out as "|u1" bytes.
//
// The dictionary does not keep the memory alive: the caller must hold v
// (or another reference on its owner) for as long as the consumer uses it.
func (v *View) CUDAArrayInterface() (cai.Interface, error) {
	if err := v.check(); err != nil {
		return cai.Interface{}, err
	}
	switch v.device.Type {
	case dlpack.CUDA, dlpack.CUDAManaged:
	default:
		return cai.Interface{}, fmt.Errorf("zerocopy: CUDAArrayInterface: memory on %s is not CUDA device memory (use ArrayInterface for host memory)", v.device)
	}
	return v.caiExport(cai.CUDA, "CUDAArrayInterface")
}

// ArrayInterface describes v as NumPy's __array_interface__ (version 3)
// dictionary, for host-accessible memory (CPU, pinned and managed): the
// same pointer, byte strides (None when C-contiguous), read-only from the
// view. A view with a pending write on a CUDA stream is refused: the host
// array interface has no way to make its consumer wait, so synchronize
// first (View.Synchronize waits for the write and clears the stream).
func (v *View) ArrayInterface() (cai.Interface, error) {
	if err := v.check(); err != nil {
		return cai.Interface{}, err
	}
	if !v.device.Type.HostAccessible() {
		return cai.Interface{}, fmt.Errorf("zerocopy: ArrayInterface: memory on %s is not host-accessible (use CUDAArrayInterface for device memory)", v.device)
	}
	if h := v.Stream(); h != 0 {
		return cai.Interface{}, fmt.Errorf("zerocopy: ArrayInterface: the view has a pending write on stream %#x; call Synchronize before handing the memory to a host consumer", h)
	}
	return v.caiExport(cai.Host, "ArrayInterface")
}

func (v *View) caiExport(kind cai.Kind, op string) (cai.Interface, error) {
	l := cai.Layout{Ptr: v.Ptr(), DType: v.lay.dtype, Shape: v.lay.shape(), Strides: v.lay.strides(),
		ReadOnly: v.readOnly, Padded: v.lay.padded}
	if h := v.Stream(); kind == cai.CUDA && h != 0 {
		l.Stream = cai.StreamHandle(h)
	}
	iface, err := cai.NewInterface(kind, l) // copies shape and strides
	if err != nil {
		return cai.Interface{}, fmt.Errorf("zerocopy: %s of %s: %w", op, v.lay.dtype, err)
	}
	return iface, nil
}

// FromCAI makes a view of the memory an interface dictionary describes,
// without copying: the view's pointer is the dictionary's data pointer.
// dev says where that memory is (the dictionary does not: a consumer
// learns it from the producer or from the driver's pointer attributes);
// owner keeps it alive, typically a reference on the Python object that
// exported the dictionary.
//
// The interface is validated first (cai.Interface.Validate). The typestr
// must map to a DLPack type (cai.Interface.DataType); byte strides become
// element strides and must be multiples of the item size. The view is
// marked Foreign, read-only when data[1] says so, and carries the
// dictionary's stream as its pending-write stream (0 for None).
//
// A CUDA interface needs a device that CUDA code can address (CUDA,
// managed or pinned host memory); a Host interface needs host-accessible
// memory and a data pointer (an absent data entry, the buffer protocol,
// must be resolved to a pointer on the Python side first).
//
// Like Wrap, FromCAI takes over one reference the caller holds on owner
// and releases it when it fails, so a rejected import still frees the
// memory exactly once.
func FromCAI(iface cai.Interface, dev dlpack.Device, owner *Owner) (*View, error) {
	fail := func(err error) (*View, error) {
		if owner != nil {
			owner.Release()
		}
		return nil, fmt.Errorf("zerocopy: FromCAI: %w", err)
	}
	if err := iface.Validate(); err != nil {
		return fail(err)
	}
	switch iface.Kind {
	case cai.CUDA:
		switch dev.Type {
		case dlpack.CUDA, dlpack.CUDAManaged, dlpack.CUDAHost:
		default:
			return fail(fmt.Errorf("a %s cannot describe memory on %s (want a CUDA, managed or pinned host device)", iface.Kind, dev))
		}
	case cai.Host:
		if !dev.Type.HostAccessible() {
			return fail(fmt.Errorf("a %s cannot describe memory on %s, which is not host-accessible", iface.Kind, dev))
		}
		if iface.Data.FromBuffer {
			return fail(fmt.Errorf("%w: data is None (the exporter's buffer protocol, offset %d): resolve it to a pointer before importing", cai.ErrData, iface.Offset))
		}
	}
	dt, err := iface.DataType()
	if err != nil {
		return fail(err)
	}
	// Element strides go through a stack buffer: Wrap copies them.
	var buf [dlpack.MaxNDim]int64
	strides, err := iface.AppendElementStrides(buf[:0])
	if err != nil {
		return fail(err)
	}
	if iface.Strides == nil {
		strides = nil // C-contiguous
	}
	s := Spec{Ptr: iface.Data.Ptr, Device: dev, DType: dt, Shape: iface.Shape, Strides: strides,
		ReadOnly: iface.Data.ReadOnly, Foreign: true}
	if iface.Stream.Present {
		s.Stream = iface.Stream.Handle
	}
	v, err := Wrap(s, owner) // releases owner on error
	if err != nil {
		return nil, fmt.Errorf("zerocopy: FromCAI: %w", err)
	}
	return v, nil
}
