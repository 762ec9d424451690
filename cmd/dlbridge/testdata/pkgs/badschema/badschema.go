// Package badschema registers functions whose schemas do not match them,
// for the test of dlbridge build's schema check.
package badschema

import (
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Mode is a named integer type.
type Mode uint8

func init() {
	pyfunc.Register("mylib.add(x: float32 [N], y: float32 [N])", Add)
	pyfunc.Register("mylib.scale(x: float32 [N], factor: float32 [N])", Scale)
	pyfunc.Register("mylib.mode(x, m=300)", SetMode)
	pyfunc.Register("mylib.sum(xs)", Sum)
	pyfunc.Register("mylib.ok(x: float32 [N] C)", OK)
	pyfunc.Register("mylib.ok(x)", OK)
}

// Add writes x + y into out: three parameters, the schema names two.
func Add(out, x, y *zerocopy.View) error { return nil }

// Scale takes a float the schema gives tensor constraints.
func Scale(x *zerocopy.View, factor float32) error { return nil }

// SetMode's default does not fit a Mode.
func SetMode(x *zerocopy.View, m Mode) error { return nil }

// Sum takes a slice, which Python cannot pass.
func Sum(xs []float32) float32 { return 0 }

// OK matches its schema, and is registered twice.
func OK(x *zerocopy.View) error { return nil }
