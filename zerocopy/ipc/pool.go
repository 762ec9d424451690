package ipc

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// ErrNotIPCMemory is matched (errors.Is) by the errors of an export of
// memory that is not an allocation of the Pool it was offered to (another
// library's memory, the default pool's, host memory): such memory has no
// handle another process can open. Copy it into the pool first
// (Pool.CopyIn).
var ErrNotIPCMemory = errors.New("ipc: memory not allocated from this IPC pool")

// ErrPoolFull is matched by the errors of an allocation that would take a
// Pool past its limit.
var ErrPoolFull = errors.New("ipc: pool limit reached")

// ErrClosed is matched by the errors of a Pool or Conn used after Close.
var ErrClosed = errors.New("ipc: closed")

// Pool is a stream-ordered memory pool on one CUDA device whose
// allocations other processes can import: created for POSIX file
// descriptor handles, separate from the device's default pool (which stays
// private), with a size limit. Views allocated from it (Alloc) are shared
// with Conn.Send; their memory is freed, in stream order, once the
// producer's views are closed and every lease on them was given back.
type Pool struct {
	dev    int
	ctx    *cuda.Context
	mp     *cuda.MemPool
	id     [16]byte
	uuid   cuda.UUID
	stream *cuda.Stream // allocations given no stream, and their frees

	mu     sync.Mutex
	blocks []*block      // live allocations, sorted by address
	ready  []ipcEvent    // idle ready events (no lease holds them)
	events []*cuda.Event // every ready event made, for Close
	fd     int           // the exported descriptor (-1 once closed)
	limit  int64         // bytes the pool may hand out
	inUse  int64         // bytes of live allocations
	closed bool
}

// block is one allocation of the pool. Its owner counts the producer's
// views and the leases; the last release frees it in stream order on the
// stream it was allocated on, after the "done" events of the leases (which
// that stream already waits for).
type block struct {
	owner  zerocopy.Owner
	pool   *Pool
	ptr    cuda.DevicePtr
	size   int64
	stream *cuda.Stream
	// exported is closed once data (or expErr) is set: the export runs
	// from Alloc in a goroutine of its own, because the driver's export
	// costs host time in proportion to the size and would otherwise stand
	// between a tensor being ready and its Send (on an H100, Send took
	// 1.5 ms at 4 GiB right after the allocation and 56 us after a fill
	// from the host: bench/results/ipc-h100).
	exported chan struct{}
	data     cuda.PoolExportData
	expErr   error
}

// export makes the block's export data, once.
func (b *block) export() {
	b.data, b.expErr = cuda.ExportPointer(b.ptr)
	close(b.exported)
}

// NewPool creates an IPC pool on CUDA device dev that reserves at most
// limit bytes (> 0).
func NewPool(dev int, limit int64) (*Pool, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("ipc: NewPool: limit %d bytes: must be > 0", limit)
	}
	ctx, err := cuda.Retain(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: NewPool(device %d): %w", dev, err)
	}
	mp, err := ctx.NewIPCMemPool(cuda.HandlePOSIXFD, uint64(limit))
	if err != nil {
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool(device %d, %d bytes): %w", dev, limit, err)
	}
	uuid, err := ctx.Device().UUID()
	if err == nil {
		// IPC pools do not trim at synchronization points unless told: keep
		// what they reserved, as the default pool's threshold does.
		err = mp.SetReleaseThreshold(uint64(limit))
	}
	var s *cuda.Stream
	if err == nil {
		s, err = ctx.NewStream(cuda.StreamNonBlocking, 0)
	}
	if err != nil {
		mp.Destroy()
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool(device %d): %w", dev, err)
	}
	// Export the pool now: the driver exports its allocations only once
	// the pool itself was (CUDA_ERROR_INVALID_VALUE before, on the H100
	// machine). The descriptor is kept for the peers.
	fd, err := mp.ExportFD()
	if err != nil {
		s.Destroy()
		mp.Destroy()
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool(device %d): %w", dev, err)
	}
	p := &Pool{dev: dev, ctx: ctx, mp: mp, uuid: uuid, stream: s, fd: fd, limit: limit}
	if _, err := rand.Read(p.id[:]); err != nil {
		return nil, fmt.Errorf("ipc: NewPool: %w", err)
	}
	return p, nil
}

