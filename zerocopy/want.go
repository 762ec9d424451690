package zerocopy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Order is the memory layout a Want asks for.
type Order uint8

const (
	// AnyOrder accepts any strides (the zero value).
	AnyOrder Order = iota
	// COrder asks for C-contiguous (row-major) elements.
	COrder
	// FOrder asks for Fortran-contiguous (column-major) elements.
	FOrder
)

// String writes o as a Want does: "C", "F", or "any order".
func (o Order) String() string {
	switch o {
	case AnyOrder:
		return "any order"
	case COrder:
		return "C"
	case FOrder:
		return "F"
	}
	return fmt.Sprintf("Order(%d)", uint8(o))
}

// Dim is one extent of a Want's shape: a fixed Size (0 or more), a Name
// that stands for one extent wherever it appears (across the dimensions of
// one tensor, and across the arguments a Signature checks together), or any
// extent (AnyDim). A named Dim has Size -1.
type Dim struct {
	Name string
	Size int64
}

// AnyDim accepts any extent.
var AnyDim = Dim{Size: -1}

// Named is the dimension called name: every extent named so takes one value.
func Named(name string) Dim { return Dim{Name: name, Size: -1} }

// Extents is a shape of fixed extents, -1 for any: Extents(-1, 3) is
// "[*, 3]".
func Extents(ns ...int64) []Dim {
	ds := make([]Dim, len(ns))
	for i, n := range ns {
		ds[i] = Dim{Size: n}
	}
	return ds
}

func (d Dim) String() string {
	switch {
	case d.Name != "":
		return d.Name
	case d.Size >= 0:
		return strconv.FormatInt(d.Size, 10)
	}
	return "*"
}

// Want states what a function needs of a tensor, as nanobind's ndarray
// annotations and pyfunc's schemas do (a schema's tensor parameter is a
// Want: ParseWant reads the notation, String writes it), so that one check
// of a tensor from outside names everything that is wrong with it. A zero
// field asks for nothing: the zero Want accepts every open view.
type Want struct {
	// DTypes are the element types accepted; none: any.
	DTypes []dlpack.DataType
	// Shape, unless nil, is the shape, which fixes the number of
	// dimensions; ask for a 0-d tensor with Shape: []Dim{}.
	Shape []Dim
	// Order is the layout; AnyOrder accepts strided views.
	Order Order
	// Device is where the memory is, unless Device.Type is 0. dlpack.CPU
	// asks for memory the host reads directly: cpu, cuda_host (pinned),
	// rocm_host and cuda_managed, whatever the ID. dlpack.CUDA asks for
	// memory CUDA kernels read: cuda and cuda_managed, of device ID, or of
	// any device when ID is below 0. Another type asks for itself.
	Device dlpack.Device
	// Writable refuses read-only views.
	Writable bool
}

// AnyCUDA is the Device of a Want that accepts the memory of every CUDA
// device ("cuda").
var AnyCUDA = dlpack.Device{Type: dlpack.CUDA, ID: -1}

// Check returns nil when v meets w, and otherwise a *MismatchError that
// names every mismatch at once. A named dimension takes one extent across
// v's dimensions. A closed view, or one whose memory is released, gives
// that error instead. A Want that contradicts itself (an extent below -1, a
// name with a size, an unknown Order) is a bug in the caller, and Check
// panics.
func (w Want) Check(v *View) error { return w.CheckArg("", "", v) }

// CheckArg is Check for argument arg of function fn, which the error names
// (either may be ""), as a Signature's Check does.
func (w Want) CheckArg(fn, arg string, v *View) error {
	var c wantCheck
	if err := c.compile(&w, nil); err != nil {
		panic("zerocopy: " + err.Error())
	}
	var buf [4]int64
	bound := buf[:]
	if len(c.names) > len(buf) {
		bound = make([]int64, len(c.names))
	}
	if c.accepts(v, bound) {
		return nil
	}
	s := Signature{fn: fn, args: []sigArg{{name: arg, tensor: true, c: c}}, names: c.names}
	return s.mismatch(0, []*View{v})
}

