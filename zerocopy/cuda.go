package zerocopy

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// This file: device views (AllocCUDA, AllocCUDAAsync, AllocPinned), the
// per-device state that copies share (retained primary contexts, an
// internal stream, an event pool), stream ordering between views, and the
// checks of foreign CUDA memory (VerifyCUDA, ClassifyPointer).

// ErrNotInAllocation is matched (errors.Is) by VerifyCUDA errors for a view
// whose bytes do not lie inside one allocation the driver knows.
var ErrNotInAllocation = errors.New("zerocopy: view not inside one CUDA allocation")

// ErrWrongDevice is matched by VerifyCUDA errors for memory that lives on
// another device, or is of another kind (device, pinned host, managed),
// than the view claims.
var ErrWrongDevice = errors.New("zerocopy: view on the wrong device")

// devState is what this package keeps per CUDA device: the retained
// primary context (never released: it lives as long as the process, as in
// PyTorch and CuPy), the work stream (non-blocking) for work given no
// stream, and a pool of idle events for ordering streams.
type devState struct {
	ctx    *cuda.Context
	stream *cuda.Stream // made on first use

	mu     sync.Mutex
	events []*cuda.Event // idle events (pending.go)

	// wrapped is the last stream of another library StreamOf wrapped: a
	// call of a Go function on the caller's stream asks for the same one
	// call after call, and a wrapper (not owned, read-only) can be shared.
	wrapped atomic.Pointer[cuda.Stream]

	kernelState // the built-in kernels, loaded on first use
	poolState   // the stream-ordered memory pool's settings (pool.go)
}

var devices struct {
	sync.Mutex
	m map[int]*devState
	// fast holds the states of the first ordinals once made (they live
	// as long as the process): device reads them without the lock, whose
	// two locked instructions were a tenth of a call's time on the host
	// (bench/results/callpath-2core).
	fast [16]atomic.Pointer[devState]
}

// device returns the state of CUDA device ordinal, retaining its primary
// context on first use.
func device(ordinal int) (*devState, error) {
	if ordinal >= 0 && ordinal < len(devices.fast) {
		if d := devices.fast[ordinal].Load(); d != nil {
			return d, nil
		}
	}
	devices.Lock()
	defer devices.Unlock()
	if d := devices.m[ordinal]; d != nil {
		return d, nil
	}
	ctx, err := cuda.Retain(ordinal)
	if err != nil {
		return nil, err
	}
	if devices.m == nil {
		devices.m = make(map[int]*devState)
	}
	d := &devState{ctx: ctx}
	devices.m[ordinal] = d
	if ordinal >= 0 && ordinal < len(devices.fast) {
		devices.fast[ordinal].Store(d)
	}
	return d, nil
}

// defaultStream returns the device's internal non-blocking stream.
func (d *devState) defaultStream() (*cuda.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stream == nil {
		s, err := d.ctx.NewStream(cuda.StreamNonBlocking, 0)
		if err != nil {
			return nil, err
		}
		noteStream(s)
		d.stream = s
	}
	return d.stream, nil
}

// streamOwners remembers which device each stream handle this package has
// seen belongs to, so that a pending write recorded on a host view can be
// waited for with an event of the right context.
var streamOwners sync.Map // uintptr -> int (device ordinal)

func noteStream(s *cuda.Stream) {
	if h := s.Handle(); h > cuda.StreamHandlePerThread {
		// Always store: a destroyed stream's handle may come back for a
		// stream of another device.
		if o, ok := streamOwners.Load(h); !ok || o.(int) != s.Context().Device().Ordinal() {
			streamOwners.Store(h, s.Context().Device().Ordinal())
		}
	}
}