// Device is the pool's CUDA device ordinal.
func (p *Pool) Device() int { return p.dev }

// Stream is the pool's own stream: allocations given no stream are made
// and freed on it.
func (p *Pool) Stream() *cuda.Stream { return p.stream }

// Usage reports the bytes the pool reserved from the device and the bytes
// of those in use.
func (p *Pool) Usage() (reserved, used uint64, err error) {
	return p.mp.Usage()
}

// Live is the number of allocations not yet freed (views or leases still
// hold them).
func (p *Pool) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.blocks)
}

// Alloc allocates a C-contiguous tensor in stream order on s (nil: the
// pool's stream). The memory may be used by work on s at once; the view's
// pending stream is s. Closing the view (and every lease ending) frees it
// on s.
func (p *Pool) Alloc(s *cuda.Stream, dt dlpack.DataType, shape ...int64) (*zerocopy.View, error) {
	if s == nil {
		s = p.stream
	}
	if err := dt.Validate(); err != nil {
		return nil, fmt.Errorf("ipc: Pool.Alloc: %w", err)
	}
	n := int64(dt.ItemSize())
	for _, e := range shape {
		if e < 0 {
			return nil, fmt.Errorf("ipc: Pool.Alloc: negative extent in shape %v", shape)
		}
		if e != 0 && n > (1<<62)/e {
			return nil, fmt.Errorf("ipc: Pool.Alloc: shape %v of %v overflows", shape, dt)
		}
		n *= e
	}
	if s.Context().Device().Ordinal() != p.dev {
		return nil, fmt.Errorf("ipc: Pool.Alloc: stream of device %d for a pool of device %d", s.Context().Device().Ordinal(), p.dev)
	}
	size := n
	if size == 0 {
		size = 1 // an allocation to export even for an empty tensor
	}
	// The limit is kept here too: the driver (580, H100) handed out more
	// than a pool's maxSize.
	p.mu.Lock()
	closed, over := p.closed, p.inUse+size > p.limit
	if !closed && !over {
		p.inUse += size
	}
	inUse := p.inUse
	p.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("ipc: Pool.Alloc: %w", ErrClosed)
	}
	if over {
		return nil, fmt.Errorf("ipc: Pool.Alloc(%v%v): %w: %d bytes in use of a %d-byte limit", dt, shape, ErrPoolFull, inUse, p.limit)
	}
	ptr, err := s.MemAllocFromPoolAsync(p.mp, size)
	if err != nil {
		p.mu.Lock()
		p.inUse -= size
		p.mu.Unlock()
		return nil, fmt.Errorf("ipc: Pool.Alloc(%v%v): %w", dt, shape, err)
	}
	b := &block{pool: p, ptr: ptr, size: size, stream: s, exported: make(chan struct{})}
	b.owner.Init(b, "ipc pool allocation")
	go b.export()
	p.mu.Lock()
	i := sort.Search(len(p.blocks), func(i int) bool { return p.blocks[i].ptr >= ptr })
	p.blocks = append(p.blocks, nil)
	copy(p.blocks[i+1:], p.blocks[i:])
	p.blocks[i] = b
	p.mu.Unlock()
	return zerocopy.Wrap(zerocopy.Spec{
		Ptr: uintptr(ptr), Device: dlpack.CUDADevice(p.dev), DType: dt, Shape: shape, Stream: s.Handle(),
	}, &b.owner)
}

