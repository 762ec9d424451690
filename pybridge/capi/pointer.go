package capi

/*
#include <stdint.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// dlb_from_pointer wraps memory at a raw address that someone else
// allocated (dlbridge.from_pointer): ctypes cudaMalloc, PyCUDA, cuda-python,
// Numba, a C library, or host memory. strides are in elements (NULL:
// C-contiguous). keeper is a PyObject* on which the caller took a reference
// for the view to own (NULL: none); the reference is dropped, holding the
// GIL, when the last view and export of the memory are gone, or before this
// returns an error. With verify set, CUDA memory is checked against the
// driver's allocation (the whole byte span, and the device) and host memory
// is checked not to be device memory. With hasStream set, stream (0: our
// work stream) is recorded as the stream of a pending write.
//
//export dlb_from_pointer
func dlb_from_pointer(ptr C.uint64_t, dtype *C.char, ndim C.int32_t, shape, strides *C.int64_t,
	devType, devID, readonly, hasStream C.int32_t, stream C.uint64_t, verify C.int32_t,
	keeper unsafe.Pointer, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		owned := keeper
		defer func() {
			if owned != nil { // not handed to a view: give the reference back
				pybridge.PyDecRef(owned)
			}
		}()
		dt, sh, err := layout(dtype, shape, ndim)
		if err != nil {
			return err
		}
		var st []int64
		if strides != nil {
			if st, err = int64s(strides, ndim); err != nil {
				return err
			}
		}
		dev := device(devType, devID)
		if err := pointerDevice(dev); err != nil {
			return err
		}
		spec := zerocopy.Spec{Ptr: uintptr(ptr), Device: dev, DType: dt, Shape: sh, Strides: st,
			ReadOnly: readonly != 0, Foreign: true}
		if hasStream != 0 {
			if dev.Type == dlpack.CPU {
				return pybridge.Errorf(pybridge.ValueError, "dlbridge: from_pointer: stream= was given for host memory (device cpu); it applies to CUDA memory only")
			}
			spec.Stream = uintptr(stream)
			if spec.Stream == 0 {
				spec.Stream = pybridge.WorkStream(dev.ID)
			}
		}
		v, err := pybridge.WrapPython(spec, owned)
		owned = nil // WrapPython owns it now, also on error
		if err != nil {
			return pybridge.WithCode(pybridge.ValueError, err)
		}
		if verify != 0 {
			if err := verifyPointer(v); err != nil {
				v.Close() // drops the keeper: the caller's deleter runs once
				return err
			}
		}
		return publish(v, out, info)
	})
}

// pointerDevice checks that memory may be wrapped on d: the host, or a CUDA
// device (device memory, pinned host memory, managed memory) that exists.
func pointerDevice(d dlpack.Device) error {
	switch d.Type {
	case dlpack.CPU:
		if d.ID != 0 {
			return pybridge.Errorf(pybridge.ValueError, "dlbridge: from_pointer: device %s: the host is device cpu (id 0)", d)
		}
		return nil
	case dlpack.CUDA, dlpack.CUDAHost, dlpack.CUDAManaged:
		n, err := cuda.DeviceCount()
		if err != nil {
			return pybridge.Errorf(pybridge.RuntimeError, "dlbridge: from_pointer: device %s: no CUDA driver or device available (%v)", d, err)
		}
		if d.ID < 0 || int(d.ID) >= n {
			return pybridge.Errorf(pybridge.ValueError, "dlbridge: from_pointer: device %s: there are %d CUDA devices", d, n)
		}
		return nil
	}
	return pybridge.Errorf(pybridge.ValueError, "dlbridge: from_pointer: device %s: only cpu, cuda:N, cuda_host and cuda_managed memory can be wrapped", d)
}

// verifyPointer checks v's whole byte span against the driver (CUDA
// memory: zerocopy.VerifyCUDA, whose error names the allocation's bounds
// and the overrun), or, for host memory, that the driver does not know the
// address as device memory (reading that from the host would crash).
func verifyPointer(v *zerocopy.View) error {
	if v.Device().Type != dlpack.CPU {
		if err := zerocopy.VerifyCUDA(v); err != nil {
			if errors.Is(err, zerocopy.ErrNotInAllocation) || errors.Is(err, zerocopy.ErrWrongDevice) {
				return pybridge.Errorf(pybridge.ValueError, "dlbridge: from_pointer: %w", err)
			}
			return pybridge.Errorf(pybridge.RuntimeError, "dlbridge: from_pointer: %w", err)
		}
		return nil
	}
	if lo, hi := v.ByteSpan(); hi <= lo || !cuda.Available() {
		return nil // nothing to read, or no driver that could know the address
	}
	a, err := cuda.PointerGetAttributes(cuda.DevicePtr(v.Ptr()))
	if err != nil || !a.Known() {
		return nil // pageable host memory: the driver knows nothing of it
	}
	if a.MemoryType == cuda.MemoryTypeDevice && !a.IsManaged {
		return pybridge.Errorf(pybridge.ValueError, "dlbridge: from_pointer: %#x is device memory of cuda:%d, not host memory: use device=\"cuda:%d\"", v.Ptr(), a.DeviceOrdinal, a.DeviceOrdinal)
	}
	return nil
}