// cudaMemory frees device memory from AllocCUDA / AllocCUDAAsync exactly
// once (the Owner guarantees that). For stream-ordered memory it frees in
// stream order after every stream a copy used it on.
type cudaMemory struct {
	owner Owner
	d     *devState
	ptr   cuda.DevicePtr
	async *cuda.Stream // nil: cuMemFree
	// size and pool are set for memory of the device's exportable pool
	// (pool.go): another process can map it (ExportableAllocation).
	size int64
	pool *cuda.MemPool

	mu       sync.Mutex
	used     map[uintptr]pooledEvent // per other stream that used the memory: an event after its last use
	defaults [3]bool                 // the legacy (1) and per-thread (2) default streams used it
	lost     bool                    // a use could not be marked: free synchronously
	// freeBy, when set (HandOverFree), frees the memory in place of
	// Release's own free: other processes may still map it then.
	freeBy func(*cuda.Stream)
}

// noteUse marks the work queued so far on stream h (another library's
// stream, or 1/2 for the default streams) that uses the memory, with an
// event recorded now, so that the free waits for it. The handle itself is
// not kept: its owner may destroy the stream before the memory is freed,
// and the driver crashes on a destroyed stream's handle (seen in the chain
// matrix on the H100, cuEventRecord in Release). The default streams are
// the exception: they live as long as the context, so the free orders
// after them itself, and an export to them (what PyTorch asks for on its
// default stream) costs no driver call.
func (m *cudaMemory) noteUse(h uintptr, viewDev dlpack.Device) {
	if m.async == nil || h == 0 || h == m.async.Handle() {
		return
	}
	if h == cuda.StreamHandleLegacy || h == cuda.StreamHandlePerThread {
		m.mu.Lock()
		m.defaults[h] = true
		m.mu.Unlock()
		return
	}
	e, d, err := markStream(h, -1, viewDev)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.lost = true
		return
	}
	if old, ok := m.used[h]; ok {
		old.d.putEvent(old.e) // the new record covers what the old one did
	}
	if m.used == nil {
		m.used = make(map[uintptr]pooledEvent)
	}
	m.used[h] = pooledEvent{d, e}
}

// FreeOnWorkStream lets the stream-ordered memory of v outlive the stream
// AllocCUDAAsync allocated it on: it will be freed on its device's work
// stream, which lives as long as the process, after the work queued on the
// allocation stream so far (one event, recorded now). Use it when that
// stream belongs to someone else who may destroy it before the memory is
// freed (a caller's stream: pyfunc does it for the results of a call); a
// free queued on a destroyed stream crashes the driver. Work queued on
// that stream later is ordered before the free the usual ways (exports
// and copies mark the streams they hand the memory to). Other memory, and
// memory of a work stream or a default stream, is left as it is.
func FreeOnWorkStream(v *View) error {
	m, ok := v.owner.rel.(*cudaMemory)
	if !ok || m.async == nil {
		return nil
	}
	m.mu.Lock()
	async := m.async
	m.mu.Unlock()
	h := async.Handle()
	if h == 0 || h == cuda.StreamHandleLegacy || h == cuda.StreamHandlePerThread {
		return nil
	}
	ws, err := m.d.defaultStream()
	if err != nil {
		return fmt.Errorf("zerocopy: FreeOnWorkStream: %w", err)
	}
	if ws.Handle() == h {
		return nil
	}
	e, d, err := markStream(h, m.d.ctx.Device().Ordinal(), v.device)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.lost = true // the free waits for the device instead
		return fmt.Errorf("zerocopy: FreeOnWorkStream: %w", err)
	}
	if old, ok := m.used[h]; ok {
		old.d.putEvent(old.e)
	}
	if m.used == nil {
		m.used = make(map[uintptr]pooledEvent)
	}
	m.used[h] = pooledEvent{d, e}
	m.async = ws
	return nil
}

