package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Raw handles of the implicit streams (cuda.h: CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD). Each means that stream of whichever context is
// current, so a Stream carrying one makes its context current per call.
const (
	StreamHandleLegacy    uintptr = 1
	StreamHandlePerThread uintptr = 2
)

// Stream creation flags.
const (
	StreamDefault     uint32 = 0 // synchronizes with the legacy default stream
	StreamNonBlocking uint32 = 1 // runs concurrently with the legacy default stream
)

// Stream is a CUDA stream: work queued on it runs in order, concurrently
// with other streams. All methods are safe for concurrent use; queueing
// from several goroutines interleaves in an unspecified order.
type Stream struct {
	h        atomic.Uintptr // the CUstream; 0 once destroyed
	ctx      *Context
	owned    bool // created here: Destroy destroys it
	implicit bool // a handle (0, 1, 2) that means "of the current context"
}

// NewStream creates a stream (cuStreamCreateWithPriority) with flags
// (StreamDefault or StreamNonBlocking) and priority (0 is the default; lower
// numbers are more urgent, see StreamPriorityRange). Destroy it when done.
func (c *Context) NewStream(flags uint32, priority int) (*Stream, error) {
	if err := c.use("Context.NewStream"); err != nil {
		return nil, err
	}
	if flags&^StreamNonBlocking != 0 {
		return nil, invalid(ErrInvalidValue, "Context.NewStream", "flags %#x: only StreamNonBlocking (1) is defined", flags)
	}
	if err := c.addChild("Context.NewStream"); err != nil {
		return nil, err
	}
	var h uintptr
	if r := cuStreamCreateWithPriority_ctx(c.h, ptrOf(&h), flags, int32(priority)); r != Success {
		c.removeChild()
		return nil, newError("cuStreamCreateWithPriority", r, fmt.Sprintf("flags=%#x priority=%d", flags, priority))
	}
	s := &Stream{ctx: c, owned: true}
	s.h.Store(h)
	return s, nil
}

// LegacyStream returns the context's legacy default stream (handle 1): it
// waits for, and is waited for by, every blocking stream of the context.
func (c *Context) LegacyStream() *Stream { return c.WrapStream(StreamHandleLegacy) }

// PerThreadStream returns the per-thread default stream (handle 2). Note
// that "thread" is the OS thread that issues each call, which for Go code is
// not stable: prefer a stream of your own.
func (c *Context) PerThreadStream() *Stream { return c.WrapStream(StreamHandlePerThread) }

// WrapStream returns a Stream for a raw CUstream that someone else owns
// (e.g. torch.cuda.current_stream().cuda_stream, or a stream integer from
// DLPack or the CUDA Array Interface). 0, 1 and 2 mean the legacy,
// legacy and per-thread default streams of c. Destroy on it only forgets it.
func (c *Context) WrapStream(handle uintptr) *Stream {
	s := &Stream{ctx: c, implicit: handle <= StreamHandlePerThread}
	if handle == 0 {
		handle = StreamHandleLegacy
	}
	s.h.Store(handle)
	return s
}

// Handle returns the raw CUstream (0 once destroyed).
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return s.h.Load()
}

// Context returns the context the stream belongs to.
func (s *Stream) Context() *Context {
	if s == nil {
		return nil
	}
	return s.ctx
}

func (s *Stream) String() string {
	if s == nil {
		return "cuda.Stream(nil)"
	}
	return fmt.Sprintf("cuda.Stream(%#x on %v)", s.h.Load(), s.ctx.Device())
}

// get returns the handle, its context and whether the call may go direct
// (an explicit stream: its own context is used by the driver, so no
// context switch is needed unless the driver says otherwise).
func (s *Stream) get(op string) (h, ctx uintptr, direct bool, err error) {
	if s == nil {
		return 0, 0, false, errHandle(op, "nil *Stream")
	}
	h = s.h.Load()
	if h == 0 {
		return 0, 0, false, errHandle(op, "stream was destroyed")
	}
	if s.ctx == nil {
		return 0, 0, false, errHandle(op, "stream has no context")
	}
	if !s.owned && s.ctx.closed.Load() {
		// A wrapped stream holds no reference of its own on the context.
		return 0, 0, false, errHandle(op, fmt.Sprintf("the context of wrapped stream %#x was released", h))
	}
	return h, s.ctx.h, !s.implicit, nil
}

// Synchronize blocks until all work queued on s is done
// (cuStreamSynchronize). Errors of that work (a failed kernel) surface here.
func (s *Stream) Synchronize() error {
	h, ctx, direct, err := s.get("Stream.Synchronize")
	if err != nil {
		return err
	}
	if r := cuStreamSynchronize_auto(ctx, direct, h); r != Success {
		return newError("cuStreamSynchronize", r, fmt.Sprintf("stream=%#x", h))
	}
	return nil
}