// wantCheck is a Want compiled for the accepting path: a few comparisons
// per argument, without a slice walk for the common dtype and device tests.
type wantCheck struct {
	want     Want
	dt0      dlpack.DataType // DTypes[0], when anyDT is false
	anyDT    bool
	devMask  uint64 // the accepted device types as bits; 0: any
	devID    int32  // the accepted CUDA ordinal, or -1
	ndim     int    // -1: any
	dims     []wantDim
	names    []string // the names this Want uses, when compiled without a Signature
	order    Order
	writable bool
}

type wantDim struct {
	size int64 // -1: any
	name int   // index among the signature's names, -1 if unnamed
}

// compile fills c from w; names, when not nil, is the signature's list of
// dimension names, to which w's new ones are added.
func (c *wantCheck) compile(w *Want, names *[]string) error {
	local := names == nil
	if local {
		names = &c.names
	}
	*c = wantCheck{want: *w, devID: -1, ndim: -1, order: w.Order, writable: w.Writable}
	if local {
		c.names = nil
	}
	if w.Order > FOrder {
		return fmt.Errorf("Want with unknown %v", w.Order)
	}
	c.anyDT = len(w.DTypes) == 0
	if !c.anyDT {
		c.dt0 = w.DTypes[0]
	}
	switch t := w.Device.Type; {
	case t == 0:
	case t == dlpack.CPU:
		c.devMask = 1<<dlpack.CPU | 1<<dlpack.CUDAHost | 1<<dlpack.ROCMHost | 1<<dlpack.CUDAManaged
	case t == dlpack.CUDA:
		c.devMask = 1<<dlpack.CUDA | 1<<dlpack.CUDAManaged
		c.devID = w.Device.ID
	case t < 64:
		c.devMask = 1 << t
		c.devID = w.Device.ID
	default:
		return fmt.Errorf("Want with device type %d", t)
	}
	if c.devID < 0 {
		c.devID = -1
	}
	if w.Shape != nil {
		if len(w.Shape) > dlpack.MaxNDim {
			return fmt.Errorf("Want with %d dimensions, more than %d", len(w.Shape), dlpack.MaxNDim)
		}
		c.ndim = len(w.Shape)
		c.dims = make([]wantDim, len(w.Shape))
		for i, d := range w.Shape {
			c.dims[i] = wantDim{size: d.Size, name: -1}
			switch {
			case d.Name != "" && !IsIdent(d.Name):
				return fmt.Errorf("Want with Shape[%d] named %q (want an identifier)", i, d.Name)
			case d.Name != "" && d.Size != -1:
				return fmt.Errorf("Want with Shape[%d] named %s and of size %d (a named dimension takes its size from the tensors)", i, d.Name, d.Size)
			case d.Size < -1:
				return fmt.Errorf("Want with Shape[%d] = %d (want an extent, or -1 for any)", i, d.Size)
			case d.Name != "":
				k := slices.Index(*names, d.Name)
				if k < 0 {
					k = len(*names)
					*names = append(*names, d.Name)
				}
				c.dims[i].name = k
			}
		}
	}
	return nil
}

// accepts reports whether v meets c, binding the named dimensions it
// meets first in bound (an extent plus one; 0 while unbound, so that a
// zeroed array starts the call): the accepting path, which names nothing.
func (c *wantCheck) accepts(v *View, bound []int64) bool {
	if !v.Alive() {
		return false
	}
	if dt := v.lay.dtype; !c.anyDT && dt != c.dt0 && !slices.Contains(c.want.DTypes[1:], dt) {
		return false
	}
	if c.devMask != 0 {
		d := v.device
		if d.Type >= 64 || c.devMask&(1<<d.Type) == 0 || c.devID >= 0 && d.ID != c.devID {
			return false
		}
	}
	if c.ndim >= 0 {
		if int(v.lay.n) != c.ndim {
			return false
		}
		shape := v.lay.shape()
		for j := range c.dims {
			d := &c.dims[j]
			got := shape[j]
			switch {
			case d.name >= 0:
				if b := &bound[d.name]; *b == 0 {
					*b = got + 1
				} else if *b != got+1 {
					return false
				}
			case d.size >= 0 && got != d.size:
				return false
			}
		}
	}
	if c.order == COrder && !v.IsCContiguous() || c.order == FOrder && !v.IsFContiguous() {
		return false
	}
	return !c.writable || !v.readOnly
}

// A Signature checks the tensor arguments of one function together: each
// against its Want, with a named dimension taking one extent across all of
// them ("x: [N, K]", "w: [K, M]"). NewSignature compiles the Wants once, so
// that Check costs a few comparisons per argument when they are met; only
// a mismatch builds the message.
type Signature struct {
	fn      string
	args    []sigArg
	tensors []int    // the indices of the tensor arguments
	names   []string // the dimension names, in order of first use
	// pairs are the argument pairs Overlap compares: a written one first,
	// then any other tensor.
	pairs [][2]int
}

type sigArg struct {
	name   string
	tensor bool
	c      wantCheck
}

// NewSignature compiles the Wants of function fn's arguments, named by
// names; wants[i] nil marks argument i as not a tensor (Check skips it).
func NewSignature(fn string, names []string, wants []*Want) (*Signature, error) {
	if len(names) != len(wants) {
		return nil, fmt.Errorf("zerocopy: NewSignature(%s): %d names for %d Wants", fn, len(names), len(wants))
	}
	s := &Signature{fn: fn, args: make([]sigArg, len(wants))}
	for i, w := range wants {
		s.args[i].name = names[i]
		if w == nil {
			continue
		}
		s.args[i].tensor = true
		s.tensors = append(s.tensors, i)
		if err := s.args[i].c.compile(w, &s.names); err != nil {
			return nil, fmt.Errorf("zerocopy: %s: argument %s: %v", fn, names[i], err)
		}
	}
	for _, i := range s.tensors {
		if !s.args[i].c.writable {
			continue
		}
		for _, k := range s.tensors {
			if k != i {
				s.pairs = append(s.pairs, [2]int{i, k})
			}
		}
	}
	return s, nil
}

// Func is the function's name, as errors give it.
func (s *Signature) Func() string { return s.fn }

// Want is the Want of argument i (the zero Want for one that is not a
// tensor).
func (s *Signature) Want(i int) Want { return s.args[i].c.want }

// Check checks vs, one view per argument (nil where the argument is not a
// tensor), and returns nil when all meet their Wants. Otherwise the error
// is about the first argument that does not: a *MismatchError naming every
// mismatch of it, with the extents its named dimensions took from the
// arguments before it, or the error of a closed view.
func (s *Signature) Check(vs []*View) error {
	if len(vs) != len(s.args) {
		return fmt.Errorf("zerocopy: %s: %d views for %d arguments", s.fn, len(vs), len(s.args))
	}
	var buf [8]int64 // zeroed: every name unbound
	bound := buf[:]
	if len(s.names) > len(buf) {
		bound = make([]int64, len(s.names))
	}
	for _, i := range s.tensors {
		a := &s.args[i]
		v := vs[i]
		if v == nil {
			return fmt.Errorf("%s: missing tensor argument %s", s.fn, a.name)
		}
		if !a.c.accepts(v, bound) {
			return s.mismatch(i, vs)
		}
	}
	return nil
}

// binding is a named dimension's extent and the argument it came from.
type binding struct {
	size int64
	from int // argument index, -1 while unbound
}

