package cai

import (
	"fmt"
	"math"
	"strconv"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Kind says which protocol an Interface follows.
type Kind uint8

const (
	// CUDA is __cuda_array_interface__ (versions 2 and 3 are read, 3 is
	// written): device-accessible memory, an optional stream.
	CUDA Kind = iota
	// Host is NumPy's __array_interface__ (version 3): host memory, no
	// stream; the data entry may be absent (the buffer protocol).
	Host
)

func (k Kind) String() string {
	switch k {
	case CUDA:
		return "__cuda_array_interface__"
	case Host:
		return "__array_interface__"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Versions this package reads and writes.
const (
	// CAIVersion is the CUDA Array Interface version this package writes.
	CAIVersion = 3
	// MinCAIVersion is the oldest CUDA Array Interface version accepted.
	// Version 2 differs from 3 only in having no stream entry; PyTorch
	// still exports version 2.
	MinCAIVersion = 2
	// ArrayInterfaceVersion is the only NumPy array interface version
	// there is.
	ArrayInterfaceVersion = 3
)

// Stream values with a fixed meaning in CAI v3.
const (
	// LegacyDefaultStream is CUDA's legacy default stream.
	LegacyDefaultStream uintptr = 1
	// PerThreadDefaultStream is CUDA's per-thread default stream.
	PerThreadDefaultStream uintptr = 2
)

// Stream is the CAI "stream" entry. The zero value is None (or absent): no
// synchronization is needed before using the data. Otherwise Handle is 1
// (legacy default stream), 2 (per-thread default stream) or a
// cudaStream_t; 0 is disallowed by CAI v3 because it would be ambiguous.
type Stream struct {
	Handle  uintptr
	Present bool
}

// StreamHandle is the Stream entry for handle h.
func StreamHandle(h uintptr) Stream { return Stream{Handle: h, Present: true} }

// IsNone reports whether the entry is None or absent.
func (s Stream) IsNone() bool { return !s.Present }

func (s Stream) String() string {
	switch {
	case !s.Present:
		return "None"
	case s.Handle == LegacyDefaultStream:
		return "1 (legacy default stream)"
	case s.Handle == PerThreadDefaultStream:
		return "2 (per-thread default stream)"
	}
	return strconv.FormatUint(uint64(s.Handle), 10)
}

// Data is the "data" entry: (pointer, read-only).
type Data struct {
	// Ptr is the address of the first element. Producers write 0 for
	// zero-size arrays.
	Ptr uintptr
	// ReadOnly is the read-only flag: consumers must not write.
	ReadOnly bool
	// FromBuffer records that the entry was absent or None, which only the
	// host array interface allows: the memory is then shared through the
	// Python buffer protocol of the exporting object, starting
	// Interface.Offset bytes in, and Ptr means nothing. This package cannot
	// resolve such memory (it has no object); the Python side must turn it
	// into a pointer first.
	FromBuffer bool
}

// Interface mirrors the dictionary of __cuda_array_interface__ (Kind CUDA)
// or __array_interface__ (Kind Host). Strides are in bytes, as in the
// dictionary; nil means C-contiguous. An Interface is plain data: build one
// with NewInterface or DecodeJSON, check one with Validate.
type Interface struct {
	Kind    Kind
	Shape   []int64
	Typestr string
	Data    Data
	Version int
	// Strides in bytes; nil (None or absent) means C-contiguous.
	Strides []int64
	// Descr describes the item layout in detail; nil when absent. NumPy
	// writes [("", typestr)] for plain types.
	Descr Descr
	// Mask is an interface over a mask array. Masked arrays are not
	// supported: Validate rejects a non-nil Mask (it is decoded so that
	// the error can say so instead of failing on syntax).
	Mask *Interface
	// Stream is the CAI v3 stream entry; always None for Host.
	Stream Stream
	// Offset is the host array interface's byte offset into the exporting
	// object's buffer; only meaningful with Data.FromBuffer.
	Offset int64
}

// NumElements is the product of Shape, or an error for negative extents
// and overflow.
func (i *Interface) NumElements() (int64, error) {
	n, err := dlpack.NumElements(i.Shape)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrShape, err)
	}
	return n, nil
}

// ItemSize is the size in bytes of one item as the typestr says.
func (i *Interface) ItemSize() (int64, error) {
	t, err := ParseTypestr(i.Typestr)
	if err != nil {
		return 0, err
	}
	return t.ItemSize(), nil
}

// Validate checks everything a consumer needs before it touches the
// memory, and returns the first problem, naming the key, the value and the
// rule:
//
//   - Kind is CUDA or Host; version 2 or 3 for CUDA, 3 for Host;
//   - at most 64 dimensions, no negative extent, an element count and a
//     byte size that fit int64;
//   - a typestr in NumPy's grammar, little-endian or byte-order free, of a
//     kind this package supports (no O, S, U, m, M, t);
//   - a descr, when present, that is well formed and whose item size
//     equals the typestr's;
//   - strides of length ndim whose values are multiples of the item size
//     (in dimensions of extent 1, and in empty arrays, where a stride is
//     never applied, any value is accepted), and a byte span that stays
//     inside the 64-bit address space;
//   - a data pointer that is not NULL unless the array is empty; CAI
//     requires the data entry; an offset only with buffer-protocol data;
//   - no mask (masked arrays are not supported);
//   - stream not 0, and no stream at all for Host.
func (i *Interface) Validate() error {
	return i.validate(0)
}

// maxMaskDepth bounds recursion through nested masks.
const maxMaskDepth = 8

func (i *Interface) validate(depth int) error {
	switch i.Kind {
	case CUDA:
		if i.Version < MinCAIVersion {
			return fmt.Errorf("%w: __cuda_array_interface__ version %d is older than %d (the oldest this package reads)", ErrVersion, i.Version, MinCAIVersion)
		}
		if i.Version > CAIVersion {
			return fmt.Errorf("%w: __cuda_array_interface__ version %d is unknown (this package knows %d..%d)", ErrVersion, i.Version, MinCAIVersion, CAIVersion)
		}
	case Host:
		if i.Version != ArrayInterfaceVersion {
			return fmt.Errorf("%w: __array_interface__ version %d (only %d is defined)", ErrVersion, i.Version, ArrayInterfaceVersion)
		}
	default:
		return fmt.Errorf("%w: %d is neither CUDA nor Host", ErrKind, i.Kind)
	}
	if len(i.Shape) > dlpack.MaxNDim {
		return fmt.Errorf("%w: ndim %d exceeds %d", ErrShape, len(i.Shape), dlpack.MaxNDim)
	}
	n, err := i.NumElements()
	if err != nil {
		return err
	}
	if i.Typestr == "" {
		return fmt.Errorf("%w: typestr is empty", ErrTypestr)
	}
	ts, err := ParseTypestr(i.Typestr)
	if err != nil {
		return err
	}
	if err := ts.checkSupported(i.Typestr); err != nil {
		return err
	}
	itemSize := ts.ItemSize()
	if i.Descr != nil {
		size, err := i.Descr.itemSize(0)
		if err != nil {
			return err
		}
		if size != itemSize {
			return fmt.Errorf("%w: fields add up to %d bytes but typestr %q is %d bytes", ErrDescr, size, i.Typestr, itemSize)
		}
	}
	if _, ok := dlpack.MulInt64(n, itemSize); !ok {
		return fmt.Errorf("%w: %d elements of %d bytes overflow int64", ErrShape, n, itemSize)
	}
	if i.Strides != nil {
		if len(i.Strides) != len(i.Shape) {
			return fmt.Errorf("%w: %d strides for %d dimensions", ErrStrides, len(i.Strides), len(i.Shape))
		}
		if n > 0 {
			for d, s := range i.Strides {
				if i.Shape[d] > 1 && s%itemSize != 0 {
					return fmt.Errorf("%w: strides[%d] = %d bytes is not a multiple of the item size %d (typestr %q)", ErrStrides, d, s, itemSize, i.Typestr)
				}
			}
		}
	}
	if i.Mask != nil {
		return fmt.Errorf("%w: masked arrays (a non-null mask) are not supported", ErrUnsupported)
	}
	switch i.Kind {
	case CUDA:
		if i.Data.FromBuffer {
			return fmt.Errorf("%w: __cuda_array_interface__ requires a data entry (pointer, read-only)", ErrData)
		}
		if i.Offset != 0 {
			return fmt.Errorf("%w: offset %d is not part of __cuda_array_interface__", ErrData, i.Offset)
		}
		if i.Stream.Present && i.Stream.Handle == 0 {
			return fmt.Errorf("%w: stream 0 is disallowed by CUDA Array Interface v3 (use None, 1 for the legacy default stream or 2 for the per-thread default stream)", ErrStream)
		}
	case Host:
		if i.Stream.Present {
			return fmt.Errorf("%w: __array_interface__ has no stream entry (got %s)", ErrStream, i.Stream)
		}
		if i.Offset < 0 {
			return fmt.Errorf("%w: offset %d is negative", ErrData, i.Offset)
		}
		if i.Offset != 0 && !i.Data.FromBuffer {
			return fmt.Errorf("%w: offset %d is only allowed when data is None (buffer protocol)", ErrData, i.Offset)
		}
		if i.Data.FromBuffer {
			return nil // no pointer to check the span against
		}
	}
	if n == 0 {
		return nil
	}
	if i.Data.Ptr == 0 {
		return fmt.Errorf("%w: data pointer is 0 (NULL) for %d elements", ErrData, n)
	}
	lo, hi, err := i.byteSpan(itemSize)
	if err != nil {
		return err
	}
	p := uint64(i.Data.Ptr)
	if lo < 0 && uint64(-lo) > p {
		return fmt.Errorf("%w: negative strides reach %d bytes below data pointer %#x", ErrStrides, -lo, p)
	}
	if uint64(hi)-1 > math.MaxUint64-p { // the last byte, p+hi-1, must not wrap
		return fmt.Errorf("%w: array of %d bytes at %#x overflows the address space", ErrStrides, hi, p)
	}
	return nil
}

// byteSpan is [lo, hi) in bytes relative to the data pointer for a
// non-empty array with a checked shape.
func (i *Interface) byteSpan(itemSize int64) (lo, hi int64, err error) {
	if i.Strides == nil {
		n, _ := dlpack.NumElements(i.Shape)
		return 0, n * itemSize, nil // checked by the caller
	}
	lo, hiElem, err := dlpack.ElementSpan(i.Shape, i.Strides)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrStrides, err)
	}
	// ElementSpan measured in bytes here (the strides are bytes): the last
	// byte reached is hiElem-1 plus the item's own size.
	hi, ok := dlpack.AddInt64(hiElem-1, itemSize)
	if !ok {
		return 0, 0, fmt.Errorf("%w: byte span overflows int64", ErrStrides)
	}
	return lo, hi, nil
}

