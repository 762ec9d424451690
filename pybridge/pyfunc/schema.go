package pyfunc

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// DeviceKind is where a tensor parameter accepts memory.
type DeviceKind uint8

const (
	// AnyDevice accepts host and CUDA memory (the zero value).
	AnyDevice DeviceKind = iota
	// CPU accepts memory the host reads directly: cpu, cuda_host
	// (page-locked) and cuda_managed.
	CPU
	// CUDA accepts CUDA device memory: cuda and cuda_managed.
	CUDA
)

func (k DeviceKind) String() string {
	switch k {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda"
	}
	return "cpu or cuda"
}

// accepts reports whether a tensor on d meets k.
func (k DeviceKind) accepts(d dlpack.Device) bool {
	switch d.Type {
	case dlpack.CPU, dlpack.CUDAHost:
		return k != CUDA
	case dlpack.CUDA:
		return k != CPU
	case dlpack.CUDAManaged:
		return true
	}
	return false
}

// Dim is one extent of a tensor parameter's shape: a Name shared across
// parameters, a fixed Size, or any extent (Name "" and Size -1).
type Dim struct {
	Name string
	Size int64
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

// TensorSpec is what a tensor parameter accepts, as its schema states it.
type TensorSpec struct {
	DTypes   []dlpack.DataType // empty: any dtype
	Shape    []Dim             // nil: any ndim; empty and not nil: 0-d
	Order    zerocopy.Order
	Device   DeviceKind
	Writable bool
}

// String writes the spec as the schema does: "float32 [N] writable".
func (t TensorSpec) String() string {
	var parts []string
	if len(t.DTypes) > 0 {
		names := make([]string, len(t.DTypes))
		for i, d := range t.DTypes {
			names[i] = d.String()
		}
		parts = append(parts, strings.Join(names, "|"))
	}
	if t.Shape != nil {
		dims := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = d.String()
		}
		parts = append(parts, "["+strings.Join(dims, ", ")+"]")
	}
	switch t.Order {
	case zerocopy.COrder:
		parts = append(parts, "C")
	case zerocopy.FOrder:
		parts = append(parts, "F")
	}
	if t.Device != AnyDevice {
		parts = append(parts, t.Device.String())
	}
	if t.Writable {
		parts = append(parts, "writable")
	}
	if parts == nil {
		return "any tensor"
	}
	return strings.Join(parts, " ")
}

// schemaParam is one parameter as the schema writes it.
type schemaParam struct {
	name       string
	tensor     *TensorSpec // after a colon
	defaultSrc string      // after "=", as written
	hasDefault bool
}

// parseSchema splits "ns.name(p: spec, q=1.0)" into the dotted name and the
// parameters.
func parseSchema(schema string) (name string, params []schemaParam, err error) {
	open := strings.IndexByte(schema, '(')
	if open < 0 || !strings.HasSuffix(strings.TrimSpace(schema), ")") {
		return "", nil, fmt.Errorf("schema %q: want name(params), e.g. \"mylib.scale(x: float32 [N], factor=2.0)\"", schema)
	}
	name = strings.TrimSpace(schema[:open])
	if err := checkName(name); err != nil {
		return "", nil, fmt.Errorf("schema %q: %w", schema, err)
	}
	body := strings.TrimSpace(schema[open+1:])
	body = strings.TrimSpace(body[:len(body)-1])
	items, err := splitTop(body)
	if err != nil {
		return "", nil, fmt.Errorf("schema %q: %w", schema, err)
	}
	seen := map[string]bool{}
	for _, it := range items {
		p, err := parseParam(it)
		if err != nil {
			return "", nil, fmt.Errorf("schema %q: %w", schema, err)
		}
		if seen[p.name] {
			return "", nil, fmt.Errorf("schema %q: parameter %q named twice", schema, p.name)
		}
		seen[p.name] = true
		params = append(params, p)
	}
	return name, params, nil
}