// mismatch builds the error for argument i, the first that Check refused:
// it binds the names of the arguments before i again, recording where
// each extent came from, then compares every part of argument i.
func (s *Signature) mismatch(i int, vs []*View) error {
	a := &s.args[i]
	v := vs[i]
	if err := v.check(); err != nil {
		return s.errorf(a.name, err)
	}
	binds := make([]binding, len(s.names))
	for k := range binds {
		binds[k].from = -1
	}
	for k := 0; k < i; k++ {
		if !s.args[k].tensor {
			continue
		}
		for j, d := range s.args[k].c.dims {
			if d.name >= 0 && binds[d.name].from < 0 {
				binds[d.name] = binding{size: vs[k].lay.shape()[j], from: k}
			}
		}
	}
	c := &a.c
	var bound []string // "N=16 from out", for the names set before i
	for _, d := range c.dims {
		if d.name < 0 {
			continue
		}
		b := binds[d.name]
		if b.from < 0 {
			continue
		}
		if e := fmt.Sprintf("%s=%d from %s", s.names[d.name], b.size, s.args[b.from].name); !slices.Contains(bound, e) {
			bound = append(bound, e)
		}
	}
	var fields []string
	if dt := v.DType(); !c.anyDT && !slices.Contains(c.want.DTypes, dt) {
		fields = append(fields, "dtype")
	}
	if c.ndim >= 0 && v.NDim() != c.ndim {
		fields = append(fields, fmt.Sprintf("ndim (%d != %d)", v.NDim(), c.ndim))
	} else {
		for j, d := range c.dims {
			got := v.lay.shape()[j]
			switch {
			case d.name >= 0:
				b := &binds[d.name]
				switch {
				case b.from < 0:
					*b = binding{size: got, from: i}
				case b.size != got:
					fields = append(fields, fmt.Sprintf("shape[%d] (%d != %s=%d from %s)", j, got, s.names[d.name], b.size, s.args[b.from].name))
				}
			case d.size >= 0 && got != d.size:
				fields = append(fields, fmt.Sprintf("shape[%d] (%d != %d)", j, got, d.size))
			}
		}
	}
	if c.order == COrder && !v.IsCContiguous() || c.order == FOrder && !v.IsFContiguous() {
		fields = append(fields, "order")
	}
	if d := v.Device(); c.devMask != 0 && (d.Type >= 64 || c.devMask&(1<<d.Type) == 0 || c.devID >= 0 && d.ID != c.devID) {
		fields = append(fields, "device")
	}
	if c.writable && v.ReadOnly() {
		fields = append(fields, "read-only")
	}
	if fields == nil {
		// accepts and this function disagree: a bug here, reported as one.
		return s.errorf(a.name, errors.New("zerocopy: the tensor check refused a tensor that meets its Want"))
	}
	return &MismatchError{Func: s.fn, Arg: a.name, Want: c.want, Bound: strings.Join(bound, ", "), Got: v.Describe(), Fields: fields}
}

// errorf names the function and argument before err.
func (s *Signature) errorf(arg string, err error) error {
	switch {
	case s.fn != "" && arg != "":
		return fmt.Errorf("%s: argument %s: %w", s.fn, arg, err)
	case s.fn != "":
		return fmt.Errorf("%s: %w", s.fn, err)
	case arg != "":
		return fmt.Errorf("argument %s: %w", arg, err)
	}
	return err
}

// Overlap finds two arguments of vs whose memory overlaps where at least
// one of them is written (its Want is Writable): the first such written
// argument w and the other, o, with ok. A function that writes one while
// it reads the other may read what it already wrote (NumPy's ufuncs copy
// the input first; a caller may, or refuse the call). Identical views
// overlap too: a body that is not elementwise computes them wrong.
func (s *Signature) Overlap(vs []*View) (w, o int, ok bool) {
	if len(vs) != len(s.args) {
		return 0, 0, false
	}
	for _, p := range s.pairs {
		a, b := vs[p[0]], vs[p[1]]
		if a == nil || b == nil {
			continue
		}
		alo, ahi := spanOf(a)
		if blo, bhi := spanOf(b); alo < ahi && blo < bhi && alo < bhi && blo < ahi {
			return p[0], p[1], true
		}
	}
	return 0, 0, false
}

