package zerocopy

import (
	"fmt"
	"math"
	"slices"

	"github.com/dlbridge/dlbridge/dlpack"
)

// View operations. Each returns a new View over the same memory with a
// reference of its own on the owner (close it too) and never copies. The
// receiver is left unchanged. Dimension arguments may be negative, counting
// from the end as in NumPy and PyTorch. Errors name the dimension, the value
// and the limit it broke.

// Omit as a start or stop of Slice means the bound was left out, as in
// Python's a[::-1]: the start or end of the dimension in the direction of
// the step.
const Omit int64 = math.MinInt64

// viewSmall co-allocates a View with the shape and strides of up to 4
// dimensions, so that deriving a view costs one allocation.
type viewSmall struct {
	v    View
	dims [8]int64
}

// allocView returns a zero View whose shape and strides have length ndim.
func allocView(ndim int) *View {
	if ndim <= 4 {
		b := new(viewSmall)
		b.v.shape = b.dims[:ndim:ndim]
		b.v.strides = b.dims[4 : 4+ndim : 4+ndim]
		return &b.v
	}
	buf := make([]int64, 2*ndim)
	return &View{shape: buf[:ndim:ndim], strides: buf[ndim:]}
}

// begin checks v is usable and allocates the derived view; finish fills in
// what a derived view inherits and takes its reference on the owner.
func (v *View) begin(ndim int) (*View, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	return allocView(ndim), nil
}

func (v *View) finish(nv *View, ptr uintptr) (*View, error) {
	if err := v.owner.Retain(); err != nil {
		return nil, err
	}
	nv.ptr, nv.device, nv.dtype = ptr, v.device, v.dtype
	nv.readOnly, nv.copied, nv.padded, nv.foreign = v.readOnly, v.copied, v.padded, v.foreign
	nv.pend.Store(v.pend.Load())
	nv.owner = v.owner
	trackLeak(nv)
	return nv, nil
}

// normDim maps a possibly negative dim onto 0..n-1.
func normDim(op string, dim, n int) (int, error) {
	d := dim
	if d < 0 {
		d += n
	}
	if d < 0 || d >= n {
		if n == 0 {
			return 0, fmt.Errorf("zerocopy: %s: dim %d out of range for a 0-d view", op, dim)
		}
		return 0, fmt.Errorf("zerocopy: %s: dim %d out of range for a %d-d view (-%d..%d)", op, dim, n, n, n-1)
	}
	return d, nil
}

// offsetPtr moves ptr by off elements of v's dtype. Packed sub-byte elements
// must land on a byte boundary because DLPack pointers address bytes.
func (v *View) offsetPtr(op string, off int64) (uintptr, error) {
	if off == 0 {
		return v.ptr, nil
	}
	if v.dtype.IsSubByte() && !v.padded {
		bits := off * int64(v.dtype.BitsPerElement()) // in range: off is inside the span
		if bits%8 != 0 {
			return 0, fmt.Errorf("zerocopy: %s: %s elements are packed below a byte; element offset %d does not start on a byte", op, v.dtype, off)
		}
		return v.ptr + uintptr(bits/8), nil
	}
	return v.ptr + uintptr(off*int64(v.dtype.ItemSize())), nil // wraps for negative off, as intended
}

// sliceIndices resolves start, stop, step against extent n exactly as
// Python's slice.indices does, returning the first index and the length.
func sliceIndices(start, stop, step, n int64) (first, length int64) {
	var lower, upper int64 = 0, n
	if step < 0 {
		lower, upper = -1, n-1
	}
	clamp := func(i, omitted int64) int64 {
		if i == Omit {
			return omitted
		}
		if i < 0 {
			i += n // cannot overflow: i > MinInt64 and n >= 0
			if i < lower {
				i = lower
			}
		} else if i > upper {
			i = upper
		}
		return i
	}
	if step > 0 {
		start, stop = clamp(start, lower), clamp(stop, upper)
		if stop > start {
			length = (stop-start-1)/step + 1
		}
	} else {
		start, stop = clamp(start, upper), clamp(stop, lower)
		if start > stop {
			length = (start-stop-1)/(-step) + 1
		}
	}
	return start, length
}

