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
//	                                   CUDA_ERROR_INVALID_CONTEXT
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
	{name: "cuDeviceGetAttribute", args: "pi:p attrib:i dev:i"},
	{name: "cuDeviceTotalMem_v2", args: "bytes:p dev:i"},
	{name: "cuDeviceGetPCIBusId", args: "busid:p length:i dev:i"},
	{name: "cuDeviceGetUuid", syms: []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}, args: "uuid:p dev:i"},
	{name: "cuDeviceCanAccessPeer", args: "can:p dev:i peer:i"},

	{name: "cuDevicePrimaryCtxRetain", args: "pctx:p dev:i"},
	{name: "cuDevicePrimaryCtxRelease_v2", args: "dev:i"},
	{name: "cuCtxGetCurrent", args: "pctx:p"},
	{name: "cuCtxSetCurrent", args: "hctx:h"},
	{name: "cuCtxPushCurrent_v2", args: "hctx:h"},
	{name: "cuCtxPopCurrent_v2", args: "pctx:p"},
	{name: "cuCtxGetDevice", args: "dev:p"},
	{name: "cuCtxSynchronize", args: ""},
	{name: "cuCtxEnablePeerAccess", args: "peer:h flags:u"},
	{name: "cuCtxGetStreamPriorityRange", args: "least:p greatest:p"},

	{name: "cuMemGetInfo_v2", args: "free:p total:p"},
	{name: "cuMemAlloc_v2", args: "pdptr:p bytes:q"},
	{name: "cuMemFree_v2", args: "dptr:q"},
	{name: "cuMemAllocManaged", args: "pdptr:p bytes:q flags:u"},
	{name: "cuMemAllocAsync", args: "pdptr:p bytes:q stream:h"},
	{name: "cuMemFreeAsync", args: "dptr:q stream:h"},
	{name: "cuMemHostAlloc", args: "pp:p bytes:q flags:u"},
	{name: "cuMemFreeHost", args: "p:p"},
	{name: "cuMemHostRegister_v2", args: "p:p bytes:q flags:u"},
	{name: "cuMemHostUnregister", args: "p:p"},
	{name: "cuMemHostGetDevicePointer_v2", args: "pdptr:p p:p flags:u"},
	{name: "cuMemGetAddressRange_v2", args: "pbase:p psize:p dptr:q"},

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

	{name: "cuEventCreate", args: "pevent:p flags:u"},
	{name: "cuEventDestroy_v2", args: "event:h"},
	{name: "cuEventRecord", args: "event:h stream:h"},
	{name: "cuEventSynchronize", args: "event:h"},
	{name: "cuEventQuery", args: "event:h"},
	{name: "cuEventElapsedTime", syms: []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, args: "ms:p start:h end:h"},

	{name: "cuPointerGetAttribute", args: "data:p attr:i ptr:q"},
	{name: "cuPointerGetAttributes", args: "n:u attrs:p data:p ptr:q"},

	{name: "cuModuleLoadDataEx", args: "pmod:p image:p nopts:u opts:p vals:p"},
	{name: "cuModuleUnload", args: "mod:h"},
	{name: "cuModuleGetFunction", args: "pfn:p mod:h name:p"},
	{name: "cuFuncGetAttribute", args: "pi:p attr:i hfunc:h"},
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

var goType = map[string]string{"p": "unsafe.Pointer", "h": "uintptr", "i": "int32", "u": "uint32", "q": "uint64"}
var cType = map[string]string{"p": "void*", "h": "uintptr_t", "i": "int", "u": "unsigned int", "q": "unsigned long long"}
var cgoConv = map[string]string{"p": "%s", "h": "C.uintptr_t(%s)", "i": "C.int(%s)", "u": "C.uint(%s)", "q": "C.ulonglong(%s)"}

func symConst(name string) string { return "sym_" + name }

func goParams(args []arg) string {
	var b []string
	for _, a := range args {
		b = append(b, a.name+" "+goType[a.kind])
	}
	return strings.Join(b, ", ")
}

