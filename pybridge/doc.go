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
//     MemoryError, RuntimeError, IndexError, TimeoutError) plus a message
//     the caller reads with dlb_last_error() on the same thread. No panic
//     crosses into C.
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
//   - The glue of dlbridge.ipc (ipc.go) and dlbridge.nccl (nccl.go: worlds,
//     communicators and grouped batches as handles, the stream of each
//     operation decided once, a communicator's failure recorded per thread
//     for Python's NCCLError).
//
// The C parts (pyapi.c) use CPython functions looked up at run time with
// dlsym, so the library links against no libpython and serves any CPython
// 3.9+. Package capi holds libdlbridge's C ABI on top of this package.
//
// Go authors hand functions of their own to Python without calling this
// package: they register ordinary Go functions with package pyfunc, whose
// calls capi runs inside the fence over these handles, and link their
// packages with dlbridge's ABI into one c-shared library with dlbridge
// build (one Go runtime per process):
//
//	package mylib
//
//	func init() {
//		pyfunc.Register("mylib.scale(x: float32 [N] C cpu writable, factor=2.0)", Scale)
//	}
//
//	// Scale multiplies every element of x by factor, in place.
//	func Scale(x *zerocopy.View, factor float32) error { ... }
//
// built and called as
//
//	dlbridge build -o build/libmylib.so ./mylib
//
//	dlbridge.load_library("build/libmylib.so")
//	dlbridge.ops.mylib.scale(x)                    # NumPy, PyTorch, CuPy, ...
//
// examples/gofunc is the worked example, docs/go-functions.md the guide.
package pybridge
