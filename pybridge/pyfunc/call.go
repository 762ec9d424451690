package pyfunc

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Value is a scalar argument as it came from Python: Kind is IntKind
// (Int), UintKind (Uint, for integers above the int64 range), FloatKind,
// BoolKind or StringKind; 0 means the caller left the parameter out.
type Value struct {
	Kind  Kind
	Int   int64
	Uint  uint64
	Float float64
	Bool  bool
	Str   string
}

// pyName is how the message names what came: "int 300", "str 'x'".
func (v *Value) pyName() string {
	switch v.Kind {
	case IntKind:
		return fmt.Sprintf("int %d", v.Int)
	case UintKind:
		return fmt.Sprintf("int %d", v.Uint)
	case FloatKind:
		return fmt.Sprintf("float %v", v.Float)
	case BoolKind:
		if v.Bool {
			return "bool True"
		}
		return "bool False"
	case StringKind:
		s := v.Str
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return fmt.Sprintf("str %q", s)
	}
	return "nothing"
}

// store converts v into Go parameter p's slot of fr, or says why not:
// Python's bool is not a number here, a float is not an integer, and an
// integer must fit the Go type.
func (v *Value) store(p *Param, fr *Frame) string {
	i := p.goIndex
	switch p.Kind {
	case BoolKind:
		if v.Kind == BoolKind {
			fr.B[i] = v.Bool
			return ""
		}
	case StringKind:
		if v.Kind == StringKind {
			fr.Str[i] = v.Str
			return ""
		}
	case IntKind:
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if p.bits < 64 {
			lo, hi = -1<<(p.bits-1), 1<<(p.bits-1)-1
		}
		switch {
		case v.Kind == IntKind && v.Int >= lo && v.Int <= hi:
			fr.I[i] = v.Int
			return ""
		case v.Kind == IntKind:
			return fmt.Sprintf("%d is out of range for %v", v.Int, p.GoType)
		case v.Kind == UintKind:
			return fmt.Sprintf("%d is out of range for %v", v.Uint, p.GoType)
		}
	case UintKind:
		hi := uint64(math.MaxUint64)
		if p.bits < 64 {
			hi = 1<<p.bits - 1
		}
		switch {
		case v.Kind == IntKind && v.Int >= 0 && uint64(v.Int) <= hi:
			fr.U[i] = uint64(v.Int)
			return ""
		case v.Kind == UintKind && v.Uint <= hi:
			fr.U[i] = v.Uint
			return ""
		case v.Kind == IntKind:
			return fmt.Sprintf("%d is out of range for %v", v.Int, p.GoType)
		case v.Kind == UintKind:
			return fmt.Sprintf("%d is out of range for %v", v.Uint, p.GoType)
		}
	case FloatKind:
		var x float64
		switch v.Kind {
		case FloatKind:
			x = v.Float
		case IntKind:
			x = float64(v.Int)
		case UintKind:
			x = float64(v.Uint)
		default:
			return "want " + p.GoType.String() + " (a float or an int), got " + v.pyName()
		}
		if p.bits == 32 && !math.IsInf(x, 0) && !math.IsNaN(x) && math.Abs(x) > math.MaxFloat32 {
			return fmt.Sprintf("%v is out of range for float32", x)
		}
		fr.F[i] = x
		return ""
	}
	return "want " + pyType(p.Kind, p.GoType) + ", got " + v.pyName()
}

// slot is Go parameter p's value in fr, as a reflect.Value of its type.
func (fr *Frame) slot(p *Param) reflect.Value {
	i := p.goIndex
	var v reflect.Value
	switch p.Kind {
	case TensorKind:
		return reflect.ValueOf(fr.V[i])
	case BoolKind:
		v = reflect.ValueOf(fr.B[i])
	case IntKind:
		v = reflect.ValueOf(fr.I[i])
	case UintKind:
		v = reflect.ValueOf(fr.U[i])
	case FloatKind:
		v = reflect.ValueOf(fr.F[i])
	case StringKind:
		v = reflect.ValueOf(fr.Str[i])
	}
	return v.Convert(p.GoType)
}

