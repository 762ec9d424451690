package capi

/*
#cgo CFLAGS: -I${SRCDIR}/..
#include <stdint.h>
#include "pyapi.h"

void dlb_fast_stats(int64_t *made, int64_t *live);
void dlb_guard_init(uintptr_t versioned, uintptr_t legacy);
void dlb_guarded_deleter_versioned(dlb_DLManagedTensorVersioned *mt);
void dlb_guarded_deleter_legacy(dlb_DLManagedTensor *mt);
*/
import "C"

import (
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
)

// The Go entry points of the CPython extension dlbridge._core, which calls
// them through its table of exports (dlbridge.h), beside the other
// exports of this package.

// dlb_alloc_export allocates a C-contiguous tensor and exports it as a
// DLManagedTensorVersioned (the exchange API's managed_tensor_allocator).
//
//dlb:nopy
//export dlb_alloc_export
func dlb_alloc_export(ndim C.int32_t, shape *C.int64_t, code, bits C.uint8_t, lanes C.uint16_t, devType, devID C.int32_t, out *unsafe.Pointer) C.int32_t {
	return fence(func() error {
		sh, err := int64s(shape, ndim)
		if err != nil {
			return err
		}
		dt := dlpack.DataType{Code: dlpack.TypeCode(code), Bits: uint8(bits), Lanes: uint16(lanes)}
		v, err := pybridge.Allocate(device(devType, devID), dt, sh, false)
		if err != nil {
			return err
		}
		defer v.Close() // the export keeps its own reference
		// The exchange API's consumer orders itself after our current work
		// stream, on which the allocation is pending: no stream to wait here.
		p, err := pybridge.Export(&pybridge.Tensor{View: v}, pybridge.ExportRequest{Versioned: true,
			HasStream: true, Stream: pybridge.StreamNoSync})
		if err != nil {
			return err
		}
		*out = guardExport(p, true)
		return nil
	})
}

// fastStats is the extension's own DLPack exports: made, and still alive.
func fastStats() (made, live int64) {
	var m, l C.int64_t
	C.dlb_fast_stats(&m, &l)
	return int64(m), int64(l)
}

func init() {
	C.dlb_guard_init(C.uintptr_t(dlpack.DeleterPtr()), C.uintptr_t(dlpack.LegacyDeleterPtr()))
}

// guardExport points the deleter of p, a DLPack tensor pybridge.Export
// just made (not yet handed to anyone), at the C deleter of pyext.c that
// calls Go's unless the process is a child forked after the library was
// loaded, where the Go runtime is gone. The address of p does not change:
// Go still recognises its own tensor when it comes back.
func guardExport(p unsafe.Pointer, versioned bool) unsafe.Pointer {
	if versioned {
		// Sound: p is a DLManagedTensorVersioned in C memory that Export
		// just made and only this thread knows yet.
		m := (*dlpack.DLManagedTensorVersioned)(p)
		if m.Deleter == dlpack.DeleterPtr() {
			m.Deleter = uintptr(unsafe.Pointer(C.dlb_guarded_deleter_versioned))
		}
		return p
	}
	// Sound: p is a DLManagedTensor in C memory that Export just made and
	// only this thread knows yet. (A C function's address stored as an
	// integer: C code never moves, and the deleter field is an integer.)
	m := (*dlpack.DLManagedTensor)(p)
	if m.Deleter == dlpack.LegacyDeleterPtr() {
		m.Deleter = uintptr(unsafe.Pointer(C.dlb_guarded_deleter_legacy))
	}
	return p
}
