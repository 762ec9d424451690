//go:build ignore

// gen_calls writes the binding layer of package cuda: one Go function per
// driver entry point, in two builds that share one signature.
//
//	zsyms.go          the symbol table (names tried with dlsym, in order)
//	zcalls_purego.go  !cgo: purego.SyscallN on the dlsym'd pointer
//	zcalls_cgo.go     cgo:  a C trampoline that calls the same pointer
//
// Each entry point X gets three functions:
//
//	X(args) Result                     call on the calling thread as it is
//	X_ctx(ctx, args) Result            make ctx current on this OS thread first
//	                                   (restoring a foreign context afterwards)
//	X_auto(ctx, direct, args) Result   direct first when direct is true, and
//	                                   with ctx only if the driver answered
//	                                   as it does to a call made in another
//	                                   context or none (wrongContext)
//
// Run with `go generate ./cuda/` after editing the table below.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"strings"
)

// Argument kinds: p = pointer (unsafe.Pointer / void*), h = opaque driver
// handle (uintptr / uintptr_t), i = int32 / int, u = uint32 / unsigned int,
// q = uint64 / unsigned long long (also size_t and CUdeviceptr on LP64).
// v = a 64-byte struct passed by value (CUipcEventHandle): the Go function
// takes an unsafe.Pointer to it; the cgo trampoline dereferences it, the
// purego build lays its words out as the platform's C ABI passes such a
// struct (byValue64, abi_*.go).
// Output parameters of hot calls are o (8 bytes) or w (4 bytes): the Go
// function has no parameter for them and returns their values (as uint64)
// before the Result. In the cgo build the C trampoline passes the address
// of a C local and returns the value in a struct, so no Go memory escapes
// to the heap for them; the purego build uses a Go variable.
type entry struct {
	name string   // Go function name = preferred symbol
	syms []string // symbols to try, first found wins (nil: just name)
	args string   // "name:kind ..." in C order
}

