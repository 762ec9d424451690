package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// This file: what sharing device memory across processes needs from the
// driver. Stream-ordered pools created for a shareable handle type
// (NewIPCMemPool), exported as a POSIX file descriptor (ExportFD) and
// imported in another process (ImportMemPoolFD); single allocations of such
// a pool exported as 64 opaque bytes (ExportPointer) and imported from them
// (ImportPointer); interprocess events (EventInterprocess) shared by a
// 64-byte handle (IPCHandle, OpenIPCEvent). The legacy cuIpcGetMemHandle
// does not cover stream-ordered pool memory, so it is not bound.

// Shareable handle types (CUmemAllocationHandleType) a pool can be created
// for.
const (
	HandlePOSIXFD uint32 = 1 // a file descriptor, passed with SCM_RIGHTS
	HandleFabric  uint32 = 8 // a 64-byte fabric handle (multi-node NVLink)
)

// PoolExportData is an exported pool allocation (CUmemPoolPtrExportData):
// opaque bytes a process that imported the pool turns back into a pointer.
type PoolExportData [64]byte

// IPCEventHandle is an interprocess event's handle (CUipcEventHandle).
type IPCEventHandle [64]byte

// FabricHandle is a pool's fabric handle (CUmemFabricHandle).
type FabricHandle [64]byte

// memPoolProps is CUmemPoolProps (88 bytes since CUDA 11.2): allocation
// type, handle types, location (type, id), the Win32 security attributes
// pointer, maxSize (CUDA 12.2+; reserved, so zero, before), the usage
// flags and reserved bytes that must be zero.
type memPoolProps struct {
	allocType   int32
	handleTypes int32
	locType     int32
	locID       int32
	win32       uintptr
	maxSize     uint64
	reserved    [56]byte
}

var _ [88 - unsafe.Sizeof(memPoolProps{})]byte // layout check: 88 bytes
var _ [unsafe.Sizeof(memPoolProps{}) - 88]byte

// NewIPCMemPool creates a stream-ordered memory pool on c's device whose
// allocations can be shared with other processes (cuMemPoolCreate with
// handleTypes, HandlePOSIXFD or HandleFabric or both). maxSize caps the
// bytes the pool may reserve (0: the driver's default, the device's
// memory). The pool is separate from the device's default pool; allocate
// from it with Stream.MemAllocFromPoolAsync and destroy it with Destroy.
func (c *Context) NewIPCMemPool(handleTypes uint32, maxSize uint64) (*MemPool, error) {
	if err := c.use("Context.NewIPCMemPool"); err != nil {
		return nil, err
	}
	if handleTypes == 0 || handleTypes&^(HandlePOSIXFD|HandleFabric) != 0 {
		return nil, invalid(ErrInvalidValue, "Context.NewIPCMemPool", "handle types %#x: want HandlePOSIXFD, HandleFabric or both", handleTypes)
	}
	props := &memPoolProps{
		allocType:   1, // CU_MEM_ALLOCATION_TYPE_PINNED
		handleTypes: int32(handleTypes),
		locType:     1, // CU_MEM_LOCATION_TYPE_DEVICE
		locID:       c.dev.handle,
		maxSize:     maxSize,
	}
	h, r := cuMemPoolCreate_ctx(c.h, unsafe.Pointer(props))
	runtime.KeepAlive(props)
	if r != Success {
		return nil, newError("cuMemPoolCreate", r, fmt.Sprintf("%v handle types %#x max size %d", c.dev, handleTypes, maxSize))
	}
	return &MemPool{h: uintptr(h), dev: c.dev, ctx: c, created: true, fabric: handleTypes&HandleFabric != 0}, nil
}

// Destroy destroys a pool this package created or imported
// (cuMemPoolDestroy). Memory still allocated from it stays valid until
// freed; the pool goes away then. A device's default pool cannot be
// destroyed.
func (p *MemPool) Destroy() error {
	if p == nil || p.h == 0 {
		return errHandle("MemPool.Destroy", "nil or destroyed pool")
	}
	if !p.created {
		return invalid(ErrInvalidValue, "MemPool.Destroy", "%v is a device's default pool", p)
	}
	if p.noDestroy {
		return invalid(ErrNotSupported, "MemPool.Destroy", "%v is kept: its fabric export failed, and destroying such a pool crashed the driver (580, H100)", p)
	}
	h := p.h
	p.h = 0
	if r := cuMemPoolDestroy_ctx(p.ctx.h, h); r != Success {
		return newError("cuMemPoolDestroy", r, fmt.Sprintf("pool %#x", h))
	}
	return nil
}