// Release frees the block in stream order (the Owner calls it once).
func (b *block) Release() {
	<-b.exported // the driver's export of the pointer is done with it
	p := b.pool
	p.mu.Lock()
	for i, x := range p.blocks {
		if x == b {
			p.blocks = append(p.blocks[:i], p.blocks[i+1:]...)
			break
		}
	}
	p.inUse -= b.size
	p.mu.Unlock()
	if err := b.stream.MemFreeAsync(b.ptr); err != nil {
		if err2 := p.ctx.MemFree(b.ptr); err2 != nil {
			reportError(fmt.Errorf("ipc: freeing %v of the IPC pool: %v; %w", b.ptr, err, err2))
		}
	}
}

// find returns the block holding [lo, hi), or nil.
func (p *Pool) find(lo, hi uintptr) *block {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.blocks), func(i int) bool { return uintptr(p.blocks[i].ptr) > lo }) - 1
	if i < 0 {
		return nil
	}
	b := p.blocks[i]
	if hi > uintptr(b.ptr)+uintptr(b.size) {
		return nil
	}
	return b
}

// Owns reports whether v is a view of memory allocated from p (and so can
// be sent with p).
func (p *Pool) Owns(v *zerocopy.View) bool {
	d := v.Device()
	if d.Type != dlpack.CUDA || int(d.ID) != p.dev {
		return false
	}
	lo, hi := v.ByteSpan()
	base := v.Ptr()
	if lo == hi {
		return p.find(base, base) != nil
	}
	return p.find(base+uintptr(lo), base+uintptr(hi)) != nil
}

// exportFD returns the pool's exported descriptor (made with the pool;
// the pool keeps it open, and each peer gets a copy through SCM_RIGHTS).
func (p *Pool) exportFD() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return -1, ErrClosed
	}
	if p.fd < 0 {
		return -1, ErrClosed
	}
	return p.fd, nil
}

