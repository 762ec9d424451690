// Package pybridge is the Go side of dlbridge's Python bridge, for authors
// of c-shared libraries that hand tensors to Python and take them back
// without copies.
//
// What it gives you:
//
//   - Handles (Table, Handle): integers that name Go objects C code holds,
//     with a generation so a stale handle never names a new object. C never
//     sees a Go pointer, so the cgo pointer rules hold.
//   - A fence (Fence): every //export function runs its body inside it; an
//     error or a panic becomes a Code (BufferError, TypeError, ValueError,
//     MemoryError, RuntimeError, IndexError) plus a message the caller reads
//     with dlb_last_error() on the same thread. No panic crosses into C.
//   - Tensors: NewTensor registers a zerocopy.View under a handle, Borrow
//     and Return use it safely from any thread, CloseTensor drops it.
//   - DLPack: Export answers a __dlpack__ request (versioned or legacy,
//     dl_device, copy, and the consumer's stream, ordered after the write
//     pending on the view by an event, never a device-wide sync); Import
//     takes a DLManagedTensor[Versioned]* from Python, with the producer's
//     deleter run holding the GIL (NumPy before 1.25 needs it) and never
//     after the interpreter has gone; a CUDA import is pending on the work
//     stream, a non-blocking stream of dlbridge's own that the producer was
//     asked to order its writes before.
//   - Operations on memory, each a zerocopy call: Allocate (C heap, the
//     device's stream-ordered pool, the pinned pool), Arange, Fill, Sum,
//     CopyInto and CopyToDevice (any devices, any strides, converting
//     dtypes; on a stream of the caller's), PinMemory, pool statistics.
//
// The C parts (pyapi.c) use CPython functions looked up at run time with
// dlsym, so the library links against no libpython and serves any CPython
// 3.9+. Package capi holds libdlbridge's C ABI on top of this package;
// import it blank from your own main package to ship one library with
// dlbridge's ABI and your own exported functions:
//
//	package main
//
//	import "C"
//	import (
//		"github.com/dlbridge/dlbridge/pybridge"
//		_ "github.com/dlbridge/dlbridge/pybridge/capi"
//	)
//
//	//export mylib_scale
//	func mylib_scale(h C.uint64_t, f C.double) C.int32_t {
//		return C.int32_t(pybridge.Fence(func() error {
//			t, err := pybridge.Borrow(pybridge.Handle(h))
//			if err != nil {
//				return err
//			}
//			defer t.Return()
//			return scaleInPlace(t.View, float64(f))
//		}))
//	}
//
//	func main() {}
//
// examples/userlib is that example worked out, with its Python side.
package pybridge