// Query reports whether all work queued on s is done (cuStreamQuery),
// without blocking.
func (s *Stream) Query() (ready bool, err error) {
	h, ctx, direct, err := s.get("Stream.Query")
	if err != nil {
		return false, err
	}
	switch r := cuStreamQuery_auto(ctx, direct, h); r {
	case Success:
		return true, nil
	case ErrNotReady:
		return false, nil
	default:
		return false, newError("cuStreamQuery", r, fmt.Sprintf("stream=%#x", h))
	}
}

// WaitEvent makes all future work on s wait until e's last recorded work
// is done (cuStreamWaitEvent), without blocking the host. e may belong to
// another context or device.
func (s *Stream) WaitEvent(e *Event) error {
	h, ctx, direct, err := s.get("Stream.WaitEvent")
	if err != nil {
		return err
	}
	eh, err := e.get("Stream.WaitEvent")
	if err != nil {
		return err
	}
	if r := cuStreamWaitEvent_auto(ctx, direct, h, eh, 0); r != Success {
		return newError("cuStreamWaitEvent", r, fmt.Sprintf("stream=%#x event=%#x", h, eh))
	}
	return nil
}

// Priority returns the stream's priority (cuStreamGetPriority).
func (s *Stream) Priority() (int, error) {
	h, ctx, direct, err := s.get("Stream.Priority")
	if err != nil {
		return 0, err
	}
	var p int32
	if r := cuStreamGetPriority_auto(ctx, direct, h, ptrOf(&p)); r != Success {
		return 0, newError("cuStreamGetPriority", r, fmt.Sprintf("stream=%#x", h))
	}
	return int(p), nil
}

// Flags returns the stream's creation flags (cuStreamGetFlags).
func (s *Stream) Flags() (uint32, error) {
	h, ctx, direct, err := s.get("Stream.Flags")
	if err != nil {
		return 0, err
	}
	var f uint32
	if r := cuStreamGetFlags_auto(ctx, direct, h, ptrOf(&f)); r != Success {
		return 0, newError("cuStreamGetFlags", r, fmt.Sprintf("stream=%#x", h))
	}
	return f, nil
}

// OwnDevice is the device of the context the stream belongs to, as the
// driver records it (cuStreamGetCtx, then cuCtxGetDevice with that
// context current), not s.Context()'s: a wrapped handle of another
// library's stream may belong to another device than the context it was
// wrapped in, and that is how a caller's bare stream handle is checked
// against the device of the work before anything is queued on it. No
// context is retained. For the NULL and default-stream constants (0, 1,
// 2) the driver answers with the current context: ask only of real handles.
func (s *Stream) OwnDevice() (Device, error) {
	h, ctx, direct, err := s.get("Stream.OwnDevice")
	if err != nil {
		return Device{}, err
	}
	c, r := cuStreamGetCtx_auto(ctx, direct, h)
	if r != Success {
		return Device{}, newError("cuStreamGetCtx", r, fmt.Sprintf("stream=%#x", h))
	}
	d, r := cuCtxGetDevice_ctx(uintptr(c))
	if r != Success {
		return Device{}, newError("cuCtxGetDevice", r, fmt.Sprintf("context=%#x of stream=%#x", c, h))
	}
	// A CUdevice is its ordinal on every driver so far; look it up rather
	// than assume it, that guess first.
	n, err := DeviceCount()
	if err != nil {
		return Device{}, err
	}
	for i := -1; i < n; i++ {
		o := i
		if i < 0 {
			o = int(int32(d))
		}
		if dev, err := GetDevice(o); err == nil && dev.handle == int32(d) {
			return dev, nil
		}
	}
	return Device{}, invalid(ErrInvalidDevice, "Stream.OwnDevice", "stream %#x belongs to CUdevice %d, which no ordinal names", h, int32(d))
}

// IsCapturing reports whether s is being captured into a CUDA graph
// (cuStreamIsCapturing: active, or invalidated and not yet ended). A
// driver without the entry point has no capture: false.
func (s *Stream) IsCapturing() (bool, error) {
	h, ctx, direct, err := s.get("Stream.IsCapturing")
	if err != nil {
		return false, err
	}
	st, r := cuStreamIsCapturing_auto(ctx, direct, h)
	if r != Success {
		err := newError("cuStreamIsCapturing", r, fmt.Sprintf("stream=%#x", h))
		if errors.Is(err, ErrMissingSymbol) {
			return false, nil
		}
		return false, err
	}
	return st != 0, nil // CU_STREAM_CAPTURE_STATUS_NONE is 0
}