// Slice returns the elements start, start+step, ... before stop along dim,
// with Python's rules: negative indices count from the end, bounds are
// clamped, a negative step walks backwards, Omit leaves a bound out, and a
// step of 0 is an error. Slice(0, Omit, Omit, -1) reverses dim 0.
func (v *View) Slice(dim int, start, stop, step int64) (*View, error) {
	d, err := normDim("Slice", dim, len(v.shape))
	if err != nil {
		return nil, err
	}
	if step == 0 {
		return nil, fmt.Errorf("zerocopy: Slice: step 0 for dim %d: the step must be nonzero", d)
	}
	if step == math.MinInt64 { // -step would overflow
		return nil, fmt.Errorf("zerocopy: Slice: step %d for dim %d is out of range", step, d)
	}
	nv, err := v.begin(len(v.shape))
	if err != nil {
		return nil, err
	}
	first, length := sliceIndices(start, stop, step, v.shape[d])
	copy(nv.shape, v.shape)
	copy(nv.strides, v.strides)
	nv.shape[d] = length
	if st, ok := dlpack.MulInt64(v.strides[d], step); ok {
		nv.strides[d] = st
	} else if length > 1 {
		// Unreachable: length > 1 means stride × step lies inside the span.
		return nil, fmt.Errorf("zerocopy: Slice: stride %d × step %d of dim %d overflows int64", v.strides[d], step, d)
	}
	ptr := v.ptr
	if length > 0 { // an empty result keeps ptr: first may be one past the end
		if ptr, err = v.offsetPtr("Slice", first*v.strides[d]); err != nil {
			return nil, err
		}
	}
	return v.finish(nv, ptr)
}

// Select returns the view at index along dim, with that dimension removed
// (NumPy's a[..., index, ...]). A negative index counts from the end.
func (v *View) Select(dim int, index int64) (*View, error) {
	d, err := normDim("Select", dim, len(v.shape))
	if err != nil {
		return nil, err
	}
	e := v.shape[d]
	i := index
	if i < 0 {
		i += e
	}
	if i < 0 || i >= e {
		return nil, fmt.Errorf("zerocopy: Select: index %d out of range for dim %d with extent %d", index, d, e)
	}
	nv, err := v.begin(len(v.shape) - 1)
	if err != nil {
		return nil, err
	}
	copy(nv.shape, v.shape[:d])
	copy(nv.shape[d:], v.shape[d+1:])
	copy(nv.strides, v.strides[:d])
	copy(nv.strides[d:], v.strides[d+1:])
	ptr, err := v.offsetPtr("Select", i*v.strides[d])
	if err != nil {
		return nil, err
	}
	return v.finish(nv, ptr)
}

// Permute reorders the dimensions: dimension i of the result is dimension
// order[i] of v. order must name every dimension once.
func (v *View) Permute(order ...int) (*View, error) {
	n := len(v.shape)
	if len(order) != n {
		return nil, fmt.Errorf("zerocopy: Permute: order has %d dims, the view has %d", len(order), n)
	}
	var seen [dlpack.MaxNDim]bool
	nv, err := v.begin(n)
	if err != nil {
		return nil, err
	}
	for i, o := range order {
		d, err := normDim("Permute", o, n)
		if err != nil {
			return nil, err
		}
		if seen[d] {
			return nil, fmt.Errorf("zerocopy: Permute: dim %d appears twice in order %v", d, slices.Clone(order))
		}
		seen[d] = true
		nv.shape[i], nv.strides[i] = v.shape[d], v.strides[d]
	}
	return v.finish(nv, v.ptr)
}

// Transpose swaps dimensions d0 and d1.
func (v *View) Transpose(d0, d1 int) (*View, error) {
	n := len(v.shape)
	a, err := normDim("Transpose", d0, n)
	if err != nil {
		return nil, err
	}
	b, err := normDim("Transpose", d1, n)
	if err != nil {
		return nil, err
	}
	nv, err := v.begin(n)
	if err != nil {
		return nil, err
	}
	copy(nv.shape, v.shape)
	copy(nv.strides, v.strides)
	nv.shape[a], nv.shape[b] = nv.shape[b], nv.shape[a]
	nv.strides[a], nv.strides[b] = nv.strides[b], nv.strides[a]
	return v.finish(nv, v.ptr)
}

// T is the matrix transpose of a 2-d view; 0-d and 1-d views come back as
// they are (a new view). Higher ranks are an error: say which dims with
// Transpose or Permute.
func (v *View) T() (*View, error) {
	switch len(v.shape) {
	case 0, 1:
		nv, err := v.begin(len(v.shape))
		if err != nil {
			return nil, err
		}
		copy(nv.shape, v.shape)
		copy(nv.strides, v.strides)
		return v.finish(nv, v.ptr)
	case 2:
		return v.Transpose(0, 1)
	}
	return nil, fmt.Errorf("zerocopy: T: view is %d-d; T needs ndim <= 2 (use Transpose or Permute)", len(v.shape))
}

