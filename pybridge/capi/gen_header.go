//go:build ignore

// gen_header declares the C ABI of libdlbridge once, from its Go source: it
// reads the //export functions of package capi and pyfunc's table of error
// classes and writes
//
//	dlbridge.h                        the error classes, a prototype of every
//	                                  export, and dlb_exports, the table of
//	                                  them that dlbridge._core fills with dlsym
//	../python/src/_exports.h          dlbridge._core's Python function for
//	                                  every export Python calls (_core.dlb_x)
//
// Run with `go generate ./pybridge/capi/` after changing an export;
// TestHeaderCurrent fails while the committed files are stale.
//
// A wrapper takes the export's parameters in order, as Python values, and
// returns its outputs (None, one value, or a tuple); a non-zero status
// raises the exception of its error class with dlb_last_error()'s message.
// The GIL is released for the call. How a parameter crosses follows from
// its C type and name:
//
//	int32_t, uint64_t, ... (value)      int (range-checked)
//	char *                              bytes or str (None: NULL)
//	char *buf followed by an int n or   out: the string written there (str);
//	capacity (and maybe int64_t *n)     a longer one asked again
//	int64_t/int32_t *shape, strides,    a sequence of at most 64 ints (None: NULL)
//	order
//	void *pyobj, *keeper                a Python object; the export takes a
//	                                    reference (Py_INCREF before the call)
//	dlb_scalar *value                   (kind, i, u, re, im)
//	dlb_index_item *items               a sequence of (kind, start, stop, step)
//	uint64_t *out then dlb_info *info   out: a tensor of the extension's
//	                                    tensor class that owns the handle
//	T *x (other scalar pointers)        out: the value; with //dlb:array x N
//	                                    in the doc comment, N values (tuple)
//	dlb_scalar *out                     out: (kind, i, u, re, im)
//
// An export with another parameter (dlb_arg *, dlb_result *) gets no
// wrapper: the extension calls it from C; //dlb:nopy in the doc comment
// says the same of any other. //dlb:value says the result is a value, not
// a status.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
)

type param struct {
	name  string
	ctype string // C type, e.g. "int64_t *"
	base  string // pointee or value type without "*": "int64_t"
	ptr   int    // levels of indirection
}

type export struct {
	name   string
	file   string
	params []param
	ret    string // C type, "void" for none
	value  bool   // //dlb:value
	nopy   bool   // //dlb:nopy: called from C only, no Python wrapper
	arrays map[string]int
}

var cTypes = map[string]string{
	"int32_t": "int32_t", "int64_t": "int64_t", "uint64_t": "uint64_t", "uint32_t": "uint32_t",
	"uint16_t": "uint16_t", "uint8_t": "uint8_t", "int": "int", "double": "double", "char": "char",
	"dlb_info": "dlb_info", "dlb_scalar": "dlb_scalar", "dlb_index_item": "dlb_index_item",
	"dlb_arg": "dlb_arg", "dlb_result": "dlb_result",
}

func cType(e ast.Expr) (base string, ptr int, err error) {
	for {
		star, ok := e.(*ast.StarExpr)
		if !ok {
			break
		}
		ptr++
		e = star.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", 0, fmt.Errorf("type %T is not C.x or unsafe.Pointer", e)
	}
	pkg := sel.X.(*ast.Ident).Name
	switch {
	case pkg == "unsafe" && sel.Sel.Name == "Pointer":
		return "void", ptr + 1, nil
	case pkg == "C":
		if t, ok := cTypes[sel.Sel.Name]; ok {
			return t, ptr, nil
		}
	}
	return "", 0, fmt.Errorf("type %s.%s has no C spelling here (add it to cTypes)", pkg, sel.Sel.Name)
}

func spell(base string, ptr int) string {
	if ptr == 0 {
		return base
	}
	return base + " " + strings.Repeat("*", ptr)
}

