package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// DevicePtr is a device address (a CUdeviceptr). With unified addressing
// (every 64-bit platform CUDA supports) the value is unique across devices
// and the host, so pointer attributes can tell which memory it is.
type DevicePtr uint64

// Add returns p advanced by off bytes.
func (p DevicePtr) Add(off int64) DevicePtr { return DevicePtr(int64(p) + off) }

func (p DevicePtr) String() string { return fmt.Sprintf("%#x", uint64(p)) }

// MemAlloc allocates n bytes of device memory (cuMemAlloc_v2). Free it with
// MemFree. n must be > 0.
func (c *Context) MemAlloc(n int64) (DevicePtr, error) {
	if err := c.use("Context.MemAlloc"); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, invalid(ErrInvalidValue, "Context.MemAlloc", "size %d: must be > 0", n)
	}
	p, r := cuMemAlloc_v2_ctx(c.h, uint64(n))
	if r != Success {
		return 0, newError("cuMemAlloc_v2", r, fmt.Sprintf("bytes=%d %v", n, c.dev))
	}
	return DevicePtr(p), nil
}

// MemFree frees device memory from MemAlloc or MemAllocManaged
// (cuMemFree_v2). A null pointer is an error, as is a pointer freed before
// (the driver answers CUDA_ERROR_INVALID_VALUE).
func (c *Context) MemFree(p DevicePtr) error {
	if err := c.use("Context.MemFree"); err != nil {
		return err
	}
	if p == 0 {
		return invalid(ErrInvalidValue, "Context.MemFree", "null device pointer")
	}
	if r := cuMemFree_v2_ctx(c.h, uint64(p)); r != Success {
		return newError("cuMemFree_v2", r, fmt.Sprintf("dptr=%v", p))
	}
	return nil
}

// MemAttachGlobal is the default attach flag of MemAllocManaged: the memory
// is accessible from any stream on any device.
const MemAttachGlobal uint32 = 1

// MemAllocManaged allocates n bytes of managed (unified) memory
// (cuMemAllocManaged) with the given attach flags (MemAttachGlobal if 0).
// Free it with MemFree.
func (c *Context) MemAllocManaged(n int64, flags uint32) (DevicePtr, error) {
	if err := c.use("Context.MemAllocManaged"); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, invalid(ErrInvalidValue, "Context.MemAllocManaged", "size %d: must be > 0", n)
	}
	if flags == 0 {
		flags = MemAttachGlobal
	}
	var p DevicePtr
	if r := cuMemAllocManaged_ctx(c.h, ptrOf(&p), uint64(n), flags); r != Success {
		return 0, newError("cuMemAllocManaged", r, fmt.Sprintf("bytes=%d flags=%#x %v", n, flags, c.dev))
	}
	return p, nil
}

