package pyfunc

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Kind is what a parameter or result carries.
type Kind uint8

// The kinds. Stream is the caller's CUDA stream (a *cuda.Stream
// parameter), which the schema does not name.
const (
	TensorKind Kind = iota + 1
	BoolKind
	IntKind
	UintKind
	FloatKind
	StringKind
	StreamKind
)

var kindNames = [...]string{"", "tensor", "bool", "int", "uint", "float", "str", "stream"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Param is one parameter of a registered function that Python passes.
type Param struct {
	Name   string
	Kind   Kind
	GoType reflect.Type
	// Tensor is what a tensor parameter accepts (for TensorKind): the
	// schema's constraints, which the call checks with zerocopy's.
	Tensor zerocopy.Want
	// Default is the value when the caller leaves the parameter out (of
	// GoType); HasDefault says whether there is one.
	Default    any
	HasDefault bool
	// DefaultSrc is the default as the schema writes it ("2.0", "True").
	DefaultSrc string

	goIndex  int   // the Go parameter it is
	bits     int   // an int, uint or float type's width
	defValue Value // Default as a Value
}

// Result is one result of a registered function.
type Result struct {
	Kind   Kind
	GoType reflect.Type
}

// Func is a registered function.
type Func struct {
	Name    string
	Doc     string
	Schema  string
	Params  []Param  // what Python passes, in order
	Results []Result // what comes back, without the error
	// GoName is the Go function's full name ("example.com/mylib.Scale").
	GoName string

	fn        reflect.Value
	invoker   atomic.Pointer[Invoker]
	frames    sync.Pool // *Frame: sync.Pool's per-thread slot costs no locked instruction
	nin       int       // the Go function's parameter count
	streamAt  int       // index of the *cuda.Stream parameter, -1 if none
	hasErr    bool      // the last result is an error
	tensorIdx []int
	scalarIdx []int // the scalar parameters' indices in Params
	strSlots  []int // the Go parameter indices of the string parameters
	// sig checks the tensor arguments (every Param, nil Wants for the
	// scalars): pyfunc has no tensor check of its own.
	sig *zerocopy.Signature
	// mayOverlap: a tensor parameter is written and there is another, so
	// a call looks for arguments that share memory (Signature.Overlap).
	mayOverlap bool
}

var (
	viewType   = reflect.TypeOf((*zerocopy.View)(nil))
	streamType = reflect.TypeOf((*cuda.Stream)(nil))
	errorType  = reflect.TypeOf((*error)(nil)).Elem()
)

func kindOf(t reflect.Type) Kind {
	switch t {
	case viewType:
		return TensorKind
	case streamType:
		return StreamKind
	}
	switch t.Kind() {
	case reflect.Bool:
		return BoolKind
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return IntKind
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return UintKind
	case reflect.Float32, reflect.Float64:
		return FloatKind
	case reflect.String:
		return StringKind
	}
	return 0
}

var registry struct {
	sync.RWMutex
	byName map[string]*Func
	docs   map[string]string
	errs   []error
}

// Register makes fn callable from Python under the schema's name, with
// doc as its help text (the Go doc comment, unless doc is given, when the
// library was built by dlbridge build). Call it from an init function.
//
// A schema that does not parse or does not match fn, or a name registered
// twice, is a mistake in the program: Register returns nil and records the
// error, which Err reports and Python raises as ImportError when it reads
// dlbridge.ops (a panic in a library's init would abort the Python process
// that loads it). Test a registration with NewFunc, which returns the
// error.
func Register(schema string, fn any, doc ...string) *Func {
	f, err := NewFunc(schema, fn, doc...)
	registry.Lock()
	defer registry.Unlock()
	if err == nil && registry.byName[f.Name] != nil {
		err = fmt.Errorf("%s is registered twice", f.Name)
	}
	if err != nil {
		registry.errs = append(registry.errs, fmt.Errorf("pyfunc.Register: %w", err))
		return nil
	}
	if registry.byName == nil {
		registry.byName = map[string]*Func{}
	}
	registry.byName[f.Name] = f
	// A new list each time (registrations are few, at start-up), so that
	// readers of the old one never see it change.
	var list []*Func
	if old := snapshot.Load(); old != nil {
		list = *old
	}
	list = append(list[:len(list):len(list)], f)
	snapshot.Store(&list)
	return f
}

// Err reports the registrations that failed, or nil.
func Err() error {
	registry.RLock()
	defer registry.RUnlock()
	return errors.Join(registry.errs...)
}

// snapshot is the registered list, in order: what At reads on every call
// without a lock.
var snapshot atomic.Pointer[[]*Func]

// At returns function number i (its index in Funcs), or nil.
func At(i int) *Func {
	p := snapshot.Load()
	if p == nil || i < 0 || i >= len(*p) {
		return nil
	}
	return (*p)[i]
}

// Lookup returns the function registered under name, or nil.
func Lookup(name string) *Func {
	registry.RLock()
	defer registry.RUnlock()
	return registry.byName[name]
}

// Funcs returns the registered functions, in the order they were
// registered; index i is the function's number at the C boundary.
func Funcs() []*Func {
	p := snapshot.Load()
	if p == nil {
		return nil
	}
	return append([]*Func(nil), *p...)
}

// SetGoDocs records the doc comments of Go functions by full name
// ("example.com/mylib.Scale"), for the functions registered without a doc
// string. dlbridge build calls it from the main package it generates.
func SetGoDocs(docs map[string]string) {
	registry.Lock()
	defer registry.Unlock()
	if registry.docs == nil {
		registry.docs = map[string]string{}
	}
	for k, v := range docs {
		registry.docs[k] = v
	}
}

// HelpDoc is f's help text: the doc given at registration, else the Go doc
// comment recorded by SetGoDocs, else "".
func (f *Func) HelpDoc() string {
	if f.Doc != "" {
		return f.Doc
	}
	registry.RLock()
	defer registry.RUnlock()
	return strings.TrimSpace(registry.docs[f.GoName])
}

// NewFunc checks schema against fn and describes the function, without
// registering it (Register does both).
func NewFunc(schema string, fn any, doc ...string) (*Func, error) {
	name, sp, err := parseSchema(schema)
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return nil, fmt.Errorf("%s: want a Go function, got %T", name, fn)
	}
	t := v.Type()
	if t.IsVariadic() {
		return nil, fmt.Errorf("%s: %v is variadic", name, t)
	}
	f := &Func{Name: name, Schema: strings.TrimSpace(schema), fn: v, nin: t.NumIn(), streamAt: -1}
	f.Doc = strings.TrimSpace(strings.Join(doc, "\n"))
	if rf := runtime.FuncForPC(v.Pointer()); rf != nil {
		f.GoName = rf.Name()
	}
	k := 0
	for i := 0; i < t.NumIn(); i++ {
		in := t.In(i)
		kind := kindOf(in)
		if kind == 0 {
			return nil, fmt.Errorf("%s: parameter %d of %v is a %v: want *zerocopy.View, *cuda.Stream, bool, an int or uint type, float32, float64 or string", name, i+1, t, in)
		}
		if kind == StreamKind {
			if f.streamAt >= 0 {
				return nil, fmt.Errorf("%s: %v takes two *cuda.Stream parameters", name, t)
			}
			f.streamAt = i
			continue
		}
		if k >= len(sp) {
			return nil, fmt.Errorf("%s: the schema names %d parameters, %v takes more", name, len(sp), t)
		}
		p, err := makeParam(name, sp[k], in, kind)
		if err != nil {
			return nil, err
		}
		p.goIndex = i
		if p.Kind != TensorKind {
			f.scalarIdx = append(f.scalarIdx, len(f.Params))
		}
		if p.Kind == StringKind {
			f.strSlots = append(f.strSlots, i)
		}
		if p.Kind == TensorKind {
			f.tensorIdx = append(f.tensorIdx, len(f.Params))
		}
		f.Params = append(f.Params, p)
		k++
	}
	if k != len(sp) {
		return nil, fmt.Errorf("%s: the schema names %d parameters, %v takes %d", name, len(sp), t, k)
	}
	names, wants := make([]string, len(f.Params)), make([]*zerocopy.Want, len(f.Params))
	writes := false
	for i := range f.Params {
		p := &f.Params[i]
		names[i] = p.Name
		if p.Kind == TensorKind {
			wants[i] = &p.Tensor
			writes = writes || p.Tensor.Writable
		}
	}
	if f.sig, err = zerocopy.NewSignature(name, names, wants); err != nil {
		return nil, err
	}
	f.mayOverlap = writes && len(f.tensorIdx) > 1
	for i, p := range f.Params {
		if p.Name == "stream" || p.Name == "result_type" {
			return nil, fmt.Errorf("%s: parameter %q: the name is reserved for the caller's %s", name, p.Name, map[bool]string{true: "CUDA stream (a *cuda.Stream parameter receives it)", false: "choice of result type"}[p.Name == "stream"])
		}
		if !p.HasDefault && i > 0 && f.Params[i-1].HasDefault {
			return nil, fmt.Errorf("%s: parameter %q without a default follows one with a default", name, p.Name)
		}
	}
	for i := 0; i < t.NumOut(); i++ {
		out := t.Out(i)
		if out == errorType {
			if i != t.NumOut()-1 {
				return nil, fmt.Errorf("%s: %v returns an error before its last result", name, t)
			}
			f.hasErr = true
			continue
		}
		kind := kindOf(out)
		if kind == 0 || kind == StreamKind {
			return nil, fmt.Errorf("%s: result %d of %v is a %v: want *zerocopy.View, bool, an int or uint type, float32, float64, string, then optionally error", name, i+1, t, out)
		}
		f.Results = append(f.Results, Result{Kind: kind, GoType: out})
	}
	if f.nin > maxSlots || len(f.Results) > maxSlots {
		return nil, fmt.Errorf("%s: %v has more than %d parameters or results", name, t, maxSlots)
	}
	f.attachInvoker()
	return f, nil
}

