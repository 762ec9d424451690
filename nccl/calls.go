package nccl

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// The entry points, indexed by the sym_ constants. Every call passes
// through call(): purego.SyscallN on the dlsym'd pointer, which needs no
// cgo and costs ~0.2 us, next to the 10+ us of the cheapest collective.
const (
	sym_ncclGetVersion = iota
	sym_ncclGetUniqueId
	sym_ncclGetErrorString
	sym_ncclGetLastError
	sym_ncclCommInitRankScalable
	sym_ncclCommSplit
	sym_ncclCommFinalize
	sym_ncclCommDestroy
	sym_ncclCommAbort
	sym_ncclCommGetAsyncError
	sym_ncclCommCount
	sym_ncclCommCuDevice
	sym_ncclCommUserRank
	sym_ncclGroupStart
	sym_ncclGroupEnd
	sym_ncclAllReduce
	sym_ncclBroadcast
	sym_ncclReduce
	sym_ncclAllGather
	sym_ncclReduceScatter
	sym_ncclSend
	sym_ncclRecv
	numSyms
)

var symNames = [numSyms]string{
	"ncclGetVersion", "ncclGetUniqueId", "ncclGetErrorString", "ncclGetLastError",
	"ncclCommInitRankScalable", "ncclCommSplit", "ncclCommFinalize", "ncclCommDestroy",
	"ncclCommAbort", "ncclCommGetAsyncError", "ncclCommCount", "ncclCommCuDevice",
	"ncclCommUserRank", "ncclGroupStart", "ncclGroupEnd", "ncclAllReduce", "ncclBroadcast",
	"ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv",
}

// required: a library without one of these is not used at all. All of
// them exist since NCCL 2.23, ncclCommInitRankScalable the newest:
// communicators are made with it because it takes the unique id by
// pointer, where ncclCommInitRank(Config) take the 128-byte struct by
// value, which purego cannot pass on amd64 (it would need 16 stack words;
// purego passes at most 9).
var required = [...]int{
	sym_ncclGetVersion, sym_ncclGetUniqueId, sym_ncclGetErrorString, sym_ncclCommInitRankScalable,
	sym_ncclCommFinalize, sym_ncclCommDestroy, sym_ncclCommAbort, sym_ncclCommGetAsyncError,
	sym_ncclCommCount, sym_ncclCommCuDevice, sym_ncclCommUserRank, sym_ncclGroupStart, sym_ncclGroupEnd,
	sym_ncclAllReduce, sym_ncclBroadcast, sym_ncclReduce, sym_ncclAllGather, sym_ncclReduceScatter,
	sym_ncclSend, sym_ncclRecv,
}

// call calls entry point sym; a missing optional symbol answers
// resultNoSymbol. Pointer arguments must be converted in the call
// expression (uintptr(unsafe.Pointer(&x))): go:uintptrescapes then moves
// what they point at to the heap and keeps it there for the call, as it
// does for purego.SyscallN itself; a conversion made earlier would leave
// a stack address that a stack growth can invalidate.
//
//go:uintptrescapes
func call(sym int, args ...uintptr) Result {
	fn := fns[sym]
	if fn == 0 {
		return resultNoSymbol
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}

// callStr calls an entry point that returns a C string.
//
//go:uintptrescapes
func callStr(sym int, args ...uintptr) string {
	fn := fns[sym]
	if fn == 0 {
		return ""
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return goString(r)
}

// goString copies a NUL-terminated C string (NCCL's static or
// thread-local message) into Go memory.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p)) // C memory: the GC never moves or frees it
	var n int
	for n < 1<<16 && *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}
