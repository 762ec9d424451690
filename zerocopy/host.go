package zerocopy

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Elem is the set of Go types typed host access understands. Each maps to
// exactly one DLPack data type (see DTypeOf); Float16 and BFloat16 carry the
// bits of the 16-bit float formats Go has no type for.
type Elem interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 |
		float32 | float64 | complex64 | complex128 | bool | Float16 | BFloat16
}

// Float16 holds the bits of an IEEE 754 binary16 value (DLPack float16).
type Float16 uint16

// BFloat16 holds the bits of a bfloat16 value (DLPack bfloat16): the top
// half of a float32.
type BFloat16 uint16

// hotDTypeOf is DTypeOf with the common element types tested first, one
// comparison each: DTypeOf's type switch jumps through a table, and that
// indirect jump, mispredicted, was half of HostSlice's time.
func hotDTypeOf[T Elem]() dlpack.DataType {
	switch p := any((*T)(nil)); p {
	case any((*float32)(nil)):
		return dlpack.Float32Type
	case any((*float64)(nil)):
		return dlpack.Float64Type
	case any((*int64)(nil)):
		return dlpack.Int64Type
	case any((*int32)(nil)):
		return dlpack.Int32Type
	}
	return DTypeOf[T]()
}

// DTypeOf returns the DLPack data type of the Go element type T.
func DTypeOf[T Elem]() dlpack.DataType {
	// A nil *T in an interface does not allocate, unlike a T value.
	switch any((*T)(nil)).(type) {
	case *int8:
		return dlpack.Int8Type
	case *int16:
		return dlpack.Int16Type
	case *int32:
		return dlpack.Int32Type
	case *int64:
		return dlpack.Int64Type
	case *uint8:
		return dlpack.Uint8Type
	case *uint16:
		return dlpack.Uint16Type
	case *uint32:
		return dlpack.Uint32Type
	case *uint64:
		return dlpack.Uint64Type
	case *float32:
		return dlpack.Float32Type
	case *float64:
		return dlpack.Float64Type
	case *complex64:
		return dlpack.Complex64Type
	case *complex128:
		return dlpack.Complex128Type
	case *bool:
		return dlpack.BoolType
	case *Float16:
		return dlpack.Float16Type
	case *BFloat16:
		return dlpack.Bfloat16Type
	}
	panic("unreachable: Elem has no other types")
}

// hostPointer turns an address held by a view into an unsafe.Pointer by
// reinterpreting the word rather than converting a uintptr (which vet and
// checkptr reject). Sound because the address is either outside the Go heap
// (C or pinned memory) or Go memory that the view's Owner keeps reachable,
// and Go never moves heap objects; callers check the view is open first.
func hostPointer(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}

// goMemory keeps a Go allocation reachable while views use it by address.
type goMemory struct {
	owner Owner
	base  unsafe.Pointer
}

// Release lets the garbage collector have the memory once the last view
// over it is closed.
func (g *goMemory) Release() { g.base = nil }

// newGoOwner returns an owner (one reference) that keeps base reachable.
func newGoOwner(base unsafe.Pointer, label string) *Owner {
	g := &goMemory{base: base}
	g.owner.Init(g, label)
	return &g.owner
}

// goView is a writable CPU view of Go memory at base with layout l, holding
// the one reference of a new owner that keeps base reachable.
func goView(base unsafe.Pointer, dt dlpack.DataType, shape []int64, padded bool, label string) *View {
	v := &View{base: uintptr(base), device: dlpack.CPUDevice, owner: newGoOwner(base, label)}
	v.lay.setTrusted(dt, shape, nil, padded) // in place: a Layout is 128 bytes
	trackLeak(v)
	return v
}

// FromSlice makes a writable CPU view of s without copying. The view's owner
// keeps s reachable until the last view over it is closed; s must not be
// appended to or resliced into new memory meanwhile (the view would not see
// it). A nil shape means [len(s)]; otherwise the product of shape must
// equal len(s) (a 0-d view of one element: FromSlice(s, []int64{}...)).
func FromSlice[T Elem](s []T, shape ...int64) (*View, error) {
	var one [1]int64
	if shape == nil {
		one[0] = int64(len(s))
		shape = one[:]
	}
	n, err := shapeElements("FromSlice", shape)
	if err != nil {
		return nil, err
	}
	if n != int64(len(s)) {
		return nil, fmt.Errorf("zerocopy: FromSlice: shape %s has %d elements, the slice has %d", FormatShape(shape), n, len(s))
	}
	base := unsafe.Pointer(unsafe.SliceData(s))
	return goView(base, DTypeOf[T](), shape, false, "go slice"), nil
}