func parse(dir string) ([]export, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var out []export
	for _, path := range names {
		if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(filepath.Base(path), "gen_") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Doc == nil {
				continue
			}
			ex := export{file: filepath.Base(path), ret: "void", arrays: map[string]int{}}
			for _, c := range fd.Doc.List {
				switch t := strings.TrimSpace(c.Text); {
				case strings.HasPrefix(t, "//export "):
					ex.name = strings.TrimSpace(strings.TrimPrefix(t, "//export "))
				case t == "//dlb:value":
					ex.value = true
				case t == "//dlb:nopy":
					ex.nopy = true
				case strings.HasPrefix(t, "//dlb:array "):
					f := strings.Fields(strings.TrimPrefix(t, "//dlb:array "))
					n, err := strconv.Atoi(f[len(f)-1])
					if len(f) != 2 || err != nil || n < 1 {
						return nil, fmt.Errorf("%s: %q: want //dlb:array NAME N", path, t)
					}
					ex.arrays[f[0]] = n
				}
			}
			if ex.name == "" {
				continue
			}
			if ex.name != fd.Name.Name {
				return nil, fmt.Errorf("%s: //export %s on func %s", path, ex.name, fd.Name.Name)
			}
			for _, fl := range fd.Type.Params.List {
				base, ptr, err := cType(fl.Type)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %v", path, ex.name, err)
				}
				for _, n := range fl.Names {
					ex.params = append(ex.params, param{name: n.Name, ctype: spell(base, ptr), base: base, ptr: ptr})
				}
			}
			if r := fd.Type.Results; r != nil {
				if len(r.List) != 1 || len(r.List[0].Names) > 1 {
					return nil, fmt.Errorf("%s: %s: exports return one value or none", path, ex.name)
				}
				base, ptr, err := cType(r.List[0].Type)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %v", path, ex.name, err)
				}
				ex.ret = spell(base, ptr)
			}
			if !ex.value && ex.ret != "int32_t" {
				return nil, fmt.Errorf("%s: %s returns %s: a status is int32_t; mark a value //dlb:value", path, ex.name, ex.ret)
			}
			out = append(out, ex)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func protoParams(ps []param) string {
	if len(ps) == 0 {
		return "void"
	}
	var b []string
	for _, p := range ps {
		b = append(b, strings.TrimSuffix(p.ctype+" ", " ")+sep(p.ctype)+p.name)
	}
	return strings.Join(b, ", ")
}

func sep(ctype string) string {
	if strings.HasSuffix(ctype, "*") {
		return ""
	}
	return " "
}

const generated = "// Code generated by pybridge/capi/gen_header.go; DO NOT EDIT.\n"

func header(exs []export) []byte {
	var b bytes.Buffer
	b.WriteString(generated)
	b.WriteString(`//
// The C ABI of libdlbridge: every function that package capi exports (from
// its Go source), and dlbridge's error classes (pyfunc.Class). A status
// function returns DLB_OK or the class of its error, with the message in
// dlb_last_error() (pyapi.h) on the calling thread.
#ifndef DLBRIDGE_H
#define DLBRIDGE_H

#include <stdint.h>

#include "capi.h"

// Error classes: the Python exception each status stands for.
#define DLB_OK 0
`)
	var names []string
	for c := pyfunc.Class(1); c.String() != "Unclassified"; c++ {
		fmt.Fprintf(&b, "#define DLB_%s %d\n", strings.ToUpper(c.String()), int(c))
		names = append(names, strconv.Quote(c.String()))
	}
	fmt.Fprintf(&b, "// The class names by status (index 0: no class, raised as RuntimeError).\n")
	fmt.Fprintf(&b, "#define DLB_ERROR_CLASSES \"RuntimeError\", %s\n", strings.Join(names, ", "))
	fmt.Fprintf(&b, "#define DLB_ERROR_CLASS_COUNT %d\n\n", len(names)+1)
	for _, e := range exs {
		fmt.Fprintf(&b, "%s%s%s(%s);\n", e.ret, sep(e.ret), e.name, protoParams(e.params))
	}
	b.WriteString("\n// Every export, for a caller that looks them up at run time (dlsym).\ntypedef struct {\n")
	for _, e := range exs {
		fmt.Fprintf(&b, "\t%s%s(*%s)(%s);\n", e.ret, sep(e.ret), strings.TrimPrefix(e.name, "dlb_"), protoParams(e.params))
	}
	b.WriteString("} dlb_exports;\n\n// The symbols of dlb_exports' fields, in order.\n#define DLB_EXPORT_NAMES")
	for _, e := range exs {
		fmt.Fprintf(&b, " \\\n\t%q,", e.name)
	}
	b.WriteString("\n\n#endif\n")
	return b.Bytes()
}