// checkName accepts "ns.name" and deeper dotted names of identifiers.
func checkName(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return fmt.Errorf("name %q: want a namespace and a name, e.g. \"mylib.scale\"", name)
	}
	for _, p := range parts {
		if !isIdent(p) {
			return fmt.Errorf("name %q: %q is not an identifier", name, p)
		}
	}
	return nil
}

func isIdent(s string) bool {
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

// splitTop splits s at commas outside brackets and quotes.
func splitTop(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var items []string
	depth, start := 0, 0
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '[':
			depth++
		case r == ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ']' at %d", i)
			}
		case r == ',' && depth == 0:
			items = append(items, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if depth != 0 || quote != 0 {
		return nil, fmt.Errorf("unbalanced brackets or quotes in %q", s)
	}
	return append(items, strings.TrimSpace(s[start:])), nil
}

func parseParam(s string) (schemaParam, error) {
	if s == "" {
		return schemaParam{}, fmt.Errorf("an empty parameter")
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		name := strings.TrimSpace(s[:i])
		if !isIdent(name) {
			return schemaParam{}, fmt.Errorf("parameter %q: %q is not an identifier", s, name)
		}
		spec, err := ParseTensorSpec(s[i+1:])
		if err != nil {
			return schemaParam{}, fmt.Errorf("parameter %s: %w", name, err)
		}
		return schemaParam{name: name, tensor: &spec}, nil
	}
	if i := strings.IndexByte(s, '='); i >= 0 {
		name := strings.TrimSpace(s[:i])
		if !isIdent(name) {
			return schemaParam{}, fmt.Errorf("parameter %q: %q is not an identifier", s, name)
		}
		return schemaParam{name: name, defaultSrc: strings.TrimSpace(s[i+1:]), hasDefault: true}, nil
	}
	if !isIdent(s) {
		return schemaParam{}, fmt.Errorf("parameter %q is not an identifier (a tensor is \"x: float32 [N]\", a scalar \"n\" or \"n=1\")", s)
	}
	return schemaParam{name: s}, nil
}

// ParseTensorSpec reads a tensor parameter's constraints as a schema writes
// them after the colon: "float32|float64 [N, K] C cuda writable" (each part
// optional; "" accepts any tensor).
func ParseTensorSpec(s string) (TensorSpec, error) {
	var t TensorSpec
	rest := strings.TrimSpace(s)
	if i := strings.IndexByte(rest, '['); i >= 0 {
		j := strings.IndexByte(rest, ']')
		if j < i {
			return t, fmt.Errorf("%q: '[' without ']'", s)
		}
		dims, err := parseDims(rest[i+1 : j])
		if err != nil {
			return t, fmt.Errorf("%q: %w", s, err)
		}
		t.Shape = dims
		rest = rest[:i] + " " + rest[j+1:]
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
				return t, fmt.Errorf("%q: two orders", s)
			}
			seenOrder = true
			t.Order = zerocopy.COrder
			if tok == "F" {
				t.Order = zerocopy.FOrder
			}
		case "cpu", "cuda":
			if seenDevice {
				return t, fmt.Errorf("%q: two devices (leave the device out to accept both)", s)
			}
			seenDevice = true
			t.Device = CPU
			if tok == "cuda" {
				t.Device = CUDA
			}
		case "writable":
			t.Writable = true
		case "*":
		default:
			if t.DTypes != nil {
				return t, fmt.Errorf("%q: unknown word %q (dtypes are one word joined by |; then [shape], C or F, cpu or cuda, writable)", s, tok)
			}
			for _, name := range strings.Split(tok, "|") {
				dt, err := dlpack.ParseDataType(name)
				if err != nil {
					return t, fmt.Errorf("%q: %q is neither a dtype nor a constraint (C, F, cpu, cuda, writable): %v", s, name, err)
				}
				t.DTypes = append(t.DTypes, dt)
			}
		}
	}
	return t, nil
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
			dims = append(dims, Dim{Size: -1})
		case isIdent(f):
			dims = append(dims, Dim{Name: f, Size: -1})
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