var table = []entry{
	{name: "cuInit", args: "flags:u"},
	{name: "cuDriverGetVersion", args: "version:p"},
	{name: "cuGetErrorName", args: "code:i pstr:p"},
	{name: "cuGetErrorString", args: "code:i pstr:p"},

	{name: "cuDeviceGetCount", args: "count:p"},
	{name: "cuDeviceGet", args: "dev:p ordinal:i"},
	{name: "cuDeviceGetName", args: "name:p length:i dev:i"},
	{name: "cuDeviceGetAttribute", args: "pi:w attrib:i dev:i"},
	{name: "cuDeviceTotalMem_v2", args: "bytes:p dev:i"},
	{name: "cuDeviceGetPCIBusId", args: "busid:p length:i dev:i"},
	{name: "cuDeviceGetUuid", syms: []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}, args: "uuid:p dev:i"},
	{name: "cuDeviceCanAccessPeer", args: "can:p dev:i peer:i"},

	{name: "cuDevicePrimaryCtxRetain", args: "pctx:p dev:i"},
	{name: "cuDevicePrimaryCtxRelease_v2", args: "dev:i"},
	{name: "cuCtxGetCurrent", args: "pctx:o"},
	{name: "cuCtxSetCurrent", args: "hctx:h"},
	{name: "cuCtxPushCurrent_v2", args: "hctx:h"},
	{name: "cuCtxPopCurrent_v2", args: "pctx:p"},
	{name: "cuCtxGetDevice", args: "dev:w"},
	{name: "cuCtxSynchronize", args: ""},
	{name: "cuCtxEnablePeerAccess", args: "peer:h flags:u"},
	{name: "cuCtxGetStreamPriorityRange", args: "least:p greatest:p"},

	{name: "cuMemGetInfo_v2", args: "free:p total:p"},
	{name: "cuMemAlloc_v2", args: "pdptr:o bytes:q"},
	{name: "cuMemFree_v2", args: "dptr:q"},
	{name: "cuMemAllocManaged", args: "pdptr:p bytes:q flags:u"},
	{name: "cuMemAllocAsync", args: "pdptr:o bytes:q stream:h"},
	{name: "cuMemFreeAsync", args: "dptr:q stream:h"},
	{name: "cuMemHostAlloc", args: "pp:p bytes:q flags:u"},
	{name: "cuMemFreeHost", args: "p:p"},
	{name: "cuMemHostRegister_v2", args: "p:p bytes:q flags:u"},
	{name: "cuMemHostUnregister", args: "p:p"},
	{name: "cuMemHostGetDevicePointer_v2", args: "pdptr:p p:p flags:u"},
	{name: "cuMemGetAddressRange_v2", args: "pbase:o psize:o dptr:q"},
	{name: "cuDeviceGetDefaultMemPool", args: "pool:o dev:i"},
	{name: "cuMemPoolSetAttribute", args: "pool:h attr:i value:p"},
	{name: "cuMemPoolGetAttribute", args: "pool:h attr:i value:p"},
	{name: "cuMemPoolTrimTo", args: "pool:h keep:q"},
	{name: "cuMemPoolSetAccess", args: "pool:h descs:p count:q"},
	{name: "cuMemPoolCreate", args: "pool:o props:p"},
	{name: "cuMemPoolDestroy", args: "pool:h"},
	{name: "cuMemAllocFromPoolAsync", args: "pdptr:o bytes:q pool:h stream:h"},
	{name: "cuMemPoolExportToShareableHandle", args: "handle:p pool:h htype:i flags:q"},
	{name: "cuMemPoolImportFromShareableHandle", args: "pool:o handle:h htype:i flags:q"},
	{name: "cuMemPoolExportPointer", args: "data:p ptr:q"},
	{name: "cuMemPoolImportPointer", args: "pdptr:o pool:h data:p"},

	{name: "cuMemsetD8_v2", args: "dst:q value:u n:q"},
	{name: "cuMemsetD32_v2", args: "dst:q value:u n:q"},
	{name: "cuMemsetD8Async", args: "dst:q value:u n:q stream:h"},
	{name: "cuMemsetD32Async", args: "dst:q value:u n:q stream:h"},

	{name: "cuMemcpyHtoD_v2", args: "dst:q src:p bytes:q"},
	{name: "cuMemcpyDtoH_v2", args: "dst:p src:q bytes:q"},
	{name: "cuMemcpyDtoD_v2", args: "dst:q src:q bytes:q"},
	{name: "cuMemcpyHtoDAsync_v2", args: "dst:q src:p bytes:q stream:h"},
	{name: "cuMemcpyDtoHAsync_v2", args: "dst:p src:q bytes:q stream:h"},
	{name: "cuMemcpyDtoDAsync_v2", args: "dst:q src:q bytes:q stream:h"},
	{name: "cuMemcpyPeer", args: "dst:q dstctx:h src:q srcctx:h bytes:q"},
	{name: "cuMemcpyPeerAsync", args: "dst:q dstctx:h src:q srcctx:h bytes:q stream:h"},
	{name: "cuMemcpy2D_v2", args: "copy:p"},
	{name: "cuMemcpy2DAsync_v2", args: "copy:p stream:h"},
	{name: "cuMemcpy3D_v2", args: "copy:p"},
	{name: "cuMemcpy3DAsync_v2", args: "copy:p stream:h"},

	{name: "cuStreamCreateWithPriority", args: "pstream:p flags:u priority:i"},
	{name: "cuStreamDestroy_v2", args: "stream:h"},
	{name: "cuStreamSynchronize", args: "stream:h"},
	{name: "cuStreamQuery", args: "stream:h"},
	{name: "cuStreamWaitEvent", args: "stream:h event:h flags:u"},
	{name: "cuStreamGetPriority", args: "stream:h priority:p"},
	{name: "cuStreamGetFlags", args: "stream:h flags:p"},
	{name: "cuStreamGetCtx", args: "stream:h pctx:o"},
	{name: "cuStreamIsCapturing", args: "stream:h status:w"},

	{name: "cuEventCreate", args: "pevent:p flags:u"},
	{name: "cuEventDestroy_v2", args: "event:h"},
	{name: "cuEventRecord", args: "event:h stream:h"},
	{name: "cuEventSynchronize", args: "event:h"},
	{name: "cuEventQuery", args: "event:h"},
	{name: "cuIpcGetEventHandle", args: "handle:p event:h"},
	{name: "cuIpcOpenEventHandle", args: "pevent:o handle:v"},
	{name: "cuEventElapsedTime", syms: []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, args: "ms:p start:h end:h"},

	{name: "cuPointerGetAttribute", args: "data:o attr:i ptr:q"},
	{name: "cuPointerGetAttributes", args: "n:u attrs:p data:p ptr:q"},

	{name: "cuModuleLoadDataEx", args: "pmod:p image:p nopts:u opts:p vals:p"},
	{name: "cuModuleUnload", args: "mod:h"},
	{name: "cuModuleGetFunction", args: "pfn:p mod:h name:p"},
	{name: "cuFuncGetAttribute", args: "pi:w attr:i hfunc:h"},
	{name: "cuLaunchKernel", args: "hfunc:h gx:u gy:u gz:u bx:u by:u bz:u shmem:u stream:h params:p extra:p"},
}

type arg struct{ name, kind string }

func parseArgs(s string) []arg {
	var out []arg
	for _, f := range strings.Fields(s) {
		n, k, ok := strings.Cut(f, ":")
		if !ok {
			panic("bad arg " + f)
		}
		out = append(out, arg{n, k})
	}
	return out
}

func isOut(k string) bool { return k == "o" || k == "w" }

var goType = map[string]string{"v": "unsafe.Pointer", "p": "unsafe.Pointer", "h": "uintptr", "i": "int32", "u": "uint32", "q": "uint64"}
var cType = map[string]string{"v": "void*", "p": "void*", "h": "uintptr_t", "i": "int", "u": "unsigned int", "q": "unsigned long long",
	"o": "unsigned long long*", "w": "unsigned int*"}
var cgoConv = map[string]string{"v": "%s", "p": "%s", "h": "C.uintptr_t(%s)", "i": "C.int(%s)", "u": "C.uint(%s)", "q": "C.ulonglong(%s)"}

func symConst(name string) string { return "sym_" + name }

// sig describes one entry's Go and C shapes.
type sig struct {
	args  []arg
	ins   []arg // the arguments the Go function takes
	nouts int
}

func newSig(e entry) sig {
	s := sig{args: parseArgs(e.args)}
	for _, a := range s.args {
		if isOut(a.kind) {
			s.nouts++
		} else {
			s.ins = append(s.ins, a)
		}
	}
	if s.nouts > 2 {
		panic(e.name + ": at most 2 outputs")
	}
	return s
}

func (s sig) goParams() string {
	var b []string
	for _, a := range s.ins {
		b = append(b, a.name+" "+goType[a.kind])
	}
	return strings.Join(b, ", ")
}

func (s sig) goNames() string {
	var b []string
	for _, a := range s.ins {
		b = append(b, a.name)
	}
	return strings.Join(b, ", ")
}

// goResults is the result list: "Result" or "(uint64, Result)" etc.
func (s sig) goResults() string {
	if s.nouts == 0 {
		return "Result"
	}
	return "(" + strings.Repeat("uint64, ", s.nouts) + "Result)"
}

// zeroRet returns the "no symbol" return statement operands.
func (s sig) noSym() string {
	return strings.Repeat("0, ", s.nouts) + "resultNoSymbol"
}

// outVars names the output values o0, o1.
func (s sig) outVars() []string {
	var v []string
	for i := 0; i < s.nouts; i++ {
		v = append(v, fmt.Sprintf("o%d", i))
	}
	return v
}

func prefixed(pre string, rest string) string {
	if rest == "" {
		return pre
	}
	return pre + ", " + rest
}

// header starts every generated file, ahead of any build constraint, in the
// form tools recognise (go/ast.IsGenerated, linters, code review).
const header = "// Code generated by gen_calls.go; DO NOT EDIT.\n\n"

func main() {
	writeSyms()
	writePurego()
	writeCgo()
}

