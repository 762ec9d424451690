package pybridge

/*
#include <stdint.h>
#include "pyapi.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// exports holds the view behind every managed tensor we exported and whose
// deleter has not run yet; the struct's manager_ctx is the handle.
var exports Table[*zerocopy.View]

// deleterCalls counts deleters of our exports that ran.
var deleterCalls atomic.Int64

//export dlbReleaseExport
func dlbReleaseExport(id C.uint64_t) {
	v, err := exports.Delete(Handle(id))
	if err != nil {
		return // a second deleter call: already released
	}
	deleterCalls.Add(1)
	v.Close()
}

// specOf describes v's memory so another view can be wrapped around it.
func specOf(v *zerocopy.View) zerocopy.Spec {
	return zerocopy.Spec{Ptr: v.Ptr(), Device: v.Device(), DType: v.DType(), Shape: v.Shape(),
		Strides: v.Strides(), ReadOnly: v.ReadOnly(), Copied: v.Copied(), Padded: v.Padded(),
		Foreign: v.Foreign(), Stream: v.Stream()}
}

// exportLocal builds a DLManagedTensor[Versioned] for v that holds its own
// reference on v's memory until the consumer calls the deleter.
func exportLocal(v *zerocopy.View, versioned bool, flags dlpack.Flags) (unsafe.Pointer, error) {
	o := v.Owner()
	if err := o.Retain(); err != nil {
		return nil, err
	}
	w, err := zerocopy.Wrap(specOf(v), o)
	if err != nil {
		return nil, err
	}
	id := exports.Add(w)
	nd := w.NDim()
	p := C.dlb_export_alloc(boolInt(versioned), C.int32_t(nd), C.uint64_t(id))
	if p == nil {
		exports.Delete(id)
		w.Close()
		return nil, Errorf(MemoryError, "dlbridge: out of memory allocating a DLPack header")
	}
	var t *dlpack.DLTensor
	if versioned {
		m := (*dlpack.DLManagedTensorVersioned)(p)
		m.Flags = flags
		t = &m.DLTensor
	} else {
		t = &(*dlpack.DLManagedTensor)(p).DLTensor
	}
	t.Data = at(w.Ptr(), 0)
	t.Device = w.Device()
	t.DType = w.DType()
	if nd > 0 {
		copy(unsafe.Slice(t.Shape, nd), w.Shape())
		copy(unsafe.Slice(t.Strides, nd), w.Strides())
	}
	return p, nil
}

// importLocal takes ownership of a DLManagedTensor[Versioned]: its deleter
// runs exactly once, when the returned view's memory is released, or before
// importLocal returns an error.
func importLocal(p unsafe.Pointer, versioned bool) (*zerocopy.View, error) {
	if p == nil {
		return nil, Errorf(ValueError, "dlbridge: DLPack import of a NULL pointer")
	}
	owner := zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { C.dlb_call_deleter(p, boolInt(versioned)) }), "dlpack import")
	fail := func(err error) (*zerocopy.View, error) {
		owner.Release()
		return nil, WithCode(BufferError, err)
	}
	var t *dlpack.DLTensor
	var flags dlpack.Flags
	if versioned {
		m := (*dlpack.DLManagedTensorVersioned)(p)
		if m.Version.Major != 1 {
			return fail(Errorf(BufferError, "dlbridge: DLPack version %s is not supported (major version 1 only)", m.Version))
		}
		t, flags = &m.DLTensor, m.Flags
	} else {
		t = &(*dlpack.DLManagedTensor)(p).DLTensor
	}
	nd := int(t.NDim)
	if nd < 0 || nd > dlpack.MaxNDim {
		return fail(Errorf(BufferError, "dlbridge: DLPack ndim %d out of range (0..%d)", nd, dlpack.MaxNDim))
	}
	if nd > 0 && t.Shape == nil {
		return fail(Errorf(BufferError, "dlbridge: DLPack shape is NULL with ndim %d", nd))
	}
	var shape, strides []int64
	if nd > 0 {
		shape = unsafe.Slice(t.Shape, nd)
		if t.Strides != nil {
			strides = unsafe.Slice(t.Strides, nd)
		}
	} else {
		shape = []int64{}
	}
	if err := t.DType.Validate(); err != nil {
		return fail(err)
	}
	if t.DType.IsSubByte() && flags&dlpack.FlagSubbyteTypePadded == 0 && t.ByteOffset != 0 {
		return fail(Errorf(BufferError, "dlbridge: byte_offset with packed sub-byte dtype %s", t.DType))
	}
	return zerocopy.Wrap(zerocopy.Spec{
		Ptr: uintptr(t.Data) + uintptr(t.ByteOffset), Device: t.Device, DType: t.DType,
		Shape: shape, Strides: strides, ReadOnly: flags&dlpack.FlagReadOnly != 0,
		Copied: flags&dlpack.FlagIsCopied != 0, Padded: flags&dlpack.FlagSubbyteTypePadded != 0,
		Foreign: true,
	}, owner)
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
