// Package zerocopy gives typed, strided, zero-copy views onto memory that
// someone owns: Go slices, C or pinned host memory, device memory that came
// in through DLPack or the CUDA Array Interface.
//
// A Layout is a dtype, a shape, strides (in elements) and a byte offset: a
// value with the layout algebra (Slice, Select, Permute, Transpose, T,
// Reshape, Flatten, Squeeze, Unsqueeze, Broadcast), byte spans and
// contiguity, which never allocates for up to 6 dimensions and fails only
// for arguments that do not fit. Every loop over elements in this package
// (copies, fills, sums, conversions, typed host access, the plans the DMA
// engines and the strided-copy kernel run) goes through one simplifier,
// which drops extent-1 dimensions and merges contiguous neighbours, and one
// N-d iterator (iter.go).
//
// A View is a Layout over memory (an address and a device) plus a
// reference on an Owner that keeps the memory alive. The Owner is
// reference counted and runs its release (a DLPack deleter, cuMemFree, or
// just letting go of a Go slice) exactly once, from whichever goroutine
// drops the last reference. A view made by FromSlice, Wrap, an import or an
// allocator holds one reference; Close drops it.
//
// View operations never copy: Slice (Python's start:stop:step, negative
// steps included), Select, Permute, Transpose, T, Reshape (when the strides
// allow it), Flatten, Squeeze, Unsqueeze, Broadcast and AsReadOnly share
// the memory. Like image.SubImage, the view they return borrows the
// reference of the view it came from: it needs no Close, and it is valid
// while that view is open (then it reports ErrClosed). Retain gives a view
// a reference of its own, for one that must outlive its parent.
//
// Go memory becomes a view without a copy with FromSlice or FromBytes. Host
// memory is read and written through HostSlice (a []T for C-contiguous
// views; HostSliceRO for read-only ones), At, Set and Each for any strides,
// Copy between any two layouts, and Clone into fresh Go memory. These check
// the dtype against T, refuse memory the CPU cannot touch, and refuse
// writes to read-only views.
//
//	data := []float32{0, 1, 2, 3, 4, 5}
//	m, err := zerocopy.FromSlice(data, 2, 3) // float32[2, 3] over data
//	if err != nil { ... }
//	defer m.Close()
//	col, err := m.Select(1, -1) // the last column: float32[2], stride 3; no Close
//	if err != nil { ... }       // only for a bad index
//	x, err := zerocopy.At[float32](col, 1) // 5
//
// Memory from elsewhere comes in and goes out without copies too:
// FromDLPackVersioned and FromDLPackLegacy take over a DLPack tensor (its
// deleter runs exactly once, when the last view is closed), ToDLPack hands
// a view to a DLPack consumer, CUDAArrayInterface and ArrayInterface
// describe a view as the Python dictionaries, and FromCAI makes a view of
// one. Device memory is copied with CopyCUDA.
//
// # CUDA memory
//
// With a CUDA driver (package cuda loads it at run time; without one these
// calls fail with an error matching cuda.ErrNoDriver), AllocCUDA and
// AllocCUDAAsync make views over fresh device memory, freed when the last
// view is closed. CopyCUDA, or a Copier for control, copies between any two
// of pageable host, pinned host, device and managed memory, any strides on
// either side. Pageable host memory takes one of three transfer paths:
// PathDirect hands it to the driver as it is, PathStaged goes through the
// Copier's ring of pinned buffers, PathRegistered page-locks a buffer that
// is transferred again and again (until its owner releases it); PathAuto,
// the default, chooses by size and history, and Copier.CopyVia forces one
// and reports the path taken. VerifyCUDA checks that a view's byte span
// lies inside one allocation the driver knows, of the kind and device the
// view claims; ClassifyPointer says what the driver thinks a pointer is.
//
// Work is ordered by streams, never by synchronizing the device. A view
// remembers the stream of its last pending write (View.Stream, SetStream);
// a copy makes its stream wait for the pending writes of both sides with
// an event, and leaves the destination pending on its own stream. Host code
// calls View.Synchronize before it reads pinned or managed memory that a
// copy wrote.
//
//	dev, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 2, 3)
//	if err != nil { ... } // errors.Is(err, cuda.ErrNoDriver): no GPU here
//	defer dev.Close()
//	if err := zerocopy.CopyCUDA(dev, m, nil); err != nil { ... } // m from above: host to device
//	back, _ := zerocopy.FromSlice(make([]float32, 6), 2, 3)
//	defer back.Close()
//	if err := zerocopy.CopyCUDA(back, dev, nil); err != nil { ... } // pageable: done on return
//
// Device memory crosses library borders the same way host memory does:
// FromDLPackVersioned (or FromDLPackLegacy) takes over a kDLCUDA DLPack
// tensor, ToDLPack hands a view to a consumer such as torch.from_dlpack,
// FromCAI wraps a __cuda_array_interface__ (its stream becomes the view's
// pending stream) and CUDAArrayInterface describes a view as one, with the
// view's pending stream so the consumer orders its work after it:
//
//	p, err := dev.ToDLPack() // a DLManagedTensorVersioned*; the consumer calls its deleter
//	if err != nil { ... }
//	in, err := zerocopy.FromDLPackVersioned(p) // a view again, same memory
//	if err != nil { ... }
//	defer in.Close() // runs the deleter, which drops dev's reference
//	iface, err := in.CUDAArrayInterface() // data, shape, typestr, stream
//
// Want states what a function needs of a tensor (dtypes, shape with fixed,
// any or named extents, order, device, writability), in the notation
// pyfunc's schemas use (ParseWant reads it, String writes it); Want.Check
// returns one *MismatchError that names every mismatch. A Signature checks
// a function's tensors together, a named dimension taking one extent across
// them, and is what a schema compiles to: a Go caller and a Python caller
// read the same message.
//
//	x, _ := zerocopy.ParseWant("float32 [N, K] C")
//	w, _ := zerocopy.ParseWant("float32 [K, M] cuda")
//	sig, err := zerocopy.NewSignature("mylib.matmul", []string{"x", "w"}, []*zerocopy.Want{&x, &w})
//	err = sig.Check([]*zerocopy.View{a, b})
//	// mylib.matmul: argument w: want float32 [K, M] cuda (K=3 from x); got float32 [4, 2] C cpu writable: shape[0] (4 != K=3 from x), device
//
// # Errors and panics
//
// What may have come from outside the program is reported with an error,
// never a panic: foreign tensors (a DLPack or CAI layout, dtype, device or
// pointer), user data, and every argument through which a user's request
// arrives: shapes, indices, dims, steps, dtypes, devices, and views the
// user has already closed. pybridge hands Python users' arguments straight
// to these calls, so zerocopy treats them all as outside values: Slice with
// step 0 or Select past the end returns an error where gonum's mat would
// panic. (Layout operations are maths on the layout alone: deriving from a
// closed view succeeds, and the closed view is reported, with ErrClosed,
// where its memory is used.) An error names the operation, the value and
// the limit, and wraps a sentinel or has a type where callers need to tell
// cases apart (ErrReleased, ErrWrongDevice, ErrNotInAllocation,
// cuda.ErrNoDriver, *MismatchError).
//
// Panics are for programming errors in the Go code that calls zerocopy,
// mistakes no input can cause: a Want that contradicts itself (an
// extent below -1, a named dimension with a size) given to Want.Check, a nil *View (most calls dereference
// it; a few, such as CopyCUDA, check it and return an error) and broken
// internal invariants. Such a panic is a bug to fix, not a condition to
// handle. (Closing a View while another goroutine uses it is a data race,
// which nothing checks.)
//
// Nothing panics across the C boundary: every exported entry point of
// pybridge that can fail runs inside pybridge.Fence. There an error becomes
// its code, which Python raises as the matching exception (BufferError,
// TypeError, ValueError, ...), and a panic becomes RuntimeError ("internal
// error", with the panic's site).
//
// SetLeakReporter turns on a safety net that reports views the garbage
// collector finds unreachable but never closed, and releases them. It is off
// by default and costs nothing then.
//
// Package fakemem provides host-backed allocations labelled as device memory
// so that all of this, DLPack and CAI included, can be tested without a GPU.
package zerocopy