// Release frees the memory. A failure (the context was torn down, the
// stream destroyed) cannot be returned from here: stream-ordered memory then
// falls back to a synchronous free, anything else is reported to the
// handler set by SetCUDAErrorHandler.
func (m *cudaMemory) Release() {
	m.mu.Lock()
	async, used, defaults, lost, freeBy := m.async, m.used, m.defaults, m.lost, m.freeBy
	m.used = nil
	m.mu.Unlock()
	var s *cuda.Stream
	if async != nil {
		s = m.order(async, used, defaults, lost)
	}
	if freeBy != nil {
		// Ordered as ever; freeBy queues the free once other processes
		// unmapped the memory.
		freeBy(s)
		return
	}
	if s != nil && s.MemFreeAsync(m.ptr) == nil {
		return
	}
	// Ordering failed: a synchronous free waits for the device.
	if err := m.d.ctx.MemFree(m.ptr); err != nil {
		reportCUDAError(fmt.Errorf("zerocopy: freeing %v on %v: %w", m.ptr, m.d.ctx.Device(), err))
	}
}

// order makes async, the stream the free goes on, wait for every other
// stream that used the memory, and returns it; nil when that order could
// not be kept (the free must then wait for the device).
func (m *cudaMemory) order(async *cuda.Stream, used map[uintptr]pooledEvent, defaults [3]bool, lost bool) *cuda.Stream {
	var err error
	if async.Handle() == 0 || lost {
		err = errors.New("lost")
	}
	dev := dlpack.CUDADevice(m.d.ctx.Device().Ordinal())
	for h, usedIt := range defaults {
		if usedIt && err == nil {
			err = waitStream(async, uintptr(h), m.d.ctx.Device().Ordinal(), dev)
		}
	}
	for _, u := range used {
		// A queued wait keeps the record it saw: the event can go back to
		// the pool at once.
		if err == nil {
			err = async.WaitEvent(u.e)
		}
		u.d.putEvent(u.e)
	}
	if err != nil {
		return nil
	}
	return async
}

// ExportableAllocation describes memory another process can map: a
// stream-ordered allocation of a device's exportable pool (AllocCUDAAsync
// on a driver that supports shareable pools).
type ExportableAllocation struct {
	Ptr    cuda.DevicePtr // where the allocation starts
	Size   int64          // its bytes
	Device int            // its CUDA device ordinal
	Pool   *cuda.MemPool  // the pool it came from (DeviceMemPool)
}

// ExportableAllocationOf reports the allocation that holds v's memory when
// AllocCUDAAsync made it from its device's exportable pool, and ok false
// for any other memory (another library's, an empty tensor, cuMemAlloc's,
// the default pool's).
func ExportableAllocationOf(v *View) (a ExportableAllocation, ok bool) {
	m, isOurs := v.owner.rel.(*cudaMemory)
	if !isOurs || m.pool == nil {
		return a, false
	}
	return ExportableAllocation{Ptr: m.ptr, Size: m.size, Device: m.d.ctx.Device().Ordinal(), Pool: m.pool}, true
}

