package zerocopy

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
)

// This file: element values of the numeric dtypes (bool, int8..64,
// uint8..64, float16/32/64, bfloat16, complex64/128) read and written one
// at a time, for what works on values rather than bytes: Fill, Sum and
// Convert. Other dtypes (float8, sub-byte types, int128) are exchanged and
// copied as bytes but have no values here.

// ValueKind says which field of a Value holds it.
type ValueKind int32

// The kinds of Value (the numbers match pybridge's Scalar kinds).
const (
	IntValue     ValueKind = 0 // I
	UintValue    ValueKind = 1 // U
	FloatValue   ValueKind = 2 // real(C)
	ComplexValue ValueKind = 3 // C
	BoolValue    ValueKind = 4 // I, 0 or 1
)

// Value is one number: integers exactly, floats and complex numbers as
// complex128.
type Value struct {
	Kind ValueKind
	I    int64
	U    uint64
	C    complex128
}

// Int, Uint, Float, Complex and Bool make Values.
func Int(i int64) Value          { return Value{Kind: IntValue, I: i} }
func Uint(u uint64) Value        { return Value{Kind: UintValue, U: u} }
func Float(f float64) Value      { return Value{Kind: FloatValue, C: complex(f, 0)} }
func Complex(z complex128) Value { return Value{Kind: ComplexValue, C: z} }
func Bool(b bool) Value {
	if b {
		return Value{Kind: BoolValue, I: 1}
	}
	return Value{Kind: BoolValue}
}

func (x Value) String() string {
	switch x.Kind {
	case IntValue:
		return fmt.Sprint(x.I)
	case UintValue:
		return fmt.Sprint(x.U)
	case BoolValue:
		return fmt.Sprint(x.I != 0)
	case ComplexValue:
		return fmt.Sprint(x.C)
	}
	return fmt.Sprint(real(x.C))
}

// Complex128 is x as one number of any kind (64-bit integers rounded to
// nearest): for comparing sums across dtypes.
func (x Value) Complex128() complex128 {
	switch x.Kind {
	case IntValue, BoolValue:
		return complex(float64(x.I), 0)
	case UintValue:
		return complex(float64(x.U), 0)
	}
	return x.C
}

// bits64 is x for an integer store: floats truncated toward zero (NaN to
// 0, saturating beyond int64/uint64), integers wrapped, as C casts do.
func (x Value) bits64() uint64 {
	switch x.Kind {
	case IntValue, BoolValue:
		return uint64(x.I)
	case UintValue:
		return x.U
	}
	f := real(x.C)
	switch {
	case math.IsNaN(f):
		return 0
	case f >= 0x1p63:
		return uint64(f) // fits uint64 or saturates
	case f <= -0x1p63:
		return 1 << 63
	}
	return uint64(int64(f))
}

func (x Value) isZero() bool {
	switch x.Kind {
	case IntValue, BoolValue:
		return x.I == 0
	case UintValue:
		return x.U == 0
	}
	return x.C == 0
}

// elemCodec reads and writes one element of a dtype at a host address.
type elemCodec struct {
	size  int64
	kind  ValueKind // the kind of the dtype's sums
	load  func(p unsafe.Pointer) Value
	store func(p unsafe.Pointer, x Value)
}

