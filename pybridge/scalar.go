package pybridge

import "fmt"

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