// pyType names the Python value a Go parameter takes.
func pyType(k Kind, t reflect.Type) string {
	switch k {
	case BoolKind:
		return "bool"
	case StringKind:
		return "str"
	case IntKind, UintKind:
		return "int (" + t.String() + ")"
	}
	return t.String()
}

// Args are the arguments of one call: one per parameter of f.Params, a
// Tensor for a tensor parameter (nil: left out), a Value for a scalar.
type Args struct {
	Tensors []*zerocopy.View
	Values  []Value
	// Stream is the CUDA stream the call runs on (a CUstream handle; 1 the
	// legacy default stream), on StreamDevice, as the caller decided it
	// (the bridge: pybridge.PlanStream, which also refuses a stream of
	// another device than the call's CUDA tensors); 0: none, for a call
	// without CUDA tensors.
	Stream uintptr
	// StreamDevice is the CUDA device of Stream, -1 when unknown (then the
	// call's CUDA tensors name it).
	StreamDevice int
	// OutTensors and OutValues, when they have room for f.Results, hold
	// the Outcome's slices, so that a caller calling in a loop reuses them;
	// nil: Call allocates them.
	OutTensors []*zerocopy.View
	OutValues  []Value
	// Frame, when not nil, is the frame the body's arguments and results
	// pass through (cleared after the call), for a caller that keeps its
	// own per-thread scratch; nil: one of f's pooled frames.
	Frame *Frame
}

// Outcome is what a call gives back: Tensors[i] for a tensor result,
// Values[i] for a scalar one (index i of f.Results). The caller owns the
// result views.
type Outcome struct {
	Tensors []*zerocopy.View
	Values  []Value
	// Stream is the CUDA stream the body ran on (0: none), on which the
	// writes of the writable arguments and results are pending.
	Stream uintptr
}

// Call checks a, orders the arguments' pending writes before the stream,
// runs the body and collects its results. An error is classified for
// Python (*Error): a mismatch names the function, the argument, what it
// expects and what came; a panic in the body comes back as RuntimeError.
func (f *Func) Call(a *Args, stream uintptr) (Outcome, error) {
	var out Outcome
	err := f.CallInto(a, &out)
	return out, err
}

// CallInto is Call with the outcome written to *out (left zero on error):
// for a caller calling in a loop, which keeps out, as the bridge does.
func (f *Func) CallInto(a *Args, out *Outcome) (err error) {
	*out = Outcome{}
	if len(a.Tensors) != len(f.Params) || len(a.Values) != len(f.Params) {
		return RuntimeErrorf("%s: %d tensor and %d value slots for %d parameters", f.Name, len(a.Tensors), len(a.Values), len(f.Params))
	}
	dev := -1 // the CUDA device of the call's tensors
	devFrom := ""
	pending := false // an argument has a write pending
	for _, i := range f.tensorIdx {
		v := a.Tensors[i]
		if v == nil {
			return TypeErrorf("%s: missing tensor argument %s", f.Name, f.Params[i].Name)
		}
		if d := v.Device(); isCUDA(d) {
			if dev >= 0 && int(d.ID) != dev {
				return ValueErrorf("%s: argument %s is on %v but %s is on cuda:%d: all CUDA tensors of a call must be on one device", f.Name, f.Params[i].Name, d, devFrom, dev)
			}
			dev, devFrom = int(d.ID), f.Params[i].Name
		}
		pending = pending || v.Stream() != 0
	}
	if len(f.tensorIdx) > 0 {
		if err := f.sig.Check(a.Tensors); err != nil {
			return checkError(err)
		}
	}
	if dev < 0 && a.Stream != 0 {
		dev = a.StreamDevice // a stream given for a call without CUDA tensors
	}
	var s *cuda.Stream
	if dev >= 0 {
		if a.Stream == 0 {
			return ValueErrorf("%s: no CUDA stream for the call on cuda:%d", f.Name, dev)
		}
		if s, err = zerocopy.StreamOf(dev, a.Stream); err != nil {
			return RuntimeErrorf("%s: cuda:%d: %w", f.Name, dev, err)
		}
		out.Stream = a.Stream
	}
	// The arguments' pending writes come first: on the GPU by event (the
	// host never waits, so a captured stream stays capturable), on the
	// host by waiting for them.
	for _, i := range f.tensorIdx {
		if !pending {
			break
		}
		v := a.Tensors[i]
		w := v.Stream()
		if w == 0 || s != nil && w == a.Stream {
			continue
		}
		if d := v.Device().Type; s != nil && (d == dlpack.CUDA || d == dlpack.CUDAManaged) {
			err = v.OrderBefore(a.Stream)
		} else {
			err = v.Synchronize()
		}
		if err != nil {
			return fmt.Errorf("%s: ordering argument %s before the call: %w", f.Name, f.Params[i].Name, err)
		}
	}
	var copies []argCopy
	if f.mayOverlap {
		if _, _, ok := f.sig.Overlap(a.Tensors); ok {
			if copies, err = f.separate(a, s); err != nil {
				return err
			}
		}
	}
	fr, pooled := a.Frame, false
	if fr == nil {
		fr, _ = f.frames.Get().(*Frame)
		if fr == nil {
			fr = new(Frame)
		}
		pooled = true
	}
	err = f.runIn(fr, s, a, out)
	fr.reset(f, pooled)
	if copies != nil {
		if err == nil {
			err = f.keepResultsOfCopies(out, copies)
		}
		undoCopies(a, copies)
	}
	return err
}

