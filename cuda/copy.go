package cuda

import (
	"fmt"
	"runtime"
	"structs"
	"unsafe"
)

// The synchronous copies below run on the legacy default stream of the
// context: they wait for prior work on the context's blocking streams and
// return when the data has arrived. The asynchronous ones are Stream
// methods (stream.go).

// MemcpyHtoD copies len(src) bytes from host memory to dst
// (cuMemcpyHtoD_v2).
func (c *Context) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if err := c.use("Context.MemcpyHtoD"); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	if dst == 0 {
		return invalid(ErrInvalidValue, "Context.MemcpyHtoD", "null device pointer")
	}
	if r := cuMemcpyHtoD_v2_ctx(c.h, uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src))); r != Success {
		return newError("cuMemcpyHtoD_v2", r, fmt.Sprintf("dst=%v bytes=%d", dst, len(src)))
	}
	return nil
}

// MemcpyDtoH copies len(dst) bytes from src to host memory
// (cuMemcpyDtoH_v2).
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if err := c.use("Context.MemcpyDtoH"); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if src == 0 {
		return invalid(ErrInvalidValue, "Context.MemcpyDtoH", "null device pointer")
	}
	if r := cuMemcpyDtoH_v2_ctx(c.h, unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst))); r != Success {
		return newError("cuMemcpyDtoH_v2", r, fmt.Sprintf("src=%v bytes=%d", src, len(dst)))
	}
	return nil
}