// isDefaultDescr reports whether d is NumPy's implied descr for typestr ts:
// [("", ts)].
func isDefaultDescr(d Descr, ts Typestr) bool {
	if len(d) != 1 {
		return false
	}
	f := d[0]
	if f.Name != "" || f.Title != "" || f.Fields != nil || f.Shape != nil {
		return false
	}
	ft, err := ParseTypestr(f.Typestr)
	return err == nil && ft == ts
}

// DataType maps the typestr (and, for record types, the descr) to a DLPack
// data type. Plain types map as Typestr.DataType says; a descr next to a
// plain typestr only describes it (NumPy's complex example lists real and
// imag fields) and is not consulted. A record ("|V…" with a descr) maps
// only when it is a run of identical scalar fields with no padding: N
// fields (or subarray items) of type T give T with Lanes = N. This is the
// inverse of TypestrOf for vector types; every other record is an error.
func (i *Interface) DataType() (dlpack.DataType, error) {
	ts, err := ParseTypestr(i.Typestr)
	if err != nil {
		return dlpack.DataType{}, err
	}
	if ts.Kind != 'V' || i.Descr == nil || isDefaultDescr(i.Descr, ts) {
		return ts.DataType()
	}
	if err := ts.checkSupported(i.Typestr); err != nil {
		return dlpack.DataType{}, err
	}
	var elem string
	lanes := int64(0)
	ok := i.Descr.homogeneous(&elem, &lanes, 0)
	if !ok || lanes == 0 || lanes > math.MaxUint16 {
		return dlpack.DataType{}, fmt.Errorf("%w: record typestr %q with fields %s has no DLPack data type (only records of identical scalar fields, read as vector lanes, map)", ErrUnsupported, i.Typestr, i.Descr)
	}
	et, err := ParseTypestr(elem)
	if err != nil {
		return dlpack.DataType{}, err
	}
	dt, err := et.DataType()
	if err != nil {
		return dlpack.DataType{}, fmt.Errorf("record typestr %q: field type: %w", i.Typestr, err)
	}
	if lanes*int64(dt.ItemSize()) != ts.ItemSize() {
		return dlpack.DataType{}, fmt.Errorf("%w: record typestr %q: %d fields of %s do not fill %d bytes", ErrDescr, i.Typestr, lanes, elem, ts.ItemSize())
	}
	dt.Lanes = uint16(lanes)
	return dt, nil
}