// readyEvent returns an interprocess event to record for one lease: an
// idle one or a new one. An event goes back (putReady) only when its lease
// ended: the peer queued its wait for the record when it received the
// descriptor, before it gave the lease back. Recording the event again any
// earlier could make the peer wait for the new record instead, which may
// stand behind a wait for the peer's own "done" event on our stream: a
// cycle on the GPU.
func (p *Pool) readyEvent() (ipcEvent, error) {
	p.mu.Lock()
	if n := len(p.ready); n > 0 {
		e := p.ready[n-1]
		p.ready = p.ready[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	e, err := newIPCEvent(p.ctx)
	if err != nil {
		return ipcEvent{}, err
	}
	p.mu.Lock()
	p.events = append(p.events, e.e)
	p.mu.Unlock()
	return e, nil
}

// putReady returns a ready event whose lease ended.
func (p *Pool) putReady(e ipcEvent) {
	p.mu.Lock()
	if !p.closed {
		p.ready = append(p.ready, e)
	}
	p.mu.Unlock()
}

// export makes the descriptor of v, a view of the pool's memory, after
// the work queued on s (nil: v's pending stream, or the allocation's
// stream). It takes a reference on the allocation for the lease.
func (p *Pool) export(v *zerocopy.View, s *cuda.Stream) (*Descriptor, *lease, error) {
	if !v.Alive() {
		return nil, nil, fmt.Errorf("ipc: export of a closed view")
	}
	dev := v.Device()
	if dev.Type != dlpack.CUDA || int(dev.ID) != p.dev {
		return nil, nil, fmt.Errorf("%w: view on %v, pool on cuda:%d", ErrNotIPCMemory, dev, p.dev)
	}
	lo, hi := v.ByteSpan()
	base := v.Ptr()
	var b *block
	if lo == hi {
		b = p.find(base, base)
	} else {
		b = p.find(base+uintptr(lo), base+uintptr(hi))
	}
	if b == nil {
		return nil, nil, fmt.Errorf("%w: view at %#x (%d bytes) of device %d", ErrNotIPCMemory, base, hi-lo, p.dev)
	}
	if err := b.owner.Retain(); err != nil {
		return nil, nil, fmt.Errorf("ipc: export: %w", err)
	}
	var ev ipcEvent
	fail := func(err error) (*Descriptor, *lease, error) {
		if ev.e != nil {
			p.putReady(ev)
		}
		b.owner.Release()
		return nil, nil, err
	}
	<-b.exported
	if b.expErr != nil {
		return fail(fmt.Errorf("ipc: export: %w", b.expErr))
	}
	data := b.data
	if s == nil {
		s = b.stream
		if h := v.Stream(); h != 0 && h != s.Handle() {
			s = p.ctx.WrapStream(h)
		}
	}
	ev, err := p.readyEvent()
	if err != nil {
		return fail(fmt.Errorf("ipc: export: %w", err))
	}
	if err := ev.e.Record(s); err != nil {
		return fail(fmt.Errorf("ipc: export: recording the ready event: %w", err))
	}
	d := &Descriptor{
		Pool: p.id, Device: p.uuid, Data: data, Size: b.size,
		Offset: int64(base - uintptr(b.ptr)), DType: v.DType(), Shape: v.Shape(), Strides: v.Strides(),
		ReadOnly: v.ReadOnly(), Ready: ev.h,
	}
	return d, &lease{b: b, ready: ev}, nil
}

// lease is what a peer holds for one tensor sent to it: a reference on
// the allocation and the ready event recorded for it.
type lease struct {
	b     *block
	ready ipcEvent
}

// end drops the lease (after the allocation's stream was ordered after
// the peer's done event, if any).
func (l *lease) end() {
	l.b.pool.putReady(l.ready)
	l.b.owner.Release()
}

// CopyIn returns a copy of v (any device or host memory the engine can
// copy) in a new allocation of the pool, queued on s (nil: the pool's
// stream): the explicit way to share memory from elsewhere.
func (p *Pool) CopyIn(v *zerocopy.View, s *cuda.Stream) (*zerocopy.View, error) {
	out, err := p.Alloc(s, v.DType(), v.Shape()...)
	if err != nil {
		return nil, err
	}
	if s == nil {
		s = p.stream
	}
	if err := zerocopy.CopyCUDA(out, v, s); err != nil {
		out.Close()
		return nil, fmt.Errorf("ipc: Pool.CopyIn: %w", err)
	}
	return out, nil
}

// Close closes the pool's exported descriptor and hands the memory it
// reserves and no longer uses back to the system. Peers that imported it
// keep their imports.
//
// The driver's pool object itself stays until the process ends: destroying
// an exported pool after peers in other processes had used its memory made
// the H100's driver (580) crash at the next pool allocation in this
// process (a pool pickled to a spawn and then a forkserver worker, then a
// third pool's first allocation: pybridge/python/tests/test_ipc.py's
// pickling tests followed by any CUDA test, on the GPU machine). A pool is
// a handful of bytes of the driver's; its memory is what Close returns.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	fd := p.fd
	p.fd = -1
	evs := p.events
	p.ready, p.events = nil, nil
	p.mu.Unlock()
	if fd >= 0 {
		closeFD(fd)
	}
	var errs []error
	if err := p.stream.Synchronize(); err != nil {
		errs = append(errs, err)
	}
	for _, e := range evs {
		if err := e.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.mp.TrimTo(0); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var errorHandler struct {
	sync.Mutex
	f func(error)
}

// SetErrorHandler sets the function that hears of errors with no caller
// to return to (a failed free when the last reference goes, a peer's
// malformed message). nil restores the default (drop them).
func SetErrorHandler(f func(error)) {
	errorHandler.Lock()
	errorHandler.f = f
	errorHandler.Unlock()
}

func reportError(err error) {
	errorHandler.Lock()
	f := errorHandler.f
	errorHandler.Unlock()
	if f != nil {
		f(err)
	}
}