// The wrapper's view of each parameter.
type arg struct {
	p    param
	kind string // in: i u s a o V I; out: S T O A W; skip: the capacity / length of S, the info of T
	n    int    // A: the count
}

func classify(e export) ([]arg, error) {
	var as []arg
	ps := e.params
	for i := 0; i < len(ps); i++ {
		p := ps[i]
		a := arg{p: p}
		next := func(k int) *param {
			if i+k < len(ps) {
				return &ps[i+k]
			}
			return nil
		}
		switch {
		case p.ptr == 0 && strings.HasPrefix(p.base, "uint"):
			a.kind = "u"
		case p.ptr == 0 && p.base != "double":
			a.kind = "i"
		case p.base == "char" && p.ptr == 1 && p.name == "buf":
			c := next(1)
			if c == nil || c.ptr != 0 || (c.name != "n" && c.name != "capacity") {
				return nil, fmt.Errorf("buf without a capacity after it")
			}
			a.kind = "S"
			as = append(as, a, arg{p: *c, kind: "-"})
			i++
			if l := next(1); l != nil && l.name == "n" && l.ptr == 1 {
				as = append(as, arg{p: *l, kind: "-"})
				i++
			}
			continue
		case p.base == "char" && p.ptr == 1:
			a.kind = "s"
		case (p.base == "int64_t" || p.base == "int32_t") && p.ptr == 1 &&
			(p.name == "shape" || p.name == "strides" || p.name == "order"):
			a.kind = "a"
		case p.base == "void" && p.ptr == 1 && (p.name == "pyobj" || p.name == "keeper"):
			a.kind = "o"
		case p.base == "dlb_scalar" && p.ptr == 1 && p.name == "value":
			a.kind = "V"
		case p.base == "dlb_scalar" && p.ptr == 1:
			a.kind = "W"
		case p.base == "dlb_index_item" && p.ptr == 1:
			a.kind = "I"
		case p.base == "uint64_t" && p.ptr == 1 && p.name == "out" && next(1) != nil && next(1).base == "dlb_info":
			a.kind = "T"
			as = append(as, a, arg{p: *next(1), kind: "-"})
			i++
			continue
		case p.ptr == 1 && cTypes[p.base] == p.base && !strings.HasPrefix(p.base, "dlb_") && p.base != "char":
			a.kind = "O"
			if n, ok := e.arrays[p.name]; ok {
				a.kind, a.n = "A", n
			}
		default:
			return nil, fmt.Errorf("parameter %s %s has no Python form", p.name, p.ctype)
		}
		as = append(as, a)
	}
	return as, nil
}

// The inputs filled by a helper x_F(arg, name, &v): v's declaration and
// how the call passes v.
var inputs = map[string]struct{ decl, helper, pass string }{
	"s": {"const char *%s", "x_str", "(char *)%s"},
	"V": {"dlb_scalar %s", "x_scalar_in", "&%s"},
}