// FromBytes makes a writable CPU view of b holding elements of type dt
// without copying; the owner keeps b reachable. Shape defaults to as many
// elements as b holds; otherwise the shape must need exactly len(b) bytes
// (sub-byte types packed, as DLPack stores them). Typed access to the view
// needs b to be aligned for the element type (Go aligns slices of 8 bytes
// or more that make returns to at least 8).
func FromBytes(b []byte, dt dlpack.DataType, shape ...int64) (*View, error) {
	if err := dt.Validate(); err != nil {
		return nil, fmt.Errorf("zerocopy: FromBytes: %w", err)
	}
	var one [1]int64
	if shape == nil {
		bits, ok := dlpack.MulInt64(int64(len(b)), 8)
		bpe := int64(dt.BitsPerElement())
		if !dt.IsSubByte() {
			bpe = int64(dt.ItemSize()) * 8
		}
		if !ok || bits%bpe != 0 {
			return nil, fmt.Errorf("zerocopy: FromBytes: %d bytes is not a whole number of %s elements", len(b), dt)
		}
		one[0] = bits / bpe
		shape = one[:]
	}
	n, err := shapeElements("FromBytes", shape)
	if err != nil {
		return nil, err
	}
	need, ok := dt.StorageBytes(n, false)
	if !ok || need != int64(len(b)) {
		return nil, fmt.Errorf("zerocopy: FromBytes: shape %s of %s needs %d bytes, have %d", FormatShape(shape), dt, need, len(b))
	}
	base := unsafe.Pointer(unsafe.SliceData(b))
	return goView(base, dt, shape, false, "go bytes"), nil
}

// HostSlice returns the elements of a C-contiguous, writable view as a []T
// sharing its memory (no copy). T must match the view's dtype exactly and
// the memory must be host-accessible (CPU, pinned or managed memory, or fake
// device memory registered with RegisterHostBacked). Read-only views are
// refused so that a write can never slip through quietly: use HostSliceRO to
// read them. The slice is valid only while the view is open.
func HostSlice[T Elem](v *View) ([]T, error) {
	if v.readOnly {
		return nil, fmt.Errorf("zerocopy: HostSlice: view is read-only (%s); use HostSliceRO to read it", v.owner.label)
	}
	return hostSlice[T](v, "HostSlice")
}

// HostSliceRO is HostSlice for reading: it accepts read-only views too. The
// returned slice must not be written; the type system cannot say so, the
// name does. The slice is valid only while the view is open.
func HostSliceRO[T Elem](v *View) ([]T, error) {
	return hostSlice[T](v, "HostSliceRO")
}

func hostSlice[T Elem](v *View, op string) ([]T, error) {
	// The common case first, in one pass: an open, compact 1-d view of
	// host memory, aligned for T (a Go function's argument on every call).
	if v.lay.n == 1 && v.lay.dtype == hotDTypeOf[T]() && v.device.Type.HostAccessible() {
		n, st, p := v.lay.inl[0], v.lay.inl[inlineDims], v.Ptr()
		if n > 0 && (st == 1 || n == 1) && p%unsafe.Alignof(*new(T)) == 0 && !v.isClosed() && v.owner.Alive() {
			// Sound: as below (open, host-accessible, aligned, n
			// contiguous elements from Ptr), each tested on this line.
			return unsafe.Slice((*T)(hostPointer(p)), int(n)), nil
		}
	}
	if err := hostCheck[T](v, op); err != nil {
		return nil, err
	}
	if !v.IsCContiguous() {
		return nil, fmt.Errorf("zerocopy: %s: view with shape %s and strides %s is not C-contiguous; use At/Each or Clone", op, FormatShape(v.lay.shape()), FormatShape(v.lay.strides()))
	}
	n := v.Len()
	if n == 0 {
		return make([]T, 0), nil
	}
	if n > math.MaxInt {
		return nil, fmt.Errorf("zerocopy: %s: %d elements exceed a Go slice", op, n)
	}
	// Sound: the view is open, host-accessible, aligned for T, and its n
	// elements are contiguous from Ptr (checked above and at construction).
	return unsafe.Slice((*T)(hostPointer(v.Ptr())), int(n)), nil
}

// hostCheck is the common gate of typed host access: open view, exact dtype,
// host-accessible memory, alignment for T.
func hostCheck[T Elem](v *View, op string) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("zerocopy: %s: %w", op, err)
	}
	want := DTypeOf[T]()
	if v.lay.dtype != want {
		return fmt.Errorf("zerocopy: %s[%s]: view dtype is %s", op, want, v.lay.dtype)
	}
	if err := hostAccessible(v, op); err != nil {
		return err
	}
	if a := unsafe.Alignof(*new(T)); v.Ptr()%a != 0 {
		return fmt.Errorf("zerocopy: %s: pointer %#x is not aligned for %s (%d bytes)", op, v.Ptr(), want, a)
	}
	return nil
}

// onHost reports whether the CPU may touch v's memory: hostAccessible's
// test without the error, for the hot paths that only choose a route.
func onHost(v *View) bool {
	if v.device.Type.HostAccessible() {
		return true
	}
	lo, hi := v.ByteSpan()
	return hostBacked(v.Ptr(), lo, hi)
}

// hostAccessible says why the CPU may not touch v's memory, or nil.
func hostAccessible(v *View, op string) error {
	if onHost(v) {
		return nil
	}
	return fmt.Errorf("zerocopy: %s: memory on %s is not host-accessible (copy it with CopyCUDA)", op, v.device)
}

// At reads the element at idx of a host-accessible view of any strides.
// Negative indices count from the end.
func At[T Elem](v *View, idx ...int64) (T, error) {
	var zero T
	if err := hostCheck[T](v, "At"); err != nil {
		return zero, err
	}
	off, err := v.lay.index("At", idx)
	if err != nil {
		return zero, err
	}
	// Sound: the element lies inside the view's validated span, and T is
	// the view's element type (hostCheck).
	return *(*T)(unsafe.Add(hostPointer(v.Ptr()), off*int64(unsafe.Sizeof(zero)))), nil
}

// Set writes x at idx of a writable, host-accessible view of any strides.
// Negative indices count from the end. On a broadcast view (stride 0) the
// one element behind all the broadcast positions is written.
func Set[T Elem](v *View, x T, idx ...int64) error {
	if v.readOnly {
		return fmt.Errorf("zerocopy: Set: view is read-only (%s)", v.owner.label)
	}
	if err := hostCheck[T](v, "Set"); err != nil {
		return err
	}
	off, err := v.lay.index("Set", idx)
	if err != nil {
		return err
	}
	// Sound: as in At.
	*(*T)(unsafe.Add(hostPointer(v.Ptr()), off*int64(unsafe.Sizeof(x)))) = x
	return nil
}

// Each calls fn for every element of a host-accessible view in row-major
// index order, with the element's index (a slice reused between calls: copy
// it to keep it) and value, until fn returns false. The view must stay open
// while Each runs.
func Each[T Elem](v *View, fn func(idx []int64, x T) bool) error {
	if err := hostCheck[T](v, "Each"); err != nil {
		return err
	}
	if v.Len() == 0 {
		return nil
	}
	shape, st := v.lay.shape(), v.lay.strides()
	nd := len(shape)
	inner, step := int64(1), int64(0) // the last dim, walked here; the odometer steps the rest
	if nd > 0 {
		inner, step = shape[nd-1], st[nd-1]
		shape, st = shape[:nd-1], st[:nd-1]
	}
	idx := make([]int64, nd) // handed to fn; the odometer keeps the outer indices, the last one is ours
	o := odometer{shape: shape, ds: st, ss: st, idx: idx[:len(shape)]}
	base := hostPointer(v.Ptr())
	is := int64(v.lay.dtype.ItemSize())
	for {
		for i := range inner {
			if nd > 0 {
				idx[nd-1] = i
			}
			// Sound: idx stays inside shape, so the offset is inside the
			// validated span.
			if !fn(idx, *(*T)(unsafe.Add(base, (o.doff+i*step)*is))) {
				return nil
			}
		}
		if !o.next() {
			return nil
		}
	}
}

