package cuda

import (
	"fmt"
	"unsafe"
)

// MemPool is a device's stream-ordered memory pool (a CUmemoryPool): what
// Stream.MemAllocAsync allocates from and Stream.MemFreeAsync returns to.
// Memory freed to it stays reserved, for the next allocation to reuse at
// once, until the pool holds more than its release threshold at a
// synchronization point.
type MemPool struct {
	h        uintptr
	dev      Device
	ctx      *Context // pools this package created or imported (ipc.go)
	created  bool     // made by NewIPCMemPool or an import: Destroy may destroy it
	imported bool     // imported from another process: no allocations
	fabric   bool     // created for fabric handles
	// noDestroy: a fabric export failed; Destroy refuses (ipc.go).
	noDestroy bool
}

// CUmemPool_attribute values used here (cuda.h).
const (
	memPoolAttrReleaseThreshold   = 4
	memPoolAttrReservedMemCurrent = 5
	memPoolAttrUsedMemCurrent     = 7
)

// DefaultMemPool returns d's default memory pool
// (cuDeviceGetDefaultMemPool): the pool cuMemAllocAsync uses unless a
// stream's device was given another. Drivers before CUDA 11.2 lack it
// (ErrMissingSymbol).
func (d Device) DefaultMemPool() (*MemPool, error) {
	if err := d.check("Device.DefaultMemPool"); err != nil {
		return nil, err
	}
	h, r := cuDeviceGetDefaultMemPool(d.handle)
	if r != Success {
		return nil, newError("cuDeviceGetDefaultMemPool", r, d.String())
	}
	return &MemPool{h: uintptr(h), dev: d}, nil
}

// Handle returns the raw CUmemoryPool.
func (p *MemPool) Handle() uintptr { return p.h }

func (p *MemPool) String() string { return fmt.Sprintf("cuda.MemPool(%#x of %v)", p.h, p.dev) }

func (p *MemPool) u64(op string, attr int32) (uint64, error) {
	var v uint64
	if r := cuMemPoolGetAttribute(p.h, attr, unsafe.Pointer(&v)); r != Success {
		return 0, newError("cuMemPoolGetAttribute", r, fmt.Sprintf("%s: %v attr=%d", op, p, attr))
	}
	return v, nil
}

// SetReleaseThreshold sets how many bytes the pool keeps reserved when
// memory is freed to it (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD): at a
// synchronization point it returns memory above that to the system.
// The driver's default is 0 (everything returned at the next sync).
func (p *MemPool) SetReleaseThreshold(bytes uint64) error {
	v := bytes
	if r := cuMemPoolSetAttribute(p.h, memPoolAttrReleaseThreshold, unsafe.Pointer(&v)); r != Success {
		return newError("cuMemPoolSetAttribute", r, fmt.Sprintf("%v release threshold %d", p, bytes))
	}
	return nil
}

// ReleaseThreshold returns the pool's release threshold in bytes.
func (p *MemPool) ReleaseThreshold() (uint64, error) {
	return p.u64("MemPool.ReleaseThreshold", memPoolAttrReleaseThreshold)
}

// Usage returns the bytes the pool has reserved from the device and the
// bytes of those handed out to allocations not yet freed.
func (p *MemPool) Usage() (reserved, used uint64, err error) {
	if reserved, err = p.u64("MemPool.Usage", memPoolAttrReservedMemCurrent); err != nil {
		return 0, 0, err
	}
	if used, err = p.u64("MemPool.Usage", memPoolAttrUsedMemCurrent); err != nil {
		return 0, 0, err
	}
	return reserved, used, nil
}

// memAccessDesc is CUmemAccessDesc: a CUmemLocation (type, id) and the
// access flags.
type memAccessDesc struct {
	locType, id int32
	flags       int32
}

// SetPeerAccess lets peer read and write the pool's allocations, or takes
// that back (cuMemPoolSetAccess). Pool memory does not follow
// Context.EnablePeerAccess: without this a peer's kernels cannot touch it
// and the driver stages copies between the two through the host.
func (p *MemPool) SetPeerAccess(peer Device, readWrite bool) error {
	if err := peer.check("MemPool.SetPeerAccess"); err != nil {
		return err
	}
	d := memAccessDesc{locType: 1, id: peer.handle} // CU_MEM_LOCATION_TYPE_DEVICE, the CUdevice
	if readWrite {
		d.flags = 3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	}
	if r := cuMemPoolSetAccess(p.h, unsafe.Pointer(&d), 1); r != Success {
		return newError("cuMemPoolSetAccess", r, fmt.Sprintf("%v peer=%v rw=%v", p, peer, readWrite))
	}
	return nil
}

// TrimTo returns reserved memory the pool does not use to the system until
// it keeps at most keep bytes (cuMemPoolTrimTo).
func (p *MemPool) TrimTo(keep uint64) error {
	if r := cuMemPoolTrimTo(p.h, keep); r != Success {
		return newError("cuMemPoolTrimTo", r, fmt.Sprintf("%v keep %d", p, keep))
	}
	return nil
}