// HandOverFree hands the free of v's exportable allocation
// (ExportableAllocationOf) to f: when the last reference goes, the free's
// stream is ordered after every stream that used the memory as usual, and
// f is called with that stream (nil when the order could not be kept: free
// synchronously) instead of the free being queued. From then on f owns
// the memory and frees it (cuMemFreeAsync on that stream) when other
// processes no longer map it. The allocation is moved to its device's work
// stream first (FreeOnWorkStream), which lives as long as the process: f
// may free long after the allocation's own stream was destroyed. An
// allocation is handed over once.
func HandOverFree(v *View, f func(*cuda.Stream)) error {
	m, ok := v.owner.rel.(*cudaMemory)
	if !ok || m.pool == nil {
		return fmt.Errorf("zerocopy: HandOverFree: %v is not an allocation of an exportable pool", v)
	}
	if f == nil {
		return fmt.Errorf("zerocopy: HandOverFree: nil function")
	}
	if err := v.owner.Retain(); err != nil { // released meanwhile: nothing to hand over
		return fmt.Errorf("zerocopy: HandOverFree: %w", err)
	}
	defer v.owner.Release()
	if err := FreeOnWorkStream(v); err != nil {
		reportCUDAError(err) // the free waits for the device instead
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.freeBy != nil {
		return fmt.Errorf("zerocopy: HandOverFree: the free of %v was handed over already", m.ptr)
	}
	m.freeBy = f
	return nil
}

// DeviceMemPool returns the stream-ordered pool AllocCUDAAsync allocates
// from on CUDA device dev, and whether it is exportable (created for POSIX
// file-descriptor handles; see ExportableAllocationOf).
func DeviceMemPool(dev int) (pool *cuda.MemPool, exportable bool, err error) {
	d, err := device(dev)
	if err != nil {
		return nil, false, fmt.Errorf("zerocopy: DeviceMemPool(%d): %w", dev, err)
	}
	p, err := d.memPool()
	if err != nil {
		return nil, false, fmt.Errorf("zerocopy: DeviceMemPool(%d): %w", dev, err)
	}
	return p, d.exportable, nil
}

var cudaErrorHandler struct {
	sync.Mutex
	f func(error)
}

// SetCUDAErrorHandler sets the function that hears of driver errors that
// have no caller to return to: a failed cuMemFree, cuMemFreeHost or
// cuMemHostUnregister when the last view of some memory is closed. nil
// (the default) drops them.
func SetCUDAErrorHandler(f func(error)) {
	cudaErrorHandler.Lock()
	cudaErrorHandler.f = f
	cudaErrorHandler.Unlock()
}

func reportCUDAError(err error) {
	cudaErrorHandler.Lock()
	f := cudaErrorHandler.f
	cudaErrorHandler.Unlock()
	if f != nil {
		f(err)
	}
}

// allocBytes checks a shape and returns the bytes a compact tensor needs.
func allocBytes(op string, dt dlpack.DataType, shape []int64) (int64, error) {
	if err := dt.Validate(); err != nil {
		return 0, fmt.Errorf("zerocopy: %s: %w", op, err)
	}
	n, err := shapeElements(op, shape)
	if err != nil {
		return 0, err
	}
	nb, ok := dt.StorageBytes(n, false)
	if !ok {
		return 0, fmt.Errorf("zerocopy: %s: %s elements of %s overflow int64 bytes", op, FormatShape(shape), dt)
	}
	return nb, nil
}

// AllocCUDA allocates device memory on CUDA device ordinal dev
// (cuMemAlloc) for a C-contiguous tensor of dtype dt and shape. The memory
// is uninitialised; it is freed (cuMemFree, exactly once) when the last view
// over it is closed. A tensor of zero elements allocates nothing.
func AllocCUDA(dev int, dt dlpack.DataType, shape ...int64) (*View, error) {
	nb, err := allocBytes("AllocCUDA", dt, shape)
	if err != nil {
		return nil, err
	}
	d, err := device(dev)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocCUDA: %w", err)
	}
	spec := Spec{Device: dlpack.CUDADevice(dev), DType: dt, Shape: shape}
	if nb == 0 {
		return Wrap(spec, NewOwner(nil, "cuda alloc (empty)"))
	}
	p, err := d.ctx.MemAlloc(nb)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocCUDA(%s%s on cuda:%d): %w", dt, FormatShape(shape), dev, err)
	}
	m := &cudaMemory{d: d, ptr: p}
	m.owner.Init(m, "cuda alloc")
	spec.Ptr = uintptr(p)
	return Wrap(spec, &m.owner)
}

// AllocatedCUDA reports whether v's memory is device memory the engine
// allocated (AllocCUDA, AllocCUDAAsync), not memory wrapped from someone
// else (DLPack, CAI, a raw pointer).
func (v *View) AllocatedCUDA() bool {
	_, ok := v.owner.rel.(*cudaMemory)
	return ok
}

// AllocCUDAAsync allocates device memory in stream order on s from the
// stream-ordered pool of s's device (DeviceMemPool: exportable, so that
// other processes can map the memory in place, where the driver allows),
// which keeps up to a quarter of the device's memory reserved after frees
// so that the next allocations cost microseconds (DevicePoolUsage): the
// memory may be used by work on s at
// once and by other streams once they wait for s, which CopyCUDA does by
// itself (the view's Stream is s). When the last view is closed the memory
// is freed in stream order on s (cuMemFreeAsync), after the work of every
// other stream a CopyCUDA used it on.
func AllocCUDAAsync(s *cuda.Stream, dt dlpack.DataType, shape ...int64) (*View, error) {
	return allocCUDAAsync(s, true, dt, shape)
}