// spanOf is the addresses [lo, hi) v may touch; a 1-d view of whole
// bytes, a call's usual argument, is worked out without ByteSpan's loop.
func spanOf(v *View) (lo, hi uintptr) {
	l := &v.lay
	p := v.base + uintptr(l.offset)
	if l.n != 1 || l.dtype.Bits < 8 {
		a, b := l.ByteSpan()
		return p + uintptr(a), p + uintptr(b)
	}
	e := l.inl[0]
	if e == 0 {
		return p, p
	}
	is := int64(l.dtype.ItemSize())
	r := (e - 1) * l.inl[inlineDims] * is
	if r < 0 {
		return p + uintptr(r), p + uintptr(is)
	}
	return p, p + uintptr(r+is)
}

// String writes w in the notation ParseWant reads (a schema's): "float32 |
// float64 [N, 3] C cuda writable" without spaces around "|", or "any
// tensor".
func (w Want) String() string {
	var parts []string
	if len(w.DTypes) > 0 {
		names := make([]string, len(w.DTypes))
		for i, d := range w.DTypes {
			names[i] = d.String()
		}
		parts = append(parts, strings.Join(names, "|"))
	}
	if w.Shape != nil {
		parts = append(parts, formatDims(w.Shape))
	}
	if w.Order != AnyOrder {
		parts = append(parts, w.Order.String())
	}
	switch d := w.Device; {
	case d.Type == 0:
	case d.Type == dlpack.CPU:
		parts = append(parts, "cpu")
	case d.ID < 0:
		parts = append(parts, d.Type.String())
	default:
		parts = append(parts, d.String())
	}
	if w.Writable {
		parts = append(parts, "writable")
	}
	if parts == nil {
		return "any tensor"
	}
	return strings.Join(parts, " ")
}

func formatDims(ds []Dim) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// FormatShape writes a shape (or strides) as a Want writes one, "[4, 2]":
// the one notation of shapes in messages, which schemas use too.
func FormatShape(shape []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, n := range shape {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// ParseWant reads a Want as a schema writes a tensor parameter's
// constraints: "float32|float64 [N, K] C cuda writable", each part optional
// and in any order ("", "*" and "any tensor", which String writes for the
// zero Want, accept any tensor). The dtypes are
// dlpack.ParseDataType names joined by "|"; the shape's extents are names,
// sizes or *; the device is cpu, cuda, cuda:N or another Device.String
// name.
func ParseWant(s string) (Want, error) {
	var w Want
	rest := strings.TrimSpace(s)
	if rest == "any tensor" {
		return w, nil
	}
	if i := strings.IndexByte(rest, '['); i >= 0 {
		j := strings.IndexByte(rest, ']')
		if j < i {
			return w, fmt.Errorf("%q: '[' without ']'", s)
		}
		if strings.ContainsAny(rest[j+1:], "[]") {
			return w, fmt.Errorf("%q: two shapes", s)
		}
		dims, err := parseDims(rest[i+1 : j])
		if err != nil {
			return w, fmt.Errorf("%q: %w", s, err)
		}
		w.Shape = dims
		rest = rest[:i] + " " + rest[j+1:]
	} else if strings.IndexByte(rest, ']') >= 0 {
		return w, fmt.Errorf("%q: ']' without '['", s)
	}
	seenOrder, seenDevice := false, false
	// "float32 | float64" is one word, as "float32|float64".
	for strings.Contains(rest, " |") || strings.Contains(rest, "| ") {
		rest = strings.ReplaceAll(strings.ReplaceAll(rest, " |", "|"), "| ", "|")
	}
	for _, tok := range strings.Fields(rest) {
		switch tok {
		case "C", "F":
			if seenOrder {
				return w, fmt.Errorf("%q: two orders", s)
			}
			seenOrder = true
			w.Order = COrder
			if tok == "F" {
				w.Order = FOrder
			}
			continue
		case "writable":
			w.Writable = true
			continue
		case "*":
			continue
		}
		if d, ok := parseWantDevice(tok); ok {
			if seenDevice {
				return w, fmt.Errorf("%q: two devices (leave the device out to accept all)", s)
			}
			seenDevice = true
			w.Device = d
			continue
		}
		if w.DTypes != nil {
			return w, fmt.Errorf("%q: unknown word %q (dtypes are one word joined by |; then [shape], C or F, cpu or cuda, writable)", s, tok)
		}
		for _, name := range strings.Split(tok, "|") {
			dt, err := dlpack.ParseDataType(name)
			if err != nil {
				return w, fmt.Errorf("%q: %q is neither a dtype nor a constraint (C, F, cpu, cuda, writable): %v", s, name, err)
			}
			w.DTypes = append(w.DTypes, dt)
		}
	}
	return w, nil
}

// parseWantDevice reads a device word: a type alone ("cuda") accepts every
// device of that type.
func parseWantDevice(tok string) (dlpack.Device, bool) {
	d, err := dlpack.ParseDevice(tok)
	if err != nil || d.String() != tok && d.Type.String() != tok {
		return dlpack.Device{}, false
	}
	if !strings.Contains(tok, ":") {
		d.ID = -1
	}
	if d.Type == dlpack.CPU {
		d.ID = 0
	}
	return d, true
}

func parseDims(s string) ([]Dim, error) {
	dims := []Dim{}
	if strings.TrimSpace(s) == "" {
		return dims, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "*":
			dims = append(dims, AnyDim)
		case IsIdent(f):
			dims = append(dims, Named(f))
		default:
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("dimension %q: want a name, a size >= 0 or *", f)
			}
			dims = append(dims, Dim{Size: n})
		}
	}
	if len(dims) > dlpack.MaxNDim {
		return nil, fmt.Errorf("%d dimensions, more than %d", len(dims), dlpack.MaxNDim)
	}
	return dims, nil
}

