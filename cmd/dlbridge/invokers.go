package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Invokers. pyfunc calls a registered function through reflection unless
// it has an Invoker for the function's signature; reflect.Value.Call costs
// about 0.5 us a call, more than the rest of a small call together (the
// pyfunc benchmarks BenchmarkCallEmpty and BenchmarkCallScale16 show the
// two paths). dlbridge build type-checks the packages it links, finds the
// functions they pass to pyfunc.Register, and generates one InvokerFactory
// per signature: a type assertion and a direct call.

const (
	cudaPkg     = dlbridgeModule + "/cuda"
	zerocopyPkg = dlbridgeModule + "/zerocopy"
)

// invokersSource returns the source of a file of the main package that
// adds the invokers for the signatures pkgs register, or nil when there
// are none. A signature it cannot express (a parameter type from an
// internal or main package, an unexported named type) is left to
// reflection, as is any package it cannot type-check (said on stderr).
// Before that it checks every registration's schema against its function
// (vetRegistrations): a mistake fails the build here, before go build
// links anything, with the message Python would raise.
func (b *builder) invokersSource(pkgs []*goPackage) ([]byte, error) {
	exports, err := b.exportData()
	if err != nil {
		return nil, err
	}
	g := &invokerGen{imports: map[string]string{}, seen: map[string]bool{}}
	g.alias(pyfuncPkg)
	for _, p := range pkgs {
		if !registers(p) {
			continue
		}
		if err := g.scan(p, exports); err != nil {
			fmt.Fprintf(b.stderr, "dlbridge build: note: package %s: %v; its functions are called through reflection and their schemas are checked when Python loads the library\n", p.ImportPath, err)
		}
	}
	if err := vetRegistrations(g.regs); err != nil {
		return nil, err
	}
	if len(g.factories) == 0 {
		return nil, nil
	}
	return g.source()
}

// exportData maps each package the generated main package depends on to
// its compiled export data (go list -export), for the type checker. The
// packages are compiled as go build will compile them for the library
// (c-shared, -trimpath, the profile beside main.go, the tags), so that
// go build finds every one of them in its cache: compiled in go list's
// default mode they would be compiled twice, for the export data and
// again for the library.
func (b *builder) exportData() (map[string]string, error) {
	args := append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, b.compileFlags()...)
	args = append(args, ".")
	out, err := b.goCmd(b.dir, b.workFile, args...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -export: %v", err)
		}
		if p.Export != "" {
			exports[p.ImportPath] = p.Export
		}
	}
	return exports, nil
}

type invokerGen struct {
	imports   map[string]string // import path -> alias
	seen      map[string]bool   // signatures done
	factories []string
	regs      []registration // the pyfunc.Register calls found, in source order
}

func (g *invokerGen) alias(path string) string {
	if a, ok := g.imports[path]; ok {
		return a
	}
	a := fmt.Sprintf("p%d", len(g.imports))
	g.imports[path] = a
	return a
}

// scan type-checks p and adds a factory for each signature it registers.
func (g *invokerGen) scan(p *goPackage, exports map[string]string) error {
	if len(p.CgoFiles) > 0 {
		return fmt.Errorf("it uses cgo")
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
		return fmt.Errorf("type-checking: %v", err)
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 || !isRegister(call.Fun, info) {
				return true
			}
			if sig, ok := info.TypeOf(call.Args[1]).(*types.Signature); ok {
				g.add(sig)
				if isRegisterNamed(call.Fun, info, "Register") {
					g.regs = append(g.regs, newRegistration(fset, call, sig, info))
				}
			}
			return true
		})
	}
	return nil
}

// isRegister reports whether fun is pyfunc.Register or pyfunc.NewFunc.
func isRegister(fun ast.Expr, info *types.Info) bool {
	return isRegisterNamed(fun, info, "Register") || isRegisterNamed(fun, info, "NewFunc")
}

// isRegisterNamed reports whether fun is the function pyfunc.<name>.
func isRegisterNamed(fun ast.Expr, info *types.Info, name string) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	fn, ok := info.Uses[sel.Sel].(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == pyfuncPkg && fn.Name() == name
}

// add writes the factory of sig, unless it has one or cannot be written.
func (g *invokerGen) add(sig *types.Signature) {
	if sig.Variadic() || sig.Recv() != nil || sig.Params().Len() > 16 || sig.Results().Len() > 17 {
		return
	}
	// Check first, so that a signature left to reflection imports nothing.
	for _, t := range append(tupleTypes(sig.Params()), tupleTypes(sig.Results())...) {
		if !nameable(t) {
			return
		}
	}
	var args []string
	for i := 0; i < sig.Params().Len(); i++ {
		a, ok := argSlot(sig.Params().At(i).Type(), i)
		if !ok {
			return
		}
		args = append(args, a)
	}
	var (
		results []string
		stores  []string
		hasErr  bool
	)
	n := sig.Results().Len()
	for i := 0; i < n; i++ {
		t := sig.Results().At(i).Type()
		if i == n-1 && types.Identical(t, types.Universe.Lookup("error").Type()) {
			results = append(results, "err")
			hasErr = true
			continue
		}
		st, ok := storeStmt(t, i)
		if !ok {
			return
		}
		results = append(results, fmt.Sprintf("r%d", i))
		stores = append(stores, st)
	}
	qual := func(p *types.Package) string { return g.alias(p.Path()) }
	typ := types.TypeString(types.NewSignatureType(nil, nil, nil, unnamed(sig.Params()), unnamed(sig.Results()), false), qual)
	if g.seen[typ] {
		return
	}
	g.seen[typ] = true
	for i, a := range args {
		if strings.HasPrefix(a, "(") { // a scalar slot, converted to the parameter's type
			args[i] = types.TypeString(sig.Params().At(i).Type(), qual) + a
		}
	}
	pf := g.alias(pyfuncPkg)
	var w strings.Builder
	fmt.Fprintf(&w, "func(fn any) %s.Invoker {\n\tf, ok := fn.(%s)\n\tif !ok {\n\t\treturn nil\n\t}\n", pf, typ)
	fmt.Fprintf(&w, "\treturn func(fr *%s.Frame) error {\n\t\t", pf)
	call := fmt.Sprintf("f(%s)", strings.Join(args, ", "))
	if len(results) == 0 {
		fmt.Fprintf(&w, "%s\n\t\treturn nil\n", call)
	} else {
		fmt.Fprintf(&w, "%s := %s\n", strings.Join(results, ", "), call)
		for _, s := range stores {
			fmt.Fprintf(&w, "\t\t%s\n", s)
		}
		if hasErr {
			w.WriteString("\t\treturn err\n")
		} else {
			w.WriteString("\t\treturn nil\n")
		}
	}
	w.WriteString("\t}\n}")
	g.factories = append(g.factories, w.String())
}