// allocCUDAAsync is AllocCUDAAsync; with exportable false it allocates
// from the default pool as AllocCUDAAsync did before the pool of our own
// (BenchmarkDevicePool compares the two).
func allocCUDAAsync(s *cuda.Stream, exportable bool, dt dlpack.DataType, shape []int64) (*View, error) {
	nb, err := allocBytes("AllocCUDAAsync", dt, shape)
	if err != nil {
		return nil, err
	}
	if s == nil || s.Handle() == 0 {
		return nil, fmt.Errorf("zerocopy: AllocCUDAAsync: nil or destroyed stream")
	}
	ord := s.Context().Device().Ordinal()
	d, err := device(ord)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocCUDAAsync: %w", err)
	}
	noteStream(s)
	spec := Spec{Device: dlpack.CUDADevice(ord), DType: dt, Shape: shape}
	if nb == 0 {
		return Wrap(spec, NewOwner(nil, "cuda async alloc (empty)"))
	}
	// The pool is made (and its release threshold set: without it the
	// driver hands freed memory back at every synchronization) once.
	pool, err := d.memPool()
	if err != nil && !errors.Is(err, cuda.ErrMissingSymbol) {
		return nil, fmt.Errorf("zerocopy: AllocCUDAAsync: %w", err)
	}
	if err != nil || !exportable || !d.exportable || capturing(d, s) {
		pool = nil // cuMemAllocAsync: the default pool
	}
	return d.allocAsync(s, pool, spec, nb)
}

// capturing reports whether s, a stream of d, is being captured into a
// CUDA graph. An allocation in a capture becomes the graph's allocation
// node, which the driver refuses for pools made for shareable handles
// (CUDA_MEM_ALLOC_NODE_PARAMS: "IPC is not supported"): such an allocation
// comes from the default pool, as it always did, and is not shareable. The
// device's work stream is never captured (it is ours, and no caller's
// capture reaches it), so the common allocation costs no query; another
// stream (a caller's: the results of a call) costs one driver call. A
// failed query counts as no capture.
func capturing(d *devState, s *cuda.Stream) bool {
	d.mu.Lock()
	ws := d.stream
	d.mu.Unlock()
	if ws != nil && ws.Handle() == s.Handle() {
		return false
	}
	c, err := s.IsCapturing()
	return err == nil && c
}

// allocAsync allocates nb bytes for spec in stream order on s from pool, an
// exportable pool, or with pool nil from the device's current pool
// (cuMemAllocAsync; the default pool unless another library changed it).
func (d *devState) allocAsync(s *cuda.Stream, pool *cuda.MemPool, spec Spec, nb int64) (*View, error) {
	m := &cudaMemory{d: d, async: s}
	var p cuda.DevicePtr
	var err error
	if pool != nil {
		p, err = s.MemAllocFromPoolAsync(pool, nb)
		m.pool, m.size = pool, nb
	} else {
		p, err = s.MemAllocAsync(nb)
	}
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocCUDAAsync(%s%s on %v): %w", spec.DType, FormatShape(spec.Shape), s, err)
	}
	m.ptr = p
	m.owner.Init(m, "cuda async alloc")
	spec.Ptr, spec.Stream = uintptr(p), s.Handle()
	return Wrap(spec, &m.owner)
}

// pinnedMemory frees pinned host memory from AllocPinned exactly once.
type pinnedMemory struct {
	owner Owner
	h     *cuda.HostMem
}

func (m *pinnedMemory) Release() {
	pinnedRanges.Delete(uintptr(m.h.Ptr()))
	if err := m.h.Free(); err != nil {
		reportCUDAError(fmt.Errorf("zerocopy: freeing pinned memory: %w", err))
	}
}

