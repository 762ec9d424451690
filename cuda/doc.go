// Package cuda is the CUDA driver API for Go, loaded at run time: no CUDA
// toolkit at build time, no cgo needed (purego), and a clear ErrNoDriver
// where no driver exists.
//
// It covers what moving tensors between Go and other CUDA libraries needs:
// devices, the primary context of each device (the one the CUDA runtime,
// PyTorch, CuPy and JAX use, so pointers and streams are shared), device,
// stream-ordered, managed and pinned host memory, registering existing Go
// memory, memsets, copies (host<->device, device<->device, peer, 2D and 3D
// pitched; synchronous or on a stream), streams, events, pointer
// attributes, modules (PTX or cubin) and kernel launches, plus a few
// built-in kernels (fill, iota, scale, a spinning writer for ordering tests
// and a strided 2-d copy).
//
// # Use
//
//	ctx, err := cuda.Retain(0) // device 0's primary context
//	if errors.Is(err, cuda.ErrNoDriver) {
//		// no CUDA here: fall back to the CPU
//	}
//	defer ctx.Release()
//	s, _ := ctx.NewStream(cuda.StreamNonBlocking, 0)
//	defer s.Destroy()
//	p, _ := ctx.MemAlloc(4 << 20)
//	defer ctx.MemFree(p)
//	k, _ := ctx.LoadKernels()
//	k.IotaF32(s, p, 1<<20, 0, 1)
//	out := make([]float32, 1<<20)
//	s.MemcpyDtoHAsync(cuda.SliceBytes(out), p) // pageable: done on return
//	err = s.Synchronize()                      // kernel errors surface here
//
// # Loading
//
// Importing the package does nothing. The first call that needs the driver
// opens libcuda.so.1 (or the path in DLBRIDGE_LIBCUDA), resolves the entry
// points it uses by their current versioned names (cuMemAlloc_v2,
// cuMemcpyHtoDAsync_v2, cuDevicePrimaryCtxRelease_v2, ...) and runs
// cuInit(0), once. If any of that fails, every call returns an error
// matching ErrNoDriver; nothing panics.
//
// # Errors
//
// A failed driver call returns an *Error with the CUresult, its name and
// message from cuGetErrorName/cuGetErrorString, the entry point and the
// arguments. The Result constants are sentinels: errors.Is(err,
// cuda.ErrOutOfMemory). Checks made here before calling the driver (a nil
// or destroyed handle, a null pointer, a negative size, an unknown flag)
// return the same *Error with the code the driver would have used,
// ErrInvalidHandle or ErrInvalidValue mostly, and say what was wrong.
//
// # Threads and contexts
//
// Every method works from any goroutine, without runtime.LockOSThread.
// The driver keeps a current context per OS thread and Go moves goroutines
// between threads, so the package handles it per call:
//
//   - Calls on an explicit stream or event (async copies and memsets,
//     launches, record, wait, query, synchronize) and pointer queries go
//     straight to the driver: it uses the object's own context. Should the
//     driver answer CUDA_ERROR_INVALID_CONTEXT, the call is repeated with
//     the context made current. This is the hot path: one driver call.
//   - Calls that mean "the current context" (allocation, synchronous
//     copies and memsets, stream/event/module creation, the legacy and
//     per-thread default streams) check the thread's current context with
//     cuCtxGetCurrent and make theirs current if it differs, all within one
//     locked stretch on one OS thread (one C trampoline in cgo builds).
//     A thread that had no context keeps ours afterwards, so the next call
//     there pays only the check; a thread that had another context (a
//     Python thread calling into a c-shared library, say) gets it back.
//
// # Binding cost
//
// Every driver entry point is a function pointer from dlsym. Built without
// cgo the calls go through purego.SyscallN (never purego's reflection-based
// RegisterLibFunc); built with cgo (as c-shared libraries are) they go
// through a C trampoline per entry point that calls the same pointer, which
// costs about as much as a direct cgo call. The two builds share one API and
// one test suite. bench/bindcost compares both with RegisterLibFunc and
// direct cgo on the same calls.
//
// # Testing without a GPU
//
// testdata/fakecuda/fakecuda.c is a fake libcuda.so.1 over host memory: the
// package's tests build it with gcc and point DLBRIDGE_LIBCUDA at it, so the
// real binding code runs in CI, against bounds-checked allocations, ordered
// stream queues that never run early (a missing wait shows as stale data),
// events, a PTX loader that knows the built-in kernels, and error injection.
// With DLBRIDGE_GPU=1 the same tests run against the real driver.
package cuda