// nameable reports whether the generated main package can name t: no type
// of a main package, of another module's internal package, or unexported.
func nameable(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok {
		return true
	}
	pkg := n.Obj().Pkg()
	if pkg == nil {
		return true // error
	}
	path := pkg.Path()
	if pkg.Name() == "main" || !n.Obj().Exported() {
		return false
	}
	return !strings.Contains("/"+path+"/", "/internal/") || strings.HasPrefix(path, dlbridgeModule+"/")
}

// unnamed is t without its names: the signature's identity.
func unnamed(t *types.Tuple) *types.Tuple {
	vars := make([]*types.Var, t.Len())
	for i := range vars {
		vars[i] = types.NewVar(token.NoPos, nil, "", t.At(i).Type())
	}
	return types.NewTuple(vars...)
}

func tupleTypes(t *types.Tuple) []types.Type {
	out := make([]types.Type, t.Len())
	for i := range out {
		out[i] = t.At(i).Type()
	}
	return out
}

// isPtrTo reports whether t is *path.name.
func isPtrTo(t types.Type, path, name string) bool {
	p, ok := t.(*types.Pointer)
	if !ok {
		return false
	}
	n, ok := p.Elem().(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == path && n.Obj().Name() == name
}

// argSlot is the expression that passes Go parameter i of type t from fr:
// the view or the stream, or "(fr.X[i])" for a scalar, which add prefixes
// with the parameter's type.
func argSlot(t types.Type, i int) (string, bool) {
	switch {
	case isPtrTo(t, zerocopyPkg, "View"):
		return fmt.Sprintf("fr.V[%d]", i), true
	case isPtrTo(t, cudaPkg, "Stream"):
		return "fr.S", true
	}
	b, ok := t.Underlying().(*types.Basic)
	if !ok {
		return "", false
	}
	slot := ""
	switch {
	case b.Info()&types.IsBoolean != 0:
		slot = "B"
	case b.Info()&types.IsString != 0:
		slot = "Str"
	case b.Kind() == types.Uintptr:
		return "", false
	case b.Info()&types.IsUnsigned != 0:
		slot = "U"
	case b.Info()&types.IsInteger != 0:
		slot = "I"
	case b.Kind() == types.Float32 || b.Kind() == types.Float64:
		slot = "F"
	default:
		return "", false
	}
	return fmt.Sprintf("(fr.%s[%d])", slot, i), true
}

// storeStmt stores result i of type t into fr.
func storeStmt(t types.Type, i int) (string, bool) {
	if isPtrTo(t, zerocopyPkg, "View") {
		return fmt.Sprintf("fr.RV[%d] = r%d", i, i), true
	}
	b, ok := t.Underlying().(*types.Basic)
	if !ok {
		return "", false
	}
	switch {
	case b.Info()&types.IsBoolean != 0:
		return fmt.Sprintf("fr.RB[%d] = bool(r%d)", i, i), true
	case b.Info()&types.IsString != 0:
		return fmt.Sprintf("fr.RStr[%d] = string(r%d)", i, i), true
	case b.Kind() == types.Uintptr:
		return "", false
	case b.Info()&types.IsUnsigned != 0:
		return fmt.Sprintf("fr.RU[%d] = uint64(r%d)", i, i), true
	case b.Info()&types.IsInteger != 0:
		return fmt.Sprintf("fr.RI[%d] = int64(r%d)", i, i), true
	case b.Kind() == types.Float32 || b.Kind() == types.Float64:
		return fmt.Sprintf("fr.RF[%d] = float64(r%d)", i, i), true
	}
	return "", false
}

// source is the generated file.
func (g *invokerGen) source() ([]byte, error) {
	var w bytes.Buffer
	w.WriteString("// Code generated by dlbridge build. DO NOT EDIT.\n\npackage main\n\nimport (\n")
	paths := make([]string, 0, len(g.imports))
	for p := range g.imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(&w, "\t%s %q\n", g.imports[p], p)
	}
	fmt.Fprintf(&w, ")\n\n// The invokers of the registered functions' signatures: direct calls\n// instead of reflection.\nfunc init() {\n\t%s.AddInvokers(\n", g.imports[pyfuncPkg])
	for _, f := range g.factories {
		fmt.Fprintf(&w, "\t\t%s,\n", f)
	}
	w.WriteString("\t)\n}\n")
	return format.Source(w.Bytes())
}
