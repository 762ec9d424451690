// Package cai reads, checks and writes the CUDA Array Interface
// (__cuda_array_interface__, version 3; version 2 is read too) and NumPy's
// array interface (__array_interface__, version 3): the dictionaries
// through which CuPy, PyTorch, Numba, JAX and NumPy describe memory they
// share without copying.
//
// An Interface mirrors the dictionary field by field (strides in bytes,
// nil meaning C-contiguous). Its Kind says which protocol it follows:
// CUDA (a device pointer and an optional stream) or Host (a host pointer,
// no stream; the data entry may be absent, meaning the exporting object's
// buffer protocol, which only the Python side can resolve).
//
// The main uses:
//
//	// A dictionary from Python, as JSON:
//	iface, err := cai.DecodeJSON(js, cai.CUDA)
//	if err == nil {
//		err = iface.Validate() // every rule of the protocol, errors name the key
//	}
//	dt, err := iface.DataType()          // typestr (and descr) -> dlpack.DataType
//	strides, err := iface.ElementStrides() // bytes -> elements
//
//	// Memory we export:
//	iface, err := cai.NewInterface(cai.CUDA, cai.Layout{Ptr: p, DType: dlpack.Float32Type,
//		Shape: []int64{2, 3}, Stream: cai.StreamHandle(s)})
//	js, err := iface.MarshalJSON() // exactly what json.dumps prints for the dict
//
// zerocopy.FromCAI and View.CUDAArrayInterface / View.ArrayInterface build
// views from an Interface and back without copying.
//
// # Types
//
// ParseTypestr reads NumPy's typestr grammar (byte order, kind, size);
// Typestr.DataType and TypestrOf map between typestrs and DLPack data
// types. Conventions where NumPy has no type: bfloat16 is "<V2" (what
// PyTorch 2.6+ and ml_dtypes write; older PyTorch wrote "<f2", which
// cannot be told from float16); float8 types go out as "|u1" bytes; "|V1"
// (ml_dtypes' string for every float8/float6/float4/int4 type) is refused
// on import because the variant cannot be known. Vector types (lanes > 1)
// are records of identical fields. Big-endian data, Python objects,
// strings, datetimes and masked arrays are refused with errors that say
// so. Descr lists describe records; Descr.ItemSize, Descr.Offsets and
// PackRecord compute and build their layout.
//
// # Errors
//
// Every error wraps one of the Err… variables (ErrStrides, ErrStream,
// ErrBigEndian, ...) so callers can tell them apart with errors.Is, and its
// text names the key, the value and the rule that failed.
package cai
