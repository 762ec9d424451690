package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The schema check, go vet style. A schema that does not match its Go
// function (two parameters named for a function of three, a tensor
// constraint on a float, a default out of its type's range) is recorded by
// pyfunc.Register at init and raised in Python as ImportError only when a
// process loads the library and reads dlbridge.ops. dlbridge build finds
// the mistake first: for every pyfunc.Register call whose schema is a
// constant it runs pyfunc.NewFunc itself, on a function of the same
// parameter and result types made with reflect.FuncOf, so that the rules
// and the message are pyfunc's own (one checker, not a second copy of its
// rules here). The rules are those of the pyfunc this command was built
// with: run it from your module (go tool dlbridge, go run
// github.com/dlbridge/dlbridge/cmd/dlbridge) and they are the library's.

// registration is one pyfunc.Register call found in a package's source.
type registration struct {
	pos    token.Position
	schema string // the constant schema; "" where it is not a constant
	sig    *types.Signature
}

func newRegistration(fset *token.FileSet, call *ast.CallExpr, sig *types.Signature, info *types.Info) registration {
	r := registration{pos: fset.Position(call.Pos()), sig: sig}
	if tv, ok := info.Types[call.Args[0]]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
		r.schema = constant.StringVal(tv.Value)
	}
	return r
}