// Reshape returns the same elements in row-major order with a new shape,
// without copying. One extent may be -1: it is inferred. It succeeds
// whenever the strides allow it (the rule of NumPy and PyTorch's view():
// each group of merged dimensions must be contiguous among itself), so
// transposed or sliced views can often be reshaped too; otherwise the error
// says a copy would be needed (Clone first).
func (v *View) Reshape(shape ...int64) (*View, error) {
	if len(shape) > dlpack.MaxNDim {
		return nil, fmt.Errorf("zerocopy: Reshape: ndim %d out of range (0..%d)", len(shape), dlpack.MaxNDim)
	}
	numel := v.Len()
	nv, err := v.begin(len(shape))
	if err != nil {
		return nil, err
	}
	infer := -1
	known := int64(1)
	for i, e := range shape {
		switch {
		case e == -1 && infer >= 0:
			return nil, fmt.Errorf("zerocopy: Reshape: dims %d and %d are both -1 (only one extent can be inferred)", infer, i)
		case e == -1:
			infer = i
		case e < 0:
			return nil, fmt.Errorf("zerocopy: Reshape: extent %d for dim %d is negative", e, i)
		default:
			var ok bool
			if known, ok = dlpack.MulInt64(known, e); !ok {
				return nil, fmt.Errorf("zerocopy: Reshape: shape %v overflows int64 at dim %d", slices.Clone(shape), i)
			}
		}
		nv.shape[i] = e
	}
	if infer >= 0 {
		if known == 0 {
			return nil, fmt.Errorf("zerocopy: Reshape: cannot infer dim %d of %v for %d elements: -1 is ambiguous next to a 0 extent", infer, slices.Clone(shape), numel)
		}
		if numel%known != 0 {
			return nil, fmt.Errorf("zerocopy: Reshape: shape %v is invalid for %d elements (%d is not a multiple of %d)", slices.Clone(shape), numel, numel, known)
		}
		nv.shape[infer] = numel / known
		known = numel
	}
	if known != numel {
		return nil, fmt.Errorf("zerocopy: Reshape: shape %v has %d elements, the view %v has %d", slices.Clone(shape), known, v.shape, numel)
	}
	if !reshapeStrides(v.shape, v.strides, nv.shape, nv.strides) {
		return nil, fmt.Errorf("zerocopy: Reshape: view with shape %v and strides %v cannot be reshaped to %v without a copy (Clone first)", v.shape, v.strides, nv.shape)
	}
	return v.finish(nv, v.ptr)
}

// reshapeStrides fills newStrides for viewing (oldShape, oldStrides) as
// newShape, or reports false when that needs a copy. The old dims are cut
// into chunks that are contiguous among themselves (stride[d-1] ==
// extent[d] × stride[d]); each chunk must be covered exactly by consecutive
// new dims, whose strides then follow from the chunk's innermost stride.
// This is the rule of NumPy's _attempt_nocopy_reshape and PyTorch's
// computeStride; extent-1 dims are free either side.
func reshapeStrides(oldShape, oldStrides, newShape, newStrides []int64) bool {
	numel := int64(1)
	for _, e := range oldShape {
		numel *= e // checked at construction
	}
	if numel == 0 || len(oldShape) == 0 {
		// Any strides describe an empty or single-element tensor; use
		// compact ones, as PyTorch does.
		dlpack.FillCStrides(newStrides, newShape)
		return true
	}
	vd := len(newShape) - 1
	base := oldStrides[len(oldStrides)-1]
	tensorN, viewN := int64(1), int64(1)
	for td := len(oldShape) - 1; td >= 0; td-- {
		tensorN *= oldShape[td] // a divisor of numel: no overflow
		chunkEnd := td == 0
		if !chunkEnd && oldShape[td-1] != 1 {
			want, ok := dlpack.MulInt64(tensorN, base)
			chunkEnd = !ok || oldStrides[td-1] != want
		}
		if !chunkEnd {
			continue
		}
		for vd >= 0 && (viewN < tensorN || newShape[vd] == 1) {
			st, ok := dlpack.MulInt64(viewN, base)
			if !ok {
				return false
			}
			newStrides[vd] = st
			viewN *= newShape[vd]
			vd--
		}
		if viewN != tensorN {
			return false
		}
		if td > 0 {
			base = oldStrides[td-1]
			tensorN, viewN = 1, 1
		}
	}
	return vd == -1
}

// Flatten returns a 1-d view of all elements in row-major order when the
// strides allow it without a copy (a C-contiguous view always does).
func (v *View) Flatten() (*View, error) {
	nv, err := v.Reshape(-1)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: Flatten: %w", err)
	}
	return nv, nil
}