// MemsetD8 sets n bytes at dst to v (cuMemsetD8_v2), ordered on the legacy
// default stream.
func (c *Context) MemsetD8(dst DevicePtr, v uint8, n int64) error {
	if err := c.use("Context.MemsetD8"); err != nil {
		return err
	}
	if err := checkDst("Context.MemsetD8", dst, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemsetD8_v2_ctx(c.h, uint64(dst), uint32(v), uint64(n)); r != Success {
		return newError("cuMemsetD8_v2", r, fmt.Sprintf("dst=%v value=%d n=%d", dst, v, n))
	}
	return nil
}

// MemsetD32 sets n 32-bit words at dst (which must be 4-byte aligned) to v
// (cuMemsetD32_v2).
func (c *Context) MemsetD32(dst DevicePtr, v uint32, n int64) error {
	if err := c.use("Context.MemsetD32"); err != nil {
		return err
	}
	if err := checkDst("Context.MemsetD32", dst, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemsetD32_v2_ctx(c.h, uint64(dst), v, uint64(n)); r != Success {
		return newError("cuMemsetD32_v2", r, fmt.Sprintf("dst=%v value=%#x n=%d", dst, v, n))
	}
	return nil
}

func checkDst(op string, dst DevicePtr, n int64) error {
	if n < 0 {
		return invalid(ErrInvalidValue, op, "count %d: must be >= 0", n)
	}
	if dst == 0 && n > 0 {
		return invalid(ErrInvalidValue, op, "null device pointer")
	}
	return nil
}

// MemGetAddressRange returns the base and size of the allocation that
// contains p (cuMemGetAddressRange_v2). It fails (ErrNotFound or
// ErrInvalidValue, as the driver answers) when the driver knows no device
// allocation there: freed memory, pageable host memory, garbage. The real
// driver wants a current context for this call; without one on the calling
// thread it is retried with a context retained through this package.
func MemGetAddressRange(p DevicePtr) (base DevicePtr, size uint64, err error) {
	if err := load(); err != nil {
		return 0, 0, err
	}
	b, size, r := cuMemGetAddressRange_v2(uint64(p))
	if r == ErrInvalidContext {
		if h := anyContext(); h != 0 {
			b, size, r = cuMemGetAddressRange_v2_ctx(h, uint64(p))
		}
	}
	if r != Success {
		return 0, 0, newError("cuMemGetAddressRange_v2", r, fmt.Sprintf("dptr=%v", p))
	}
	return DevicePtr(b), size, nil
}

// Host allocation flags (CU_MEMHOSTALLOC_*) for MemAllocHost.
const (
	HostAllocPortable      uint32 = 1 // pinned for every context, not just this one
	HostAllocDeviceMap     uint32 = 2 // mapped into the device address space
	HostAllocWriteCombined uint32 = 4 // write-combined: fast host writes, slow host reads
)

// HostMem is pinned (page-locked) host memory from MemAllocHost. Copies
// from and to it run at full bus speed and can be asynchronous.
type HostMem struct {
	p   unsafe.Pointer
	n   int
	ctx *Context
	mu  sync.Mutex
}

// MemAllocHost allocates n bytes of pinned host memory (cuMemHostAlloc with
// flags, a combination of HostAlloc*). Free it with Free.
func (c *Context) MemAllocHost(n int, flags uint32) (*HostMem, error) {
	if err := c.use("Context.MemAllocHost"); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, invalid(ErrInvalidValue, "Context.MemAllocHost", "size %d: must be > 0", n)
	}
	if err := c.addChild("Context.MemAllocHost"); err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	if r := cuMemHostAlloc_ctx(c.h, ptrOf(&p), uint64(n), flags); r != Success {
		c.removeChild()
		return nil, newError("cuMemHostAlloc", r, fmt.Sprintf("bytes=%d flags=%#x", n, flags))
	}
	return &HostMem{p: p, n: n, ctx: c}, nil
}

// Bytes returns the memory as a slice (nil after Free). The slice must not
// be used after Free.
func (h *HostMem) Bytes() []byte {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p == nil {
		return nil
	}
	// Sound: h.p points to h.n bytes of pinned memory that the driver owns
	// and keeps until Free.
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Ptr returns the host address (nil after Free).
func (h *HostMem) Ptr() unsafe.Pointer {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.p
}

// DevicePtr returns the address under which kernels reach the memory; with
// unified addressing it equals the host address.
func (h *HostMem) DevicePtr() DevicePtr { return DevicePtr(uintptr(h.Ptr())) }

// Len returns the size in bytes.
func (h *HostMem) Len() int {
	if h == nil {
		return 0
	}
	return h.n
}

// Free releases the memory (cuMemFreeHost). A second Free returns an error
// matching ErrInvalidHandle.
func (h *HostMem) Free() error {
	if h == nil {
		return errHandle("HostMem.Free", "nil *HostMem")
	}
	h.mu.Lock()
	p := h.p
	h.p = nil
	h.mu.Unlock()
	if p == nil {
		return errHandle("HostMem.Free", "pinned memory freed twice")
	}
	r := cuMemFreeHost_ctx(h.ctx.h, p)
	err := h.ctx.removeChild()
	if r != Success {
		return newError("cuMemFreeHost", r, fmt.Sprintf("p=%p", p))
	}
	return err
}

// Host registration flags (CU_MEMHOSTREGISTER_*) for MemHostRegister.
const (
	HostRegisterPortable  uint32 = 1
	HostRegisterDeviceMap uint32 = 2
	HostRegisterIOMemory  uint32 = 4
	HostRegisterReadOnly  uint32 = 8
)

// HostRegistration is existing host memory page-locked for the driver by
// MemHostRegister. While registered, Go memory stays pinned (a
// runtime.Pinner) and reachable, so the garbage collector neither moves nor
// frees it; Unregister undoes both.
type HostRegistration struct {
	p      unsafe.Pointer
	n      int
	ctx    *Context
	pinner runtime.Pinner
	mu     sync.Mutex
	done   bool
}

// registrations keeps every live HostRegistration reachable: memory the
// driver has page-locked must not be reclaimed even if the caller drops the
// handle without Unregister (a leak then, but never a dangling DMA target).
var registrations struct {
	sync.Mutex
	m map[*HostRegistration]struct{}
}

// MemHostRegister page-locks n bytes at p (cuMemHostRegister_v2) so copies
// from and to it run at pinned speed and may be asynchronous. p may point
// into Go memory (the object is pinned until Unregister) or C memory.
// Registering costs about as much as copying the memory a few times; it
// pays off for buffers transferred again and again.
func (c *Context) MemHostRegister(p unsafe.Pointer, n int, flags uint32) (*HostRegistration, error) {
	if err := c.use("Context.MemHostRegister"); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, invalid(ErrInvalidValue, "Context.MemHostRegister", "null host pointer")
	}
	if n <= 0 {
		return nil, invalid(ErrInvalidValue, "Context.MemHostRegister", "size %d: must be > 0", n)
	}
	if err := c.addChild("Context.MemHostRegister"); err != nil {
		return nil, err
	}
	reg := &HostRegistration{p: p, n: n, ctx: c}
	// Pin before the driver sees the address: from here on the object can
	// neither move nor be freed. Pin is a no-op for non-Go memory.
	reg.pinner.Pin(p)
	if r := cuMemHostRegister_v2_ctx(c.h, p, uint64(n), flags); r != Success {
		reg.pinner.Unpin()
		c.removeChild()
		return nil, newError("cuMemHostRegister_v2", r, fmt.Sprintf("p=%p bytes=%d flags=%#x", p, n, flags))
	}
	registrations.Lock()
	if registrations.m == nil {
		registrations.m = make(map[*HostRegistration]struct{})
	}
	registrations.m[reg] = struct{}{}
	registrations.Unlock()
	return reg, nil
}

// RegisterSlice registers the backing array of s (see MemHostRegister).
// E must not contain Go pointers.
func RegisterSlice[E Numeric](c *Context, s []E, flags uint32) (*HostRegistration, error) {
	if len(s) == 0 {
		return nil, invalid(ErrInvalidValue, "RegisterSlice", "empty slice")
	}
	return c.MemHostRegister(unsafe.Pointer(unsafe.SliceData(s)), len(s)*int(unsafe.Sizeof(s[0])), flags)
}

// Ptr returns the registered host address.
func (h *HostRegistration) Ptr() unsafe.Pointer { return h.p }

// Len returns the registered size in bytes.
func (h *HostRegistration) Len() int { return h.n }

// DevicePtr returns the device address of the registered memory
// (cuMemHostGetDevicePointer_v2; with unified addressing, the host address).
func (h *HostRegistration) DevicePtr() (DevicePtr, error) {
	if h == nil {
		return 0, errHandle("HostRegistration.DevicePtr", "nil *HostRegistration")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return 0, errHandle("HostRegistration.DevicePtr", "memory was unregistered")
	}
	var d DevicePtr
	if r := cuMemHostGetDevicePointer_v2_ctx(h.ctx.h, ptrOf(&d), h.p, 0); r != Success {
		return 0, newError("cuMemHostGetDevicePointer_v2", r, fmt.Sprintf("p=%p", h.p))
	}
	return d, nil
}

// Unregister unlocks the pages (cuMemHostUnregister) and unpins the Go
// memory. Work still queued on a stream that uses the memory must finish
// first (synchronize it). A second call returns an error matching
// ErrInvalidHandle.
func (h *HostRegistration) Unregister() error {
	if h == nil {
		return errHandle("HostRegistration.Unregister", "nil *HostRegistration")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return errHandle("HostRegistration.Unregister", "memory unregistered twice")
	}
	if r := cuMemHostUnregister_ctx(h.ctx.h, h.p); r != Success {
		// Still registered as far as the driver knows: keep it pinned.
		return newError("cuMemHostUnregister", r, fmt.Sprintf("p=%p", h.p))
	}
	h.done = true
	h.pinner.Unpin()
	registrations.Lock()
	delete(registrations.m, h)
	registrations.Unlock()
	return h.ctx.removeChild()
}

// Numeric lists the element types whose slices may be handed to the driver
// as raw bytes: no Go pointers inside.
type Numeric interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 |
		~int | ~uint | ~uintptr | ~float32 | ~float64 | ~complex64 | ~complex128
}

// SliceBytes views the backing array of s as bytes, without copying.
func SliceBytes[E Numeric](s []E) []byte {
	if len(s) == 0 {
		return nil
	}
	// Sound: E holds no pointers, and the result covers exactly the bytes of
	// s's elements and shares their lifetime.
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}