// vetRegistrations checks each registration as pyfunc.Register will, and
// that no name is registered twice; the error lists every mistake, each at
// its file:line:col.
func vetRegistrations(regs []registration) error {
	var errs []error
	first := map[string]token.Position{}
	for _, r := range regs {
		if r.schema == "" {
			continue // a schema computed at run time: pyfunc checks it at init
		}
		name, err := checkRegistration(r.schema, r.sig)
		if err == nil {
			if _, dup := first[name]; dup {
				err = fmt.Errorf("%s is registered twice", name)
			} else {
				first[name] = r.pos
			}
		}
		if err != nil {
			// pyfunc.Register's prefix, as Python's ImportError shows it.
			errs = append(errs, fmt.Errorf("%s: pyfunc.Register: %v", relPos(r.pos), err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("a schema does not match its function (Python would raise ImportError when it loads the library):\n%w", errors.Join(errs...))
}

// relPos writes pos as go vet does: relative to the working directory
// where that is shorter.
func relPos(pos token.Position) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, pos.Filename); err == nil && len(rel) < len(pos.Filename) {
			pos.Filename = rel
		}
	}
	return pos.String()
}

// unsupported stands for a parameter or result type pyfunc refuses (a
// slice, a struct, a map): NewFunc names the parameter and the message
// gets the real type back (checkRegistration).
type unsupported struct{}

var (
	unsupportedType = reflect.TypeOf(unsupported{})
	viewRType       = reflect.TypeOf((*zerocopy.View)(nil))
	streamRType     = reflect.TypeOf((*cuda.Stream)(nil))
	errorRType      = reflect.TypeOf((*error)(nil)).Elem()
)

// reflectType is the reflect.Type NewFunc sees for t: the same type for
// the views, streams and errors pyfunc knows, the predeclared type of a
// basic underlying type (a Go `type Mode int32` checks as int32: pyfunc
// goes by kind and width), else unsupported.
func reflectType(t types.Type) reflect.Type {
	switch {
	case isPtrTo(t, zerocopyPkg, "View"):
		return viewRType
	case isPtrTo(t, cudaPkg, "Stream"):
		return streamRType
	case types.Identical(t, types.Universe.Lookup("error").Type()):
		return errorRType
	}
	b, ok := t.Underlying().(*types.Basic)
	if !ok {
		return unsupportedType
	}
	if rt, ok := basicTypes[b.Kind()]; ok {
		return rt
	}
	return unsupportedType
}

var basicTypes = map[types.BasicKind]reflect.Type{
	types.Bool: reflect.TypeOf(false), types.String: reflect.TypeOf(""),
	types.Int: reflect.TypeOf(int(0)), types.Int8: reflect.TypeOf(int8(0)), types.Int16: reflect.TypeOf(int16(0)),
	types.Int32: reflect.TypeOf(int32(0)), types.Int64: reflect.TypeOf(int64(0)),
	types.Uint: reflect.TypeOf(uint(0)), types.Uint8: reflect.TypeOf(uint8(0)), types.Uint16: reflect.TypeOf(uint16(0)),
	types.Uint32: reflect.TypeOf(uint32(0)), types.Uint64: reflect.TypeOf(uint64(0)), types.Uintptr: reflect.TypeOf(uintptr(0)),
	types.Float32: reflect.TypeOf(float32(0)), types.Float64: reflect.TypeOf(float64(0)),
	types.Complex64: reflect.TypeOf(complex64(0)), types.Complex128: reflect.TypeOf(complex128(0)),
}

// numbered finds the parameter or result a NewFunc message names by number.
var numbered = regexp.MustCompile(`\b(parameter|result) ([0-9]+) of `)

// namedParam finds the parameter a NewFunc message names by its name.
var namedParam = regexp.MustCompile(`\bparameter "([A-Za-z_][A-Za-z0-9_]*)"`)

// namedScalar rewrites, in a message about the schema's parameter name,
// the predeclared type reflectType chose for the Go type it maps to (the
// schema's parameters are the Go parameters in order, *cuda.Stream left
// out), when that Go type is a named one: "out of range for uint8" becomes
// "out of range for mylib.Mode", as Python says it.
func namedScalar(schema, name string, params []types.Type) *strings.Replacer {
	none := strings.NewReplacer()
	sc, err := pyfunc.ParseSchema(schema)
	if err != nil {
		return none
	}
	k := slices.IndexFunc(sc.Params, func(p pyfunc.SchemaParam) bool { return p.Name == name })
	if k < 0 {
		return none
	}
	for _, t := range params {
		if isPtrTo(t, cudaPkg, "Stream") {
			continue
		}
		if k--; k >= 0 {
			continue
		}
		if n, ok := t.(*types.Named); ok {
			if b, ok := n.Underlying().(*types.Basic); ok && reflectType(t) != unsupportedType {
				return strings.NewReplacer(" "+b.Name(), " "+types.TypeString(n, func(p *types.Package) string { return p.Name() }))
			}
		}
		break
	}
	return none
}

// checkRegistration runs pyfunc.NewFunc on schema and a stand-in of a
// function of signature sig, and returns the registered name or NewFunc's
// error, with sig's types written as the compiler writes them.
func checkRegistration(schema string, sig *types.Signature) (string, error) {
	params, results := tupleTypes(sig.Params()), tupleTypes(sig.Results())
	in := make([]reflect.Type, len(params))
	for i, t := range params {
		if i == len(params)-1 && sig.Variadic() {
			// reflect.FuncOf wants a slice last; NewFunc refuses it anyway.
			in[i] = reflect.SliceOf(reflectType(t.(*types.Slice).Elem()))
			continue
		}
		in[i] = reflectType(t)
	}
	out := make([]reflect.Type, len(results))
	for i, t := range results {
		out[i] = reflectType(t)
	}
	ft := reflect.FuncOf(in, out, sig.Variadic())
	fn := reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
		panic("dlbridge build: the stand-in of a registered function is never called")
	})
	f, err := pyfunc.NewFunc(schema, fn.Interface())
	if err == nil {
		return f.Name, nil
	}
	// The message names reflect's types; the author knows the compiler's
	// (sigs.Mode, not int32; []float32, not the stand-in).
	qual := func(p *types.Package) string { return p.Name() }
	msg := err.Error()
	if m := numbered.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[2])
		list := params
		if m[1] == "result" {
			list = results
		}
		if n >= 1 && n <= len(list) {
			msg = strings.Replace(msg, "is a "+unsupportedType.String(), "is a "+types.TypeString(list[n-1], qual), 1)
		}
	}
	if m := namedParam.FindStringSubmatchIndex(msg); m != nil {
		msg = msg[:m[1]] + namedScalar(schema, msg[m[2]:m[3]], params).Replace(msg[m[1]:])
	}
	goSig := types.TypeString(types.NewSignatureType(nil, nil, nil, unnamed(sig.Params()), unnamed(sig.Results()), sig.Variadic()), qual)
	msg = strings.ReplaceAll(msg, ft.String(), goSig)
	return "", errors.New(msg)
}
