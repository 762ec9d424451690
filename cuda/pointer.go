package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// PointerAttribute is a CUpointer_attribute.
type PointerAttribute int32

// Pointer attributes (values from cuda.h).
const (
	PointerAttrContext       PointerAttribute = 1
	PointerAttrMemoryType    PointerAttribute = 2
	PointerAttrDevicePointer PointerAttribute = 3
	PointerAttrHostPointer   PointerAttribute = 4
	PointerAttrSyncMemops    PointerAttribute = 6
	PointerAttrBufferID      PointerAttribute = 7
	PointerAttrIsManaged     PointerAttribute = 8
	PointerAttrDeviceOrdinal PointerAttribute = 9
	PointerAttrRangeStart    PointerAttribute = 11
	PointerAttrRangeSize     PointerAttribute = 12
	PointerAttrMapped        PointerAttribute = 13
)

// PointerAttributes is what the driver knows about an address, from one
// batched query (PointerGetAttributes).
type PointerAttributes struct {
	// MemoryType is host (pinned or registered), device, or 0 when the
	// driver knows nothing about the address (pageable host memory, freed
	// memory, garbage); the other fields are then zero and DeviceOrdinal -1.
	MemoryType    MemoryType
	DeviceOrdinal int       // the device the memory belongs to
	Context       uintptr   // the CUcontext it was allocated in
	DevicePointer DevicePtr // the address kernels use
	HostPointer   uintptr   // the host address, for host or managed memory
	RangeStart    DevicePtr // start of the allocation containing the address
	RangeSize     uint64    // its size in bytes
	IsManaged     bool      // managed (unified) memory
	Mapped        bool      // backed by physical memory
	SyncMemops    bool      // synchronous memory operations forced on it
	BufferID      uint64    // unique per allocation over the process's life
}

// Known reports whether the driver knows the address.
func (a PointerAttributes) Known() bool { return a.MemoryType != 0 }

// Kind classifies the memory: "device", "managed", "host (pinned or
// registered)" or "unknown (pageable host or not an allocation)".
func (a PointerAttributes) Kind() MemoryKind {
	switch {
	case a.MemoryType == 0:
		return KindUnknown
	case a.IsManaged:
		return KindManaged
	case a.MemoryType == MemoryTypeHost:
		return KindPinnedHost
	default:
		return KindDevice
	}
}

// MemoryKind classifies an address (PointerAttributes.Kind).
type MemoryKind int

// Memory kinds.
const (
	KindUnknown    MemoryKind = iota // not known to the driver: pageable host memory or no allocation
	KindDevice                       // device memory (cuMemAlloc, cuMemAllocAsync, ...)
	KindManaged                      // managed memory (cuMemAllocManaged)
	KindPinnedHost                   // page-locked host memory (cuMemHostAlloc or cuMemHostRegister)
)

func (k MemoryKind) String() string {
	switch k {
	case KindDevice:
		return "device"
	case KindManaged:
		return "managed"
	case KindPinnedHost:
		return "pinned host"
	}
	return "unknown"
}

// The attributes fetched by PointerGetAttributes, in order.
var batchAttrs = [...]PointerAttribute{
	PointerAttrContext, PointerAttrMemoryType, PointerAttrDevicePointer,
	PointerAttrHostPointer, PointerAttrSyncMemops, PointerAttrBufferID,
	PointerAttrIsManaged, PointerAttrDeviceOrdinal, PointerAttrRangeStart,
	PointerAttrRangeSize, PointerAttrMapped,
}

const numBatch = len(batchAttrs)

// attrBuf is the memory of one cuPointerGetAttributes call in one Go
// allocation: the void* data array (ptrs, first so that a pointer to the
// struct is a pointer to it), the attribute list and the 8-byte result
// slots that ptrs point into. Each slot is wider than any attribute's
// type, and zeroed before the call, so reading it as a uint64 is exact for
// 8-byte values and right for the "nonzero?" test of 1- or 4-byte ones.
type attrBuf struct {
	ptrs  [numBatch]uintptr
	attrs [numBatch]int32
	slots [numBatch]uint64
}

var attrPool = sync.Pool{New: func() any {
	b := new(attrBuf)
	for i := range b.slots {
		// Sound: the slots live in the same heap object as ptrs; heap
		// objects do not move, and the object is passed to the call (kept
		// alive) whenever the driver writes through these addresses.
		b.ptrs[i] = uintptr(unsafe.Pointer(&b.slots[i]))
		b.attrs[i] = int32(batchAttrs[i])
	}
	return b
}}