func goNames(args []arg) string {
	var b []string
	for _, a := range args {
		b = append(b, a.name)
	}
	return strings.Join(b, ", ")
}

func prefixed(pre string, rest string) string {
	if rest == "" {
		return pre
	}
	return pre + ", " + rest
}

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
	b.WriteString("//go:build !cgo\n\n" + header + "package cuda\n\n")
	b.WriteString("import (\n\t\"runtime\"\n\t\"unsafe\"\n\n\t\"github.com/ebitengine/purego\"\n)\n\n")
	b.WriteString("var _ unsafe.Pointer\n\n")
	for _, e := range table {
		args := parseArgs(e.args)
		var conv []string
		for _, a := range args {
			conv = append(conv, "uintptr("+a.name+")")
		}
		call := prefixed("fn", strings.Join(conv, ", "))
		fmt.Fprintf(&b, "func %s(%s) Result {\n", e.name, goParams(args))
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn resultNoSymbol\n\t}\n", symConst(e.name))
		fmt.Fprintf(&b, "\tr, _, _ := purego.SyscallN(%s)\n\treturn Result(int32(r))\n}\n\n", call)

		fmt.Fprintf(&b, "func %s_ctx(%s) Result {\n", e.name, prefixed("ctx uintptr", goParams(args)))
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn resultNoSymbol\n\t}\n", symConst(e.name))
		b.WriteString("\truntime.LockOSThread()\n\tprev, r := enterCtx(ctx)\n\tif r == Success {\n")
		fmt.Fprintf(&b, "\t\tr0, _, _ := purego.SyscallN(%s)\n\t\tr = Result(int32(r0))\n\t\tleaveCtx(prev)\n\t}\n", call)
		b.WriteString("\truntime.UnlockOSThread()\n\treturn r\n}\n\n")

		fmt.Fprintf(&b, "func %s_auto(%s) Result {\n", e.name, prefixed("ctx uintptr, direct bool", goParams(args)))
		fmt.Fprintf(&b, "\tif direct {\n\t\tif r := %s(%s); r != ErrInvalidContext {\n\t\t\treturn r\n\t\t}\n\t}\n", e.name, goNames(args))
		fmt.Fprintf(&b, "\treturn %s_ctx(%s)\n}\n\n", e.name, prefixed("ctx", goNames(args)))
	}
	emit("zcalls_purego.go", &b)
}

