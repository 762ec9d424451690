package pyfunc

import (
	"sync"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Frame holds one call's arguments and results in the Go function's own
// parameter and result order, for an Invoker. A slot holds the value of
// its Go type's kind: V for tensors, S for the stream, I (int kinds), U
// (uint kinds), F (floats), B, Str.
type Frame struct {
	S   *cuda.Stream
	V   [maxSlots]*zerocopy.View
	I   [maxSlots]int64
	U   [maxSlots]uint64
	F   [maxSlots]float64
	B   [maxSlots]bool
	Str [maxSlots]string
	// Results, by result index (the error aside).
	RV   [maxSlots]*zerocopy.View
	RI   [maxSlots]int64
	RU   [maxSlots]uint64
	RF   [maxSlots]float64
	RB   [maxSlots]bool
	RStr [maxSlots]string
}

// maxSlots bounds the parameters and results a Frame carries; Register
// refuses functions with more.
const maxSlots = 16

// MaxParams is the most parameters (and results) a registered function has.
const MaxParams = maxSlots

// An Invoker calls one registered function with a Frame's arguments and
// stores its results there, without reflection. Invokers are made by
// InvokerFactory functions, which dlbridge build generates for the
// signatures of the functions its packages register.
type Invoker func(fr *Frame) error

// An InvokerFactory returns an Invoker for fn when fn has the signature it
// knows, else nil.
type InvokerFactory func(fn any) Invoker

var factories struct {
	sync.Mutex
	list []InvokerFactory
}

// AddInvokers adds factories of invokers and attaches an invoker to every
// registered function that one of them knows; functions registered later
// get theirs at registration. A function without one is called through
// reflection, with the same results.
func AddInvokers(fs ...InvokerFactory) {
	factories.Lock()
	factories.list = append(factories.list, fs...)
	factories.Unlock()
	for _, f := range Funcs() {
		f.attachInvoker()
	}
}

// attachInvoker gives f the first invoker a factory makes for it.
func (f *Func) attachInvoker() {
	if f.nin > maxSlots || len(f.Results) > maxSlots || f.invoker.Load() != nil {
		return
	}
	factories.Lock()
	list := append([]InvokerFactory(nil), factories.list...)
	factories.Unlock()
	fn := f.fn.Interface()
	for _, mk := range list {
		if inv := mk(fn); inv != nil {
			f.invoker.Store(&inv)
			return
		}
	}
}

// Fast reports whether f is called without reflection.
func (f *Func) Fast() bool { return f.invoker.Load() != nil }