// pinnedRanges records the pinned allocations made here (start -> end), so
// that ClassifyPointer can tell them from registered memory.
var pinnedRanges sync.Map

// AllocPinned allocates page-locked host memory (cuMemHostAlloc, portable
// to every context) for a C-contiguous tensor of dtype dt and shape. The
// view's device is cuda_host: the CPU reads and writes it directly, and
// copies between it and device memory run at full bus speed and
// asynchronously. It is freed (cuMemFreeHost) when the last view is closed.
func AllocPinned(dt dlpack.DataType, shape ...int64) (*View, error) {
	nb, err := allocBytes("AllocPinned", dt, shape)
	if err != nil {
		return nil, err
	}
	spec := Spec{Device: dlpack.Device{Type: dlpack.CUDAHost}, DType: dt, Shape: shape}
	if nb == 0 {
		return Wrap(spec, NewOwner(nil, "pinned alloc (empty)"))
	}
	d, err := device(0)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocPinned: %w", err)
	}
	h, err := d.ctx.MemAllocHost(int(nb), cuda.HostAllocPortable)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocPinned(%s%s): %w", dt, FormatShape(shape), err)
	}
	m := &pinnedMemory{h: h}
	m.owner.Init(m, "pinned alloc")
	spec.Ptr = uintptr(h.Ptr())
	pinnedRanges.Store(spec.Ptr, spec.Ptr+uintptr(nb))
	return Wrap(spec, &m.owner)
}

// PointerKind says what the driver knows about an address.
type PointerKind int

// Pointer kinds (ClassifyPointer).
const (
	// PointerUnknown: the driver knows nothing of the address: pageable
	// host memory (Go or C heap, stacks, mappings) or no memory at all.
	PointerUnknown PointerKind = iota
	// PointerDevice: device memory (cuMemAlloc, cuMemAllocAsync, pools).
	PointerDevice
	// PointerManaged: managed (unified) memory (cuMemAllocManaged).
	PointerManaged
	// PointerHost: page-locked host memory from cuMemHostAlloc
	// (cudaMallocHost, torch pin_memory), or registered by someone other
	// than this package (the driver does not tell the two apart).
	PointerHost
	// PointerRegistered: pageable host memory that this package
	// page-locked (cuMemHostRegister) for fast transfers.
	PointerRegistered
)

func (k PointerKind) String() string {
	switch k {
	case PointerDevice:
		return "device"
	case PointerManaged:
		return "managed"
	case PointerHost:
		return "pinned host"
	case PointerRegistered:
		return "registered host"
	}
	return "unknown"
}

// ClassifyPointer asks the driver what ptr points at (one batched
// cuPointerGetAttributes call) and returns the kind of memory and the
// ordinal of the device it belongs to (-1 for unknown memory; for pinned
// host memory the device of the context that pinned it). Without a driver
// it returns PointerUnknown, -1 and an error matching cuda.ErrNoDriver.
func ClassifyPointer(ptr uintptr) (PointerKind, int, error) {
	a, err := cuda.PointerGetAttributes(cuda.DevicePtr(ptr))
	if err != nil {
		return PointerUnknown, -1, err
	}
	return kindOf(ptr, a), a.DeviceOrdinal, nil
}

func kindOf(ptr uintptr, a cuda.PointerAttributes) PointerKind {
	switch a.Kind() {
	case cuda.KindDevice:
		return PointerDevice
	case cuda.KindManaged:
		return PointerManaged
	case cuda.KindPinnedHost:
		if isRegisteredHere(ptr) {
			return PointerRegistered
		}
		return PointerHost
	}
	return PointerUnknown
}