// ElementStrides converts the byte strides to element strides (DLPack's
// unit) for a validated interface: nil when Strides is nil (C-contiguous).
// A stride that is not a multiple of the item size is an error, except in
// dimensions of extent 1 and in empty arrays, where the stride is never
// applied and is replaced by the C-contiguous one.
func (i *Interface) ElementStrides() ([]int64, error) {
	if i.Strides == nil {
		return nil, nil
	}
	return i.AppendElementStrides(make([]int64, 0, len(i.Strides)))
}

// AppendElementStrides is ElementStrides appending to dst, so that callers
// can convert into a buffer of their own. With nil Strides it returns dst
// unchanged.
func (i *Interface) AppendElementStrides(dst []int64) ([]int64, error) {
	if i.Strides == nil {
		return dst, nil
	}
	if len(i.Strides) != len(i.Shape) {
		return dst, fmt.Errorf("%w: %d strides for %d dimensions", ErrStrides, len(i.Strides), len(i.Shape))
	}
	start := len(dst)
	dst = append(dst, i.Strides...)
	if err := i.fillElementStrides(dst[start:]); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// fillElementStrides is ElementStrides into out (len(out) == ndim).
func (i *Interface) fillElementStrides(out []int64) error {
	itemSize, err := i.ItemSize()
	if err != nil {
		return err
	}
	n, err := i.NumElements()
	if err != nil {
		return err
	}
	var cst []int64
	for d, s := range i.Strides {
		if s%itemSize != 0 {
			if n > 0 && i.Shape[d] > 1 {
				return fmt.Errorf("%w: strides[%d] = %d bytes is not a multiple of the item size %d (typestr %q)", ErrStrides, d, s, itemSize, i.Typestr)
			}
			if cst == nil {
				cst = dlpack.CStrides(i.Shape)
			}
			out[d] = cst[d]
			continue
		}
		out[d] = s / itemSize
	}
	return nil
}

// Layout is memory described in DLPack's terms, the input of NewInterface.
type Layout struct {
	Ptr   uintptr
	DType dlpack.DataType
	Shape []int64
	// Strides in elements; nil means C-contiguous.
	Strides  []int64
	ReadOnly bool
	// Padded says sub-byte elements are stored one per byte.
	Padded bool
	// Stream of the last pending write (CUDA only); None when no write is
	// pending.
	Stream Stream
}

// NewInterface builds the dictionary a producer exports for l, as PyTorch,
// CuPy and Numba do: version 3, strides None when the layout is
// C-contiguous (extent-1 dimensions ignored) and byte strides otherwise,
// data pointer 0 for zero-size arrays (as the specification asks), the
// typestr (and descr for vector types) from TypestrOf, and the stream for
// CUDA. The result is validated.
func NewInterface(kind Kind, l Layout) (Interface, error) {
	var ts string
	var descr Descr
	var err error
	if l.Padded {
		ts, descr, err = PaddedTypestrOf(l.DType)
	} else {
		ts, descr, err = TypestrOf(l.DType)
	}
	if err != nil {
		return Interface{}, err
	}
	if len(l.Shape) > dlpack.MaxNDim {
		return Interface{}, fmt.Errorf("%w: ndim %d exceeds %d", ErrShape, len(l.Shape), dlpack.MaxNDim)
	}
	if l.Strides != nil && len(l.Strides) != len(l.Shape) {
		return Interface{}, fmt.Errorf("%w: %d strides for %d dimensions", ErrStrides, len(l.Strides), len(l.Shape))
	}
	n, err := dlpack.NumElements(l.Shape)
	if err != nil {
		return Interface{}, fmt.Errorf("%w: %v", ErrShape, err)
	}
	i := Interface{Kind: kind, Typestr: ts, Descr: descr, Version: CAIVersion,
		Data: Data{Ptr: l.Ptr, ReadOnly: l.ReadOnly}, Stream: l.Stream}
	if kind == Host {
		i.Version = ArrayInterfaceVersion
	}
	if n == 0 {
		i.Data.Ptr = 0
	}
	itemSize := int64(l.DType.ItemSize()) // packed sub-byte types were refused above
	contiguous := l.Strides == nil || dlpack.IsCContiguous(l.Shape, l.Strides)
	if contiguous {
		i.Shape = append(make([]int64, 0, len(l.Shape)), l.Shape...)
	} else {
		// One allocation for shape and strides.
		buf := make([]int64, 2*len(l.Shape))
		i.Shape = buf[:len(l.Shape):len(l.Shape)]
		copy(i.Shape, l.Shape)
		i.Strides = buf[len(l.Shape):]
		for d, s := range l.Strides {
			b, ok := dlpack.MulInt64(s, itemSize)
			if !ok {
				return Interface{}, fmt.Errorf("%w: strides[%d] = %d elements of %d bytes overflows int64", ErrStrides, d, s, itemSize)
			}
			i.Strides[d] = b
		}
	}
	if err := i.Validate(); err != nil {
		return Interface{}, err
	}
	return i, nil
}
