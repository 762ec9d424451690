// Package capi is the C ABI of libdlbridge: the //export functions the
// Python package dlbridge calls through its extension dlbridge._core
// (dlb_empty, dlb_export, dlb_from_memory, dlb_fill, ...). They are declared
// once, here in Go: gen_header.go writes dlbridge.h (their prototypes, the
// table dlb_exports, and the error classes of pyfunc.Class) and the
// extension's Python function for each (pybridge/python/src/_exports.h);
// capi.h holds the structs they pass.
//
// Every function returns 0 or a pybridge.Code and leaves the message in
// dlb_last_error() on the calling thread. Tensors cross as uint64 handles
// (pybridge.Handle); a dlb_info struct describes a handle so Python needs
// no second call.
//
// Importing the package (blank) into a main package built with
// -buildmode=c-shared puts the whole ABI into that library:
//
//	go build -buildmode=c-shared -o build/libdlbridge.so ./pybridge/cmd/libdlbridge
//
// dlbridge build (cmd/dlbridge) imports it the same way into a library
// with Go packages whose functions are registered with pyfunc: dlb_func_count,
// dlb_func_describe and dlb_call describe and run them for dlbridge.ops
// (see examples/gofunc).
package capi

//go:generate go run gen_header.go