// codecOf returns the codec of dt, or an error for dtypes without values.
func codecOf(op string, dt dlpack.DataType) (elemCodec, error) {
	// Sound (every load and store below): p is the address of one element
	// of dt inside a live view's validated span, aligned for it (checked
	// by the callers: element strides and base of the view).
	c := elemCodec{size: int64(dt.ItemSize())}
	ok := dt.Lanes == 1
	switch {
	case !ok:
	case dt.Code == dlpack.Bool && dt.Bits == 8:
		c.kind = IntValue
		c.load = func(p unsafe.Pointer) Value {
			if *(*uint8)(p) != 0 {
				return Value{Kind: BoolValue, I: 1}
			}
			return Value{Kind: BoolValue}
		}
		c.store = func(p unsafe.Pointer, x Value) {
			*(*uint8)(p) = 0
			if !x.isZero() {
				*(*uint8)(p) = 1
			}
		}
	case dt.Code == dlpack.Int:
		c.kind = IntValue
		switch dt.Bits {
		case 8:
			c.load, c.store = intCodec[int8]()
		case 16:
			c.load, c.store = intCodec[int16]()
		case 32:
			c.load, c.store = intCodec[int32]()
		case 64:
			c.load, c.store = intCodec[int64]()
		default:
			ok = false
		}
	case dt.Code == dlpack.UInt:
		c.kind = UintValue
		switch dt.Bits {
		case 8:
			c.load, c.store = uintCodec[uint8]()
		case 16:
			c.load, c.store = uintCodec[uint16]()
		case 32:
			c.load, c.store = uintCodec[uint32]()
		case 64:
			c.load, c.store = uintCodec[uint64]()
		default:
			ok = false
		}
	case dt.Code == dlpack.Float && dt.Bits == 16:
		c.kind = FloatValue
		c.load = func(p unsafe.Pointer) Value { return Float(float64((*(*Float16)(p)).Float32())) }
		c.store = func(p unsafe.Pointer, x Value) { *(*Float16)(p) = Float16From(float32(real(x.Complex128()))) }
	case dt.Code == dlpack.Bfloat && dt.Bits == 16:
		c.kind = FloatValue
		c.load = func(p unsafe.Pointer) Value { return Float(float64((*(*BFloat16)(p)).Float32())) }
		c.store = func(p unsafe.Pointer, x Value) { *(*BFloat16)(p) = BFloat16From(float32(real(x.Complex128()))) }
	case dt.Code == dlpack.Float && dt.Bits == 32:
		c.kind = FloatValue
		c.load = func(p unsafe.Pointer) Value { return Float(float64(*(*float32)(p))) }
		c.store = func(p unsafe.Pointer, x Value) { *(*float32)(p) = float32(real(x.Complex128())) }
	case dt.Code == dlpack.Float && dt.Bits == 64:
		c.kind = FloatValue
		c.load = func(p unsafe.Pointer) Value { return Float(*(*float64)(p)) }
		c.store = func(p unsafe.Pointer, x Value) { *(*float64)(p) = real(x.Complex128()) }
	case dt.Code == dlpack.Complex && dt.Bits == 64:
		c.kind = ComplexValue
		c.load = func(p unsafe.Pointer) Value { return Complex(complex128(*(*complex64)(p))) }
		c.store = func(p unsafe.Pointer, x Value) { *(*complex64)(p) = complex64(x.Complex128()) }
	case dt.Code == dlpack.Complex && dt.Bits == 128:
		c.kind = ComplexValue
		c.load = func(p unsafe.Pointer) Value { return Complex(*(*complex128)(p)) }
		c.store = func(p unsafe.Pointer, x Value) { *(*complex128)(p) = x.Complex128() }
	default:
		ok = false
	}
	if !ok {
		return elemCodec{}, fmt.Errorf("zerocopy: %s: dtype %s has no values here (bool, int8..64, uint8..64, float16/32/64, bfloat16, complex64/128); it is still exchanged and copied as bytes", op, dt)
	}
	return c, nil
}

func intCodec[T int8 | int16 | int32 | int64]() (func(unsafe.Pointer) Value, func(unsafe.Pointer, Value)) {
	return func(p unsafe.Pointer) Value { return Int(int64(*(*T)(p))) },
		func(p unsafe.Pointer, x Value) { *(*T)(p) = T(x.bits64()) }
}

func uintCodec[T uint8 | uint16 | uint32 | uint64]() (func(unsafe.Pointer) Value, func(unsafe.Pointer, Value)) {
	return func(p unsafe.Pointer) Value { return Uint(uint64(*(*T)(p))) },
		func(p unsafe.Pointer, x Value) { *(*T)(p) = T(x.bits64()) }
}

// Encode returns x as one element of dtype dt in memory (little-endian, as
// the view's memory holds it), converted as a C cast would: floats to
// integers truncated toward zero, nonzero to bool true.
func Encode(dt dlpack.DataType, x Value) ([]byte, error) {
	c, err := codecOf("Encode", dt)
	if err != nil {
		return nil, err
	}
	var buf [2]uint64 // 16 bytes, 8-aligned: room and alignment for every dtype here
	c.store(unsafe.Pointer(&buf[0]), x)
	out := make([]byte, c.size)
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), c.size))
	return out, nil
}
