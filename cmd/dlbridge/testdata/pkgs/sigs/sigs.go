// Package sigs registers functions of varied signatures for the tests of
// dlbridge build's invokers.
package sigs

import (
	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Mode is a named integer type, exported: an invoker can name it.
type Mode int32

// level is unexported: the generated main package cannot name it.
type level int

type counter struct{ n int }

func (c *counter) Add(k int) int { c.n += k; return c.n }

func init() {
	pyfunc.Register("sigs.modes(x, m=1, flag=False)", Modes)
	pyfunc.Register("sigs.levels(l)", levels)
	pyfunc.Register("sigs.lit(s, u)", func(s string, u uint8) (bool, float64, error) { return s != "", float64(u), nil })
	pyfunc.Register("sigs.add(k)", (&counter{}).Add)
	pyfunc.Register("sigs.stream(x: cuda)", func(s *cuda.Stream, x *zerocopy.View) (*zerocopy.View, error) { return nil, nil })
}

// Modes takes a view, a named integer and a flag.
func Modes(x *zerocopy.View, m Mode, flag bool) (int64, error) { return int64(m), nil }

func levels(l level) int { return int(l) }