// IsIdent reports whether s is a Python and Go identifier of ASCII letters,
// digits and underscores: what may name a dimension here, and a parameter
// or function in a pyfunc schema.
func IsIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// Describe says what v is, in the notation of Want.String: "int64 [4, 2]
// strided cpu read-only". The order is C, F, C/F (both: one dimension, or
// none longer than 1) or strided. Mismatch messages show it.
func (v *View) Describe() string {
	order := "strided"
	switch c, f := v.IsCContiguous(), v.IsFContiguous(); {
	case c && f:
		order = "C/F"
	case c:
		order = "C"
	case f:
		order = "F"
	}
	access := "writable"
	if v.ReadOnly() {
		access = "read-only"
	}
	return v.DType().String() + " " + FormatShape(v.lay.shape()) + " " + order + " " + v.Device().String() + " " + access
}

// A MismatchError is a tensor that does not meet a Want. Its message reads
// the same from Go (Want.Check, Signature.Check) and from Python (a
// schema's check): "mylib.scale: argument x: want float32 [N] C (N=16 from
// out); got float32 [15] C/F cpu writable: shape[0] (15 != N=16 from out)".
type MismatchError struct {
	// Func and Arg name the function and the argument, when the check
	// knew them.
	Func, Arg string
	Want      Want
	// Bound gives the extents of Want's named dimensions that earlier
	// arguments set: "N=16 from out".
	Bound string
	// Got describes the tensor, as View.Describe.
	Got string
	// Fields lists what differs, in this order: "dtype", "ndim (3 != 2)"
	// or "shape[i] (got != want)" for each extent ("shape[0] (15 != N=16
	// from out)" for a named one), "order", "device", "read-only".
	Fields []string
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	switch {
	case e.Func != "":
		b.WriteString(e.Func + ": ")
	case e.Arg == "":
		b.WriteString("zerocopy: ")
	}
	if e.Arg != "" {
		b.WriteString("argument " + e.Arg + ": ")
	}
	b.WriteString("want " + e.Want.String())
	if e.Bound != "" {
		b.WriteString(" (" + e.Bound + ")")
	}
	b.WriteString("; got " + e.Got + ": " + strings.Join(e.Fields, ", "))
	return b.String()
}

// WrongKind reports whether the dtype or the device is among the
// mismatches: the tensor is the wrong kind of thing (Python raises
// TypeError), not of the wrong size, layout or access (ValueError).
func (e *MismatchError) WrongKind() bool {
	return slices.Contains(e.Fields, "dtype") || slices.Contains(e.Fields, "device")
}
