// Package dlpacktest helps test code that consumes or produces DLPack
// tensors: a C producer that mallocs a DLManagedTensor[Versioned] with
// shape, strides and data, with a C deleter that counts its calls, and
// helpers that call a deleter from a thread the Go runtime did not create,
// as a C or Python consumer finishing on its own thread would.
//
//	p, rec := dlpacktest.NewVersioned(dlpacktest.Spec{NDim: 1, Shape: []int64{4},
//		Strides: []int64{1}, Code: 2, Bits: 32, Lanes: 1, DeviceType: 1,
//		Major: 1, Minor: 3, DataBytes: 16})
//	defer rec.Free()
//	v, err := zerocopy.FromDLPackVersioned(p)
//	...
//	v.Close()
//	// rec.Calls() == 1
//
// It needs cgo: without cgo the package is empty, and tests that use it
// carry the cgo build tag.
package dlpacktest
