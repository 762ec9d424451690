// Package zerocopy gives typed, strided, zero-copy views onto memory that
// someone owns: Go slices, C or pinned host memory, device memory that came
// in through DLPack or the CUDA Array Interface.
//
// A View is a pointer, a device, a dtype, a shape and strides (in elements),
// plus a reference on an Owner that keeps the memory alive. The Owner is
// reference counted and runs its release (a DLPack deleter, cuMemFree, or
// just letting go of a Go slice) exactly once, from whichever goroutine drops
// the last reference. Every view holds one reference; Close drops it.
//
// View operations never copy: Slice (Python's start:stop:step, negative
// steps included), Select, Permute, Transpose, T, Reshape (when the strides
// allow it), Flatten, Squeeze, Unsqueeze, Broadcast and AsReadOnly share the
// memory and take a reference of their own, so every derived view is closed
// too, in any order.
//
// Go memory becomes a view without a copy with FromSlice or FromBytes. Host
// memory is read and written through HostSlice (a []T for C-contiguous
// views; HostSliceRO for read-only ones), At, Set and Each for any strides,
// Copy between any two layouts, and Clone into fresh Go memory. These check
// the dtype against T, refuse memory the CPU cannot touch, and refuse
// writes to read-only views.
//
//	data := []float32{0, 1, 2, 3, 4, 5}
//	m, err := zerocopy.FromSlice(data, 2, 3) // float32[2 3] over data
//	if err != nil { ... }
//	defer m.Close()
//	col, err := m.Select(1, -1) // the last column: float32[2], stride 3
//	if err != nil { ... }
//	defer col.Close()
//	x, err := zerocopy.At[float32](col, 1) // 5
//
// Memory from elsewhere comes in and goes out without copies too:
// FromDLPackVersioned and FromDLPackLegacy take over a DLPack tensor (its
// deleter runs exactly once, when the last view is closed), ToDLPack hands
// a view to a DLPack consumer, CUDAArrayInterface and ArrayInterface
// describe a view as the Python dictionaries, and FromCAI makes a view of
// one. Device memory is copied with CopyCUDA.
//
// SetLeakReporter turns on a safety net that reports views the garbage
// collector finds unreachable but never closed, and releases them. It is off
// by default and costs nothing then.
//
// Package fakemem provides host-backed allocations labelled as device memory
// so that all of this, DLPack and CAI included, can be tested without a GPU.
package zerocopy