func emit(file string, b *bytes.Buffer) {
	src, err := format.Source(b.Bytes())
	if err != nil {
		os.WriteFile(file+".broken", b.Bytes(), 0o644)
		panic(fmt.Sprintf("%s: %v", file, err))
	}
	if err := os.WriteFile(file, src, 0o644); err != nil {
		panic(err)
	}
}

func writeSyms() {
	var b bytes.Buffer
	b.WriteString(header + "package cuda\n\n")
	b.WriteString("// Indexes into fns and symNames, one per driver entry point.\nconst (\n")
	for i, e := range table {
		if i == 0 {
			fmt.Fprintf(&b, "\t%s = iota\n", symConst(e.name))
		} else {
			fmt.Fprintf(&b, "\t%s\n", symConst(e.name))
		}
	}
	b.WriteString("\tnumSyms\n)\n\n")
	b.WriteString("// symNames lists, per entry point, the symbols tried with dlsym in order.\nvar symNames = [numSyms][]string{\n")
	for _, e := range table {
		syms := e.syms
		if syms == nil {
			syms = []string{e.name}
		}
		q := make([]string, len(syms))
		for i, s := range syms {
			q[i] = fmt.Sprintf("%q", s)
		}
		fmt.Fprintf(&b, "\t%s: {%s},\n", symConst(e.name), strings.Join(q, ", "))
	}
	b.WriteString("}\n")
	emit("zsyms.go", &b)
}

func writePurego() {
	var b bytes.Buffer
	b.WriteString(header + "//go:build !cgo\n\npackage cuda\n\n")
	b.WriteString("import (\n\t\"runtime\"\n\t\"unsafe\"\n\n\t\"github.com/ebitengine/purego\"\n)\n\n")
	b.WriteString("var _ unsafe.Pointer\n\n")
	for _, e := range table {
		sg := newSig(e)
		// Output variables live in Go memory here (SyscallN's
		// go:uintptrescapes keeps them on the heap during the call).
		var decl, conv []string
		oi := 0
		byValue := ""
		for _, a := range sg.args {
			switch a.kind {
			case "v":
				if byValue != "" {
					panic(e.name + ": at most one by-value struct")
				}
				byValue = a.name
			case "o":
				decl = append(decl, fmt.Sprintf("var o%d uint64", oi))
				conv = append(conv, fmt.Sprintf("uintptr(unsafe.Pointer(&o%d))", oi))
				oi++
			case "w":
				decl = append(decl, fmt.Sprintf("var o%d uint32", oi))
				conv = append(conv, fmt.Sprintf("uintptr(unsafe.Pointer(&o%d))", oi))
				oi++
			default:
				conv = append(conv, "uintptr("+a.name+")")
			}
		}
		var rets []string
		for i, v := range sg.outVars() {
			if sg.args[outIndex(sg, i)].kind == "w" {
				rets = append(rets, "uint64("+v+")")
			} else {
				rets = append(rets, v)
			}
		}
		if byValue != "" {
			// The argument words pass through a slice, not SyscallN's own
			// parameters, so go:uintptrescapes does not move the outputs
			// to the heap: allocate them there, where they cannot move
			// when the stack grows before the call.
			for i := range decl {
				decl[i] = strings.Replace(strings.Replace(decl[i], "var ", "", 1), " uint", " := new(uint", 1) + ")"
			}
			for i, c := range conv {
				conv[i] = strings.Replace(c, "(&o", "(o", 1)
			}
			for i, r := range rets {
				if strings.HasPrefix(r, "uint64(") {
					rets[i] = strings.Replace(r, "(o", "(*o", 1)
				} else {
					rets[i] = "*" + r
				}
			}
		}
		call := prefixed("fn", strings.Join(conv, ", "))
		if byValue != "" {
			// The struct's words follow the register arguments as the
			// C ABI places them (byValue64).
			call = fmt.Sprintf("fn, byValue64([]uintptr{%s}, %s)...", strings.Join(conv, ", "), byValue)
		}
		ret := func(r string) string { return strings.Join(append(append([]string{}, rets...), r), ", ") }
		zeros := strings.Repeat("0, ", sg.nouts)

		fmt.Fprintf(&b, "func %s(%s) %s {\n", e.name, sg.goParams(), sg.goResults())
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn %s\n\t}\n", symConst(e.name), sg.noSym())
		for _, d := range decl {
			fmt.Fprintf(&b, "\t%s\n", d)
		}
		fmt.Fprintf(&b, "\tr, _, _ := purego.SyscallN(%s)\n\treturn %s\n}\n\n", call, ret("Result(int32(r))"))

		fmt.Fprintf(&b, "func %s_ctx(%s) %s {\n", e.name, prefixed("ctx uintptr", sg.goParams()), sg.goResults())
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn %s\n\t}\n", symConst(e.name), sg.noSym())
		for _, d := range decl {
			fmt.Fprintf(&b, "\t%s\n", d)
		}
		b.WriteString("\truntime.LockOSThread()\n\tprev, r := enterCtx(ctx)\n\tif r == Success {\n")
		fmt.Fprintf(&b, "\t\tr0, _, _ := purego.SyscallN(%s)\n\t\tr = Result(int32(r0))\n\t\tleaveCtx(prev)\n\t}\n", call)
		fmt.Fprintf(&b, "\truntime.UnlockOSThread()\n\treturn %s\n}\n\n", ret("r"))

		fmt.Fprintf(&b, "func %s_auto(%s) %s {\n", e.name, prefixed("ctx uintptr, direct bool", sg.goParams()), sg.goResults())
		outs := strings.Join(sg.outVars(), ", ")
		if sg.nouts == 0 {
			fmt.Fprintf(&b, "\tif direct {\n\t\tif r := %s(%s); !wrongContext(ctx, r) {\n\t\t\treturn r\n\t\t}\n\t}\n", e.name, sg.goNames())
		} else {
			fmt.Fprintf(&b, "\tif direct {\n\t\tif %s, r := %s(%s); !wrongContext(ctx, r) {\n\t\t\treturn %s, r\n\t\t}\n\t}\n", outs, e.name, sg.goNames(), outs)
		}
		_ = zeros
		fmt.Fprintf(&b, "\treturn %s_ctx(%s)\n}\n\n", e.name, prefixed("ctx", sg.goNames()))
	}
	emit("zcalls_purego.go", &b)
}