// Squeeze removes dimensions of extent 1: the given ones (each must have
// extent 1, as in NumPy), or all of them when none are given.
func (v *View) Squeeze(dims ...int) (*View, error) {
	n := len(v.shape)
	var drop [dlpack.MaxNDim]bool
	keep := n
	if len(dims) == 0 {
		for d, e := range v.shape {
			if e == 1 {
				drop[d] = true
				keep--
			}
		}
	}
	for _, dim := range dims {
		d, err := normDim("Squeeze", dim, n)
		if err != nil {
			return nil, err
		}
		if v.shape[d] != 1 {
			return nil, fmt.Errorf("zerocopy: Squeeze: dim %d has extent %d, not 1", d, v.shape[d])
		}
		if drop[d] {
			return nil, fmt.Errorf("zerocopy: Squeeze: dim %d given twice", d)
		}
		drop[d] = true
		keep--
	}
	nv, err := v.begin(keep)
	if err != nil {
		return nil, err
	}
	j := 0
	for d := range v.shape {
		if !drop[d] {
			nv.shape[j], nv.strides[j] = v.shape[d], v.strides[d]
			j++
		}
	}
	return v.finish(nv, v.ptr)
}

// Unsqueeze inserts a dimension of extent 1 before dim (0..ndim; negative
// counts from the end, -1 appends). Its stride keeps a contiguous view
// contiguous, as in PyTorch.
func (v *View) Unsqueeze(dim int) (*View, error) {
	n := len(v.shape)
	if n == dlpack.MaxNDim {
		return nil, fmt.Errorf("zerocopy: Unsqueeze: view already has the maximum of %d dims", dlpack.MaxNDim)
	}
	d := dim
	if d < 0 {
		d += n + 1
	}
	if d < 0 || d > n {
		return nil, fmt.Errorf("zerocopy: Unsqueeze: dim %d out of range for a %d-d view (-%d..%d)", dim, n, n+1, n)
	}
	nv, err := v.begin(n + 1)
	if err != nil {
		return nil, err
	}
	copy(nv.shape, v.shape[:d])
	copy(nv.strides, v.strides[:d])
	copy(nv.shape[d+1:], v.shape[d:])
	copy(nv.strides[d+1:], v.strides[d:])
	nv.shape[d], nv.strides[d] = 1, 1
	if d < n {
		if st, ok := dlpack.MulInt64(v.shape[d], v.strides[d]); ok && st != 0 {
			nv.strides[d] = st
		}
	}
	return v.finish(nv, v.ptr)
}

// Broadcast returns v stretched to shape by NumPy's rules: dims are aligned
// from the right; a missing or extent-1 dim is repeated with stride 0; other
// extents must match. -1 keeps the extent of an existing dim (PyTorch's
// expand). Several positions of the result then share one element: it stays
// writable, as PyTorch's expand does, but writing through it (Set) changes
// every position at once, and Copy refuses it as a destination.
func (v *View) Broadcast(shape ...int64) (*View, error) {
	n, m := len(v.shape), len(shape)
	if m > dlpack.MaxNDim {
		return nil, fmt.Errorf("zerocopy: Broadcast: ndim %d out of range (0..%d)", m, dlpack.MaxNDim)
	}
	if m < n {
		return nil, fmt.Errorf("zerocopy: Broadcast: target shape %v has %d dims, fewer than the view's %d", slices.Clone(shape), m, n)
	}
	nv, err := v.begin(m)
	if err != nil {
		return nil, err
	}
	for i := m - 1; i >= 0; i-- {
		t := shape[i]
		j := i - (m - n) // the source dim aligned with i, if any
		if j < 0 {
			if t < 0 {
				return nil, fmt.Errorf("zerocopy: Broadcast: extent %d for new dim %d must be >= 0", t, i)
			}
			nv.shape[i], nv.strides[i] = t, 0
			continue
		}
		e := v.shape[j]
		switch {
		case t == -1 || t == e:
			nv.shape[i], nv.strides[i] = e, v.strides[j]
		case t < 0:
			return nil, fmt.Errorf("zerocopy: Broadcast: extent %d for dim %d must be >= 0 or -1", t, i)
		case e == 1:
			nv.shape[i], nv.strides[i] = t, 0
		default:
			return nil, fmt.Errorf("zerocopy: Broadcast: dim %d has extent %d, cannot broadcast to %d (only extent 1 can)", j, e, t)
		}
	}
	if _, err := dlpack.NumElements(nv.shape); err != nil {
		return nil, fmt.Errorf("zerocopy: Broadcast: %w", err)
	}
	return v.finish(nv, v.ptr)
}

// AsReadOnly returns a view of the same memory that refuses writes
// (HostSlice, Set, Copy into it; DLPack export sets READ_ONLY).
func (v *View) AsReadOnly() (*View, error) {
	nv, err := v.begin(len(v.shape))
	if err != nil {
		return nil, err
	}
	copy(nv.shape, v.shape)
	copy(nv.strides, v.strides)
	if nv, err = v.finish(nv, v.ptr); err != nil {
		return nil, err
	}
	nv.readOnly = true
	return nv, nil
}