func writeCgo() {
	var b bytes.Buffer
	b.WriteString("//go:build cgo\n\n" + header + "package cuda\n\n")
	b.WriteString("/*\n#include <stdint.h>\n\n")
	b.WriteString(`// The trampolines call a function pointer that purego.Dlsym resolved, so
// the driver is still loaded at run time; only the call itself is cgo.
typedef int (*dlb_getcur_fn)(void**);
typedef int (*dlb_setcur_fn)(void*);

// dlb_enter makes ctx current on this OS thread. *prev receives the context
// to restore afterwards: a foreign context that was current, or NULL when
// the thread had none (ours then stays, so the next call finds it there).
static int dlb_enter(uintptr_t getcur, uintptr_t setcur, uintptr_t ctx, void** prev) {
	void* cur = 0;
	int r = ((dlb_getcur_fn)getcur)(&cur);
	*prev = 0;
	if (r != 0) return r;
	if (cur == (void*)ctx) return 0;
	r = ((dlb_setcur_fn)setcur)((void*)ctx);
	if (r == 0) *prev = cur;
	return r;
}

static void dlb_leave(uintptr_t setcur, void* prev) {
	if (prev) ((dlb_setcur_fn)setcur)(prev);
}

`)
	for _, e := range table {
		args := parseArgs(e.args)
		var cparams, ctypes, cnames []string
		for _, a := range args {
			cparams = append(cparams, cType[a.kind]+" "+a.name)
			ctypes = append(ctypes, cType[a.kind])
			if a.kind == "h" {
				cnames = append(cnames, "(void*)"+a.name)
			} else {
				cnames = append(cnames, a.name)
			}
		}
		var fnTypes []string
		for i, t := range ctypes {
			if args[i].kind == "h" {
				t = "void*"
			}
			fnTypes = append(fnTypes, t)
		}
		ft := strings.Join(fnTypes, ", ")
		if ft == "" {
			ft = "void"
		}
		var plain []string
		for _, a := range args {
			plain = append(plain, a.name)
		}
		fmt.Fprintf(&b, "static int dlb_%s(%s) {\n\treturn ((int (*)(%s))fn)(%s);\n}\n", e.name,
			prefixed("uintptr_t fn", strings.Join(cparams, ", ")), ft, strings.Join(cnames, ", "))
		fmt.Fprintf(&b, "static int dlb_%s_ctx(%s) {\n\tvoid* prev;\n\tint r = dlb_enter(gc, sc, ctx, &prev);\n\tif (r != 0) return r;\n\tr = dlb_%s(%s);\n\tdlb_leave(sc, prev);\n\treturn r;\n}\n",
			e.name, prefixed("uintptr_t gc, uintptr_t sc, uintptr_t ctx, uintptr_t fn", strings.Join(cparams, ", ")),
			e.name, prefixed("fn", strings.Join(plain, ", ")))
		fmt.Fprintf(&b, "static int dlb_%s_auto(%s) {\n\tif (direct) {\n\t\tint r = dlb_%s(%s);\n\t\tif (r != 201) return r;\n\t}\n\treturn dlb_%s_ctx(%s);\n}\n\n",
			e.name, prefixed("uintptr_t gc, uintptr_t sc, uintptr_t ctx, int direct, uintptr_t fn", strings.Join(cparams, ", ")),
			e.name, prefixed("fn", strings.Join(plain, ", ")),
			e.name, prefixed("gc, sc, ctx, fn", strings.Join(plain, ", ")))
	}
	b.WriteString("*/\nimport \"C\"\n\nimport \"unsafe\"\n\nvar _ unsafe.Pointer\n\n")
	for _, e := range table {
		args := parseArgs(e.args)
		var conv []string
		for _, a := range args {
			conv = append(conv, fmt.Sprintf(cgoConv[a.kind], a.name))
		}
		c := strings.Join(conv, ", ")
		fmt.Fprintf(&b, "func %s(%s) Result {\n", e.name, goParams(args))
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn resultNoSymbol\n\t}\n", symConst(e.name))
		fmt.Fprintf(&b, "\treturn Result(C.dlb_%s(%s))\n}\n\n", e.name, prefixed("C.uintptr_t(fn)", c))

		fmt.Fprintf(&b, "func %s_ctx(%s) Result {\n", e.name, prefixed("ctx uintptr", goParams(args)))
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn resultNoSymbol\n\t}\n", symConst(e.name))
		fmt.Fprintf(&b, "\treturn Result(C.dlb_%s_ctx(%s))\n}\n\n", e.name,
			prefixed("C.uintptr_t(fns[sym_cuCtxGetCurrent]), C.uintptr_t(fns[sym_cuCtxSetCurrent]), C.uintptr_t(ctx), C.uintptr_t(fn)", c))

		fmt.Fprintf(&b, "func %s_auto(%s) Result {\n", e.name, prefixed("ctx uintptr, direct bool", goParams(args)))
		fmt.Fprintf(&b, "\tfn := fns[%s]\n\tif fn == 0 {\n\t\treturn resultNoSymbol\n\t}\n", symConst(e.name))
		fmt.Fprintf(&b, "\treturn Result(C.dlb_%s_auto(%s))\n}\n\n", e.name,
			prefixed("C.uintptr_t(fns[sym_cuCtxGetCurrent]), C.uintptr_t(fns[sym_cuCtxSetCurrent]), C.uintptr_t(ctx), cbool(direct), C.uintptr_t(fn)", c))
	}
	b.WriteString("func cbool(b bool) C.int {\n\tif b {\n\t\treturn 1\n\t}\n\treturn 0\n}\n")
	emit("zcalls_cgo.go", &b)
}