// keepResultsOfCopies gives a result that views a copy (a body that
// returns a view of its argument) a reference of its own, so that it
// outlives the copy, as a view of the caller's argument would.
func (f *Func) keepResultsOfCopies(out *Outcome, copies []argCopy) error {
	for i, r := range out.Tensors {
		for _, c := range copies {
			if r == nil || r.Owner() != c.copy.Owner() {
				continue
			}
			kept, err := r.Retain()
			if err != nil {
				out.closeTensors()
				*out = Outcome{}
				return RuntimeErrorf("%s: result %d views a copy of an argument: %v", f.Name, i+1, err)
			}
			r.Close() // drops r's own reference, if it had one (a derived view has none)
			out.Tensors[i], r = kept, kept
		}
	}
	return nil
}

// argCopy is an argument the body reads from a copy: the copy at index i
// of Args.Tensors, and the caller's view it stands for.
type argCopy struct {
	i          int
	orig, copy *zerocopy.View
}

// separate makes a call right whose written argument shares memory with
// another argument, as NumPy's ufuncs do: the body reads a copy of the
// other argument, taken before it runs (on the call's stream for device
// memory), so that it never reads what it already wrote. Two written
// arguments that share memory cannot be made right: a ValueError names
// both. The copies replace the arguments in a.Tensors until undoCopies.
func (f *Func) separate(a *Args, s *cuda.Stream) ([]argCopy, error) {
	var copies []argCopy
	for {
		w, o, ok := f.sig.Overlap(a.Tensors)
		if !ok {
			return copies, nil
		}
		if f.Params[o].Tensor.Writable {
			undoCopies(a, copies)
			return nil, ValueErrorf("%s: arguments %s and %s share memory and both are written: pass tensors that do not overlap", f.Name, f.Params[w].Name, f.Params[o].Name)
		}
		c, err := copyForRead(a.Tensors[o], &f.Params[o].Tensor, s)
		if err != nil {
			undoCopies(a, copies)
			return nil, fmt.Errorf("%s: argument %s shares memory with %s, which is written, and copying it failed: %w", f.Name, f.Params[o].Name, f.Params[w].Name, err)
		}
		copies = append(copies, argCopy{i: o, orig: a.Tensors[o], copy: c})
		a.Tensors[o] = c
	}
}

// undoCopies gives the caller's views back to a.Tensors and closes the
// copies (device memory is freed in order on the call's stream, after the
// body's work).
func undoCopies(a *Args, copies []argCopy) {
	for _, c := range copies {
		a.Tensors[c.i] = c.orig
		c.copy.Close()
	}
}