// Destroy destroys a stream made by NewStream (cuStreamDestroy_v2); work
// already queued still completes. For a wrapped or implicit stream it only
// forgets the handle. A second Destroy returns an error matching
// ErrInvalidHandle.
func (s *Stream) Destroy() error {
	if s == nil {
		return errHandle("Stream.Destroy", "nil *Stream")
	}
	h := s.h.Swap(0)
	if h == 0 {
		return errHandle("Stream.Destroy", "stream destroyed twice")
	}
	if !s.owned {
		return nil
	}
	r := cuStreamDestroy_v2_auto(s.ctx.h, true, h)
	err := s.ctx.removeChild()
	if r != Success {
		return newError("cuStreamDestroy_v2", r, fmt.Sprintf("stream=%#x", h))
	}
	return err
}

// MemAllocAsync allocates n bytes of device memory in stream order
// (cuMemAllocAsync): usable by work queued on s after this call (and by
// other streams once they wait for s). Free it with MemFreeAsync.
func (s *Stream) MemAllocAsync(n int64) (DevicePtr, error) {
	h, ctx, direct, err := s.get("Stream.MemAllocAsync")
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, invalid(ErrInvalidValue, "Stream.MemAllocAsync", "size %d: must be > 0", n)
	}
	p, r := cuMemAllocAsync_auto(ctx, direct, uint64(n), h)
	if r != Success {
		return 0, newError("cuMemAllocAsync", r, fmt.Sprintf("bytes=%d stream=%#x", n, h))
	}
	return DevicePtr(p), nil
}

// MemFreeAsync frees p in stream order (cuMemFreeAsync): after the work
// queued on s before it.
func (s *Stream) MemFreeAsync(p DevicePtr) error {
	h, ctx, direct, err := s.get("Stream.MemFreeAsync")
	if err != nil {
		return err
	}
	if p == 0 {
		return invalid(ErrInvalidValue, "Stream.MemFreeAsync", "null device pointer")
	}
	if r := cuMemFreeAsync_auto(ctx, direct, uint64(p), h); r != Success {
		return newError("cuMemFreeAsync", r, fmt.Sprintf("dptr=%v stream=%#x", p, h))
	}
	return nil
}

// MemsetD8Async sets n bytes at dst to v, queued on s (cuMemsetD8Async).
func (s *Stream) MemsetD8Async(dst DevicePtr, v uint8, n int64) error {
	h, ctx, direct, err := s.get("Stream.MemsetD8Async")
	if err != nil {
		return err
	}
	if err := checkDst("Stream.MemsetD8Async", dst, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemsetD8Async_auto(ctx, direct, uint64(dst), uint32(v), uint64(n), h); r != Success {
		return newError("cuMemsetD8Async", r, fmt.Sprintf("dst=%v value=%d n=%d stream=%#x", dst, v, n, h))
	}
	return nil
}

// MemsetD32Async sets n 32-bit words at dst to v, queued on s
// (cuMemsetD32Async).
func (s *Stream) MemsetD32Async(dst DevicePtr, v uint32, n int64) error {
	h, ctx, direct, err := s.get("Stream.MemsetD32Async")
	if err != nil {
		return err
	}
	if err := checkDst("Stream.MemsetD32Async", dst, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemsetD32Async_auto(ctx, direct, uint64(dst), v, uint64(n), h); r != Success {
		return newError("cuMemsetD32Async", r, fmt.Sprintf("dst=%v value=%#x n=%d stream=%#x", dst, v, n, h))
	}
	return nil
}

// MemcpyHtoDAsync queues a copy of len(src) bytes from host memory to dst
// on s (cuMemcpyHtoDAsync_v2).
//
// From pinned memory (HostMem, a HostRegistration) the call returns at once
// and the copy runs later: src must stay alive and unchanged until the
// stream passes the copy. From ordinary (pageable) memory the driver stages
// the data before returning, so src may be reused at once, but the copy is
// slower.
func (s *Stream) MemcpyHtoDAsync(dst DevicePtr, src []byte) error {
	h, ctx, direct, err := s.get("Stream.MemcpyHtoDAsync")
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	if dst == 0 {
		return invalid(ErrInvalidValue, "Stream.MemcpyHtoDAsync", "null device pointer")
	}
	if r := cuMemcpyHtoDAsync_v2_auto(ctx, direct, uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src)), h); r != Success {
		return newError("cuMemcpyHtoDAsync_v2", r, fmt.Sprintf("dst=%v bytes=%d stream=%#x", dst, len(src), h))
	}
	return nil
}