// VerifyCUDA checks a CUDA view against the driver's idea of the memory:
// the whole byte span the view may touch must lie inside one allocation the
// driver knows, of the kind the view's device type claims (cuda: device
// memory on that device; cuda_host: page-locked host memory; cuda_managed:
// managed memory), and the error says which bound is violated, e.g.
//
//	span [ptr-16, ptr+4096) = [0x..., 0x...) ends 512 bytes past the allocation [0x..., 0x...+3584)
//
// Views of other device types are refused. An empty view (no bytes) passes.
// The errors match ErrNotInAllocation or ErrWrongDevice (errors.Is), and
// cuda.ErrNoDriver where there is no driver.
func VerifyCUDA(v *View) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("zerocopy: VerifyCUDA: %w", err)
	}
	switch v.device.Type {
	case dlpack.CUDA, dlpack.CUDAHost, dlpack.CUDAManaged:
	default:
		return fmt.Errorf("zerocopy: VerifyCUDA: %v is a %v view, not CUDA memory", v, v.device.Type)
	}
	lo, hi := v.ByteSpan()
	if hi <= lo {
		return nil
	}
	// Ask about the data pointer (element [0,...], always inside the span):
	// the view is of its allocation, and a span that starts before it is
	// then reported as such, even where the bytes before it belong to other
	// memory (on two H200s the 12 bytes before a cuMemAlloc block were
	// pinned host memory, and asking about the first byte said only that).
	first := v.Ptr() + uintptr(lo) // lo may be negative: wraps as intended
	a, err := cuda.PointerGetAttributes(cuda.DevicePtr(v.Ptr()))
	if err != nil {
		return fmt.Errorf("zerocopy: VerifyCUDA: %w", err)
	}
	span := fmt.Sprintf("span %s = [%#x, %#x)", relSpan(lo, hi), first, v.Ptr()+uintptr(hi))
	if !a.Known() {
		return fmt.Errorf("%w: VerifyCUDA: %s: %s: its data pointer is at an address the driver knows no allocation at (pageable host memory, freed memory or garbage)",
			ErrNotInAllocation, v, span)
	}
	kind := kindOf(v.Ptr(), a)
	switch v.device.Type {
	case dlpack.CUDA:
		if kind != PointerDevice {
			return fmt.Errorf("%w: VerifyCUDA: %s claims %v but the driver says %v memory", ErrWrongDevice, v, v.device, kind)
		}
		if a.DeviceOrdinal != int(v.device.ID) {
			return fmt.Errorf("%w: VerifyCUDA: %s claims %v but the memory is on cuda:%d", ErrWrongDevice, v, v.device, a.DeviceOrdinal)
		}
	case dlpack.CUDAHost:
		if kind != PointerHost && kind != PointerRegistered {
			return fmt.Errorf("%w: VerifyCUDA: %s claims pinned host memory but the driver says %v memory", ErrWrongDevice, v, kind)
		}
	case dlpack.CUDAManaged:
		if kind != PointerManaged {
			return fmt.Errorf("%w: VerifyCUDA: %s claims managed memory but the driver says %v memory", ErrWrongDevice, v, kind)
		}
	}
	if a.RangeSize == 0 {
		return nil // the driver gave no range (some registered memory): nothing more to check
	}
	base, end := uint64(a.RangeStart), uint64(a.RangeStart)+a.RangeSize
	alloc := fmt.Sprintf("the allocation [%#x, %#x+%d)", base, base, a.RangeSize)
	f, l := uint64(first), uint64(v.Ptr())+uint64(hi)
	if f < base {
		return fmt.Errorf("%w: VerifyCUDA: %s: %s starts %d bytes before %s", ErrNotInAllocation, v, span, base-f, alloc)
	}
	if l > end {
		return fmt.Errorf("%w: VerifyCUDA: %s: %s ends %d bytes past %s", ErrNotInAllocation, v, span, l-end, alloc)
	}
	return nil
}

// relSpan writes [lo, hi) relative to the data pointer: "[ptr-16, ptr+4096)".
func relSpan(lo, hi int64) string {
	rel := func(x int64) string {
		switch {
		case x < 0:
			return fmt.Sprintf("ptr-%d", -x)
		case x > 0:
			return fmt.Sprintf("ptr+%d", x)
		}
		return "ptr"
	}
	return "[" + rel(lo) + ", " + rel(hi) + ")"
}
