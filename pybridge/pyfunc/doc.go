// Package pyfunc lets a Go author hand ordinary Go functions to Python
// users: registered under a dotted name, they appear as
// dlbridge.ops.<ns>.<name> once the library that links them is loaded, and
// take tensors from NumPy, PyTorch, CuPy, JAX or dlbridge without copies.
//
// A function is registered with a schema, the signature Python users read,
// as torch.library registers "ns::name(Tensor x) -> Tensor":
//
//	func init() {
//		pyfunc.Register("mylib.scale(out: float32 [N] writable, x: float32 [N], factor=2.0)", Scale,
//			"out = x * factor, elementwise.")
//	}
//
//	// Scale writes x * factor into out, on the caller's CUDA stream s (nil
//	// for host tensors).
//	func Scale(s *cuda.Stream, out, x *zerocopy.View, factor float32) error { ... }
//
// The schema names the parameters in the Go function's order (a
// *cuda.Stream parameter is not named: it receives the caller's stream).
// A tensor parameter (*zerocopy.View) states what it accepts after a colon,
// a zerocopy.Want in its notation (zerocopy.ParseWant):
//
//	float32 | float64    the dtype, or a set of them (dlpack.ParseDataType names)
//	[N, K]  [N, 3]  [*]  the shape: a named dimension binds across parameters,
//	                     a number is fixed, * is any extent; no brackets: any ndim
//	C  F                 C- or Fortran-contiguous
//	cpu  cuda  cuda:0    memory the host reads (cpu, pinned, managed), memory
//	                     CUDA kernels read (device, managed), of one device;
//	                     none: any
//	writable             refuses read-only tensors
//
// A scalar parameter (bool, int and uint of any width, float32, float64,
// string) is named alone, or with a default as Python writes it
// ("factor=2.0", "flag=True", "mode='fast'"). Results are tensors and
// scalars, in order, optionally followed by an error.
//
// Every check runs before the body, and the tensors' are zerocopy's (a
// Signature compiled at registration): a mismatch is a TypeError (dtype,
// device, kind of value) or a ValueError (shape, order, read-only) that
// names the function, the argument, what it expects and what came, and
// every mismatch of that argument, with the value a named dimension took
// from another argument, as a Go caller of zerocopy.Want reads it:
//
//	mylib.scale: argument x: want float32 [N] (N=16 from out); got float32 [15] C/F cpu writable: shape[0] (15 != N=16 from out)
//
// An argument that shares memory with a writable one is read from a copy
// taken before the body runs (as NumPy's ufuncs make overlapping arguments
// right), so a body never reads what it already wrote; two writable
// arguments that share memory are a ValueError naming both. A stream= of
// another device than the call's CUDA tensors is a ValueError too.
//
// On CUDA the body runs on the caller's stream: PyTorch's or CuPy's current
// stream, or the stream= the caller passes. Writes pending on the arguments
// are ordered before it with events (never a host synchronisation, so CUDA
// graph capture survives the call), and the writable arguments and the
// results are left pending on it. All CUDA tensors of a call are on one
// device.
//
// Errors made with TypeErrorf, ValueErrorf, BufferErrorf, MemoryErrorf or
// RuntimeErrorf are raised as that Python exception; a panic in the body
// becomes a RuntimeError with its message, and the process goes on.
//
// Arguments are borrowed for the call: a view the body keeps after it
// returns (a Retain, or a result that is a view of an argument) keeps the
// Python object's memory alive until it is closed; one derived from an
// argument and kept without Retain fails with zerocopy.ErrClosed.
//
// One Go runtime per process: a registered package is linked into one
// c-shared library with dlbridge's C ABI (`dlbridge build -o lib.so PKG...`,
// as xcaddy builds Caddy with plugins), which Python loads with
// dlbridge.load_library or DLBRIDGE_LIB.
package pyfunc
