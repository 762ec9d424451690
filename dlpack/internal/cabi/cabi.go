//go:build cgo

package cabi

/*
#include <stdlib.h>
#include "cabi.h"

static uintptr_t cabi_touch(void *p) { return (uintptr_t)p; }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Row is one line of the C layout table: a struct (Field == "") or one of
// its fields, with the size and offset the C compiler gave it.
type Row struct {
	Struct string // C struct name without the cabi_ prefix: "DLTensor"
	Field  string // C field name: "byte_offset"; "" for the struct itself
	Size   uintptr
	Offset uintptr
}

// Layout returns sizeof and offsetof for every DLPack struct and field, as
// compiled by the C compiler.
func Layout() []Row {
	var n C.size_t
	p := C.cabi_layout(&n)
	// The table is a static C array of n rows.
	rows := unsafe.Slice(p, int(n))
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = Row{
			Struct: C.GoString(r.strct)[len("cabi_"):],
			Field:  C.GoString(r.field),
			Size:   uintptr(r.size),
			Offset: uintptr(r.offset),
		}
	}
	return out
}

// Spec says what the C test producer builds. Nil Shape or Strides store a
// NULL pointer; DataBytes 0 stores NULL data.
type Spec struct {
	NDim                 int32
	Shape, Strides       []int64
	Code, Bits           uint8
	Lanes                uint16
	DeviceType, DeviceID int32
	Flags                uint64
	Major, Minor         uint32 // versioned only
	DataBytes            int
	ByteOffset           uint64
	NullDeleter          bool
}

// Record tracks one produced tensor: how often its deleter ran and where its
// data is. It outlives the tensor so that a second deleter call is counted,
// not a double free; Free releases it.
type Record struct{ p *C.cabi_record }

// Calls is the number of times the tensor's deleter ran.
func (r Record) Calls() int64 { return int64(C.cabi_record_calls(r.p)) }

// Data is the tensor's data pointer (without byte_offset), 0 if NULL.
func (r Record) Data() uintptr { return uintptr(r.p.data) }

// DataPointer is Data as a pointer, for reading the C memory in tests.
func (r Record) DataPointer() unsafe.Pointer { return r.p.data }

// Free releases the record (after the test is done with the tensor).
func (r Record) Free() { C.cabi_free_record(r.p) }

// TotalDeleterCalls counts the calls of every deleter the producer made.
func TotalDeleterCalls() int64 { return int64(C.cabi_total_deleter_calls()) }

// NewVersioned mallocs a DLManagedTensorVersioned with shape, strides and
// data in one C block and a C deleter that counts its calls and frees.
func NewVersioned(s Spec) (unsafe.Pointer, Record) { return produce(s, false) }

// NewLegacy is NewVersioned for the legacy DLManagedTensor.
func NewLegacy(s Spec) (unsafe.Pointer, Record) { return produce(s, true) }

func produce(s Spec, legacy bool) (unsafe.Pointer, Record) {
	// The spec and its arrays go to C memory: cgo forbids passing Go memory
	// that holds Go pointers.
	cs := (*C.cabi_spec)(C.calloc(1, C.size_t(unsafe.Sizeof(C.cabi_spec{}))))
	defer C.free(unsafe.Pointer(cs))
	cs.ndim = C.int32_t(s.NDim)
	cs.shape = cArray(s.Shape, s.NDim)
	defer C.free(unsafe.Pointer(cs.shape))
	cs.strides = cArray(s.Strides, s.NDim)
	defer C.free(unsafe.Pointer(cs.strides))
	cs.code, cs.bits, cs.lanes = C.uint8_t(s.Code), C.uint8_t(s.Bits), C.uint16_t(s.Lanes)
	cs.device_type, cs.device_id = C.int32_t(s.DeviceType), C.int32_t(s.DeviceID)
	cs.flags = C.uint64_t(s.Flags)
	cs.major, cs.minor = C.uint32_t(s.Major), C.uint32_t(s.Minor)
	cs.data_bytes = C.size_t(s.DataBytes)
	cs.byte_offset = C.uint64_t(s.ByteOffset)
	if s.NullDeleter {
		cs.null_deleter = 1
	}
	var rec *C.cabi_record
	var p unsafe.Pointer
	if legacy {
		p = C.cabi_new_legacy(cs, &rec)
	} else {
		p = C.cabi_new_versioned(cs, &rec)
	}
	if p == nil {
		panic("cabi: out of C memory")
	}
	return p, Record{rec}
}

// cArray copies a into C memory; nil stays NULL. The array has at least
// ndim elements (zero-filled past len(a)) because the producer copies ndim.
func cArray(a []int64, ndim int32) *C.int64_t {
	if a == nil {
		return nil
	}
	n := max(len(a), int(ndim), 1)
	p := (*C.int64_t)(C.calloc(C.size_t(n), 8))
	copy(unsafe.Slice((*int64)(unsafe.Pointer(p)), n), a)
	return p
}

// PassToC hands p to a C function as a void* argument, so that cgo's
// pointer checks (GODEBUG=cgocheck=1, the default) inspect the Go memory p
// points into: they panic when it holds a pointer to unpinned Go memory.
func PassToC(p unsafe.Pointer) uintptr { return uintptr(C.cabi_touch(p)) }

// CallOnNewThread calls the C function fn(arg) (void fn(void*)) on a new
// pthread that the Go runtime did not create, and waits for it.
func CallOnNewThread(fn, arg uintptr) error {
	if rc := C.cabi_call_on_new_thread(C.uintptr_t(fn), C.uintptr_t(arg)); rc != 0 {
		return fmt.Errorf("cabi: pthread error %d", int(rc))
	}
	return nil
}

// DeleteOnNewThread calls the deleter stored in tensor (a
// DLManagedTensorVersioned*, or a DLManagedTensor* when legacy) on a new
// pthread, as a C consumer finishing on its own thread would.
func DeleteOnNewThread(tensor unsafe.Pointer, legacy bool) error {
	l := C.int(0)
	if legacy {
		l = 1
	}
	if rc := C.cabi_delete_on_new_thread(C.uintptr_t(uintptr(tensor)), l); rc != 0 {
		return fmt.Errorf("cabi: pthread error %d", int(rc))
	}
	return nil
}