// PointerGetAttributes asks the driver about p in one call
// (cuPointerGetAttributes). An address it does not know is not an error:
// the result then has MemoryType 0 (see PointerAttributes).
func PointerGetAttributes(p DevicePtr) (PointerAttributes, error) {
	if err := load(); err != nil {
		return PointerAttributes{}, err
	}
	b := attrPool.Get().(*attrBuf)
	defer attrPool.Put(b)
	b.slots = [numBatch]uint64{}
	r := cuPointerGetAttributes(uint32(numBatch), unsafe.Pointer(&b.attrs), unsafe.Pointer(b), uint64(p))
	if r == ErrInvalidContext {
		if h := anyContext(); h != 0 {
			b.slots = [numBatch]uint64{}
			r = cuPointerGetAttributes_ctx(h, uint32(numBatch), unsafe.Pointer(&b.attrs), unsafe.Pointer(b), uint64(p))
		}
	}
	if r != Success {
		return PointerAttributes{}, newError("cuPointerGetAttributes", r, fmt.Sprintf("ptr=%v", p))
	}
	s := &b.slots
	a := PointerAttributes{
		Context:       uintptr(s[0]),
		MemoryType:    MemoryType(uint32(s[1])),
		DevicePointer: DevicePtr(s[2]),
		HostPointer:   uintptr(s[3]),
		SyncMemops:    s[4] != 0,
		BufferID:      s[5],
		IsManaged:     s[6] != 0,
		DeviceOrdinal: int(int32(uint32(s[7]))),
		RangeStart:    DevicePtr(s[8]),
		RangeSize:     s[9],
		Mapped:        s[10] != 0,
	}
	if a.MemoryType == 0 {
		a.DeviceOrdinal = -1
	}
	return a, nil
}

// PointerGetAttribute returns one attribute of p (cuPointerGetAttribute) as
// the raw 8-byte value (narrower attributes zero-extended). Unlike
// PointerGetAttributes it fails for an address the driver does not know.
func PointerGetAttribute(attr PointerAttribute, p DevicePtr) (uint64, error) {
	if err := load(); err != nil {
		return 0, err
	}
	v, r := cuPointerGetAttribute(int32(attr), uint64(p))
	if r == ErrInvalidContext {
		if h := anyContext(); h != 0 {
			v, r = cuPointerGetAttribute_ctx(h, int32(attr), uint64(p))
		}
	}
	if r != Success {
		return 0, newError("cuPointerGetAttribute", r, fmt.Sprintf("attr=%d ptr=%v", attr, p))
	}
	return v, nil
}

// VerifyDeviceRange checks that the n bytes at p lie inside one allocation
// the driver knows, on the device with the given ordinal (ordinal < 0: any
// device). It returns the attributes of p; the error (ErrInvalidValue or,
// for the wrong device, ErrInvalidDevice) names the bound that is violated.
func VerifyDeviceRange(p DevicePtr, n uint64, ordinal int) (PointerAttributes, error) {
	const op = "VerifyDeviceRange"
	a, err := PointerGetAttributes(p)
	if err != nil {
		return a, err
	}
	if !a.Known() {
		return a, invalid(ErrInvalidValue, op, "address %v is not in any allocation the driver knows", p)
	}
	if a.MemoryType == MemoryTypeHost && !a.IsManaged {
		return a, invalid(ErrInvalidValue, op, "address %v is pinned host memory, not device memory", p)
	}
	if ordinal >= 0 && a.DeviceOrdinal != ordinal {
		return a, invalid(ErrInvalidDevice, op, "address %v is on device %d, not device %d", p, a.DeviceOrdinal, ordinal)
	}
	if a.RangeSize == 0 {
		return a, nil // the driver gave no range; nothing more to check
	}
	end := uint64(a.RangeStart) + a.RangeSize
	if uint64(p) < uint64(a.RangeStart) || uint64(p) >= end {
		return a, invalid(ErrInvalidValue, op, "address %v outside its allocation [%v, %#x)", p, a.RangeStart, end)
	}
	if n > end-uint64(p) {
		return a, invalid(ErrInvalidValue, op, "%d bytes at %v end at %#x, past the end of the allocation [%v, %#x) by %d bytes",
			n, p, uint64(p)+n, a.RangeStart, end, n-(end-uint64(p)))
	}
	return a, nil
}
