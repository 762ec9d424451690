package zerocopy

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/dlbridge/dlbridge/dlpack"
)

// inlineDims is how many dimensions a Layout stores without a heap
// allocation. Layouts are copied by value on every derived view and live
// inside every View, so the array is kept small (a View is then no larger
// than it was with shape and strides beside it); tensors of more dimensions
// are rare and pay one allocation per new layout.
const inlineDims = 6

// Layout is where the elements of a tensor lie relative to a base address:
// a dtype, a shape, strides in elements (DLPack's unit) and the byte offset
// of element [0, 0, ...]. It is a value: the operations below return a new
// Layout and leave the receiver alone, never allocate for up to 6
// dimensions, and fail only for arguments that do not fit the layout. A
// View is a Layout plus memory plus an Owner, and its layout operations are
// these.
//
// Contiguity (C and F) is decided ignoring extent-1 dimensions, and empty
// layouts are contiguous, as in NumPy. Every Layout made by NewLayout or
// derived from one has a byte span that fits in int64.
type Layout struct {
	dtype  dlpack.DataType
	padded bool  // sub-byte elements stored one per byte (DLPack IS_SUBBYTE_TYPE_PADDED)
	n      uint8 // number of dimensions (at most dlpack.MaxNDim)
	offset int64 // bytes from the base to element [0, 0, ...]
	inl    [2 * inlineDims]int64
	ext    *[2 * dlpack.MaxNDim]int64 // shape then strides for more dims; shared between copies, never written once built
}

// NewLayout validates a layout: ndim within 0..64, as many strides as
// dimensions (nil strides mean compact row-major), a valid dtype, no
// negative extent, and a byte span that fits in int64.
func NewLayout(dt dlpack.DataType, shape, strides []int64) (Layout, error) {
	return newLayout(dt, shape, strides, false)
}

func newLayout(dt dlpack.DataType, shape, strides []int64, padded bool) (Layout, error) {
	var l Layout
	if err := l.set(dt, shape, strides, padded); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// set makes l the layout newLayout validates, in place: a Layout is 128
// bytes, and a view made per call argument should not copy one around.
// The checks that need the layout's own copy of shape and strides run
// after the copy, in one pass (spanFits); only a layout that pass does not
// clear takes dlpack's checks, which name what is wrong.
func (l *Layout) set(dt dlpack.DataType, shape, strides []int64, padded bool) error {
	if len(shape) > dlpack.MaxNDim {
		return fmt.Errorf("zerocopy: ndim %d out of range (0..%d)", len(shape), dlpack.MaxNDim)
	}
	if strides != nil && len(strides) != len(shape) {
		return fmt.Errorf("zerocopy: %d strides for %d dimensions", len(strides), len(shape))
	}
	if err := dt.Validate(); err != nil {
		return fmt.Errorf("zerocopy: %w", err)
	}
	l.setTrusted(dt, shape, strides, padded)
	if l.spanFits() {
		return nil
	}
	shape, strides = l.dims()
	for _, e := range shape {
		if e < 0 {
			_, err := dlpack.NumElements(shape) // names the extent
			return fmt.Errorf("zerocopy: %w", err)
		}
	}
	if _, err := dlpack.NumElements(shape); err != nil {
		return fmt.Errorf("zerocopy: %w", err)
	}
	if _, _, err := dlpack.ByteSpan(dt, shape, strides, padded); err != nil {
		return fmt.Errorf("zerocopy: %w", err)
	}
	return nil
}

// spanFits is true when l's extents are not negative and its element count
// and byte span fit in int64, checked in one pass without divisions. False
// means "ask dlpack": it is also false for packed sub-byte types and for
// spans within a few units of the int64 limits.
func (l *Layout) spanFits() bool {
	if l.dtype.IsSubByte() && !l.padded {
		return false
	}
	shape, st := l.dims()
	n, lo, hi := uint64(1), uint64(0), uint64(0) // count; span below and above element 0
	empty := false
	for d, e := range shape {
		if e < 0 {
			return false
		}
		over, p := bits.Mul64(n, uint64(e))
		if over != 0 || p > math.MaxInt64 {
			return false
		}
		n = p
		if e == 0 {
			empty = true
		}
		if empty {
			continue
		}
		s := st[d]
		m := uint64(s)
		if s < 0 {
			m = -m
		}
		over, r := bits.Mul64(uint64(e-1), m)
		if over != 0 || r > math.MaxInt64/2 {
			return false
		}
		if s < 0 {
			lo += r
		} else {
			hi += r
		}
		if lo > math.MaxInt64/2 || hi > math.MaxInt64/2 {
			return false
		}
	}
	if empty {
		return true
	}
	is := uint64(l.dtype.ItemSize())
	over1, b1 := bits.Mul64(lo, is)
	over2, b2 := bits.Mul64(hi+1, is)
	return over1 == 0 && over2 == 0 && b1 <= math.MaxInt64 && b2 <= math.MaxInt64
}

// trustedLayout is the layout of shape and strides (nil: C-contiguous) that
// the caller has validated (dlpack's import has, or we made them).
func trustedLayout(dt dlpack.DataType, shape, strides []int64, padded bool) Layout {
	var l Layout
	l.setTrusted(dt, shape, strides, padded)
	return l
}

// setTrusted makes l the layout trustedLayout returns, in place.
func (l *Layout) setTrusted(dt dlpack.DataType, shape, strides []int64, padded bool) {
	l.dtype, l.padded, l.offset = dt, padded, 0
	l.reset(len(shape))
	copy(l.shape(), shape)
	if strides == nil {
		dlpack.FillCStrides(l.strides(), shape)
	} else {
		copy(l.strides(), strides)
	}
}

// reset gives l room for n dimensions that no other Layout shares; the
// caller fills shape() and strides().
func (l *Layout) reset(n int) {
	l.n = uint8(n)
	l.ext = nil
	if n > inlineDims {
		l.ext = new([2 * dlpack.MaxNDim]int64)
	}
}

// shape and strides are l's own storage: callers in this package read them
// without a copy and write them only right after reset.
func (l *Layout) shape() []int64 {
	n := int(l.n)
	if l.ext != nil {
		return l.ext[:n:n]
	}
	return l.inl[:n:n]
}

func (l *Layout) strides() []int64 {
	n := int(l.n)
	if l.ext != nil {
		return l.ext[dlpack.MaxNDim : dlpack.MaxNDim+n : dlpack.MaxNDim+n]
	}
	return l.inl[inlineDims : inlineDims+n : inlineDims+n]
}

// dims is shape() and strides() together, for loops that read both.
func (l *Layout) dims() (shape, strides []int64) {
	n := int(l.n)
	if l.ext != nil {
		return l.ext[:n:n], l.ext[dlpack.MaxNDim : dlpack.MaxNDim+n : dlpack.MaxNDim+n]
	}
	return l.inl[:n:n], l.inl[inlineDims : inlineDims+n : inlineDims+n]
}

// DType is the element type.
func (l *Layout) DType() dlpack.DataType { return l.dtype }

// NDim is the number of dimensions.
func (l *Layout) NDim() int { return int(l.n) }

// Shape returns a copy of the extents.
func (l *Layout) Shape() []int64 { return slices.Clone(l.shape()) }

// Strides returns a copy of the strides, in elements.
func (l *Layout) Strides() []int64 { return slices.Clone(l.strides()) }

// Dim returns the extent and stride of dimension d (0 <= d < NDim; no
// negative d here: this is the allocation-free accessor for loops).
func (l *Layout) Dim(d int) (extent, stride int64) { return l.shape()[d], l.strides()[d] }

// Offset is the byte offset of element [0, 0, ...] from the base address.
func (l *Layout) Offset() int64 { return l.offset }

// Len is the number of elements.
func (l *Layout) Len() int64 {
	n := int64(1)
	for _, e := range l.shape() {
		n *= e // cannot overflow: checked when the layout was made
	}
	return n
}

// ByteSpan returns [lo, hi): the bytes relative to element [0, 0, ...] that
// the layout may touch (add Offset for bytes relative to the base).
func (l *Layout) ByteSpan() (lo, hi int64) {
	shape, st := l.dims()
	if l.dtype.IsSubByte() && !l.padded { // packed: bits, rounded out to bytes
		lo, hi, _ = dlpack.ByteSpan(l.dtype, shape, st, false) // checked when made
		return lo, hi
	}
	// dlpack.ByteSpan without its overflow checks, which passed when the
	// layout was made: copies ask for spans on every call.
	for d, e := range shape {
		if e == 0 {
			return 0, 0
		}
		if r := (e - 1) * st[d]; r < 0 {
			lo += r
		} else {
			hi += r
		}
	}
	is := int64(l.dtype.ItemSize())
	return lo * is, (hi + 1) * is
}

// IsCContiguous reports compact row-major layout (extent-1 dims ignored).
func (l *Layout) IsCContiguous() bool {
	if l.n == 1 { // the common case, on every call's hot path: no slices
		return l.inl[0] <= 1 || l.inl[inlineDims] == 1
	}
	return dlpack.IsCContiguous(l.shape(), l.strides())
}

// same reports whether l is the layout set(dt, shape, strides, padded)
// would make, with element [0, ...] at offset 0: the test that lets a
// reused view keep the layout it validated before.
func (l *Layout) same(dt dlpack.DataType, shape, strides []int64, padded bool) bool {
	n := len(shape)
	if int(l.n) != n || l.dtype != dt || l.padded != padded || l.offset != 0 || strides != nil && len(strides) != n {
		return false
	}
	if n == 1 && strides != nil { // the common case, without the loops
		return l.inl[0] == shape[0] && l.inl[inlineDims] == strides[0]
	}
	ls, lst := l.dims()
	for d, e := range shape {
		if ls[d] != e {
			return false
		}
	}
	if strides == nil {
		acc := int64(1) // dlpack.FillCStrides, compared instead of written
		for d := n - 1; d >= 0; d-- {
			if lst[d] != acc {
				return false
			}
			if ls[d] > 1 {
				acc *= ls[d]
			}
		}
		return true
	}
	for d, s := range strides {
		if lst[d] != s {
			return false
		}
	}
	return true
}

// IsFContiguous reports compact column-major layout (extent-1 dims ignored).
func (l *Layout) IsFContiguous() bool { return dlpack.IsFContiguous(l.shape(), l.strides()) }

// sharesElements reports a dimension whose positions share one element
// (stride 0, extent > 1): a broadcast, which cannot be written through.
func (l *Layout) sharesElements() (dim int, ok bool) {
	st := l.strides()
	for d, e := range l.shape() {
		if e > 1 && st[d] == 0 {
			return d, true
		}
	}
	return 0, false
}

// String describes the layout: "float32[2, 3] strides=[3, 1] offset=0".
func (l *Layout) String() string {
	return fmt.Sprintf("%s%s strides=%s offset=%d", l.dtype, FormatShape(l.shape()), FormatShape(l.strides()), l.offset)
}

// index checks idx against the shape (negative indices count from the end,
// as in Python) and returns the element offset of that element from
// element [0, 0, ...]. It is At's and Set's hot path: one pass, the error
// built out of line.
func (l *Layout) index(op string, idx []int64) (int64, error) {
	shape, st := l.dims()
	if len(idx) != len(shape) {
		return 0, fmt.Errorf("zerocopy: %s: %d indices for a %d-d view", op, len(idx), len(shape))
	}
	var off int64
	for d, i := range idx {
		e := shape[d]
		if i < 0 {
			i += e
		}
		if uint64(i) >= uint64(e) {
			return 0, l.indexError(op, d, idx[d])
		}
		off += i * st[d] // in range: bounded by the validated span
	}
	return off, nil
}

func (l *Layout) indexError(op string, d int, i int64) error {
	return fmt.Errorf("zerocopy: %s: index %d out of range for dim %d with extent %d", op, i, d, l.shape()[d])
}

// Layout operations. Dimension arguments may be negative, counting from the
// end as in NumPy and PyTorch. Errors name the operation, the dimension,
// the value and the limit it broke: these arguments arrive from users (see
// "Errors and panics" in the package documentation).

// Omit as a start or stop of Slice means the bound was left out, as in
// Python's a[::-1]: the start or end of the dimension in the direction of
// the step.
const Omit int64 = math.MinInt64

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

// move shifts the offset by off elements. Packed sub-byte elements must
// land on a byte boundary because DLPack pointers address bytes.
func (l *Layout) move(op string, off int64) error {
	if l.dtype.IsSubByte() && !l.padded {
		bits := off * int64(l.dtype.BitsPerElement()) // in range: off is inside the span
		if bits%8 != 0 {
			return fmt.Errorf("zerocopy: %s: %s elements are packed below a byte; element offset %d does not start on a byte", op, l.dtype, off)
		}
		l.offset += bits / 8
		return nil
	}
	l.offset += off * int64(l.dtype.ItemSize())
	return nil
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

// Slice keeps the elements start, start+step, ... before stop along dim,
// with Python's rules: negative indices count from the end, bounds are
// clamped, a negative step walks backwards, Omit leaves a bound out, and a
// step of 0 is an error. Slice(0, Omit, Omit, -1) reverses dim 0.
func (l *Layout) Slice(dim int, start, stop, step int64) (Layout, error) {
	var nl Layout
	err := l.slice(&nl, dim, start, stop, step)
	return nl, err
}

// slice is Slice writing the result into *nl (a View's own layout: no
// intermediate copies on the path every index takes).
func (l *Layout) slice(nl *Layout, dim int, start, stop, step int64) error {
	d, err := normDim("Slice", dim, l.NDim())
	if err != nil {
		return err
	}
	if step == 0 {
		return fmt.Errorf("zerocopy: Slice: step 0 for dim %d: the step must be nonzero", d)
	}
	if step == math.MinInt64 { // -step would overflow
		return fmt.Errorf("zerocopy: Slice: step %d for dim %d is out of range", step, d)
	}
	e, st := l.Dim(d)
	first, length := sliceIndices(start, stop, step, e)
	nst, ok := dlpack.MulInt64(st, step)
	if !ok && length > 1 {
		// Unreachable: length > 1 means stride × step lies inside the span.
		return fmt.Errorf("zerocopy: Slice: stride %d × step %d of dim %d overflows int64", st, step, d)
	}
	l.cloneInto(nl, l.NDim())
	nl.shape()[d], nl.strides()[d] = length, nst
	if length > 0 { // an empty result keeps the offset: first may be one past the end
		return nl.move("Slice", first*st)
	}
	return nil
}

// clone returns a copy of l with storage of its own for n dims, the first
// min(n, l.NDim()) of them copied.
func (l *Layout) clone(n int) Layout {
	var nl Layout
	l.cloneInto(&nl, n)
	return nl
}

func (l *Layout) cloneInto(nl *Layout, n int) {
	*nl = *l
	if l.ext != nil || n > inlineDims {
		nl.reset(n)
		k := min(n, l.NDim())
		copy(nl.shape(), l.shape()[:k])
		copy(nl.strides(), l.strides()[:k])
	} else {
		nl.n = uint8(n)
	}
}

// Select keeps the elements at index along dim and drops that dimension
// (NumPy's a[..., index, ...]). A negative index counts from the end.
func (l *Layout) Select(dim int, index int64) (Layout, error) {
	var nl Layout
	err := l.selectInto(&nl, dim, index)
	return nl, err
}

// selectInto is Select writing the result into *nl.
func (l *Layout) selectInto(nl *Layout, dim int, index int64) error {
	d, err := normDim("Select", dim, l.NDim())
	if err != nil {
		return err
	}
	e, st := l.Dim(d)
	i := index
	if i < 0 {
		i += e
	}
	if i < 0 || i >= e {
		return fmt.Errorf("zerocopy: Select: index %d out of range for dim %d with extent %d", index, d, e)
	}
	*nl = *l
	nl.reset(l.NDim() - 1)
	sh, ss := l.dims()
	nsh, nss := nl.dims()
	j := 0
	for k := range sh { // a loop: four copy calls cost more for a few dims
		if k != d {
			nsh[j], nss[j] = sh[k], ss[k]
			j++
		}
	}
	return nl.move("Select", i*st)
}

// Permute reorders the dimensions: dimension i of the result is dimension
// order[i] of l. order must name every dimension once.
func (l *Layout) Permute(order ...int) (Layout, error) {
	n := l.NDim()
	if len(order) != n {
		return Layout{}, fmt.Errorf("zerocopy: Permute: order has %d dims, the view has %d", len(order), n)
	}
	var seen [dlpack.MaxNDim]bool
	nl := l.clone(n)
	sh, st := l.shape(), l.strides()
	nsh, nst := nl.shape(), nl.strides()
	for i, o := range order {
		d, err := normDim("Permute", o, n)
		if err != nil {
			return Layout{}, err
		}
		if seen[d] {
			return Layout{}, fmt.Errorf("zerocopy: Permute: dim %d appears twice in order %v", d, slices.Clone(order))
		}
		seen[d] = true
		nsh[i], nst[i] = sh[d], st[d]
	}
	return nl, nil
}

// Transpose swaps dimensions d0 and d1.
func (l *Layout) Transpose(d0, d1 int) (Layout, error) {
	a, err := normDim("Transpose", d0, l.NDim())
	if err != nil {
		return Layout{}, err
	}
	b, err := normDim("Transpose", d1, l.NDim())
	if err != nil {
		return Layout{}, err
	}
	nl := l.clone(l.NDim())
	sh, st := nl.shape(), nl.strides()
	sh[a], sh[b] = sh[b], sh[a]
	st[a], st[b] = st[b], st[a]
	return nl, nil
}

// T is the matrix transpose of a 2-d layout; 0-d and 1-d layouts come back
// as they are. Higher ranks are an error: say which dims with Transpose or
// Permute.
func (l *Layout) T() (Layout, error) {
	switch l.NDim() {
	case 0, 1:
		return l.clone(l.NDim()), nil
	case 2:
		return l.Transpose(0, 1)
	}
	return Layout{}, fmt.Errorf("zerocopy: T: view is %d-d; T needs ndim <= 2 (use Transpose or Permute)", l.NDim())
}

// ErrNeedsCopy is matched (errors.Is) by the error of Reshape and Flatten
// when the shape is valid but the strides give no view of it: a
// C-contiguous copy of the view (Clone, or a copy on its device) reshapes.
// torch.reshape and numpy.reshape make that copy themselves; a caller that
// wants their semantics copies on this error alone, after every shape error
// was reported without copying.
var ErrNeedsCopy = errors.New("zerocopy: reshape needs a copy")

// needsCopy is the error that matches ErrNeedsCopy and says which layout
// and shape.
type needsCopy struct{ msg string }

func (e *needsCopy) Error() string        { return e.msg }
func (e *needsCopy) Is(target error) bool { return target == ErrNeedsCopy }

// Reshape gives the same elements in row-major order a new shape, without
// copying. One extent may be -1: it is inferred. It succeeds whenever the
// strides allow it (the rule of NumPy and PyTorch's view(): each group of
// merged dimensions must be contiguous among itself), so transposed or
// sliced layouts can often be reshaped too; otherwise the error matches
// ErrNeedsCopy. Every other error is a shape that no copy could take
// either: negative extents, two -1s, an element count that differs.
func (l *Layout) Reshape(shape ...int64) (Layout, error) {
	if len(shape) > dlpack.MaxNDim {
		return Layout{}, fmt.Errorf("zerocopy: Reshape: shape of %d dims for %d elements: ndim out of range (0..%d)", len(shape), l.Len(), dlpack.MaxNDim)
	}
	numel := l.Len()
	nl := *l
	nl.reset(len(shape))
	nsh := nl.shape()
	infer := -1
	known := int64(1)
	for i, e := range shape {
		switch {
		case e == -1 && infer >= 0:
			return Layout{}, fmt.Errorf("zerocopy: Reshape: shape %s for %d elements: dims %d and %d are both -1 (only one extent can be inferred)", FormatShape(shape), numel, infer, i)
		case e == -1:
			infer = i
		case e < 0:
			return Layout{}, fmt.Errorf("zerocopy: Reshape: shape %s for %d elements: extent %d for dim %d is negative (-1 alone is inferred)", FormatShape(shape), numel, e, i)
		default:
			var ok bool
			if known, ok = dlpack.MulInt64(known, e); !ok {
				return Layout{}, fmt.Errorf("zerocopy: Reshape: shape %s for %d elements overflows int64 at dim %d", FormatShape(shape), numel, i)
			}
		}
		nsh[i] = e
	}
	if infer >= 0 {
		if known == 0 {
			return Layout{}, fmt.Errorf("zerocopy: Reshape: cannot infer dim %d of %s for %d elements: -1 is ambiguous next to a 0 extent", infer, FormatShape(shape), numel)
		}
		if numel%known != 0 {
			return Layout{}, fmt.Errorf("zerocopy: Reshape: shape %s is invalid for %d elements (%d is not a multiple of %d)", FormatShape(shape), numel, numel, known)
		}
		nsh[infer] = numel / known
		known = numel
	}
	if known != numel {
		return Layout{}, fmt.Errorf("zerocopy: Reshape: shape %s has %d elements, the view %s has %d", FormatShape(shape), known, FormatShape(l.shape()), numel)
	}
	if !reshapeStrides(l.shape(), l.strides(), nsh, nl.strides()) {
		return Layout{}, &needsCopy{fmt.Sprintf("zerocopy: Reshape: view with shape %s and strides %s cannot be reshaped to %s without a copy (Clone first)", FormatShape(l.shape()), FormatShape(l.strides()), FormatShape(nsh))}
	}
	return nl, nil
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
		// Any strides describe an empty or single-element tensor: an empty
		// one keeps its own when the shape stays (as NumPy and PyTorch
		// do), else both take compact ones, as PyTorch does.
		if numel == 0 && slices.Equal(oldShape, newShape) {
			copy(newStrides, oldStrides)
		} else {
			dlpack.FillCStrides(newStrides, newShape)
		}
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

// Flatten is Reshape(-1): all elements in row-major order, 1-d, when the
// strides allow it without a copy (a C-contiguous layout always does).
func (l *Layout) Flatten() (Layout, error) {
	nl, err := l.Reshape(-1)
	if err != nil {
		return Layout{}, fmt.Errorf("zerocopy: Flatten: %w", err)
	}
	return nl, nil
}

// Squeeze removes dimensions of extent 1: the given ones (each must have
// extent 1, as in NumPy), or all of them when none are given.
func (l *Layout) Squeeze(dims ...int) (Layout, error) {
	n := l.NDim()
	sh, st := l.shape(), l.strides()
	var drop [dlpack.MaxNDim]bool
	keep := n
	if len(dims) == 0 {
		for d, e := range sh {
			if e == 1 {
				drop[d] = true
				keep--
			}
		}
	}
	for _, dim := range dims {
		d, err := normDim("Squeeze", dim, n)
		if err != nil {
			return Layout{}, err
		}
		if sh[d] != 1 {
			return Layout{}, fmt.Errorf("zerocopy: Squeeze: dim %d has extent %d, not 1", d, sh[d])
		}
		if drop[d] {
			return Layout{}, fmt.Errorf("zerocopy: Squeeze: dim %d given twice", d)
		}
		drop[d] = true
		keep--
	}
	nl := *l
	nl.reset(keep)
	nsh, nst := nl.shape(), nl.strides()
	j := 0
	for d := range sh {
		if !drop[d] {
			nsh[j], nst[j] = sh[d], st[d]
			j++
		}
	}
	return nl, nil
}

// Unsqueeze inserts a dimension of extent 1 before dim (0..ndim; negative
// counts from the end, -1 appends). Its stride keeps a contiguous layout
// contiguous, as in PyTorch.
func (l *Layout) Unsqueeze(dim int) (Layout, error) {
	n := l.NDim()
	if n == dlpack.MaxNDim {
		return Layout{}, fmt.Errorf("zerocopy: Unsqueeze: view already has the maximum of %d dims", dlpack.MaxNDim)
	}
	d := dim
	if d < 0 {
		d += n + 1
	}
	if d < 0 || d > n {
		return Layout{}, fmt.Errorf("zerocopy: Unsqueeze: dim %d out of range for a %d-d view (-%d..%d)", dim, n, n+1, n)
	}
	sh, st := l.dims()
	nl := *l
	nl.reset(n + 1)
	nsh, nst := nl.dims()
	for i := range sh {
		j := i
		if i >= d {
			j++
		}
		nsh[j], nst[j] = sh[i], st[i]
	}
	nsh[d], nst[d] = 1, 1
	if d < n {
		if s, ok := dlpack.MulInt64(sh[d], st[d]); ok && s != 0 {
			nst[d] = s
		}
	}
	return nl, nil
}

// Broadcast stretches l to shape by NumPy's rules: dims are aligned from
// the right; a missing or extent-1 dim is repeated with stride 0; other
// extents must match. -1 keeps the extent of an existing dim (PyTorch's
// expand). Several positions of the result then share one element.
func (l *Layout) Broadcast(shape ...int64) (Layout, error) {
	n, m := l.NDim(), len(shape)
	if m > dlpack.MaxNDim {
		return Layout{}, fmt.Errorf("zerocopy: Broadcast: ndim %d out of range (0..%d)", m, dlpack.MaxNDim)
	}
	if m < n {
		return Layout{}, fmt.Errorf("zerocopy: Broadcast: target shape %s has %d dims, fewer than the view's %d", FormatShape(shape), m, n)
	}
	sh, st := l.shape(), l.strides()
	nl := *l
	nl.reset(m)
	nsh, nst := nl.shape(), nl.strides()
	for i := m - 1; i >= 0; i-- {
		t := shape[i]
		j := i - (m - n) // the source dim aligned with i, if any
		if j < 0 {
			if t < 0 {
				return Layout{}, fmt.Errorf("zerocopy: Broadcast: extent %d for new dim %d must be >= 0", t, i)
			}
			nsh[i], nst[i] = t, 0
			continue
		}
		e := sh[j]
		switch {
		case t == -1 || t == e:
			nsh[i], nst[i] = e, st[j]
		case t < 0:
			return Layout{}, fmt.Errorf("zerocopy: Broadcast: extent %d for dim %d must be >= 0 or -1", t, i)
		case e == 1:
			nsh[i], nst[i] = t, 0
		default:
			return Layout{}, fmt.Errorf("zerocopy: Broadcast: dim %d has extent %d, cannot broadcast to %d (only extent 1 can)", j, e, t)
		}
	}
	if _, err := dlpack.NumElements(nsh); err != nil {
		return Layout{}, fmt.Errorf("zerocopy: Broadcast: %w", err)
	}
	return nl, nil
}