// copyForRead copies v into new memory that still meets w: the same dtype
// and shape, F-contiguous where w asks for F (else C), on the device
// where the body reads it (device memory on s when the call has a stream
// and v is CUDA memory that w lets stay there; Go memory otherwise).
func copyForRead(v *zerocopy.View, w *zerocopy.Want, s *cuda.Stream) (*zerocopy.View, error) {
	src := v
	var rev []int // reverses the dimensions: a C copy of the reversed view is F
	if w.Order == zerocopy.FOrder && v.NDim() > 1 {
		rev = make([]int, v.NDim())
		for i := range rev {
			rev[i] = len(rev) - 1 - i
		}
		p, err := v.Permute(rev...) // borrows v's reference: no Close
		if err != nil {
			return nil, err
		}
		src = p
	}
	var c *zerocopy.View
	var err error
	switch d := v.Device().Type; {
	case s != nil && (d == dlpack.CUDA || d == dlpack.CUDAManaged && w.Device.Type != dlpack.CPU):
		if c, err = zerocopy.AllocCUDAAsync(s, v.DType(), src.Shape()...); err != nil {
			return nil, err
		}
		err = zerocopy.CopyCUDA(c, src, s)
	default:
		// Host memory: the writes pending on it were waited for; managed
		// memory the call's stream may still write is read once it is done.
		if s != nil && d == dlpack.CUDAManaged {
			if err := s.Synchronize(); err != nil {
				return nil, err
			}
		}
		c, err = zerocopy.Clone(src)
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, err
	}
	if rev != nil {
		// The F view holds a reference of its own, as c did.
		t, err := c.Permute(rev...)
		if err == nil {
			t, err = t.Retain()
		}
		c.Close()
		return t, err
	}
	return c, nil
}

// runIn passes a's arguments to the body through fr, runs it and collects
// its results; the caller resets fr.
func (f *Func) runIn(fr *Frame, s *cuda.Stream, a *Args, out *Outcome) error {
	fr.S = s
	for _, i := range f.tensorIdx {
		fr.V[f.Params[i].goIndex] = a.Tensors[i]
	}
	for _, k := range f.scalarIdx {
		p := &f.Params[k]
		v := &a.Values[k]
		if v.Kind == 0 {
			if !p.HasDefault {
				return TypeErrorf("%s: missing argument %s (%s)", f.Name, p.Name, pyType(p.Kind, p.GoType))
			}
			v = &p.defValue
		}
		if msg := v.store(p, fr); msg != "" {
			if strings.Contains(msg, "out of range") {
				return ValueErrorf("%s: argument %s: %s", f.Name, p.Name, msg)
			}
			return TypeErrorf("%s: argument %s: %s", f.Name, p.Name, msg)
		}
	}
	if err := f.run(fr); err != nil {
		fr.closeResults(f)
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	// What the body wrote is pending on the stream.
	if s != nil {
		for _, i := range f.tensorIdx {
			if v := a.Tensors[i]; f.Params[i].Tensor.Writable && isCUDA(v.Device()) {
				v.SetStream(a.Stream)
			}
		}
	}
	return f.collect(fr, s, a, out)
}

// reset clears what f's call left in fr (no pointer outlives the call in
// a reused frame) and, if it came from f's pool, gives it back.
func (fr *Frame) reset(f *Func, pooled bool) {
	fr.S = nil
	for _, i := range f.tensorIdx {
		fr.V[f.Params[i].goIndex] = nil
	}
	for _, g := range f.strSlots {
		fr.Str[g] = ""
	}
	for i := range f.Results {
		fr.RV[i], fr.RStr[i] = nil, ""
	}
	if pooled {
		f.frames.Put(fr)
	}
}

// closeResults closes the result views the body made before it failed.
func (fr *Frame) closeResults(f *Func) {
	for i, r := range f.Results {
		if r.Kind == TensorKind && fr.RV[i] != nil {
			fr.RV[i].Close()
			fr.RV[i] = nil
		}
	}
}

// run calls the body with fr's arguments, through f's invoker or else
// reflection, and leaves its results in fr. A panic in the body comes back
// as a RuntimeError naming the panic value and where it happened.
func (f *Func) run(fr *Frame) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = RuntimeErrorf("Go panic: %v%s", r, panicSite())
		}
	}()
	if inv := f.invoker.Load(); inv != nil {
		return (*inv)(fr)
	}
	var inbuf [maxSlots]reflect.Value
	in := inbuf[:f.nin]
	for i := range in {
		if i == f.streamAt {
			in[i] = reflect.ValueOf(fr.S)
		}
	}
	for k := range f.Params {
		p := &f.Params[k]
		in[p.goIndex] = fr.slot(p)
	}
	res := f.fn.Call(in)
	for i, r := range f.Results {
		rv := res[i]
		switch r.Kind {
		case TensorKind:
			fr.RV[i], _ = rv.Interface().(*zerocopy.View)
		case BoolKind:
			fr.RB[i] = rv.Bool()
		case IntKind:
			fr.RI[i] = rv.Int()
		case UintKind:
			fr.RU[i] = rv.Uint()
		case FloatKind:
			fr.RF[i] = rv.Float()
		case StringKind:
			fr.RStr[i] = rv.String()
		}
	}
	if f.hasErr {
		if e := res[len(f.Results)]; !e.IsNil() {
			return e.Interface().(error)
		}
	}
	return nil
}