func wrappers(exs []export) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(generated)
	b.WriteString(`//
// dlbridge._core's function for every export of libdlbridge that Python
// calls (gen_header.go says how each parameter crosses). Included once, by
// _core.c, which defines the helpers (x_*) and E, the table of exports.

`)
	var table []string
	for _, e := range exs {
		if e.nopy {
			continue
		}
		as, err := classify(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %v (mark it //dlb:nopy if Python does not call it)", e.name, err)
		}
		var decl, conv, call, outs []string
		nin := 0
		for i, a := range as {
			v := fmt.Sprintf("a%d", i)
			p := a.p
			switch a.kind {
			case "i", "u", "s", "a", "o", "V", "I":
				var c string
				pass := v
				// INT32_MIN, UINT64_MAX, INT_MAX: <stdint.h>'s and <limits.h>'s names.
				short := strings.TrimSuffix(p.base, "_t")
				up := strings.ToUpper(short)
				switch a.kind {
				case "i":
					c = fmt.Sprintf("%s %s; X_INT(args[%d], %q, %q, %s_MIN, %s_MAX, %s);", p.base, v, nin, p.name, short, up, up, v)
				case "u":
					c = fmt.Sprintf("%s %s; X_UINT(args[%d], %q, %q, %s_MAX, %s);", p.base, v, nin, p.name, short, up, v)
				case "o":
					c = fmt.Sprintf("PyObject *%s = args[%d] == Py_None ? NULL : args[%d];", v, nin, nin)
				case "a", "I":
					helper := "x_ints_" + short
					if a.kind == "I" {
						helper = "x_items"
					}
					c = fmt.Sprintf("%s %s_[64], *%s; if (%s(args[%d], %q, %s_, &%s) < 0) return NULL;", p.base, v, v, helper, nin, p.name, v, v)
				default:
					in := inputs[a.kind]
					c = fmt.Sprintf(in.decl+"; if (%s(args[%d], %q, &%s) < 0) return NULL;", v, in.helper, nin, p.name, v)
					pass = fmt.Sprintf(in.pass, v)
				}
				conv = append(conv, c)
				call = append(call, pass)
				nin++
			case "S":
				decl = append(decl, fmt.Sprintf("char %s_[4096], *%s = %s_; int64_t %s_cap = sizeof %s_;", v, v, v, v, v))
				call = append(call, v)
			case "-":
				// The capacity or length of the S before, or the info of the T before.
				prev := as[i-1]
				switch {
				case prev.kind == "T":
					decl = append(decl, fmt.Sprintf("dlb_info %s;", v))
					call = append(call, "&"+v)
				case p.ptr == 0:
					call = append(call, fmt.Sprintf("(%s)%s_cap", p.base, sVar(as, i)))
				default:
					decl = append(decl, fmt.Sprintf("%s %s = 0;", p.base, v))
					call = append(call, "&"+v)
				}
			case "T":
				decl = append(decl, fmt.Sprintf("uint64_t %s = 0;", v))
				call = append(call, "&"+v)
				outs = append(outs, fmt.Sprintf("x_tensor(%s, &a%d, epoch)", v, i+1))
				decl = append(decl, "uint64_t epoch = epoch_now(); // before Go's info: see _core.c's fill")
			case "O":
				decl = append(decl, fmt.Sprintf("%s %s = 0;", p.base, v))
				call = append(call, "&"+v)
				outs = append(outs, outValue(p.base, v))
			case "A":
				decl = append(decl, fmt.Sprintf("%s %s[%d] = {0};", p.base, v, a.n))
				call = append(call, v)
				var vs []string
				for k := 0; k < a.n; k++ {
					vs = append(vs, outValue(p.base, fmt.Sprintf("%s[%d]", v, k)))
				}
				outs = append(outs, fmt.Sprintf("Py_BuildValue(\"(%s)\", %s)", strings.Repeat("N", a.n), strings.Join(vs, ", ")))
			case "W":
				decl = append(decl, fmt.Sprintf("dlb_scalar %s;", v))
				call = append(call, "&"+v)
				outs = append(outs, fmt.Sprintf("x_scalar_out(&%s)", v))
			}
		}
		w := "x_" + e.name
		table = append(table, fmt.Sprintf("\t{%q, (PyCFunction)(void (*)(void))%s, METH_FASTCALL, NULL},", e.name, w))
		fmt.Fprintf(&b, "static PyObject *%s(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {\n", w)
		fmt.Fprintf(&b, "\tif (need_args(nargs, %d, %d, %q) < 0) return NULL;\n", nin, nin, e.name)
		for _, c := range append(conv, decl...) {
			fmt.Fprintf(&b, "\t%s\n", c)
		}
		b.WriteString("\tNEED_LIBRARY(return NULL);\n")
		for i, a := range as {
			if a.kind == "o" {
				fmt.Fprintf(&b, "\tPy_XINCREF(a%d); // the export owns this reference\n", i)
			}
		}
		short := strings.TrimPrefix(e.name, "dlb_")
		fmt.Fprintf(&b, "\t%s r;\n\tPy_BEGIN_ALLOW_THREADS r = E.%s(%s); Py_END_ALLOW_THREADS\n", e.ret, short, strings.Join(call, ", "))
		if e.value {
			fmt.Fprintf(&b, "\treturn %s;\n}\n\n", outValue(e.ret, "r"))
			continue
		}
		for i, a := range as {
			if a.kind == "S" {
				// Asked again with room for a longer string (the length in the *n that follows).
				if i+2 < len(as) && as[i+2].kind == "-" && as[i+2].p.ptr == 1 {
					fmt.Fprintf(&b, "\tif (!r && a%d >= a%d_cap) {\n", i+2, i)
					fmt.Fprintf(&b, "\t\ta%d_cap = a%d + 1;\n\t\tif (!(a%d = PyMem_Malloc(a%d_cap))) return PyErr_NoMemory();\n", i, i+2, i, i)
					fmt.Fprintf(&b, "\t\tPy_BEGIN_ALLOW_THREADS r = E.%s(%s); Py_END_ALLOW_THREADS\n\t}\n", short, strings.Join(call, ", "))
					outs = append(outs, fmt.Sprintf("x_string(a%d, a%d_, r)", i, i))
				} else {
					outs = append(outs, fmt.Sprintf("x_string(a%d, a%d_, r)", i, i))
				}
			}
		}
		raise := "raise_last(r)"
		for i, a := range as {
			if a.kind == "S" {
				raise = fmt.Sprintf("x_string(a%d, a%d_, r)", i, i) // frees a longer buffer, raises
			}
		}
		fmt.Fprintf(&b, "\tif (r) return %s;\n", raise)
		switch len(outs) {
		case 0:
			b.WriteString("\tPy_RETURN_NONE;\n")
		case 1:
			fmt.Fprintf(&b, "\treturn %s;\n", outs[0])
		default:
			fmt.Fprintf(&b, "\treturn Py_BuildValue(\"(%s)\", %s);\n", strings.Repeat("N", len(outs)), strings.Join(outs, ", "))
		}
		b.WriteString("}\n\n")
	}
	b.WriteString("static PyMethodDef export_methods[] = {\n")
	for _, t := range table {
		b.WriteString(t + "\n")
	}
	b.WriteString("\t{NULL, NULL, 0, NULL},\n};\n")
	return b.Bytes(), nil
}

func sVar(as []arg, i int) string {
	for ; i >= 0; i-- {
		if as[i].kind == "S" {
			return fmt.Sprintf("a%d", i)
		}
	}
	panic("capacity without a buffer")
}

func outValue(ctype, v string) string {
	switch ctype {
	case "double":
		return fmt.Sprintf("PyFloat_FromDouble(%s)", v)
	case "uint64_t", "uint32_t", "uint16_t", "uint8_t":
		return fmt.Sprintf("PyLong_FromUnsignedLongLong(%s)", v)
	}
	return fmt.Sprintf("PyLong_FromLongLong(%s)", v)
}

// Generate returns the generated files by path relative to dir (package capi).
func generate(dir string) (map[string][]byte, error) {
	exs, err := parse(dir)
	if err != nil {
		return nil, err
	}
	w, err := wrappers(exs)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"dlbridge.h":               header(exs),
		"../python/src/_exports.h": w,
	}, nil
}

// With -check, main writes nothing and fails if a file differs from what
// it would write (TestHeaderCurrent).
func main() {
	check := len(os.Args) > 1 && os.Args[1] == "-check"
	files, err := generate(".")
	if err == nil {
		for path, data := range files {
			if check {
				if old, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(old, data) {
					err = fmt.Errorf("%s is stale: run go generate ./pybridge/capi/", path)
				}
				continue
			}
			if err = os.WriteFile(path, data, 0o644); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen_header:", err)
		os.Exit(1)
	}
}