func makeParam(fn string, sp SchemaParam, t reflect.Type, kind Kind) (Param, error) {
	p := Param{Name: sp.Name, Kind: kind, GoType: t}
	switch kind {
	case IntKind, UintKind, FloatKind:
		p.bits = t.Bits()
	}
	if kind == TensorKind {
		if sp.HasDefault {
			return p, fmt.Errorf("%s: tensor parameter %q cannot have a default", fn, sp.Name)
		}
		if sp.Tensor != nil {
			p.Tensor = *sp.Tensor
		}
		return p, nil
	}
	if sp.Tensor != nil {
		return p, fmt.Errorf("%s: parameter %q is a %v in Go, but the schema gives it tensor constraints", fn, sp.Name, t)
	}
	if sp.HasDefault {
		d, err := parseDefault(sp.Default, t, kind)
		if err != nil {
			return p, fmt.Errorf("%s: parameter %q: default %s: %w", fn, sp.Name, sp.Default, err)
		}
		p.Default, p.HasDefault, p.DefaultSrc = d.Interface(), true, sp.Default
		switch kind {
		case BoolKind:
			p.defValue = Value{Kind: BoolKind, Bool: d.Bool()}
		case IntKind:
			p.defValue = Value{Kind: IntKind, Int: d.Int()}
		case UintKind:
			p.defValue = Value{Kind: UintKind, Uint: d.Uint()}
		case FloatKind:
			p.defValue = Value{Kind: FloatKind, Float: d.Float()}
		case StringKind:
			p.defValue = Value{Kind: StringKind, Str: d.String()}
		}
	}
	return p, nil
}