// Imported reports whether the pool was imported from another process
// (it then serves only ImportPointer, never allocations).
func (p *MemPool) Imported() bool { return p.imported }

// MemAllocFromPoolAsync allocates n bytes from pool in stream order
// (cuMemAllocFromPoolAsync). Free them with MemFreeAsync.
func (s *Stream) MemAllocFromPoolAsync(pool *MemPool, n int64) (DevicePtr, error) {
	h, ctx, direct, err := s.get("Stream.MemAllocFromPoolAsync")
	if err != nil {
		return 0, err
	}
	if pool == nil || pool.h == 0 {
		return 0, errHandle("Stream.MemAllocFromPoolAsync", "nil or destroyed pool")
	}
	if pool.imported {
		return 0, invalid(ErrInvalidValue, "Stream.MemAllocFromPoolAsync", "%v was imported from another process: it cannot allocate", pool)
	}
	if n <= 0 {
		return 0, invalid(ErrInvalidValue, "Stream.MemAllocFromPoolAsync", "size %d: must be > 0", n)
	}
	ptr, r := cuMemAllocFromPoolAsync_auto(ctx, direct, uint64(n), pool.h, h)
	if r != Success {
		return 0, newError("cuMemAllocFromPoolAsync", r, fmt.Sprintf("bytes=%d %v stream=%#x", n, pool, h))
	}
	return DevicePtr(ptr), nil
}

// ExportFD exports the pool as a POSIX file descriptor
// (cuMemPoolExportToShareableHandle). The caller owns the descriptor: send
// it to another process (SCM_RIGHTS) and close it.
func (p *MemPool) ExportFD() (int, error) {
	if p == nil || p.h == 0 {
		return -1, errHandle("MemPool.ExportFD", "nil or destroyed pool")
	}
	fd := new(int32) // heap: the driver writes an int
	r := cuMemPoolExportToShareableHandle(unsafe.Pointer(fd), p.h, int32(HandlePOSIXFD), 0)
	if r != Success {
		return -1, newError("cuMemPoolExportToShareableHandle", r, fmt.Sprintf("%v as a POSIX file descriptor", p))
	}
	return int(*fd), nil
}

// ExportFabric exports the pool as a fabric handle (for processes on other
// nodes of a multi-node NVLink domain). Pools created without HandleFabric,
// drivers or systems without fabric support answer with an error matching
// ErrNotSupported or ErrInvalidValue.
func (p *MemPool) ExportFabric() (FabricHandle, error) {
	var out FabricHandle
	if p == nil || p.h == 0 {
		return out, errHandle("MemPool.ExportFabric", "nil or destroyed pool")
	}
	h := new(FabricHandle)
	if r := cuMemPoolExportToShareableHandle(unsafe.Pointer(h), p.h, int32(HandleFabric), 0); r != Success {
		// On the H100 machine (driver 580, no IMEX channel) the export
		// answered CUDA_ERROR_NOT_PERMITTED and a cuMemPoolDestroy of
		// the pool afterwards crashed inside the driver: such a pool is
		// kept (Destroy refuses it).
		p.noDestroy = p.fabric
		return out, newError("cuMemPoolExportToShareableHandle", r, fmt.Sprintf("%v as a fabric handle", p))
	}
	return *h, nil
}

// ImportMemPoolFD imports a pool another process exported with ExportFD
// (cuMemPoolImportFromShareableHandle) onto c's device, which must be the
// pool's. fd stays the caller's to close (the driver keeps what it needs).
// An imported pool is accessible from its own device only.
func (c *Context) ImportMemPoolFD(fd int) (*MemPool, error) {
	if err := c.use("Context.ImportMemPoolFD"); err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, invalid(ErrInvalidValue, "Context.ImportMemPoolFD", "file descriptor %d", fd)
	}
	h, r := cuMemPoolImportFromShareableHandle_ctx(c.h, uintptr(fd), int32(HandlePOSIXFD), 0)
	if r != Success {
		return nil, newError("cuMemPoolImportFromShareableHandle", r, fmt.Sprintf("fd %d on %v", fd, c.dev))
	}
	return &MemPool{h: uintptr(h), dev: c.dev, ctx: c, created: true, imported: true}, nil
}