// outIndex returns the position in sg.args of output number i.
func outIndex(sg sig, i int) int {
	n := 0
	for j, a := range sg.args {
		if isOut(a.kind) {
			if n == i {
				return j
			}
			n++
		}
	}
	panic("no output")
}

func writeCgo() {
	var b bytes.Buffer
	b.WriteString(header + "//go:build cgo\n\npackage cuda\n\n")
	b.WriteString("/*\n#include <stdint.h>\n\n")
	b.WriteString(`// The trampolines call a function pointer that purego.Dlsym resolved, so
// the driver is still loaded at run time; only the call itself is cgo.
typedef int (*dlb_getcur_fn)(void**);
typedef int (*dlb_setcur_fn)(void*);

// dlb_keep is the context that may stay current on a thread that had none
// (see keepCtx in context.go): device 0's primary context.
static uintptr_t dlb_keep;
static void dlb_set_keep(uintptr_t ctx) { __atomic_store_n(&dlb_keep, ctx, __ATOMIC_RELAXED); }

// DLB_NONE as *prev: the thread had no context, take ours off again.
#define DLB_NONE ((void*)1)

// dlb_enter makes ctx current on this OS thread. *prev receives what to
// restore afterwards: a foreign context that was current; DLB_NONE when the
// thread had none and ctx is not dlb_keep; NULL when there is nothing to
// undo (ctx was current, or it is dlb_keep, which then stays so that the
// next call finds it there).
static int dlb_enter(uintptr_t getcur, uintptr_t setcur, uintptr_t ctx, void** prev) {
	void* cur = 0;
	int r = ((dlb_getcur_fn)getcur)(&cur);
	*prev = 0;
	if (r != 0) return r;
	if (cur == (void*)ctx) return 0;
	r = ((dlb_setcur_fn)setcur)((void*)ctx);
	if (r == 0) *prev = cur ? cur : (ctx == __atomic_load_n(&dlb_keep, __ATOMIC_RELAXED) ? 0 : DLB_NONE);
	return r;
}

static void dlb_leave(uintptr_t setcur, void* prev) {
	if (prev == DLB_NONE) ((dlb_setcur_fn)setcur)(0);
	else if (prev) ((dlb_setcur_fn)setcur)(prev);
}

// dlb_wrong_context: whether result r of a call made direct may be the
// driver's answer to a call made in another context than its stream's or
// event's (see wrongContext in context.go).
static int dlb_wrong_context(uintptr_t getcur, uintptr_t ctx, int r) {
	void* cur = 0;
	if (r == 201) return 1;
	if (r != 1 && r != 400) return 0;
	return ((dlb_getcur_fn)getcur)(&cur) == 0 && cur != (void*)ctx;
}

// Calls with output parameters return them with the result: the outputs
// are C locals, so the Go caller passes no pointer for them.
typedef struct { int r; unsigned long long o0, o1; } dlb_ret;

// A 64-byte struct passed by value (CUipcEventHandle).
typedef struct { char bytes[64]; } dlb_b64;

`)
	for _, e := range table {
		sg := newSig(e)
		var inParams, inNames, fnTypes, callArgs []string
		oi := 0
		var locals []string
		for _, a := range sg.args {
			switch a.kind {
			case "o":
				locals = append(locals, fmt.Sprintf("unsigned long long o%d = 0;", oi))
				callArgs = append(callArgs, fmt.Sprintf("&o%d", oi))
				fnTypes = append(fnTypes, "unsigned long long*")
				oi++
			case "w":
				locals = append(locals, fmt.Sprintf("unsigned int o%d = 0;", oi))
				callArgs = append(callArgs, fmt.Sprintf("&o%d", oi))
				fnTypes = append(fnTypes, "unsigned int*")
				oi++
			case "v":
				inParams = append(inParams, "void* "+a.name)
				inNames = append(inNames, a.name)
				callArgs = append(callArgs, "*(dlb_b64*)"+a.name)
				fnTypes = append(fnTypes, "dlb_b64")
			case "h":
				inParams = append(inParams, "uintptr_t "+a.name)
				inNames = append(inNames, a.name)
				callArgs = append(callArgs, "(void*)"+a.name)
				fnTypes = append(fnTypes, "void*")
			default:
				inParams = append(inParams, cType[a.kind]+" "+a.name)
				inNames = append(inNames, a.name)
				callArgs = append(callArgs, a.name)
				fnTypes = append(fnTypes, cType[a.kind])
			}
		}
		ft := strings.Join(fnTypes, ", ")
		if ft == "" {
			ft = "void"
		}
		rt := "int"
		if sg.nouts > 0 {
			rt = "dlb_ret"
		}
		params := strings.Join(inParams, ", ")
		names := strings.Join(inNames, ", ")
		// plain
		fmt.Fprintf(&b, "static %s dlb_%s(%s) {\n", rt, e.name, prefixed("uintptr_t fn", params))
		call := fmt.Sprintf("((int (*)(%s))fn)(%s)", ft, strings.Join(callArgs, ", "))
		if sg.nouts == 0 {
			fmt.Fprintf(&b, "\treturn %s;\n}\n", call)
		} else {
			b.WriteString("\tdlb_ret res = {0, 0, 0};\n")
			for _, l := range locals {
				fmt.Fprintf(&b, "\t%s\n", l)
			}
			fmt.Fprintf(&b, "\tres.r = %s;\n", call)
			for i := 0; i < sg.nouts; i++ {
				fmt.Fprintf(&b, "\tres.o%d = o%d;\n", i, i)
			}
			b.WriteString("\treturn res;\n}\n")
		}
		// ctx
		fmt.Fprintf(&b, "static %s dlb_%s_ctx(%s) {\n\tvoid* prev;\n", rt, e.name,
			prefixed("uintptr_t gc, uintptr_t sc, uintptr_t ctx, uintptr_t fn", params))
		if sg.nouts == 0 {
			fmt.Fprintf(&b, "\tint r = dlb_enter(gc, sc, ctx, &prev);\n\tif (r != 0) return r;\n\tr = dlb_%s(%s);\n\tdlb_leave(sc, prev);\n\treturn r;\n}\n",
				e.name, prefixed("fn", names))
		} else {
			fmt.Fprintf(&b, "\tdlb_ret res = {0, 0, 0};\n\tres.r = dlb_enter(gc, sc, ctx, &prev);\n\tif (res.r != 0) return res;\n\tres = dlb_%s(%s);\n\tdlb_leave(sc, prev);\n\treturn res;\n}\n",
				e.name, prefixed("fn", names))
		}
		// auto
		fmt.Fprintf(&b, "static %s dlb_%s_auto(%s) {\n\tif (direct) {\n", rt, e.name,
			prefixed("uintptr_t gc, uintptr_t sc, uintptr_t ctx, int direct, uintptr_t fn", params))
		if sg.nouts == 0 {
			fmt.Fprintf(&b, "\t\tint r = dlb_%s(%s);\n\t\tif (!dlb_wrong_context(gc, ctx, r)) return r;\n", e.name, prefixed("fn", names))
		} else {
			fmt.Fprintf(&b, "\t\tdlb_ret res = dlb_%s(%s);\n\t\tif (!dlb_wrong_context(gc, ctx, res.r)) return res;\n", e.name, prefixed("fn", names))
		}
		fmt.Fprintf(&b, "\t}\n\treturn dlb_%s_ctx(%s);\n}\n\n", e.name, prefixed("gc, sc, ctx, fn", names))
	}
	b.WriteString("*/\nimport \"C\"\n\nimport \"unsafe\"\n\nvar _ unsafe.Pointer\n\n")
	for _, e := range table {
		sg := newSig(e)
		var conv []string
		for _, a := range sg.ins {
			conv = append(conv, fmt.Sprintf(cgoConv[a.kind], a.name))
		}
		c := strings.Join(conv, ", ")
		ret := func(call string) string {
			if sg.nouts == 0 {
				return "\treturn Result(" + call + ")\n"
			}
			out := "\tres := " + call + "\n\treturn "
			for i := 0; i < sg.nouts; i++ {
				out += fmt.Sprintf("uint64(res.o%d), ", i)
			}
			return out + "Result(res.r)\n"
		}
		head := func(name, params string) {
			fmt.Fprintf(&b, "func %s(%s) %s {\n", name, params, sg.goResults())
			fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn %s\n\t}\n", symConst(e.name), sg.noSym())
		}
		head(e.name, sg.goParams())
		b.WriteString(ret(fmt.Sprintf("C.dlb_%s(%s)", e.name, prefixed("C.uintptr_t(fn)", c))))
		b.WriteString("}\n\n")

		head(e.name+"_ctx", prefixed("ctx uintptr", sg.goParams()))
		b.WriteString(ret(fmt.Sprintf("C.dlb_%s_ctx(%s)", e.name,
			prefixed("C.uintptr_t(fns[sym_cuCtxGetCurrent]), C.uintptr_t(fns[sym_cuCtxSetCurrent]), C.uintptr_t(ctx), C.uintptr_t(fn)", c))))
		b.WriteString("}\n\n")

		head(e.name+"_auto", prefixed("ctx uintptr, direct bool", sg.goParams()))
		b.WriteString(ret(fmt.Sprintf("C.dlb_%s_auto(%s)", e.name,
			prefixed("C.uintptr_t(fns[sym_cuCtxGetCurrent]), C.uintptr_t(fns[sym_cuCtxSetCurrent]), C.uintptr_t(ctx), cbool(direct), C.uintptr_t(fn)", c))))
		b.WriteString("}\n\n")
	}
	b.WriteString("func cbool(b bool) C.int {\n\tif b {\n\t\treturn 1\n\t}\n\treturn 0\n}\n\n")
	b.WriteString("// setKeepCtx names the context that may stay current on a thread that had\n// none (see keepCtx).\nfunc setKeepCtx(ctx uintptr) { C.dlb_set_keep(C.uintptr_t(ctx)) }\n")
	emit("zcalls_cgo.go", &b)
}