// MemcpyDtoD copies n bytes between device allocations (cuMemcpyDtoD_v2).
// With unified addressing the two may be on different devices.
func (c *Context) MemcpyDtoD(dst, src DevicePtr, n int64) error {
	if err := c.use("Context.MemcpyDtoD"); err != nil {
		return err
	}
	if err := checkPair("Context.MemcpyDtoD", dst, src, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemcpyDtoD_v2_ctx(c.h, uint64(dst), uint64(src), uint64(n)); r != Success {
		return newError("cuMemcpyDtoD_v2", r, fmt.Sprintf("dst=%v src=%v bytes=%d", dst, src, n))
	}
	return nil
}

func checkPair(op string, dst, src DevicePtr, n int64) error {
	if n < 0 {
		return invalid(ErrInvalidValue, op, "byte count %d: must be >= 0", n)
	}
	if n > 0 && dst == 0 {
		return invalid(ErrInvalidValue, op, "null destination pointer")
	}
	if n > 0 && src == 0 {
		return invalid(ErrInvalidValue, op, "null source pointer")
	}
	return nil
}

// MemcpyPeer copies n bytes from src in srcCtx to dst in dstCtx
// (cuMemcpyPeer), between devices, synchronously.
func MemcpyPeer(dst DevicePtr, dstCtx *Context, src DevicePtr, srcCtx *Context, n int64) error {
	if err := dstCtx.use("MemcpyPeer(dstCtx)"); err != nil {
		return err
	}
	if err := srcCtx.use("MemcpyPeer(srcCtx)"); err != nil {
		return err
	}
	if err := checkPair("MemcpyPeer", dst, src, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemcpyPeer_ctx(dstCtx.h, uint64(dst), dstCtx.h, uint64(src), srcCtx.h, uint64(n)); r != Success {
		return newError("cuMemcpyPeer", r, fmt.Sprintf("dst=%v on %v src=%v on %v bytes=%d", dst, dstCtx.dev, src, srcCtx.dev, n))
	}
	return nil
}

// MemoryType is a CUmemorytype: where a copy operand or a pointer lives.
type MemoryType uint32

// Memory types. A pointer the driver does not know (pageable host memory,
// garbage) has MemoryType 0 in PointerAttributes.
const (
	MemoryTypeHost    MemoryType = 1
	MemoryTypeDevice  MemoryType = 2
	MemoryTypeArray   MemoryType = 3
	MemoryTypeUnified MemoryType = 4
)

func (t MemoryType) String() string {
	switch t {
	case 0:
		return "unregistered"
	case MemoryTypeHost:
		return "host"
	case MemoryTypeDevice:
		return "device"
	case MemoryTypeArray:
		return "array"
	case MemoryTypeUnified:
		return "unified"
	}
	return fmt.Sprintf("MemoryType(%d)", uint32(t))
}

// Memcpy2D mirrors CUDA_MEMCPY2D field for field (layout tested against C):
// a copy of Height rows of WidthInBytes bytes, the rows Pitch bytes apart on
// each side, starting at (XInBytes, Y) of the source and destination.
//
// Set SrcMemoryType/DstMemoryType to MemoryTypeHost with SrcHost/DstHost,
// or MemoryTypeDevice (or MemoryTypeUnified) with SrcDevice/DstDevice.
// Host pointers may point into Go memory: Memcpy2D keeps it pinned during
// the call; for Memcpy2DAsync it must be pinned (page-locked) host memory
// that stays alive until the stream passes the copy.
type Memcpy2D struct {
	_ structs.HostLayout

	SrcXInBytes   uint64         // size_t
	SrcY          uint64         // size_t
	SrcMemoryType MemoryType     // CUmemorytype
	SrcHost       unsafe.Pointer // const void*
	SrcDevice     DevicePtr      // CUdeviceptr
	SrcArray      uintptr        // CUarray
	SrcPitch      uint64         // size_t

	DstXInBytes   uint64
	DstY          uint64
	DstMemoryType MemoryType
	DstHost       unsafe.Pointer
	DstDevice     DevicePtr
	DstArray      uintptr
	DstPitch      uint64

	WidthInBytes uint64
	Height       uint64
}

// Memcpy3D mirrors CUDA_MEMCPY3D field for field (layout tested against C):
// Depth slices of Height rows of WidthInBytes bytes; rows are Pitch bytes
// apart and slices Pitch*Height bytes apart on each side. Reserved0 and
// Reserved1 must stay nil.
type Memcpy3D struct {
	_ structs.HostLayout

	SrcXInBytes   uint64
	SrcY          uint64
	SrcZ          uint64
	SrcLOD        uint64
	SrcMemoryType MemoryType
	SrcHost       unsafe.Pointer
	SrcDevice     DevicePtr
	SrcArray      uintptr
	Reserved0     unsafe.Pointer
	SrcPitch      uint64
	SrcHeight     uint64

	DstXInBytes   uint64
	DstY          uint64
	DstZ          uint64
	DstLOD        uint64
	DstMemoryType MemoryType
	DstHost       unsafe.Pointer
	DstDevice     DevicePtr
	DstArray      uintptr
	Reserved1     unsafe.Pointer
	DstPitch      uint64
	DstHeight     uint64

	WidthInBytes uint64
	Height       uint64
	Depth        uint64
}

// checkSide validates one operand of a 2D/3D copy.
func checkSide(op, side string, t MemoryType, host unsafe.Pointer, dev DevicePtr, array uintptr) error {
	switch t {
	case MemoryTypeHost:
		if host == nil {
			return invalid(ErrInvalidValue, op, "%sMemoryType is host but %sHost is nil", side, side)
		}
	case MemoryTypeDevice, MemoryTypeUnified:
		if dev == 0 {
			return invalid(ErrInvalidValue, op, "%sMemoryType is %v but %sDevice is 0", side, t, side)
		}
	case MemoryTypeArray:
		if array == 0 {
			return invalid(ErrInvalidValue, op, "%sMemoryType is array but %sArray is 0", side, side)
		}
	default:
		return invalid(ErrInvalidValue, op, "%sMemoryType %d is not host, device, array or unified", side, uint32(t))
	}
	return nil
}

func (m *Memcpy2D) check(op string) error {
	if m == nil {
		return invalid(ErrInvalidValue, op, "nil *Memcpy2D")
	}
	if err := checkSide(op, "Src", m.SrcMemoryType, m.SrcHost, m.SrcDevice, m.SrcArray); err != nil {
		return err
	}
	if err := checkSide(op, "Dst", m.DstMemoryType, m.DstHost, m.DstDevice, m.DstArray); err != nil {
		return err
	}
	if m.Height > 1 {
		if m.SrcMemoryType != MemoryTypeArray && m.SrcPitch < m.WidthInBytes {
			return invalid(ErrInvalidValue, op, "SrcPitch %d < WidthInBytes %d", m.SrcPitch, m.WidthInBytes)
		}
		if m.DstMemoryType != MemoryTypeArray && m.DstPitch < m.WidthInBytes {
			return invalid(ErrInvalidValue, op, "DstPitch %d < WidthInBytes %d", m.DstPitch, m.WidthInBytes)
		}
	}
	return nil
}

func (m *Memcpy2D) String() string {
	return fmt.Sprintf("src=%v(%p|%v)+(%d,%d) pitch %d -> dst=%v(%p|%v)+(%d,%d) pitch %d, %dx%d bytes",
		m.SrcMemoryType, m.SrcHost, m.SrcDevice, m.SrcXInBytes, m.SrcY, m.SrcPitch,
		m.DstMemoryType, m.DstHost, m.DstDevice, m.DstXInBytes, m.DstY, m.DstPitch,
		m.WidthInBytes, m.Height)
}

func (m *Memcpy3D) check(op string) error {
	if m == nil {
		return invalid(ErrInvalidValue, op, "nil *Memcpy3D")
	}
	if m.Reserved0 != nil || m.Reserved1 != nil {
		return invalid(ErrInvalidValue, op, "Reserved0 and Reserved1 must be nil")
	}
	if err := checkSide(op, "Src", m.SrcMemoryType, m.SrcHost, m.SrcDevice, m.SrcArray); err != nil {
		return err
	}
	if err := checkSide(op, "Dst", m.DstMemoryType, m.DstHost, m.DstDevice, m.DstArray); err != nil {
		return err
	}
	if m.Height > 1 || m.Depth > 1 {
		if m.SrcMemoryType != MemoryTypeArray && m.SrcPitch < m.WidthInBytes {
			return invalid(ErrInvalidValue, op, "SrcPitch %d < WidthInBytes %d", m.SrcPitch, m.WidthInBytes)
		}
		if m.DstMemoryType != MemoryTypeArray && m.DstPitch < m.WidthInBytes {
			return invalid(ErrInvalidValue, op, "DstPitch %d < WidthInBytes %d", m.DstPitch, m.WidthInBytes)
		}
	}
	if m.Depth > 1 {
		if m.SrcMemoryType != MemoryTypeArray && m.SrcHeight < m.Height {
			return invalid(ErrInvalidValue, op, "SrcHeight %d < Height %d", m.SrcHeight, m.Height)
		}
		if m.DstMemoryType != MemoryTypeArray && m.DstHeight < m.Height {
			return invalid(ErrInvalidValue, op, "DstHeight %d < Height %d", m.DstHeight, m.Height)
		}
	}
	return nil
}

func (m *Memcpy3D) String() string {
	return fmt.Sprintf("src=%v(%p|%v)+(%d,%d,%d) pitch %d height %d -> dst=%v(%p|%v)+(%d,%d,%d) pitch %d height %d, %dx%dx%d bytes",
		m.SrcMemoryType, m.SrcHost, m.SrcDevice, m.SrcXInBytes, m.SrcY, m.SrcZ, m.SrcPitch, m.SrcHeight,
		m.DstMemoryType, m.DstHost, m.DstDevice, m.DstXInBytes, m.DstY, m.DstZ, m.DstPitch, m.DstHeight,
		m.WidthInBytes, m.Height, m.Depth)
}

// pinHosts pins the Go objects a copy descriptor points at, so the struct
// (Go memory holding Go pointers) may be handed to C (cgo's pointer rules)
// and the objects cannot move or vanish during the call.
func pinHosts(p *runtime.Pinner, a, b unsafe.Pointer) {
	if a != nil {
		p.Pin(a)
	}
	if b != nil {
		p.Pin(b)
	}
}

// Memcpy2D performs a 2D pitched copy synchronously (cuMemcpy2D_v2).
func (c *Context) Memcpy2D(m *Memcpy2D) error {
	if err := c.use("Context.Memcpy2D"); err != nil {
		return err
	}
	if err := m.check("Context.Memcpy2D"); err != nil {
		return err
	}
	if m.WidthInBytes == 0 || m.Height == 0 {
		return nil
	}
	var pin runtime.Pinner
	pinHosts(&pin, m.SrcHost, m.DstHost)
	r := cuMemcpy2D_v2_ctx(c.h, unsafe.Pointer(m))
	pin.Unpin()
	if r != Success {
		return newError("cuMemcpy2D_v2", r, m.String())
	}
	return nil
}

// Memcpy3D performs a 3D pitched copy synchronously (cuMemcpy3D_v2).
func (c *Context) Memcpy3D(m *Memcpy3D) error {
	if err := c.use("Context.Memcpy3D"); err != nil {
		return err
	}
	if err := m.check("Context.Memcpy3D"); err != nil {
		return err
	}
	if m.WidthInBytes == 0 || m.Height == 0 || m.Depth == 0 {
		return nil
	}
	var pin runtime.Pinner
	pinHosts(&pin, m.SrcHost, m.DstHost)
	r := cuMemcpy3D_v2_ctx(c.h, unsafe.Pointer(m))
	pin.Unpin()
	if r != Success {
		return newError("cuMemcpy3D_v2", r, m.String())
	}
	return nil
}