// ImportMemPoolFabric imports a pool exported with ExportFabric.
func (c *Context) ImportMemPoolFabric(fh FabricHandle) (*MemPool, error) {
	if err := c.use("Context.ImportMemPoolFabric"); err != nil {
		return nil, err
	}
	hp := new(FabricHandle)
	*hp = fh
	h, r := cuMemPoolImportFromShareableHandle_ctx(c.h, uintptr(unsafe.Pointer(hp)), int32(HandleFabric), 0)
	runtime.KeepAlive(hp)
	if r != Success {
		return nil, newError("cuMemPoolImportFromShareableHandle", r, fmt.Sprintf("fabric handle on %v", c.dev))
	}
	return &MemPool{h: uintptr(h), dev: c.dev, ctx: c, created: true, imported: true}, nil
}

// ExportPointer exports ptr, an allocation of an IPC pool (the pointer the
// allocation returned, not one inside it), for a process that imported the
// pool (cuMemPoolExportPointer). The pool must have been exported first
// (ExportFD, ExportFabric): the driver refuses pointers of a pool not yet
// shared with CUDA_ERROR_INVALID_VALUE (seen on the H100 machine).
func ExportPointer(ptr DevicePtr) (PoolExportData, error) {
	var out PoolExportData
	if ptr == 0 {
		return out, invalid(ErrInvalidValue, "ExportPointer", "null device pointer")
	}
	d := new(PoolExportData)
	if r := cuMemPoolExportPointer(unsafe.Pointer(d), uint64(ptr)); r != Success {
		return out, newError("cuMemPoolExportPointer", r, fmt.Sprintf("dptr=%v", ptr))
	}
	return *d, nil
}

// ImportPointer maps an allocation another process exported with
// ExportPointer from this imported pool (cuMemPoolImportPointer). It must
// not be used before the exporter's allocation is ready (wait for the
// exporter's event), and must be freed (Stream.MemFreeAsync or
// Context.MemFree) before the exporter frees it.
func (p *MemPool) ImportPointer(data PoolExportData) (DevicePtr, error) {
	if p == nil || p.h == 0 {
		return 0, errHandle("MemPool.ImportPointer", "nil or destroyed pool")
	}
	if !p.imported {
		return 0, invalid(ErrInvalidValue, "MemPool.ImportPointer", "%v was not imported from another process", p)
	}
	d := new(PoolExportData)
	*d = data
	ptr, r := cuMemPoolImportPointer_ctx(p.ctx.h, p.h, unsafe.Pointer(d))
	runtime.KeepAlive(d)
	if r != Success {
		return 0, newError("cuMemPoolImportPointer", r, fmt.Sprintf("%v", p))
	}
	return DevicePtr(ptr), nil
}

// IPCHandle returns the handle another process opens the event with
// (cuIpcGetEventHandle). The event must have been created with
// EventInterprocess.
func (e *Event) IPCHandle() (IPCEventHandle, error) {
	var out IPCEventHandle
	eh, err := e.get("Event.IPCHandle")
	if err != nil {
		return out, err
	}
	h := new(IPCEventHandle)
	if r := cuIpcGetEventHandle_ctx(e.ctx.h, unsafe.Pointer(h), eh); r != Success {
		return out, newError("cuIpcGetEventHandle", r, fmt.Sprintf("event=%#x (created with EventInterprocess?)", eh))
	}
	return *h, nil
}

// OpenIPCEvent opens an interprocess event of another process
// (cuIpcOpenEventHandle) in c. Streams of c can wait for it and record it;
// Destroy closes it here (the exporter's event lives on).
func (c *Context) OpenIPCEvent(h IPCEventHandle) (*Event, error) {
	if err := c.use("Context.OpenIPCEvent"); err != nil {
		return nil, err
	}
	if err := c.addChild("Context.OpenIPCEvent"); err != nil {
		return nil, err
	}
	hp := new(IPCEventHandle) // heap: its words are read during the call
	*hp = h
	ev, r := cuIpcOpenEventHandle_ctx(c.h, unsafe.Pointer(hp))
	runtime.KeepAlive(hp)
	if r != Success {
		c.removeChild()
		return nil, newError("cuIpcOpenEventHandle", r, "")
	}
	e := &Event{ctx: c}
	e.h.Store(uintptr(ev))
	return e, nil
}
