package dlpack

import "unsafe"

// Fast validity checks for the import and export paths. They agree with
// DataType.Validate and DeviceType.Valid (check_test.go proves it for every
// value) but use switches instead of map lookups: import has a budget of
// about 150 ns for everything.

// deviceTypeOK reports whether t is a DLDeviceType of DLPack 1.3.
func deviceTypeOK(t DeviceType) bool {
	return (t >= CPU && t <= OpenCL) || (t >= Vulkan && t <= Trn)
}

// dtypeOK reports whether t is a data type DLPack defines (any lanes >= 1).
func dtypeOK(t DataType) bool {
	if t.Lanes == 0 {
		return false
	}
	b := t.Bits
	switch t.Code {
	case Int, UInt:
		return b == 1 || b == 4 || b == 8 || b == 16 || b == 32 || b == 64 || b == 128
	case Float:
		return b == 16 || b == 32 || b == 64 || b == 128
	case OpaqueHandle:
		return b > 0 && b%8 == 0
	case Bfloat:
		return b == 16
	case Complex:
		return b == 32 || b == 64 || b == 128
	case Bool, Float8E3M4, Float8E4M3, Float8E4M3B11FNUZ, Float8E4M3FN, Float8E4M3FNUZ,
		Float8E5M2, Float8E5M2FNUZ, Float8E8M0FNU:
		return b == 8
	case Float6E2M3FN, Float6E3M2FN:
		return b == 6
	case Float4E2M1FN:
		return b == 4
	}
	return false
}

// ptrOf turns an address that is not a Go pointer (C heap, device memory,
// or Go memory kept alive and pinned elsewhere) into an unsafe.Pointer for
// the ABI's void* fields. Sound: the GC ignores addresses outside its heap,
// and addresses inside it are kept alive by the view's owner.
func ptrOf(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }
