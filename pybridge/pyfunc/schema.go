package pyfunc

import (
	"fmt"
	"strings"

	"github.com/dlbridge/dlbridge/zerocopy"
)

// Schema is a registration's schema as written, before it meets a Go
// function: what `dlbridge build` checks against the function's parameter
// types without running it (NewFunc checks the same against a Go value).
type Schema struct {
	Name   string // the dotted name, "mylib.scale"
	Params []SchemaParam
}

// SchemaParam is one parameter as the schema writes it.
type SchemaParam struct {
	Name string
	// Tensor is the constraints after a colon ("x: float32 [N]"); nil for
	// a parameter written without one, which is a scalar, or a tensor
	// that accepts any tensor.
	Tensor *zerocopy.Want
	// Default is the default after "=", as written; HasDefault says
	// whether there is one.
	Default    string
	HasDefault bool
}

// ParseSchema reads a schema, "ns.name(p: spec, q=1.0)", without a Go
// function: the name, and each parameter's tensor constraints (a
// zerocopy.Want) or default. The errors are those NewFunc and Register
// give for the same schema.
func ParseSchema(schema string) (Schema, error) {
	name, params, err := parseSchema(schema)
	return Schema{Name: name, Params: params}, err
}

// CheckDefault checks that p's default, as written, is a value of a Go
// parameter of kind k whose type is bits wide (for int, uint and float
// kinds; 0 for the others): the check NewFunc makes, for a caller that
// knows the parameter's type only by name (go/types).
func (p SchemaParam) CheckDefault(k Kind, bits int) error {
	if !p.HasDefault {
		return nil
	}
	_, err := parseDefaultBits(p.Default, k, bits)
	return err
}

// parseSchema splits "ns.name(p: spec, q=1.0)" into the dotted name and the
// parameters.
func parseSchema(schema string) (name string, params []SchemaParam, err error) {
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
		if seen[p.Name] {
			return "", nil, fmt.Errorf("schema %q: parameter %q named twice", schema, p.Name)
		}
		seen[p.Name] = true
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
		if !zerocopy.IsIdent(p) {
			return fmt.Errorf("name %q: %q is not an identifier", name, p)
		}
	}
	return nil
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

func parseParam(s string) (SchemaParam, error) {
	if s == "" {
		return SchemaParam{}, fmt.Errorf("an empty parameter")
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		name := strings.TrimSpace(s[:i])
		if !zerocopy.IsIdent(name) {
			return SchemaParam{}, fmt.Errorf("parameter %q: %q is not an identifier", s, name)
		}
		w, err := zerocopy.ParseWant(s[i+1:])
		if err != nil {
			return SchemaParam{}, fmt.Errorf("parameter %s: %w", name, err)
		}
		return SchemaParam{Name: name, Tensor: &w}, nil
	}
	if i := strings.IndexByte(s, '='); i >= 0 {
		name := strings.TrimSpace(s[:i])
		if !zerocopy.IsIdent(name) {
			return SchemaParam{}, fmt.Errorf("parameter %q: %q is not an identifier", s, name)
		}
		return SchemaParam{Name: name, Default: strings.TrimSpace(s[i+1:]), HasDefault: true}, nil
	}
	if !zerocopy.IsIdent(s) {
		return SchemaParam{}, fmt.Errorf("parameter %q is not an identifier (a tensor is \"x: float32 [N]\", a scalar \"n\" or \"n=1\")", s)
	}
	return SchemaParam{Name: s}, nil
}
