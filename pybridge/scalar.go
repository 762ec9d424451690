package pybridge

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// ScalarKind says which field of a Scalar holds the value.
type ScalarKind int32

// The kinds of Scalar.
const (
	IntScalar     ScalarKind = 0 // I
	UintScalar    ScalarKind = 1 // U
	FloatScalar   ScalarKind = 2 // F
	ComplexScalar ScalarKind = 3 // F + Im·i
	BoolScalar    ScalarKind = 4 // I (0 or 1)
)

// Scalar is one number crossing the C boundary: fill values in, sums out.
// Integers travel exactly (a float64 would lose int64 precision).
type Scalar struct {
	Kind ScalarKind
	I    int64
	U    uint64
	F    float64
	Im   float64
}

// Int, Uint, Float and Complex make Scalars.
func Int(i int64) Scalar            { return Scalar{Kind: IntScalar, I: i} }
func Uint(u uint64) Scalar          { return Scalar{Kind: UintScalar, U: u} }
func Float(f float64) Scalar        { return Scalar{Kind: FloatScalar, F: f} }
func Complex(re, im float64) Scalar { return Scalar{Kind: ComplexScalar, F: re, Im: im} }

// complex gives the value as complex128 (integers rounded to nearest).
func (s Scalar) complex() complex128 {
	switch s.Kind {
	case IntScalar, BoolScalar:
		return complex(float64(s.I), 0)
	case UintScalar:
		return complex(float64(s.U), 0)
	case ComplexScalar:
		return complex(s.F, s.Im)
	}
	return complex(s.F, 0)
}

// asInt gives the value as int64 bits for integer stores, truncating floats
// toward zero and wrapping out-of-range integers as C casts do.
func (s Scalar) asInt() uint64 {
	switch s.Kind {
	case IntScalar, BoolScalar:
		return uint64(s.I)
	case UintScalar:
		return s.U
	}
	f := s.F
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

func (s Scalar) isZero() bool {
	switch s.Kind {
	case IntScalar, BoolScalar:
		return s.I == 0
	case UintScalar:
		return s.U == 0
	}
	return s.F == 0 && s.Im == 0
}

func (s Scalar) String() string {
	switch s.Kind {
	case IntScalar:
		return fmt.Sprint(s.I)
	case UintScalar:
		return fmt.Sprint(s.U)
	case BoolScalar:
		return fmt.Sprint(s.I != 0)
	case ComplexScalar:
		return fmt.Sprint(complex(s.F, s.Im))
	}
	return fmt.Sprint(s.F)
}

// codec reads and writes one element of a dtype in host memory.
type codec struct {
	dtype dlpack.DataType
	size  int64
}

func codecOf(t dlpack.DataType) (codec, error) {
	if t.Lanes != 1 {
		return codec{}, Errorf(TypeError, "dlbridge: Go-side arithmetic does not support vector dtype %s (lanes=%d)", t, t.Lanes)
	}
	ok := false
	switch t.Code {
	case dlpack.Bool:
		ok = t.Bits == 8
	case dlpack.Int, dlpack.UInt:
		ok = t.Bits == 8 || t.Bits == 16 || t.Bits == 32 || t.Bits == 64
	case dlpack.Float:
		ok = t.Bits == 16 || t.Bits == 32 || t.Bits == 64
	case dlpack.Bfloat:
		ok = t.Bits == 16
	case dlpack.Complex:
		ok = t.Bits == 64 || t.Bits == 128
	}
	if !ok {
		return codec{}, Errorf(TypeError, "dlbridge: Go-side arithmetic does not support dtype %s (only bool, int8..64, uint8..64, float16/32/64, bfloat16, complex64/128); exchange still works", t)
	}
	return codec{dtype: t, size: int64(t.ItemSize())}, nil
}

// kind is the kind of Scalar that sums of this dtype give.
func (c codec) kind() ScalarKind {
	switch c.dtype.Code {
	case dlpack.Int, dlpack.Bool:
		return IntScalar
	case dlpack.UInt:
		return UintScalar
	case dlpack.Complex:
		return ComplexScalar
	}
	return FloatScalar
}

// encode writes s as one element into b (len(b) == c.size).
func (c codec) encode(b []byte, s Scalar) {
	switch c.dtype.Code {
	case dlpack.Bool:
		if s.isZero() {
			b[0] = 0
		} else {
			b[0] = 1
		}
	case dlpack.Int, dlpack.UInt:
		u := s.asInt()
		for i := range b {
			b[i] = byte(u >> (8 * i))
		}
	case dlpack.Float:
		f := real(s.complex())
		switch c.size {
		case 2:
			putU16(b, uint16(zerocopy.Float16From(float32(f))))
		case 4:
			putU32(b, math.Float32bits(float32(f)))
		default:
			putU64(b, math.Float64bits(f))
		}
	case dlpack.Bfloat:
		putU16(b, uint16(zerocopy.BFloat16From(float32(real(s.complex())))))
	case dlpack.Complex:
		z := s.complex()
		if c.size == 8 {
			putU32(b, math.Float32bits(float32(real(z))))
			putU32(b[4:], math.Float32bits(float32(imag(z))))
		} else {
			putU64(b, math.Float64bits(real(z)))
			putU64(b[8:], math.Float64bits(imag(z)))
		}
	}
}

// load reads the element at p.
func (c codec) load(p unsafe.Pointer) (i int64, u uint64, z complex128) {
	switch c.dtype.Code {
	case dlpack.Bool:
		if *(*uint8)(p) != 0 {
			return 1, 1, 1
		}
		return 0, 0, 0
	case dlpack.Int:
		switch c.size {
		case 1:
			i = int64(*(*int8)(p))
		case 2:
			i = int64(*(*int16)(p))
		case 4:
			i = int64(*(*int32)(p))
		default:
			i = *(*int64)(p)
		}
		return i, uint64(i), complex(float64(i), 0)
	case dlpack.UInt:
		switch c.size {
		case 1:
			u = uint64(*(*uint8)(p))
		case 2:
			u = uint64(*(*uint16)(p))
		case 4:
			u = uint64(*(*uint32)(p))
		default:
			u = *(*uint64)(p)
		}
		return int64(u), u, complex(float64(u), 0)
	case dlpack.Float:
		switch c.size {
		case 2:
			z = complex(float64((*(*zerocopy.Float16)(p)).Float32()), 0)
		case 4:
			z = complex(float64(*(*float32)(p)), 0)
		default:
			z = complex(*(*float64)(p), 0)
		}
	case dlpack.Bfloat:
		z = complex(float64((*(*zerocopy.BFloat16)(p)).Float32()), 0)
	case dlpack.Complex:
		if c.size == 8 {
			z = complex128(*(*complex64)(p))
		} else {
			z = *(*complex128)(p)
		}
	}
	return 0, 0, z
}

func putU16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
func putU32(b []byte, v uint32) {
	for i := 0; i < 4; i++ {
		b[i] = byte(v >> (8 * i))
	}
}
func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}
