package capi

/*
#cgo CFLAGS: -I${SRCDIR}/..
#include <stdint.h>
#include "capi.h"

void dlb_fast_stats(int64_t *made, int64_t *live);
*/
import "C"

import (
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
)

// The Go entry points of the CPython fast path (pyext.c). The fast path
// itself is C: it is loaded by the Python package through dlb_pyext_init
// (with the GIL held) and falls back to these and the other exports.

// dlb_wait_stream makes our work stream on CUDA device id wait for the
// work queued so far on a producer's stream (0 and 1: the legacy default).
//
//export dlb_wait_stream
func dlb_wait_stream(id C.int32_t, producer C.int64_t) C.int32_t {
	return fence(func() error {
		p := uintptr(producer)
		if p == 0 {
			p = uintptr(pybridge.StreamLegacy)
		}
		return pybridge.WaitForProducer(dlpack.CUDADevice(int(id)), p)
	})
}

// dlb_alloc_export allocates a C-contiguous tensor and exports it as a
// DLManagedTensorVersioned (the exchange API's managed_tensor_allocator).
//
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
		p, err := pybridge.Export(&pybridge.Tensor{View: v}, pybridge.ExportRequest{Versioned: true})
		if err != nil {
			return err
		}
		*out = p
		return nil
	})
}

// fastStats is the fast path's exports made and still alive.
func fastStats() (made, live int64) {
	var m, l C.int64_t
	C.dlb_fast_stats(&m, &l)
	return int64(m), int64(l)
}
