// Package dlpack is the DLPack ABI (version 1.3) for Go: layout-exact
// mirrors of the C structs, data types, devices and flags, and the two
// operations a bridge needs — take over a DLManagedTensorVersioned (or a
// legacy DLManagedTensor) handed over from C, and build one for a C
// consumer.
//
// # Import
//
// A producer (PyTorch, CuPy, NumPy, a C++ engine) hands over a pointer and
// the duty to call its deleter exactly once. FromVersioned validates every
// field before use (errors are *FieldError and name the C field), copies
// shape and strides into Go memory, and returns a Desc; Release calls the
// deleter once, from any goroutine. A rejected tensor is still deleted.
//
//	var im dlpack.Imported
//	if err := im.FromVersioned(p, nil); err != nil {
//		return err // the producer's deleter has run
//	}
//	defer im.Release()
//	use(im.Data, im.DType, im.Shape, im.Strides)
//
// Imported is designed to be embedded: package zerocopy places the handle,
// its Owner, the View and up to InlineDims dimensions in one allocation.
//
// # Export
//
// Export builds a DLManagedTensorVersioned for a Desc whose memory a
// Releaser keeps alive. Header, shape and strides are one Go block, kept
// reachable by a table and pinned with runtime.Pinner (with the data, when
// it is Go memory) until the consumer calls the deleter, so that neither
// the GC nor cgo's pointer checks get in the way. Blocks are recycled
// through a quarantine, so an export costs no allocation. Every export
// carries the same deleter, a single C function pointer (DeleterPtr): a
// cgo-exported Go function when built with cgo, a purego callback without
// cgo (purego allows only 2000 callbacks per process, so exactly two are
// ever made). It may be called from any thread, including threads Go did
// not create; a second call with the same pointer is detected and ignored.
//
//	p, err := dlpack.Export(&desc, owner) // owner.Release() runs when the consumer is done
//	// hand p to C; the consumer calls p->deleter(p) once
//
// Importing one of our own exports is recognised (LookupExport, and Release
// calls the Go release directly instead of going through C).
//
// Everything here builds and works with CGO_ENABLED=0; cgo only makes the
// deleter calls cheaper.
package dlpack
