// Package cabi holds DLPack 1.3's C structs written in C from the spec, so
// that tests can prove the Go mirrors in package dlpack have the same size
// and field offsets, and a small C producer of DLPack tensors whose deleters
// count their calls, so that tests can prove deleters run exactly once, also
// when called from a thread the Go runtime did not create.
//
// Everything here needs cgo. Without cgo the package is empty; tests that use
// it carry the cgo build tag.
package cabi
