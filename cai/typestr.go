package cai

import (
	"fmt"
	"strconv"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Byte-order characters of a typestr.
const (
	LittleEndian byte = '<'
	BigEndian    byte = '>'
	NotRelevant  byte = '|' // one-byte and opaque types
	Native       byte = '=' // the producer's native order: little-endian on every platform CUDA runs on
)

// maxTypestrSize bounds the number in a typestr so that item sizes and
// products of them stay far from int64 overflow.
const maxTypestrSize = 1<<31 - 1

// Typestr is a parsed NumPy type string such as "<f4", "|b1", "<V2",
// "|V12" or "<M8[ns]": a byte order, a kind character and a size.
//
// ParseTypestr accepts every kind NumPy defines (b i u f c V m M O S U t)
// so that an error can say precisely what is unsupported; DataType maps
// the ones DLPack can represent.
type Typestr struct {
	// Order is '<', '>', '|' or '=', or 0 when the string had none ("f4":
	// some producers omit it; it then means native order).
	Order byte
	// Kind is the type character: b bool, i int, u uint, f float,
	// c complex, V void (opaque or record), m timedelta, M datetime,
	// O Python object, S bytes, U unicode, t bit field.
	Kind byte
	// Size is the number after the kind: bytes for most kinds, characters
	// for U (4 bytes each), bits for t. It is 0 only for "O" written
	// without a size, as NumPy writes object arrays ("|O").
	Size int
	// Unit is the bracketed unit of m and M ("ns" in "<M8[ns]", "25s"
	// in "<m8[25s]"), empty otherwise.
	Unit string
}

// ParseTypestr parses the grammar of a NumPy typestr: an optional byte
// order (< > | =), a kind character, a decimal size (optional only for O)
// and, for m and M, an optional "[unit]". It checks syntax only: use
// DataType to learn whether DLPack can represent the type.
func ParseTypestr(s string) (Typestr, error) {
	var t Typestr
	i := 0
	if i < len(s) {
		switch s[i] {
		case LittleEndian, BigEndian, NotRelevant, Native:
			t.Order = s[i]
			i++
		}
	}
	if i >= len(s) {
		return Typestr{}, fmt.Errorf("%w %q: missing kind character", ErrTypestr, s)
	}
	t.Kind = s[i]
	i++
	switch t.Kind {
	case 'b', 'i', 'u', 'f', 'c', 'V', 'm', 'M', 'O', 'S', 'U', 't':
	default:
		return Typestr{}, fmt.Errorf("%w %q: unknown kind %q (want one of b i u f c V m M O S U t)", ErrTypestr, s, rune(t.Kind))
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == start {
		if t.Kind != 'O' {
			return Typestr{}, fmt.Errorf("%w %q: missing size after kind %q", ErrTypestr, s, rune(t.Kind))
		}
	} else {
		n, err := strconv.ParseInt(s[start:i], 10, 64)
		if err != nil || n > maxTypestrSize {
			return Typestr{}, fmt.Errorf("%w %q: size %s out of range (1..%d)", ErrTypestr, s, s[start:i], maxTypestrSize)
		}
		if n == 0 {
			return Typestr{}, fmt.Errorf("%w %q: size 0 (must be at least 1)", ErrTypestr, s)
		}
		t.Size = int(n)
	}
	if i < len(s) && s[i] == '[' && (t.Kind == 'm' || t.Kind == 'M') {
		end := i + 1
		for end < len(s) && s[end] != ']' {
			end++
		}
		if end >= len(s) || end != len(s)-1 {
			return Typestr{}, fmt.Errorf("%w %q: unterminated or trailing text after datetime unit", ErrTypestr, s)
		}
		unit := s[i+1 : end]
		if !validUnit(unit) {
			return Typestr{}, fmt.Errorf("%w %q: bad datetime unit %q", ErrTypestr, s, unit)
		}
		t.Unit = unit
		i = len(s)
	}
	if i != len(s) {
		return Typestr{}, fmt.Errorf("%w %q: unexpected %q after the size", ErrTypestr, s, s[i:])
	}
	return t, nil
}

// validUnit accepts NumPy datetime units: an optional multiplier followed
// by letters ("ns", "25s", "D", "generic").
func validUnit(u string) bool {
	i := 0
	for i < len(u) && u[i] >= '0' && u[i] <= '9' {
		i++
	}
	if i > 9 { // keep the multiplier well inside int32
		return false
	}
	if i == len(u) {
		return false
	}
	for ; i < len(u); i++ {
		c := u[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// String writes t back in the form ParseTypestr reads.
func (t Typestr) String() string {
	b := make([]byte, 0, 16)
	if t.Order != 0 {
		b = append(b, t.Order)
	}
	b = append(b, t.Kind)
	if t.Size != 0 {
		b = strconv.AppendInt(b, int64(t.Size), 10)
	}
	if t.Unit != "" {
		b = append(b, '[')
		b = append(b, t.Unit...)
		b = append(b, ']')
	}
	return string(b)
}

// ItemSize is the number of bytes one item of this type occupies: Size for
// most kinds, 4 × Size for U, ceil(Size/8) for t, 8 (a pointer) for O.
func (t Typestr) ItemSize() int64 {
	switch t.Kind {
	case 'U':
		return 4 * int64(t.Size)
	case 't':
		return (int64(t.Size) + 7) / 8
	case 'O':
		if t.Size == 0 {
			return 8
		}
	}
	return int64(t.Size)
}

// BigEndian reports whether the data is stored big-endian: order '>' on a
// type wider than one byte (the order of one-byte types is irrelevant).
func (t Typestr) BigEndian() bool { return t.Order == BigEndian && t.ItemSize() > 1 }

// checkSupported reports why data of type t cannot be used at all:
// big-endian storage, or a kind with no fixed-size numeric meaning.
func (t Typestr) checkSupported(orig string) error {
	switch t.Kind {
	case 'O':
		return fmt.Errorf("%w: typestr %q holds Python object pointers, which cannot be shared as raw memory", ErrUnsupported, orig)
	case 'S', 'U':
		return fmt.Errorf("%w: typestr %q is a fixed-length string type, not supported", ErrUnsupported, orig)
	case 'm', 'M':
		return fmt.Errorf("%w: typestr %q is a datetime/timedelta type, not supported", ErrUnsupported, orig)
	case 't':
		return fmt.Errorf("%w: typestr %q is a bit field, not supported", ErrUnsupported, orig)
	}
	if t.BigEndian() {
		return fmt.Errorf("%w (typestr %q)", ErrBigEndian, orig)
	}
	return nil
}

// DataType maps t to a DLPack data type. The mapping is:
//
//	|b1                      bool
//	|i1 <i2 <i4 <i8          int8 … int64
//	|u1 <u2 <u4 <u8          uint8 … uint64
//	<f2 <f4 <f8              float16, float32, float64
//	<c8 <c16                 complex64, complex128
//	<V2                      bfloat16 (PyTorch's convention since 2.6, the
//	                         same string ml_dtypes.bfloat16 has)
//
// The byte order may also be '=' (native: little on every CUDA platform),
// omitted, or, for one-byte types, any of the four. Everything else is an
// error that names the typestr: big-endian data; float16/f12 "long double"
// and c32 (no DLPack equivalent: they are x87 extended precision, not
// IEEE binary128); 16-byte integers (NumPy has none); any other V type
// ("|V1" is what ml_dtypes writes for every float8, float6, float4 and
// int4 type, so the variant cannot be recovered; "|V2" with order '|' is a
// plain opaque void, not bfloat16); and the kinds O S U m M t.
// Records (V with a descr) are handled by Interface.DataType.
func (t Typestr) DataType() (dlpack.DataType, error) {
	dt, ok := t.dataType()
	if ok {
		return dt, nil
	}
	return dlpack.DataType{}, t.dataTypeError()
}

// dataType is the successful half of DataType, kept free of allocations
// (the error text is built only when needed).
func (t Typestr) dataType() (dlpack.DataType, bool) {
	if t.Order == BigEndian && t.ItemSize() > 1 {
		return dlpack.DataType{}, false
	}
	bits := uint8(t.Size * 8)
	switch t.Kind {
	case 'b':
		if t.Size == 1 {
			return dlpack.BoolType, true
		}
	case 'i', 'u':
		if t.Size == 1 || t.Size == 2 || t.Size == 4 || t.Size == 8 {
			code := dlpack.Int
			if t.Kind == 'u' {
				code = dlpack.UInt
			}
			return dlpack.DataType{Code: code, Bits: bits, Lanes: 1}, true
		}
	case 'f':
		if t.Size == 2 || t.Size == 4 || t.Size == 8 {
			return dlpack.DataType{Code: dlpack.Float, Bits: bits, Lanes: 1}, true
		}
	case 'c':
		if t.Size == 8 || t.Size == 16 {
			return dlpack.DataType{Code: dlpack.Complex, Bits: bits, Lanes: 1}, true
		}
	case 'V':
		if t.Size == 2 && t.Order == LittleEndian {
			return dlpack.Bfloat16Type, true
		}
	}
	return dlpack.DataType{}, false
}

// dataTypeError says why t has no DLPack data type.
func (t Typestr) dataTypeError() error {
	orig := t.String()
	if err := t.checkSupported(orig); err != nil {
		return err
	}
	switch t.Kind {
	case 'f':
		if t.Size == 12 || t.Size == 16 {
			return fmt.Errorf("%w: typestr %q is NumPy's long double (x87 extended precision), which DLPack cannot represent", ErrUnsupported, orig)
		}
	case 'c':
		if t.Size == 24 || t.Size == 32 {
			return fmt.Errorf("%w: typestr %q is NumPy's complex long double, which DLPack cannot represent", ErrUnsupported, orig)
		}
	case 'V':
		if t.Size == 1 {
			return fmt.Errorf("%w: typestr %q is an opaque 1-byte type (ml_dtypes writes it for every float8, float6, float4 and int4 type, so which one is unknown); set Typestr to \"|u1\" to import the raw bytes", ErrUnsupported, orig)
		}
		return fmt.Errorf("%w: typestr %q is an opaque %d-byte void type with no fields: no DLPack data type (only \"<V2\", PyTorch's bfloat16, is mapped)", ErrUnsupported, orig, t.Size)
	}
	return fmt.Errorf("%w: typestr %q: kind %q has no %d-byte type", ErrUnsupported, orig, rune(t.Kind), t.Size)
}

// TypestrOf returns the typestr producers write for dt, the inverse of
// Typestr.DataType, and for vector types (lanes > 1) the record descr that
// describes them.
//
//   - bfloat16 is "<V2", as PyTorch (2.6 and later) and ml_dtypes write it.
//   - The one-byte extended floats (every float8 variant, and float6/float4
//     when stored one per byte) have no NumPy type: they go out as "|u1",
//     a byte container any consumer (PyTorch, CuPy, Numba) accepts and can
//     reinterpret, as TensorRT-LLM does. The reverse mapping gives uint8, so
//     the variant is lost on a round trip through the typestr alone.
//   - Lanes > 1 become a record "|V{lanes × size}" of fields named f0, f1,
//     … (NumPy's names for unnamed fields), each of the scalar typestr.
//   - Packed sub-byte types, int128/uint128, float128 and complex32 have no
//     NumPy equivalent and are an error.
func TypestrOf(dt dlpack.DataType) (string, Descr, error) {
	if err := dt.Validate(); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	scalar := dt
	scalar.Lanes = 1
	ts, err := scalarTypestr(scalar)
	if err != nil {
		return "", nil, err
	}
	if dt.Lanes == 1 {
		return ts, nil, nil
	}
	size := scalar.ItemSize() * int(dt.Lanes)
	d := make(Descr, dt.Lanes)
	for i := range d {
		d[i] = Field{Name: "f" + strconv.Itoa(i), Typestr: ts}
	}
	return "|V" + strconv.Itoa(size), d, nil
}

func scalarTypestr(dt dlpack.DataType) (string, error) {
	switch dt.Code {
	case dlpack.Bool:
		return "|b1", nil
	case dlpack.Int, dlpack.UInt:
		k := "i"
		if dt.Code == dlpack.UInt {
			k = "u"
		}
		switch dt.Bits {
		case 8:
			return "|" + k + "1", nil
		case 16, 32, 64:
			return "<" + k + strconv.Itoa(int(dt.Bits)/8), nil
		}
	case dlpack.Float:
		switch dt.Bits {
		case 16:
			return "<f2", nil
		case 32:
			return "<f4", nil
		case 64:
			return "<f8", nil
		}
	case dlpack.Bfloat:
		return "<V2", nil
	case dlpack.Complex:
		switch dt.Bits {
		case 64:
			return "<c8", nil
		case 128:
			return "<c16", nil
		}
	case dlpack.Float8E3M4, dlpack.Float8E4M3, dlpack.Float8E4M3B11FNUZ, dlpack.Float8E4M3FN,
		dlpack.Float8E4M3FNUZ, dlpack.Float8E5M2, dlpack.Float8E5M2FNUZ, dlpack.Float8E8M0FNU:
		return "|u1", nil
	}
	if dt.IsSubByte() {
		return "", fmt.Errorf("%w: %s packs elements below a byte; the array interface has no such type (store it padded, one per byte)", ErrUnsupported, dt)
	}
	return "", fmt.Errorf("%w: %s has no NumPy typestr", ErrUnsupported, dt)
}

// PaddedTypestrOf is TypestrOf for sub-byte types stored one element per
// byte (DLPack's IS_SUBBYTE_TYPE_PADDED): float6/float4 and int4/uint4
// values go out as "|u1" bytes, as the one-byte floats do.
func PaddedTypestrOf(dt dlpack.DataType) (string, Descr, error) {
	if dt.IsSubByte() && dt.Lanes == 1 {
		if err := dt.Validate(); err != nil {
			return "", nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return "|u1", nil, nil
	}
	return TypestrOf(dt)
}
