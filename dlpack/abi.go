package dlpack

import "unsafe"

// The Go mirrors of DLPack's C structs. Field order, types and padding match
// dlpack.h exactly on every 64-bit platform Go supports; abi_test.go proves it
// against C definitions compiled by cgo. C function pointers are uintptr.

// DLDevice mirrors DLDevice (8 bytes).
type DLDevice = Device

// DLDataType mirrors DLDataType (4 bytes).
type DLDataType = DataType

// DLPackVersion mirrors DLPackVersion (8 bytes).
type DLPackVersion = Version

// DLTensor mirrors DLTensor (48 bytes on 64-bit platforms).
type DLTensor struct {
	Data       unsafe.Pointer // device or host address; may be opaque on some devices
	Device     DLDevice
	NDim       int32
	DType      DLDataType
	Shape      *int64 // ndim extents
	Strides    *int64 // ndim strides in elements; NULL means compact row-major (before 1.2)
	ByteOffset uint64
}

// DLManagedTensor mirrors the legacy DLManagedTensor (64 bytes).
type DLManagedTensor struct {
	DLTensor   DLTensor
	ManagerCtx unsafe.Pointer
	Deleter    uintptr // void (*)(DLManagedTensor*)
}

// DLManagedTensorVersioned mirrors DLManagedTensorVersioned (80 bytes).
type DLManagedTensorVersioned struct {
	Version    DLPackVersion
	ManagerCtx unsafe.Pointer
	Deleter    uintptr // void (*)(DLManagedTensorVersioned*)
	Flags      Flags
	DLTensor   DLTensor
}

// MaxNDim is the largest ndim this package accepts from foreign input.
const MaxNDim = 64