// parseDefault reads a default as Python writes it into a value of t.
func parseDefault(src string, t reflect.Type, kind Kind) (reflect.Value, error) {
	bits := 0
	if kind != BoolKind && kind != StringKind {
		bits = t.Bits()
	}
	fr, err := parseDefaultBits(src, kind, bits)
	if err != nil {
		return reflect.Value{}, err
	}
	return fr.slot(&Param{Kind: kind, GoType: t, bits: bits}), nil
}

// parseDefaultBits reads a default into slot 0 of a frame, for a Go
// parameter of kind k and width bits.
func parseDefaultBits(src string, kind Kind, bits int) (*Frame, error) {
	var v Value
	switch {
	case src == "True" || src == "False":
		v = Value{Kind: BoolKind, Bool: src == "True"}
	case len(src) >= 2 && (src[0] == '\'' || src[0] == '"') && src[len(src)-1] == src[0]:
		v = Value{Kind: StringKind, Str: src[1 : len(src)-1]}
	default:
		if i, err := strconv.ParseInt(src, 0, 64); err == nil {
			v = Value{Kind: IntKind, Int: i}
		} else if u, err := strconv.ParseUint(src, 0, 64); err == nil {
			v = Value{Kind: UintKind, Uint: u}
		} else if x, err := strconv.ParseFloat(src, 64); err == nil {
			v = Value{Kind: FloatKind, Float: x}
		} else {
			return nil, fmt.Errorf("not a Python literal (a number, True, False or a quoted string)")
		}
	}
	p := &Param{Kind: kind, GoType: goTypeOf(kind, bits), bits: bits}
	fr := new(Frame)
	if msg := v.store(p, fr); msg != "" {
		return nil, fmt.Errorf("%s", msg)
	}
	return fr, nil
}

// goTypeOf is the Go type of kind k and width bits that messages name.
func goTypeOf(k Kind, bits int) reflect.Type {
	switch k {
	case BoolKind:
		return reflect.TypeOf(false)
	case StringKind:
		return reflect.TypeOf("")
	case IntKind:
		switch bits {
		case 8:
			return reflect.TypeOf(int8(0))
		case 16:
			return reflect.TypeOf(int16(0))
		case 32:
			return reflect.TypeOf(int32(0))
		}
		return reflect.TypeOf(int64(0))
	case UintKind:
		switch bits {
		case 8:
			return reflect.TypeOf(uint8(0))
		case 16:
			return reflect.TypeOf(uint16(0))
		case 32:
			return reflect.TypeOf(uint32(0))
		}
		return reflect.TypeOf(uint64(0))
	case FloatKind:
		if bits == 32 {
			return reflect.TypeOf(float32(0))
		}
		return reflect.TypeOf(float64(0))
	}
	return nil
}

// Description is what Python learns of a function (Describe).
type Description struct {
	Name    string        `json:"name"`
	Index   int           `json:"index"`
	Doc     string        `json:"doc"`
	Schema  string        `json:"schema"`
	GoName  string        `json:"go_name"`
	Stream  bool          `json:"stream"`
	Fast    bool          `json:"fast"` // called through an Invoker, not reflection
	Params  []ParamDesc   `json:"params"`
	Results []ResultsDesc `json:"results"`
}

// ParamDesc describes a parameter to Python.
type ParamDesc struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	GoType     string `json:"go_type"`
	Spec       string `json:"spec,omitempty"`
	Writable   bool   `json:"writable,omitempty"`
	Default    any    `json:"default,omitempty"`
	HasDefault bool   `json:"has_default"`
	DefaultSrc string `json:"default_src,omitempty"`
}

// ResultsDesc describes a result to Python.
type ResultsDesc struct {
	Kind   string `json:"kind"`
	GoType string `json:"go_type"`
}

// Describe is f as JSON for the Python side, index its number.
func (f *Func) Describe(index int) ([]byte, error) {
	d := Description{Name: f.Name, Index: index, Doc: f.HelpDoc(), Schema: f.Schema, GoName: f.GoName,
		Stream: f.streamAt >= 0, Fast: f.Fast(), Params: []ParamDesc{}, Results: []ResultsDesc{}}
	for _, p := range f.Params {
		pd := ParamDesc{Name: p.Name, Kind: p.Kind.String(), GoType: p.GoType.String(),
			HasDefault: p.HasDefault, DefaultSrc: p.DefaultSrc, Default: p.Default}
		if p.Kind == TensorKind {
			pd.Spec, pd.Writable = p.Tensor.String(), p.Tensor.Writable
		}
		d.Params = append(d.Params, pd)
	}
	for _, r := range f.Results {
		d.Results = append(d.Results, ResultsDesc{Kind: r.Kind.String(), GoType: r.GoType.String()})
	}
	return json.Marshal(d)
}