// Float32 converts h to float32 exactly.
func (h Float16) Float32() float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0x1f: // infinity or NaN: keep the payload
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0: // zero or subnormal: mant × 2^-24, exact in float32
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// Float16From rounds f to the nearest float16 (ties to even), as NumPy and
// PyTorch do; magnitudes beyond 65504 round to infinity.
func Float16From(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return Float16(sign | 0x7c00)
		}
		return Float16(sign | 0x7e00 | uint16(mant>>13)) // quiet NaN
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return Float16(sign | 0x7c00)
	}
	if e <= 0 {
		// Subnormal half: k = m × 2^(e-14) units of 2^-24.
		if e < -10 {
			return Float16(sign)
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		k := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && k&1 == 1) {
			k++ // may carry into the smallest normal: still the right encoding
		}
		return Float16(sign | uint16(k))
	}
	k := uint16(mant >> 13)
	rem := mant & 0x1fff
	h := sign | uint16(e)<<10 | k
	if rem > 0x1000 || (rem == 0x1000 && k&1 == 1) {
		h++ // a carry into the exponent is the right rounding, up to infinity
	}
	return Float16(h)
}

// Float32 converts h to float32 exactly.
func (h BFloat16) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }

// BFloat16From rounds f to the nearest bfloat16 (ties to even).
func BFloat16From(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BFloat16(b>>16 | 0x40) // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// hostRanges is the registry of fake device memory the CPU may touch.
var hostRanges struct {
	n      atomic.Int32 // len(ranges), read without the lock on the fast path
	mu     sync.RWMutex
	ranges []hostRange // sorted by base, disjoint
}

type hostRange struct{ base, end uintptr }

// RegisterHostBacked declares that the bytes [base, base+n) are host memory
// the CPU may read and write even though views over them name another device.
// It exists for fake device memory in tests (package fakemem registers its
// allocations when asked): typed host access (HostSlice, At, Set, Each, Copy,
// Clone) then accepts views that lie entirely inside one registered range.
// Never register real device memory. Ranges may not overlap. The returned
// function removes the registration; calling it again does nothing.
func RegisterHostBacked(base uintptr, n int64) (unregister func(), err error) {
	if base == 0 || n <= 0 || uint64(n) > uint64(^uintptr(0)-base) {
		return nil, fmt.Errorf("zerocopy: RegisterHostBacked: bad range base=%#x n=%d", base, n)
	}
	r := hostRange{base, base + uintptr(n)}
	hostRanges.mu.Lock()
	defer hostRanges.mu.Unlock()
	rs := hostRanges.ranges
	i := sort.Search(len(rs), func(i int) bool { return rs[i].base >= r.base })
	if (i < len(rs) && rs[i].base < r.end) || (i > 0 && rs[i-1].end > r.base) {
		return nil, fmt.Errorf("zerocopy: RegisterHostBacked: [%#x, %#x) overlaps a registered range", r.base, r.end)
	}
	rs = append(rs, hostRange{})
	copy(rs[i+1:], rs[i:])
	rs[i] = r
	hostRanges.ranges = rs
	hostRanges.n.Store(int32(len(rs)))
	var once sync.Once
	return func() { once.Do(func() { unregisterHostBacked(r) }) }, nil
}

func unregisterHostBacked(r hostRange) {
	hostRanges.mu.Lock()
	defer hostRanges.mu.Unlock()
	rs := hostRanges.ranges
	i := sort.Search(len(rs), func(i int) bool { return rs[i].base >= r.base })
	if i < len(rs) && rs[i] == r {
		hostRanges.ranges = append(rs[:i], rs[i+1:]...)
		hostRanges.n.Store(int32(len(hostRanges.ranges)))
	}
}

// hostBacked reports whether [ptr+lo, ptr+hi) lies inside one registered
// range (for an empty span: whether ptr does).
func hostBacked(ptr uintptr, lo, hi int64) bool {
	if hostRanges.n.Load() == 0 || ptr == 0 {
		return false
	}
	a, b := ptr+uintptr(lo), ptr+uintptr(hi) // lo may be negative: wraps as intended
	if hi <= lo {
		a, b = ptr, ptr
	}
	hostRanges.mu.RLock()
	defer hostRanges.mu.RUnlock()
	rs := hostRanges.ranges
	i := sort.Search(len(rs), func(i int) bool { return rs[i].end > a })
	return i < len(rs) && rs[i].base <= a && b <= rs[i].end && a <= b
}
