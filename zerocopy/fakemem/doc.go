// Package fakemem hands out host-backed allocations labelled as memory of
// any device (kDLCUDA, ROCm, ...), so that code which wraps, views, exports
// and frees device memory can be tested on a machine without a GPU.
//
// A Tracker records what is live, counts frees (deleter calls), fills freed
// memory with a poison byte, keeps freed memory mapped so that a late read
// sees the poison instead of someone else's data, and reports double frees,
// frees of pointers it never handed out, use after free and out-of-bounds
// access, both as errors and as recorded events. Each allocation is
// followed by a guard zone that Free verifies.
//
// The memory is ordinary Go memory. Typed host access to it through
// zerocopy (HostSlice, At, Copy) is refused like any device memory unless
// the tracker is made with Options.HostAccess; Tracker.Bytes reads and
// writes it either way. Real device pointers are never accepted.
//
// Typical use in a test:
//
//	tr := fakemem.New(fakemem.Options{HostAccess: true})
//	v, err := tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 2, 3)
//	if err != nil { ... }
//	// ... slice v, export it, import it back, Close every view ...
//	if s := tr.Stats(); s.Live != 0 || s.Frees != 1 || s.DoubleFrees != 0 {
//		t.Errorf("stats %+v", s)
//	}
package fakemem