func isCUDA(d dlpack.Device) bool { return d.Type == dlpack.CUDA || d.Type == dlpack.CUDAManaged }

// checkError classifies an error of the tensor check for Python: a
// mismatch of dtype or device is a TypeError, of shape, order or access a
// ValueError, as is a closed tensor.
func checkError(err error) error {
	var m *zerocopy.MismatchError
	if errors.As(err, &m) && m.WrongKind() {
		return &Error{Class: TypeError, Err: err}
	}
	return &Error{Class: ValueError, Err: err}
}

// panicSite names the first frame below the panic outside the runtime.
func panicSite() string {
	var pcs [32]uintptr
	n := runtime.Callers(4, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if fr.Function != "" && !strings.HasPrefix(fr.Function, "runtime.") && !strings.HasPrefix(fr.Function, "reflect.") {
			return fmt.Sprintf(" (at %s %s:%d)", fr.Function, fr.File, fr.Line)
		}
		if !more {
			return ""
		}
	}
}

// collect turns the body's results in fr into *out (left zero on error).
func (f *Func) collect(fr *Frame, s *cuda.Stream, a *Args, out *Outcome) error {
	stream := a.Stream
	out.Stream = stream
	n := len(f.Results)
	if n == 0 {
		return nil
	}
	if len(a.OutTensors) >= n && len(a.OutValues) >= n {
		out.Tensors, out.Values = a.OutTensors[:n:n], a.OutValues[:n:n]
		clear(out.Tensors)
		clear(out.Values)
	} else {
		out.Tensors, out.Values = make([]*zerocopy.View, n), make([]Value, n)
	}
	for i, r := range f.Results {
		switch r.Kind {
		case TensorKind:
			v := fr.RV[i]
			if v == nil {
				fr.closeResults(f)
				*out = Outcome{}
				return RuntimeErrorf("%s: result %d is a nil *zerocopy.View with a nil error", f.Name, i+1)
			}
			if s != nil && isCUDA(v.Device()) {
				if v.Stream() == 0 {
					v.SetStream(stream)
				}
				// The result outlives the call, and the caller may destroy
				// its stream first: readers wait for an event recorded now,
				// and memory the body allocated on that stream is freed on
				// the device's work stream.
				err := v.MarkPending()
				if err == nil {
					err = zerocopy.FreeOnWorkStream(v)
				}
				if err != nil {
					fr.closeResults(f)
					*out = Outcome{}
					return RuntimeErrorf("%s: result %d: %v", f.Name, i+1, err)
				}
			}
			out.Tensors[i] = v
		case BoolKind:
			out.Values[i] = Value{Kind: BoolKind, Bool: fr.RB[i]}
		case IntKind:
			out.Values[i] = Value{Kind: IntKind, Int: fr.RI[i]}
		case UintKind:
			out.Values[i] = Value{Kind: UintKind, Uint: fr.RU[i]}
		case FloatKind:
			out.Values[i] = Value{Kind: FloatKind, Float: fr.RF[i]}
		case StringKind:
			out.Values[i] = Value{Kind: StringKind, Str: fr.RStr[i]}
		}
	}
	return nil
}

// closeTensors closes the result views that hold a reference.
func (o *Outcome) closeTensors() {
	for _, v := range o.Tensors {
		if v != nil {
			v.Close()
		}
	}
}