// MemcpyDtoHAsync queues a copy of len(dst) bytes from src to host memory
// on s (cuMemcpyDtoHAsync_v2). Into pinned memory the data is there only
// once the stream passes the copy (synchronize s, or an event recorded after
// it); into pageable memory the driver returns when the copy is done.
func (s *Stream) MemcpyDtoHAsync(dst []byte, src DevicePtr) error {
	h, ctx, direct, err := s.get("Stream.MemcpyDtoHAsync")
	if err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if src == 0 {
		return invalid(ErrInvalidValue, "Stream.MemcpyDtoHAsync", "null device pointer")
	}
	if r := cuMemcpyDtoHAsync_v2_auto(ctx, direct, unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst)), h); r != Success {
		return newError("cuMemcpyDtoHAsync_v2", r, fmt.Sprintf("src=%v bytes=%d stream=%#x", src, len(dst), h))
	}
	return nil
}

// MemcpyDtoDAsync queues a device-to-device copy of n bytes on s
// (cuMemcpyDtoDAsync_v2).
func (s *Stream) MemcpyDtoDAsync(dst, src DevicePtr, n int64) error {
	h, ctx, direct, err := s.get("Stream.MemcpyDtoDAsync")
	if err != nil {
		return err
	}
	if err := checkPair("Stream.MemcpyDtoDAsync", dst, src, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemcpyDtoDAsync_v2_auto(ctx, direct, uint64(dst), uint64(src), uint64(n), h); r != Success {
		return newError("cuMemcpyDtoDAsync_v2", r, fmt.Sprintf("dst=%v src=%v bytes=%d stream=%#x", dst, src, n, h))
	}
	return nil
}

// MemcpyPeerAsync queues a copy of n bytes from src in srcCtx to dst in
// dstCtx on s (cuMemcpyPeerAsync).
func (s *Stream) MemcpyPeerAsync(dst DevicePtr, dstCtx *Context, src DevicePtr, srcCtx *Context, n int64) error {
	h, ctx, direct, err := s.get("Stream.MemcpyPeerAsync")
	if err != nil {
		return err
	}
	if err := dstCtx.use("Stream.MemcpyPeerAsync(dstCtx)"); err != nil {
		return err
	}
	if err := srcCtx.use("Stream.MemcpyPeerAsync(srcCtx)"); err != nil {
		return err
	}
	if err := checkPair("Stream.MemcpyPeerAsync", dst, src, n); err != nil || n == 0 {
		return err
	}
	if r := cuMemcpyPeerAsync_auto(ctx, direct, uint64(dst), dstCtx.h, uint64(src), srcCtx.h, uint64(n), h); r != Success {
		return newError("cuMemcpyPeerAsync", r, fmt.Sprintf("dst=%v on %v src=%v on %v bytes=%d stream=%#x", dst, dstCtx.dev, src, srcCtx.dev, n, h))
	}
	return nil
}

// Memcpy2DAsync queues a 2D pitched copy on s (cuMemcpy2DAsync_v2). Host
// operands must be pinned memory that stays alive until the stream passes
// the copy (the driver rejects pageable memory here).
func (s *Stream) Memcpy2DAsync(m *Memcpy2D) error {
	h, ctx, direct, err := s.get("Stream.Memcpy2DAsync")
	if err != nil {
		return err
	}
	if err := m.check("Stream.Memcpy2DAsync"); err != nil {
		return err
	}
	if m.WidthInBytes == 0 || m.Height == 0 {
		return nil
	}
	var pin runtime.Pinner
	pinHosts(&pin, m.SrcHost, m.DstHost)
	r := cuMemcpy2DAsync_v2_auto(ctx, direct, unsafe.Pointer(m), h)
	pin.Unpin()
	if r != Success {
		return newError("cuMemcpy2DAsync_v2", r, m.String())
	}
	return nil
}

// Memcpy3DAsync queues a 3D pitched copy on s (cuMemcpy3DAsync_v2), with
// the same rules for host operands as Memcpy2DAsync.
func (s *Stream) Memcpy3DAsync(m *Memcpy3D) error {
	h, ctx, direct, err := s.get("Stream.Memcpy3DAsync")
	if err != nil {
		return err
	}
	if err := m.check("Stream.Memcpy3DAsync"); err != nil {
		return err
	}
	if m.WidthInBytes == 0 || m.Height == 0 || m.Depth == 0 {
		return nil
	}
	var pin runtime.Pinner
	pinHosts(&pin, m.SrcHost, m.DstHost)
	r := cuMemcpy3DAsync_v2_auto(ctx, direct, unsafe.Pointer(m), h)
	pin.Unpin()
	if r != Success {
		return newError("cuMemcpy3DAsync_v2", r, m.String())
	}
	return nil
}
