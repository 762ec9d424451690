package capi

/*
#include <stdint.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/cai"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// ABIVersion is bumped whenever an exported function changes signature; the
// Python package refuses a library with another version.
const ABIVersion = 1

//dlb:value
//export dlb_abi_version
func dlb_abi_version() C.int32_t { return ABIVersion }

// fence runs fn as the body of an entry point (see pybridge.Fence).
func fence(fn func() error) C.int32_t { return C.int32_t(pybridge.Fence(fn)) }

func device(t, id C.int32_t) dlpack.Device {
	return dlpack.Device{Type: dlpack.DeviceType(t), ID: int32(id)}
}

func parseDType(s *C.char) (dlpack.DataType, error) {
	if s == nil {
		return dlpack.Float32Type, nil
	}
	dt, err := dlpack.ParseDataType(C.GoString(s))
	if err != nil {
		return dt, pybridge.WithCode(pybridge.TypeError, err)
	}
	return dt, nil
}

// layout is a tensor's dtype and shape from C.
func layout(dtype *C.char, shape *C.int64_t, ndim C.int32_t) (dlpack.DataType, []int64, error) {
	dt, err := parseDType(dtype)
	if err != nil {
		return dt, nil, err
	}
	sh, err := int64s(shape, ndim)
	return dt, sh, err
}

func int64s(p *C.int64_t, n C.int32_t) ([]int64, error) {
	if n < 0 || n > dlpack.MaxNDim {
		return nil, pybridge.Errorf(pybridge.ValueError, "dlbridge: ndim %d out of range (0..%d)", int(n), dlpack.MaxNDim)
	}
	if n == 0 {
		return []int64{}, nil
	}
	if p == nil {
		return nil, pybridge.Errorf(pybridge.ValueError, "dlbridge: NULL array for %d dimensions", int(n))
	}
	// The caller's array of n int64s, copied before it returns.
	return append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(p)), int(n))...), nil
}

// fillInfo describes v into info (when not NULL).
func fillInfo(v *zerocopy.View, stream uintptr, info *C.dlb_info) {
	if info == nil {
		return
	}
	info.ptr = C.uint64_t(v.Ptr())
	d := v.Device()
	info.device_type, info.device_id = C.int32_t(d.Type), C.int32_t(d.ID)
	dt := v.DType()
	info.code, info.bits, info.lanes = C.uint8_t(dt.Code), C.uint8_t(dt.Bits), C.uint16_t(dt.Lanes)
	info.ndim = C.int32_t(v.NDim())
	var f C.uint32_t
	if v.ReadOnly() {
		f |= C.DLB_INFO_READONLY
	}
	if v.Copied() {
		f |= C.DLB_INFO_COPIED
	}
	if v.Padded() {
		f |= C.DLB_INFO_PADDED
	}
	if v.IsCContiguous() {
		f |= C.DLB_INFO_C_CONTIGUOUS
	}
	if v.IsFContiguous() {
		f |= C.DLB_INFO_F_CONTIGUOUS
	}
	if v.Foreign() {
		f |= C.DLB_INFO_FOREIGN
	}
	info.flags = f
	info.itemsize = C.int32_t(dt.ItemSize())
	info.stream = C.uint64_t(stream)
	for i, e := range v.Shape() {
		info.shape[i] = C.int64_t(e)
	}
	for i, s := range v.Strides() {
		info.strides[i] = C.int64_t(s)
	}
}

// publishTo is publish of what an operation returns:
// return publishTo(out, info)(pybridge.Allocate(...)).
func publishTo(out *C.uint64_t, info *C.dlb_info) func(*zerocopy.View, error) error {
	return func(v *zerocopy.View, err error) error {
		if err != nil {
			return err
		}
		return publish(v, out, info)
	}
}

// publish registers v under a new handle and reports it.
func publish(v *zerocopy.View, out *C.uint64_t, info *C.dlb_info) error {
	if out == nil {
		v.Close()
		return pybridge.Errorf(pybridge.ValueError, "dlbridge: NULL out pointer")
	}
	h := pybridge.NewTensor(v)
	*out = C.uint64_t(h)
	fillInfo(v, v.Stream(), info)
	return nil
}

// borrow is pybridge.Borrow for a C handle.
func borrow(h C.uint64_t) (*pybridge.Tensor, error) { return pybridge.Borrow(pybridge.Handle(h)) }

// withTensor is fence for an entry point over tensor h: fn gets h's
// tensor, borrowed for the call.
func withTensor(h C.uint64_t, fn func(t *pybridge.Tensor) error) C.int32_t {
	return fence(func() error {
		t, err := borrow(h)
		if err != nil {
			return err
		}
		defer t.Return()
		return fn(t)
	})
}

// dlb_work_stream is the CUDA stream Go-side operations on device id use, a
// non-blocking stream of dlbridge's own (1, the legacy default stream, only
// when the device cannot be used); importers pass it to
// __dlpack__(stream=...) so the producer orders its work first.
//
//dlb:value
//export dlb_work_stream
func dlb_work_stream(id C.int32_t) C.int64_t { return C.int64_t(pybridge.WorkStream(int32(id))) }

//dlb:value
//export dlb_cuda_device_count
func dlb_cuda_device_count() C.int32_t { return C.int32_t(pybridge.CUDADeviceCount()) }

//export dlb_empty
func dlb_empty(dtype *C.char, ndim C.int32_t, shape *C.int64_t, devType, devID C.int32_t, zero C.int32_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		dt, sh, err := layout(dtype, shape, ndim)
		if err != nil {
			return err
		}
		return publishTo(out, info)(pybridge.Allocate(device(devType, devID), dt, sh, zero != 0))
	})
}

//export dlb_arange
func dlb_arange(n C.int64_t, dtype *C.char, devType, devID C.int32_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		dt, err := parseDType(dtype)
		if err != nil {
			return err
		}
		return publishTo(out, info)(pybridge.Arange(int64(n), dt, device(devType, devID)))
	})
}

//dlb:nopy
//export dlb_info_get
func dlb_info_get(h C.uint64_t, info *C.dlb_info) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		fillInfo(t.View, t.View.Stream(), info)
		return nil
	})
}

//export dlb_close
func dlb_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.CloseTensor(pybridge.Handle(h)) })
}

//dlb:nopy
//export dlb_export
func dlb_export(h C.uint64_t, versioned, hasStream C.int32_t, stream C.int64_t, hasDevice, devType, devID, copyMode C.int32_t, out *unsafe.Pointer) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		p, err := pybridge.Export(t, pybridge.ExportRequest{
			Versioned: versioned != 0, HasStream: hasStream != 0, Stream: int64(stream),
			HasDevice: hasDevice != 0, Device: device(devType, devID), Copy: pybridge.CopyMode(copyMode),
		})
		if err != nil {
			return err
		}
		*out = guardExport(p, versioned != 0)
		return nil
	})
}

//dlb:nopy
//export dlb_import
func dlb_import(mt unsafe.Pointer, versioned, gil C.int32_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		return publishTo(out, info)(pybridge.Import(mt, versioned != 0, gil != 0))
	})
}

// dlb_import_on is dlb_import for a tensor whose producer ordered its
// writes before stream rather than our work stream: a C exchange API
// producer's current work stream (0 from the producer means the legacy
// default stream), or the current stream of a producer that from_dlpack
// passed as __dlpack__(stream=...) so that it had nothing to order. The
// tensor's pending write is on that stream, ordered before each reader when
// it needs it, so nothing waits at import.
//
//dlb:nopy
//export dlb_import_on
func dlb_import_on(mt unsafe.Pointer, versioned, gil C.int32_t, stream C.int64_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		var p pybridge.StreamPlan
		err := pybridge.PlanStream(&pybridge.StreamAsk{Entry: pybridge.EntryImport, Current: uintptr(stream)}, &p)
		v, ierr := pybridge.ImportOn(mt, versioned != 0, gil != 0, p.Handle) // takes mt either way
		if err != nil {
			if ierr == nil {
				v.Close()
			}
			return err
		}
		return publishTo(out, info)(v, ierr)
	})
}

// dlb_from_memory wraps memory described by __cuda_array_interface__
// (kind 0) or __array_interface__ (kind 1) fields through zerocopy.FromCAI.
// strides are in bytes (NULL: C-contiguous). pyobj is a PyObject* on which
// the caller took a reference for the view to own (NULL: none). A CUDA
// interface's stream becomes the view's pending stream: nothing waits at
// import, every reader is ordered after it.
//
//export dlb_from_memory
func dlb_from_memory(kind C.int32_t, ptr C.uint64_t, readonly C.int32_t, typestr *C.char, ndim C.int32_t,
	shape, strides *C.int64_t, version C.int32_t, hasStream C.int32_t, stream C.int64_t, hasMask C.int32_t,
	devType, devID C.int32_t, pyobj unsafe.Pointer, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		owner := pybridge.PythonOwner(pyobj) // drops the reference when the memory is released
		sh, err := int64s(shape, ndim)
		if err != nil {
			owner.Release()
			return err
		}
		ci := cai.Interface{Kind: cai.Kind(kind), Shape: sh, Typestr: C.GoString(typestr),
			Data: cai.Data{Ptr: uintptr(ptr), ReadOnly: readonly != 0}, Version: int(version)}
		if strides != nil {
			if ci.Strides, err = int64s(strides, ndim); err != nil {
				owner.Release()
				return err
			}
		}
		if hasStream != 0 {
			ci.Stream = cai.StreamHandle(uintptr(stream))
		}
		if hasMask != 0 {
			ci.Mask = &cai.Interface{}
		}
		if err := ci.Validate(); err != nil {
			owner.Release()
			return caiError(err)
		}
		dev := device(devType, devID)
		if ci.Kind == cai.Host {
			dev = dlpack.CPUDevice
		} else if dev.Type == dlpack.CUDA && dev.ID < 0 {
			// CAI names no device: ask the driver who owns the pointer.
			dev.ID = 0
			if n, _ := ci.NumElements(); n > 0 {
				if dev.ID, err = pybridge.PointerDevice(uintptr(ptr)); err != nil {
					owner.Release()
					return err
				}
			}
		}
		v, err := zerocopy.FromCAI(ci, dev, owner) // releases owner on error
		if err != nil {
			return caiError(err)
		}
		return publish(v, out, info)
	})
}

func caiError(err error) error {
	if errors.Is(err, cai.ErrStream) {
		return pybridge.WithCode(pybridge.ValueError, err)
	}
	if errors.Is(err, cai.ErrTypestr) || errors.Is(err, cai.ErrUnsupported) || errors.Is(err, cai.ErrBigEndian) {
		return pybridge.WithCode(pybridge.TypeError, err)
	}
	return pybridge.WithCode(pybridge.BufferError, err)
}

//export dlb_typestr
func dlb_typestr(code, bits C.int32_t, lanes C.int32_t, padded C.int32_t, buf *C.char, n C.int32_t) C.int32_t {
	return fence(func() error {
		dt := dlpack.DataType{Code: dlpack.TypeCode(code), Bits: uint8(bits), Lanes: uint16(lanes)}
		var ts string
		var err error
		if padded != 0 {
			ts, _, err = cai.PaddedTypestrOf(dt)
		} else {
			ts, _, err = cai.TypestrOf(dt)
		}
		if err != nil {
			return pybridge.WithCode(pybridge.TypeError, err)
		}
		return putString(ts, buf, n)
	})
}

//export dlb_dtype_name
func dlb_dtype_name(code, bits, lanes C.int32_t, buf *C.char, n C.int32_t) C.int32_t {
	return fence(func() error {
		dt := dlpack.DataType{Code: dlpack.TypeCode(code), Bits: uint8(bits), Lanes: uint16(lanes)}
		return putString(dt.String(), buf, n)
	})
}

//export dlb_parse_dtype
func dlb_parse_dtype(s *C.char, code, bits, lanes *C.int32_t) C.int32_t {
	return fence(func() error {
		dt, err := parseDType(s)
		if err != nil {
			return err
		}
		*code, *bits, *lanes = C.int32_t(dt.Code), C.int32_t(dt.Bits), C.int32_t(dt.Lanes)
		return nil
	})
}

func putString(s string, buf *C.char, n C.int32_t) error {
	if int(n) < len(s)+1 || buf == nil {
		return pybridge.Errorf(pybridge.ValueError, "dlbridge: buffer of %d bytes too small for %q", int(n), s)
	}
	// Sound: buf is the caller's C buffer of n bytes (checked non-nil and
	// large enough above), written before this call returns and not kept.
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(b, s)
	b[len(s)] = 0
	return nil
}

// valueIn is the number Python passed; dlb_scalar's kinds are
// zerocopy.ValueKind's numbers, and a real float travels in re with im 0.
func valueIn(s *C.dlb_scalar) (zerocopy.Value, error) {
	k := zerocopy.ValueKind(s.kind)
	if k < zerocopy.IntValue || k > zerocopy.BoolValue {
		return zerocopy.Value{}, pybridge.Errorf(pybridge.ValueError, "dlbridge: scalar kind %d is not one of 0..4", int32(k))
	}
	return zerocopy.Value{Kind: k, I: int64(s.i), U: uint64(s.u), C: complex(float64(s.re), float64(s.im))}, nil
}

//export dlb_fill
func dlb_fill(h C.uint64_t, value *C.dlb_scalar) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		x, err := valueIn(value)
		if err != nil {
			return err
		}
		return pybridge.Fill(t, x)
	})
}

//export dlb_sum
func dlb_sum(h C.uint64_t, out *C.dlb_scalar) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		x, err := pybridge.Sum(t)
		if err != nil {
			return err
		}
		out.kind, out.i, out.u = C.int32_t(x.Kind), C.int64_t(x.I), C.uint64_t(x.U)
		out.re, out.im = C.double(real(x.C)), C.double(imag(x.C))
		return nil
	})
}

// streamArg is a stream= as C passes it: hasStream 0 for None, else the
// handle and the device its object names (-1: a bare handle).
func streamArg(hasStream C.int32_t, stream C.uint64_t, streamDev C.int32_t) pybridge.StreamArg {
	return pybridge.StreamArg{Given: hasStream != 0, Handle: uintptr(stream), Device: int32(streamDev)}
}

// dlb_copy_on is copy_(src, non_blocking=, stream=) (see streamArg).
// exposed is the extension's fact that an address of dst's or src's
// memory went out of dlbridge (an export alive, an interface dictionary,
// data_ptr); when none did and Go agrees both are alone, pybridge's
// PlanStream may leave a blocking copy in flight, since nobody can tell it
// from a complete one (everything that reads or writes them through
// dlbridge is ordered after it), and a device-to-device copy_ then costs
// what PyTorch's does (no synchronization).
//
//dlb:nopy
//export dlb_copy_on
func dlb_copy_on(dst, src C.uint64_t, hasStream C.int32_t, stream C.uint64_t, streamDev, nonBlocking, exposed C.int32_t) C.int32_t {
	return fence(func() error {
		d, err := borrow(dst)
		if err != nil {
			return err
		}
		defer d.Return()
		s, err := borrow(src)
		if err != nil {
			return err
		}
		defer s.Return()
		return pybridge.CopyInto(d, s, pybridge.CopyOptions{Stream: streamArg(hasStream, stream, streamDev),
			NonBlocking: nonBlocking != 0, Private: exposed == 0 && alone(d) && alone(s)})
	})
}

// dlb_copy_from_host is copy_(src) for a blocking copy from host memory
// that the extension took through the buffer protocol (a NumPy array): the
// block at ptr (dtype code/bits/lanes, ndim extents, strides in elements)
// is wrapped for the length of the call only, without a handle or a DLPack
// round trip, and copied into dst. exposed is as for dlb_copy_on, of dst.
// The host memory is done with on return either way. The caller holds the
// buffer, and so the memory, until this returns.
//
//dlb:nopy
//export dlb_copy_from_host
func dlb_copy_from_host(dst C.uint64_t, ptr C.uint64_t, code, bits C.uint8_t, lanes C.uint16_t, ndim C.int32_t,
	shape, strides *C.int64_t, hasStream C.int32_t, stream C.uint64_t, streamDev, exposed C.int32_t) C.int32_t {
	return fence(func() error {
		sh, err := int64s(shape, ndim)
		if err != nil {
			return err
		}
		st, err := int64s(strides, ndim)
		if err != nil {
			return err
		}
		d, err := borrow(dst)
		if err != nil {
			return err
		}
		defer d.Return()
		opts := pybridge.CopyOptions{Stream: streamArg(hasStream, stream, streamDev), Private: exposed == 0 && alone(d)}
		v, err := zerocopy.Wrap(zerocopy.Spec{Ptr: uintptr(ptr), Device: dlpack.CPUDevice,
			DType: dlpack.DataType{Code: dlpack.TypeCode(code), Bits: uint8(bits), Lanes: uint16(lanes)},
			Shape: sh, Strides: st, ReadOnly: true, Foreign: true}, zerocopy.NewOwner(nil, "buffer"))
		if err != nil {
			return pybridge.WithCode(pybridge.ValueError, err)
		}
		defer v.Close()
		return pybridge.CopyInto(d, &pybridge.Tensor{View: v}, opts)
	})
}

// alone reports whether only t's handle, borrowed once by the caller,
// holds t's memory, and the engine allocated it on a device: no other
// handle, view or Go export, nor an owner outside dlbridge.
func alone(t *pybridge.Tensor) bool {
	v := t.View
	return v.Device().Type == dlpack.CUDA && v.AllocatedCUDA() && v.Owner().Refs() == 2 // the handle's and the borrow's
}

// dlb_to_on is to(device, non_blocking=, stream=): a new tensor on the
// device (stream=: see streamArg).
//
//dlb:nopy
//export dlb_to_on
func dlb_to_on(h C.uint64_t, devType, devID C.int32_t, hasStream C.int32_t, stream C.uint64_t, streamDev, nonBlocking C.int32_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		opts := pybridge.CopyOptions{Stream: streamArg(hasStream, stream, streamDev), NonBlocking: nonBlocking != 0}
		t, err := borrow(h)
		if err != nil {
			return err
		}
		defer t.Return()
		return publishTo(out, info)(pybridge.CopyToDevice(t.View, device(devType, devID), opts))
	})
}

// dlb_order_before_exchange orders the write pending on h before a
// consumer of the C exchange API's managed_tensor_from_py_object_no_sync,
// which has no stream handshake and orders itself after the
// current_work_stream it is told (pybridge.OrderBeforeExchange).
//
//dlb:nopy
//export dlb_order_before_exchange
func dlb_order_before_exchange(h C.uint64_t) C.int32_t {
	return withTensor(h, pybridge.OrderBeforeExchange)
}

// dlb_dlpack_stream is the stream= from_dlpack passes to the __dlpack__ of
// a producer of a tensor on CUDA device dev whose stream probe named
// current (0: none), which is also the stream the imported tensor's write
// is pending on (pybridge.PlanStream, EntryDLPackStream).
//
//dlb:value
//export dlb_dlpack_stream
func dlb_dlpack_stream(dev C.int32_t, current C.int64_t) C.int64_t {
	var p pybridge.StreamPlan
	if err := pybridge.PlanStream(&pybridge.StreamAsk{Entry: pybridge.EntryDLPackStream, Devices: [2]dlpack.Device{dlpack.CUDADevice(int(dev))}, Current: uintptr(current)}, &p); err != nil {
		return C.int64_t(pybridge.StreamLegacy)
	}
	return C.int64_t(p.Handle)
}

// dlb_pin_memory is Tensor.pin_memory(): a copy in page-locked host memory.
//
//export dlb_pin_memory
func dlb_pin_memory(h C.uint64_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		return publishTo(out, info)(pybridge.PinMemory(t))
	})
}

// dlb_is_pinned sets *out to 1 when h's memory is page-locked host memory.
//
//export dlb_is_pinned
func dlb_is_pinned(h C.uint64_t, out *C.int32_t) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		*out = 0
		if pybridge.IsPinned(t) {
			*out = 1
		}
		return nil
	})
}

// dlb_pool_stats writes the pinned pool's cached, in-use and limit bytes
// and the stream-ordered pool of CUDA device dev (reserved, used; -1 when
// unknown) into out[0..4].
//
//dlb:array out 5
//export dlb_pool_stats
func dlb_pool_stats(dev C.int32_t, out *C.int64_t) C.int32_t {
	return fence(func() error {
		if out == nil {
			return pybridge.Errorf(pybridge.ValueError, "dlbridge: NULL out pointer")
		}
		p := pybridge.Pools(int(dev))
		o := unsafe.Slice((*int64)(unsafe.Pointer(out)), 5) // sound: the caller's C array of 5, written during this call
		o[0], o[1], o[2], o[3], o[4] = p.PinnedCached, p.PinnedInUse, p.PinnedLimit, p.DeviceReserved, p.DeviceUsed
		return nil
	})
}

// dlb_set_pinned_pool_limit sets the bytes the pinned pool may hold.
//
//export dlb_set_pinned_pool_limit
func dlb_set_pinned_pool_limit(nbytes C.int64_t) C.int32_t {
	return fence(func() error { return pybridge.SetPinnedPoolLimit(int64(nbytes)) })
}

// dlb_index applies a basic index (ints, normalized slices, newaxis) to h
// and registers the resulting view.
//
//export dlb_index
func dlb_index(h C.uint64_t, n C.int32_t, items *C.dlb_index_item, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		if n < 0 || n > 2*dlpack.MaxNDim || (n > 0 && items == nil) {
			return pybridge.Errorf(pybridge.IndexError, "dlbridge: %d index items", int(n))
		}
		var list []C.dlb_index_item
		if n > 0 {
			// Sound: items is the caller's C array of n index items (n
			// range-checked above), read only during this call.
			list = unsafe.Slice(items, int(n))
		}
		return publishTo(out, info)(applyIndex(t.View, list))
	})
}

// applyIndex derives the view of a basic index from v. The intermediate
// views borrow v's reference; the result gets one of its own (Retain), for
// it becomes a tensor handle that outlives v's.
func applyIndex(v *zerocopy.View, items []C.dlb_index_item) (*zerocopy.View, error) {
	cur := v
	dim := 0
	for k, it := range items {
		var err error
		switch it.kind {
		case C.DLB_INDEX_INT:
			if dim >= cur.NDim() {
				return nil, pybridge.Errorf(pybridge.IndexError, "dlbridge: too many indices for a %d-d tensor", v.NDim())
			}
			e, i := cur.Shape()[dim], int64(it.start)
			if i < -e || i >= e {
				return nil, pybridge.Errorf(pybridge.IndexError, "dlbridge: index %d is out of bounds for dimension %d with size %d", i, dim, e)
			}
			if cur, err = cur.Select(dim, i); err != nil {
				return nil, pybridge.WithCode(pybridge.IndexError, err)
			}
		case C.DLB_INDEX_SLICE:
			if dim >= cur.NDim() {
				return nil, pybridge.Errorf(pybridge.IndexError, "dlbridge: too many indices for a %d-d tensor", v.NDim())
			}
			if it.step == 0 {
				return nil, pybridge.Errorf(pybridge.ValueError, "dlbridge: slice step cannot be zero")
			}
			if cur, err = cur.Slice(dim, int64(it.start), int64(it.stop), int64(it.step)); err != nil {
				return nil, pybridge.WithCode(pybridge.ValueError, err)
			}
			dim++
		case C.DLB_INDEX_NEWAXIS:
			if cur, err = cur.Unsqueeze(dim); err != nil {
				return nil, pybridge.WithCode(pybridge.IndexError, err)
			}
			dim++
		default:
			return nil, pybridge.Errorf(pybridge.TypeError, "dlbridge: index item %d has unknown kind %d", k, int(it.kind))
		}
	}
	// t[()] and t[...] leave cur == v: a new handle of the same view.
	return cur.Retain()
}

//export dlb_permute
func dlb_permute(h C.uint64_t, n C.int32_t, order *C.int32_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		if n < 0 || n > dlpack.MaxNDim || (n > 0 && order == nil) {
			return pybridge.Errorf(pybridge.ValueError, "dlbridge: permute order of %d dims", int(n))
		}
		ord := make([]int, int(n))
		if n > 0 {
			// Sound: order is the caller's C array of n int32s (n checked
			// above), copied into ord before this call returns.
			for i, o := range unsafe.Slice((*int32)(unsafe.Pointer(order)), int(n)) {
				ord[i] = int(o)
			}
		}
		p, err := t.View.Permute(ord...)
		if err != nil {
			return pybridge.WithCode(pybridge.ValueError, err)
		}
		return publishTo(out, info)(p.Retain()) // the new handle outlives t's
	})
}

// dlb_reshape is Tensor.reshape, as torch.reshape: a view of h when its
// strides allow one (zerocopy's Reshape), else a C-contiguous copy on h's
// device made as clone() makes one (CopyToDevice: its memory pool and
// stream order), reshaped. The copy is made only for a shape that Reshape
// found valid, so a bad shape costs no copy.
//
//export dlb_reshape
func dlb_reshape(h C.uint64_t, n C.int32_t, shape *C.int64_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		sh, err := int64s(shape, n)
		if err != nil {
			return err
		}
		r, err := t.View.Reshape(sh...)
		if errors.Is(err, zerocopy.ErrNeedsCopy) {
			c, cerr := pybridge.CopyToDevice(t.View, t.View.Device(), pybridge.CopyOptions{})
			if cerr != nil {
				return cerr
			}
			defer c.Close() // the result holds a reference of its own
			r, err = c.Reshape(sh...)
		}
		if err != nil {
			return pybridge.WithCode(pybridge.ValueError, err)
		}
		return publishTo(out, info)(r.Retain()) // the new handle outlives t's (and c's)
	})
}

//export dlb_stats
func dlb_stats(liveTensors, liveExports, deleterCalls *C.int64_t) C.int32_t {
	if liveTensors != nil {
		*liveTensors = C.int64_t(pybridge.LiveTensors())
	}
	made, live := fastStats() // the extension's own DLPack exports, which Go does not see
	if liveExports != nil {
		*liveExports = C.int64_t(int64(pybridge.LiveExports()) + live)
	}
	if deleterCalls != nil {
		*deleterCalls = C.int64_t(pybridge.DeleterCalls() + made - live)
	}
	return 0
}

// dlb_debug_spin_write queues a slow write (spin nanoseconds, then value)
// on the work stream; see pybridge.DebugSpinWrite. For tests.
//
//export dlb_debug_spin_write
func dlb_debug_spin_write(h C.uint64_t, value C.uint32_t, spinNS C.int64_t) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		return pybridge.DebugSpinWrite(t, uint32(value), time.Duration(spinNS))
	})
}
