package ipc

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// with Conn.Send.
//
// An allocation whose producer views are closed and whose every lease was
// given back is kept, not freed, while a live peer keeps it mapped (every
// peer it was sent to does, until told otherwise): the pool's cache. The
// next Alloc of exactly that size takes it again, and sending it costs the
// peer no new mapping. Cached memory is freed, in stream order after each
// peer's unmap, when Trim or Close retires it, when an allocation needs its
// bytes under the limit, or at once when no peer maps it any more (its
// connection ended).
type Pool struct {
	dev    int
	ctx    *cuda.Context
	mp     *cuda.MemPool
	id     [16]byte
	uuid   cuda.UUID
	stream *cuda.Stream // allocations given no stream, and their frees

	mu       sync.Mutex
	freed    *sync.Cond          // on mu: a retired block was freed
	blocks   []*block            // allocations in use, sorted by address
	cache    []*block            // idle allocations peers keep mapped, oldest first
	retiring map[*block]struct{} // idle allocations retired, waiting for their peers
	ready    []ipcEvent          // idle ready events (no lease holds them)
	events   []*cuda.Event       // every ready event made, for Close
	fd       int                 // the exported descriptor (-1 once closed)
	limit    int64               // bytes the pool may hand out
	inUse    int64               // bytes of allocations not freed (cached ones too)
	freeing  int64               // of inUse, bytes of blocks on their way to free (out of cache and retiring)
	closed   bool
	shared   bool // DevicePool's: never closed

	timeout atomic.Int64 // nanoseconds Trim and Alloc wait for peers' answers to retires
}

// block is one allocation of the pool, exported once, however many times
// it is used. Each use (an Alloc that returned it) has an owner of its own
// that counts the producer's views and the leases; when the last reference
// goes the block is cached if a peer keeps it mapped, else freed in stream
// order on its stream, after the "done" events of the leases (which that
// stream already waits for).
type block struct {
	pool *Pool
	ptr  cuda.DevicePtr
	size int64
	// The fields below are guarded by pool.mu.
	stream *cuda.Stream // the stream of the current or last use
	cur    *use         // the current use; nil while idle
	// mappers are the live peers that keep the block mapped (it was sent
	// to them); unmapping the ones asked to unmap it (msgRetire) that have
	// not answered yet.
	mappers   map[*Conn]struct{}
	unmapping map[*Conn]struct{}
	retired   bool        // freed once idle and no peer maps it
	idleEv    *cuda.Event // recorded on stream when the block went idle
	// exported is closed once data (or expErr) is set: the export runs
	// from Alloc in a goroutine of its own, because the driver's export
	// costs host time in proportion to the size and would otherwise stand
	// between a tensor being ready and its Send (on an H100, Send took
	// 1.5 ms at 4 GiB right after the allocation and 56 us after a fill
	// from the host: bench/results/ipc-h100).
	exported chan struct{}
	data     cuda.PoolExportData
	expErr   error
	// owner is set for an allocation the pool adopted (adopt): memory
	// AllocCUDAAsync made from the device's exportable pool. Its producer
	// views count in owner, and each lease holds a reference there; when
	// the last goes, zerocopy hands the free over (idle), and the block is
	// freed once its peers unmapped it. Such a block is never cached: the
	// memory is the producer's to free.
	owner *zerocopy.Owner
}

// use is one use of a block: from the Alloc that returned it to the last
// reference's release (the producer's views, the leases).
type use struct {
	owner zerocopy.Owner
	b     *block
}

// Release ends the use (the Owner calls it once): the block is cached or
// freed.
func (u *use) Release() { u.b.pool.idle(u.b) }

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
	// IPC pools do not trim at synchronization points unless told: keep
	// what they reserved, as the default pool's threshold does.
	if err := mp.SetReleaseThreshold(uint64(limit)); err != nil {
		mp.Destroy()
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool(device %d): %w", dev, err)
	}
	p, err := newPool(dev, ctx, mp, limit)
	if err != nil {
		mp.Destroy()
		return nil, err
	}
	return p, nil
}

// devicePools are the pools of DevicePool, one per device, made once.
var devicePools struct {
	sync.Mutex
	m map[int]*Pool
}

// DevicePool returns the Pool over CUDA device dev's own stream-ordered
// pool: the one zerocopy.AllocCUDAAsync allocates every device tensor of
// the engine from (zerocopy.DeviceMemPool), created exportable. Such
// memory needs no copy to be shared: Send, Offer and Owns take any view
// of it (the pool adopts the allocation on its first export: the free of
// the memory, once the producer's views are closed and every lease ended,
// waits for the peers to unmap it). Its Alloc allocates from the same pool
// and has no limit but the device's memory; Usage reports the device's
// whole pool, Live the allocations it adopted or made that are in use. The
// pool is shared by the process: Close refuses. The error matches ErrNotIPCMemory when the
// driver could not make the device's pool exportable.
func DevicePool(dev int) (*Pool, error) {
	devicePools.Lock()
	defer devicePools.Unlock()
	if p := devicePools.m[dev]; p != nil {
		return p, nil
	}
	mp, exportable, err := zerocopy.DeviceMemPool(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: DevicePool(%d): %w", dev, err)
	}
	if !exportable {
		return nil, fmt.Errorf("ipc: DevicePool(%d): %w: the driver gave the device no exportable pool", dev, ErrNotIPCMemory)
	}
	ctx, err := cuda.Retain(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: DevicePool(%d): %w", dev, err)
	}
	p, err := newPool(dev, ctx, mp, math.MaxInt64/2)
	if err != nil {
		return nil, err
	}
	p.shared = true
	if devicePools.m == nil {
		devicePools.m = map[int]*Pool{}
	}
	devicePools.m[dev] = p
	return p, nil
}

// newPool makes the Pool over mp, an exportable pool of device dev; it
// takes over ctx (a retained context), released on failure.
func newPool(dev int, ctx *cuda.Context, mp *cuda.MemPool, limit int64) (*Pool, error) {
	uuid, err := ctx.Device().UUID()
	var s *cuda.Stream
	if err == nil {
		s, err = ctx.NewStream(cuda.StreamNonBlocking, 0)
	}
	if err != nil {
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool(device %d): %w", dev, err)
	}
	// Export the pool now: the driver exports its allocations only once
	// the pool itself was (CUDA_ERROR_INVALID_VALUE before, on the H100
	// machine). The descriptor is kept for the peers.
	fd, err := mp.ExportFD()
	if err != nil {
		s.Destroy()
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool(device %d): %w", dev, err)
	}
	p := &Pool{dev: dev, ctx: ctx, mp: mp, uuid: uuid, stream: s, fd: fd, limit: limit, retiring: map[*block]struct{}{}}
	p.freed = sync.NewCond(&p.mu)
	p.timeout.Store(int64(retireWait))
	if _, err := rand.Read(p.id[:]); err != nil {
		closeFD(fd)
		s.Destroy()
		ctx.Release()
		return nil, fmt.Errorf("ipc: NewPool: %w", err)
	}
	return p, nil
}

// SetTimeout sets how long Trim, Close and an Alloc at the limit wait for
// peers to answer the retires of cached allocations (2 s unless set; 0 or
// less: the default). A peer that does not answer in time keeps its
// allocations retired, freed once it answers or its connection ends.
func (p *Pool) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = retireWait
	}
	p.timeout.Store(int64(d))
}

func (p *Pool) retireTimeout() time.Duration { return time.Duration(p.timeout.Load()) }

// Device is the pool's CUDA device ordinal.
func (p *Pool) Device() int { return p.dev }

// Stream is the pool's own stream: allocations given no stream are made
// and freed on it.
func (p *Pool) Stream() *cuda.Stream { return p.stream }

// Usage reports the bytes the pool reserved from the device and the bytes
// of those in use. Used bytes include the cached allocations (Cached)
// until they are freed (Trim).
func (p *Pool) Usage() (reserved, used uint64, err error) {
	return p.mp.Usage()
}

// Live is the number of allocations in use (views or leases hold them);
// cached ones do not count.
func (p *Pool) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.blocks)
}

// Cached reports the allocations the pool keeps for reuse because a peer
// keeps them mapped (nothing uses them), and their bytes.
func (p *Pool) Cached() (n int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.cache {
		bytes += b.size
	}
	return len(p.cache), bytes
}

// Trim frees the cached allocations, as torch.cuda.empty_cache does for
// PyTorch's caching allocator: each is retired (every peer that maps it
// unmaps it, in stream order, and answers) and freed once its peers
// answered or went away; Trim returns when that is done. Allocations in use
// stay. The memory goes back to the pool (Usage's used bytes fall; the
// reserved ones stay up to the pool's release threshold). A peer that does
// not answer within retireWait (2 s: stopped, or stuck) makes Trim return
// an error; its allocations stay retired and are freed when it answers or
// its connection ends, never while it may still map them.
func (p *Pool) Trim() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("ipc: Pool.Trim: %w", ErrClosed)
	}
	p.mu.Unlock()
	if n, bytes, peers := p.retireAll(); n > 0 {
		return fmt.Errorf("ipc: Pool.Trim: %d allocations (%d bytes) wait for peers that did not answer their retire within %v (%s): %w; they are freed once the peers answer or their connections end", n, bytes, p.retireTimeout(), strings.Join(peers, ", "), ErrTimeout)
	}
	return nil
}

// retireAll retires every cached block and waits until every retired block
// was freed, or retireWait passed: then it reports the blocks still
// retiring.
func (p *Pool) retireAll() (n int, bytes int64, peers []string) {
	p.mu.Lock()
	var free []*block
	var ret []retireReq
	for _, b := range p.cache {
		free, ret = p.retireLocked(b, free, ret)
	}
	p.cache = nil
	p.mu.Unlock()
	p.finishRetire(free, ret)
	deadline := time.Now().Add(p.retireTimeout())
	p.mu.Lock()
	defer p.mu.Unlock()
	for (len(p.retiring) > 0 || p.freeing > 0) && p.waitFreedLocked(deadline) {
	}
	seen := map[*Conn]bool{}
	for b := range p.retiring {
		n, bytes = n+1, bytes+b.size
		for c := range b.unmapping {
			if !seen[c] {
				seen[c] = true
				peers = append(peers, c.peer)
			}
		}
	}
	sort.Strings(peers)
	return n, bytes, peers
}

// waitFreedLocked waits, with p.mu held, until a retired block is freed
// (or anything else broadcasts p.freed) or deadline comes; false once it
// has passed.
func (p *Pool) waitFreedLocked(deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.AfterFunc(d, func() {
		p.mu.Lock()
		p.freed.Broadcast()
		p.mu.Unlock()
	})
	p.freed.Wait()
	t.Stop()
	return true
}

// retireReq is a retire message to send: peer c is to unmap b.
type retireReq struct {
	b *block
	c *Conn
}

// retireLocked marks b (idle, out of the cache) retired: if no peer maps
// it, it goes to free (to be freed once p.mu is dropped); else each peer
// that maps it is to be told to unmap it (ret) and the block waits in
// p.retiring. Called with p.mu held.
func (p *Pool) retireLocked(b *block, free []*block, ret []retireReq) ([]*block, []retireReq) {
	b.retired = true
	if len(b.mappers) == 0 && len(b.unmapping) == 0 {
		p.freeing += b.size
		return append(free, b), ret
	}
	p.retiring[b] = struct{}{}
	for c := range b.mappers {
		delete(b.mappers, c)
		b.unmapping[c] = struct{}{}
		ret = append(ret, retireReq{b, c})
	}
	return free, ret
}

// finishRetire frees blocks no peer maps and sends the retire messages.
// Called without p.mu.
func (p *Pool) finishRetire(free []*block, ret []retireReq) {
	for _, b := range free {
		p.free(b)
	}
	for _, r := range ret {
		if err := r.c.sendRetire(p, r.b); err != nil {
			go r.c.unmappedAtEnd(r.b)
		}
	}
}

// unmapped: peer c unmapped b (it answered a retire, after which b's stream
// waits for its done event) or is gone. A retired idle block that no peer
// maps any more is freed.
func (p *Pool) unmapped(b *block, c *Conn) {
	p.mu.Lock()
	delete(b.unmapping, c)
	delete(b.mappers, c)
	ready := p.freeableLocked(b)
	p.mu.Unlock()
	if ready {
		p.free(b)
	}
}

// freeableLocked reports whether b, unmapped by every peer, is to be freed
// now (it is idle and retired, or idle in the cache with no peer left), and
// if so takes it out of the cache and the retiring set. Called with p.mu
// held.
func (p *Pool) freeableLocked(b *block) bool {
	if b.cur != nil || len(b.mappers) > 0 || len(b.unmapping) > 0 {
		return false
	}
	if _, ok := p.retiring[b]; ok {
		delete(p.retiring, b)
		p.freeing += b.size
		return true
	}
	for i, x := range p.cache {
		if x == b {
			p.cache = append(p.cache[:i], p.cache[i+1:]...)
			p.freeing += b.size
			return true
		}
	}
	return false
}

// retireFor retires, for peer c only, the cached blocks c maps: c moves
// from their mappers to unmapping, and the returned requests are the
// retires to send it. The blocks stay cached for the other peers that map
// them; one that no peer maps once c answered is freed then (unmapped).
func (p *Pool) retireFor(c *Conn) []retireReq {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ret []retireReq
	for _, b := range p.cache {
		if _, ok := b.mappers[c]; !ok {
			continue
		}
		delete(b.mappers, c)
		b.unmapping[c] = struct{}{}
		ret = append(ret, retireReq{b, c})
	}
	return ret
}

// addMapper records that peer c maps b (b was sent to it).
func (p *Pool) addMapper(b *block, c *Conn) {
	p.mu.Lock()
	b.mappers[c] = struct{}{}
	p.mu.Unlock()
}

// dropPeer forgets peer c, whose connection ended, in every block: cached
// blocks no other peer maps are freed at once.
func (p *Pool) dropPeer(c *Conn) {
	var free []*block
	p.mu.Lock()
	drop := func(b *block) {
		_, m := b.mappers[c]
		_, u := b.unmapping[c]
		if !m && !u {
			return
		}
		delete(b.mappers, c)
		delete(b.unmapping, c)
		if p.freeableLocked(b) {
			free = append(free, b)
		}
	}
	for _, b := range p.blocks {
		drop(b)
	}
	for _, b := range append([]*block(nil), p.cache...) {
		drop(b)
	}
	for b := range p.retiring {
		drop(b)
	}
	p.mu.Unlock()
	for _, b := range free {
		p.free(b)
	}
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
	u := &use{}
	// The limit is kept here too: the driver (580, H100) handed out more
	// than a pool's maxSize.
	var deadline time.Time // for the peers' answers, once a wait for them began
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("ipc: Pool.Alloc: %w", ErrClosed)
		}
		if b := p.takeCachedLocked(size); b != nil {
			other := b.stream != s
			ev := b.idleEv
			b.stream, b.cur, u.b = s, u, b
			p.insertLocked(b)
			p.mu.Unlock()
			if other && ev != nil {
				// The block's last use (and the peers' done events its
				// stream waited for) comes before this one's work.
				if err := s.WaitEvent(ev); err != nil {
					if err := ev.Synchronize(); err != nil {
						reportError(fmt.Errorf("ipc: ordering the reuse of a cached allocation: %w", err))
					}
				}
			}
			u.owner.Init(u, "ipc pool allocation")
			return zerocopy.Wrap(zerocopy.Spec{
				Ptr: uintptr(b.ptr), Device: dlpack.CUDADevice(p.dev), DType: dt, Shape: shape, Stream: s.Handle(),
			}, &u.owner)
		}
		if p.inUse+size <= p.limit {
			p.inUse += size
			break
		}
		// Over the limit: free or retire cached blocks, oldest first,
		// until enough bytes are on their way back, and wait for them.
		need := p.inUse + size - p.limit
		coming := p.freeing // taken out of the cache or the retiring set, not yet freed
		for b := range p.retiring {
			coming += b.size
		}
		var free []*block
		var ret []retireReq
		for len(p.cache) > 0 && coming < need {
			b := p.cache[0]
			p.cache = p.cache[1:]
			free, ret = p.retireLocked(b, free, ret)
			coming += b.size
		}
		if len(free) > 0 || len(ret) > 0 {
			p.mu.Unlock()
			p.finishRetire(free, ret)
			p.mu.Lock()
			continue
		}
		if len(p.retiring) == 0 && p.freeing == 0 {
			inUse := p.inUse
			p.mu.Unlock()
			return nil, fmt.Errorf("ipc: Pool.Alloc(%v%v): %w: %d bytes in use of a %d-byte limit", dt, shape, ErrPoolFull, inUse, p.limit)
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(p.retireTimeout())
		}
		if !p.waitFreedLocked(deadline) {
			inUse := p.inUse
			p.mu.Unlock()
			return nil, fmt.Errorf("ipc: Pool.Alloc(%v%v): %w: %d bytes in use of a %d-byte limit, %d allocations retired to make room wait for peers that did not answer within %v", dt, shape, ErrPoolFull, inUse, p.limit, len(p.retiring), p.retireTimeout())
		}
	}
	p.mu.Unlock()
	ptr, err := s.MemAllocFromPoolAsync(p.mp, size)
	if err != nil {
		p.mu.Lock()
		p.inUse -= size
		p.freed.Broadcast()
		p.mu.Unlock()
		return nil, fmt.Errorf("ipc: Pool.Alloc(%v%v): %w", dt, shape, err)
	}
	b := &block{
		pool: p, ptr: ptr, size: size, stream: s, cur: u, exported: make(chan struct{}),
		mappers: map[*Conn]struct{}{}, unmapping: map[*Conn]struct{}{},
	}
	u.b = b
	u.owner.Init(u, "ipc pool allocation")
	go b.export()
	p.mu.Lock()
	p.insertLocked(b)
	p.mu.Unlock()
	return zerocopy.Wrap(zerocopy.Spec{
		Ptr: uintptr(ptr), Device: dlpack.CUDADevice(p.dev), DType: dt, Shape: shape, Stream: s.Handle(),
	}, &u.owner)
}

// takeCachedLocked takes a cached block of exactly size bytes out of the
// cache (the most recently cached one), or returns nil. Called with p.mu
// held.
func (p *Pool) takeCachedLocked(size int64) *block {
	for i := len(p.cache) - 1; i >= 0; i-- {
		if b := p.cache[i]; b.size == size {
			p.cache = append(p.cache[:i], p.cache[i+1:]...)
			return b
		}
	}
	return nil
}

// insertLocked adds b to the blocks in use. Called with p.mu held.
func (p *Pool) insertLocked(b *block) {
	i := sort.Search(len(p.blocks), func(i int) bool { return p.blocks[i].ptr >= b.ptr })
	p.blocks = append(p.blocks, nil)
	copy(p.blocks[i+1:], p.blocks[i:])
	p.blocks[i] = b
}

// idle runs when the last reference of b's current use goes. If a live
// peer keeps b mapped, b is cached (after an event on its stream that a
// reuse on another stream waits for: that stream already waited for the
// peers' done events); a closed pool retires it instead. Otherwise it is
// freed in stream order.
func (p *Pool) idle(b *block) {
	<-b.exported // the driver's export of the pointer is done with it
	p.mu.Lock()
	for i, x := range p.blocks {
		if x == b {
			p.blocks = append(p.blocks[:i], p.blocks[i+1:]...)
			break
		}
	}
	b.cur = nil
	if len(b.mappers) == 0 && len(b.unmapping) == 0 {
		p.freeing += b.size
		p.mu.Unlock()
		p.free(b)
		return
	}
	if p.closed || b.retired {
		free, ret := p.retireLocked(b, nil, nil)
		p.mu.Unlock()
		// Not here: the last reference may go under a Conn's lock (a
		// lease ending), and the retire messages take Conn locks.
		go p.finishRetire(free, ret)
		return
	}
	if b.idleEv == nil {
		ev, err := p.ctx.NewEvent(0)
		if err != nil {
			reportError(fmt.Errorf("ipc: caching an allocation: %w", err))
		}
		b.idleEv = ev
	}
	if b.idleEv != nil {
		if err := b.idleEv.Record(b.stream); err != nil {
			reportError(fmt.Errorf("ipc: caching an allocation: %w", err))
			b.idleEv.Destroy()
			b.idleEv = nil
		}
	}
	if b.idleEv == nil {
		// Without the event a reuse on another stream could not be
		// ordered: retire the block instead.
		free, ret := p.retireLocked(b, nil, nil)
		p.mu.Unlock()
		go p.finishRetire(free, ret)
		return
	}
	p.cache = append(p.cache, b)
	p.mu.Unlock()
}

// free frees b in stream order on its stream (its peers unmapped it, or
// are gone), and its bytes leave the limit.
func (p *Pool) free(b *block) {
	p.mu.Lock()
	s, ev := b.stream, b.idleEv
	b.idleEv = nil
	p.mu.Unlock()
	err := errors.New("no stream to free on in order") // an adopted block whose order was lost
	if s != nil {
		err = s.MemFreeAsync(b.ptr)
	}
	if err != nil {
		if err2 := p.ctx.MemFree(b.ptr); err2 != nil {
			reportError(fmt.Errorf("ipc: freeing %v of the IPC pool: %v; %w", b.ptr, err, err2))
		}
	}
	if ev != nil {
		ev.Destroy()
	}
	p.mu.Lock()
	p.inUse -= b.size
	p.freeing -= b.size
	p.freed.Broadcast()
	p.mu.Unlock()
}

// find returns the block holding [lo, hi), or nil.
func (p *Pool) find(lo, hi uintptr) *block {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.findLocked(lo, hi)
}

// findLocked is find with p.mu held.
func (p *Pool) findLocked(lo, hi uintptr) *block {
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
	if p.findView(v) != nil {
		return true
	}
	_, ok := p.adoptable(v)
	return ok
}

// findView returns the block holding v's elements, or nil.
func (p *Pool) findView(v *zerocopy.View) *block {
	lo, hi := v.ByteSpan()
	base := v.Ptr()
	if lo == hi {
		return p.find(base, base)
	}
	return p.find(base+uintptr(lo), base+uintptr(hi))
}

// adoptable reports whether v's memory is an allocation of the device's
// exportable pool that p, a DevicePool, can adopt, and which.
func (p *Pool) adoptable(v *zerocopy.View) (zerocopy.ExportableAllocation, bool) {
	a, ok := zerocopy.ExportableAllocationOf(v)
	if !p.shared || !ok || a.Pool != p.mp || a.Device != p.dev {
		return a, false
	}
	lo, hi := v.ByteSpan()
	start, end := v.Ptr()+uintptr(lo), v.Ptr()+uintptr(hi)
	if start < uintptr(a.Ptr) || end > uintptr(a.Ptr)+uintptr(a.Size) {
		return a, false
	}
	return a, true
}

// adopt makes v's allocation, memory the device's exportable pool gave
// zerocopy.AllocCUDAAsync, a block of p (a DevicePool), or returns the
// block that holds it already. The block's use has no references of its
// own: its leases hold references on the allocation's owner, which the
// producer's views count too; when the last goes, zerocopy hands the free
// over to the block (idle), which frees it once no peer maps it.
func (p *Pool) adopt(v *zerocopy.View) (*block, error) {
	a, ok := p.adoptable(v)
	if !ok {
		lo, hi := v.ByteSpan()
		return nil, fmt.Errorf("%w: view at %#x (%d bytes) of device %d", ErrNotIPCMemory, v.Ptr(), hi-lo, p.dev)
	}
	data, err := cuda.ExportPointer(a.Ptr)
	if err != nil {
		return nil, fmt.Errorf("ipc: export: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("ipc: export: %w", ErrClosed)
	}
	if b := p.findLocked(uintptr(a.Ptr), uintptr(a.Ptr)+uintptr(a.Size)); b != nil && b.ptr == a.Ptr {
		return b, nil // adopted meanwhile by another export
	}
	b := &block{
		pool: p, ptr: a.Ptr, size: a.Size, exported: make(chan struct{}), data: data,
		mappers: map[*Conn]struct{}{}, unmapping: map[*Conn]struct{}{},
		owner:   v.Owner(),
		retired: true, // not cached once idle: freed when its peers unmapped it
	}
	close(b.exported)
	b.cur = &use{b: b}
	// Under p.mu: the free handed over finds the block in p.blocks (it
	// cannot run before this returns: the caller holds a view).
	err = zerocopy.HandOverFree(v, func(s *cuda.Stream) {
		p.mu.Lock()
		b.stream = s
		p.mu.Unlock()
		p.idle(b)
	})
	if err != nil {
		return nil, fmt.Errorf("ipc: export: %w", err)
	}
	p.inUse += b.size
	p.insertLocked(b)
	return b, nil
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
	base := v.Ptr()
	b := p.findView(v)
	if b == nil {
		var err error
		if b, err = p.adopt(v); err != nil {
			return nil, nil, err
		}
	}
	p.mu.Lock()
	u := b.cur
	p.mu.Unlock()
	if u == nil {
		return nil, nil, fmt.Errorf("ipc: export of a closed view")
	}
	ref := &u.owner // the lease's reference: on the use, or the adopted allocation's owner
	if b.owner != nil {
		ref = b.owner
	}
	if err := ref.Retain(); err != nil {
		return nil, nil, fmt.Errorf("ipc: export: %w", err)
	}
	var ev ipcEvent
	fail := func(err error) (*Descriptor, *lease, error) {
		if ev.e != nil {
			p.putReady(ev)
		}
		ref.Release()
		return nil, nil, err
	}
	<-b.exported
	if b.expErr != nil {
		return fail(fmt.Errorf("ipc: export: %w", b.expErr))
	}
	data := b.data
	if s == nil {
		p.mu.Lock()
		s = b.stream
		p.mu.Unlock()
		if h := v.Stream(); h != 0 && (s == nil || h != s.Handle()) {
			s = p.ctx.WrapStream(h)
		} else if s == nil {
			s = p.stream // an adopted allocation with no pending stream: nothing queued to wait for
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
	return d, &lease{u: u, ref: ref, ready: ev}, nil
}

// lease is what a peer holds for one tensor sent to it: a reference on
// the allocation (its use's owner, or an adopted allocation's own) and the
// ready event recorded for it.
type lease struct {
	u     *use
	ref   *zerocopy.Owner
	ready ipcEvent
}

// end drops the lease (after the allocation's stream was ordered after
// the peer's done event, if any).
func (l *lease) end() {
	l.u.b.pool.putReady(l.ready)
	l.ref.Release()
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

// Close retires and frees the cached allocations (as Trim does), closes
// the pool's exported descriptor and hands the memory it reserves and no
// longer uses back to the system. Allocations still in use are retired when
// their last reference goes. Peers that imported the pool keep their
// imports.
//
// The driver's pool object itself stays until the process ends: destroying
// an exported pool after peers in other processes had used its memory made
// the H100's driver (580) crash at the next pool allocation in this
// process (a pool pickled to a spawn and then a forkserver worker, then a
// third pool's first allocation: pybridge/python/tests/test_ipc.py's
// pickling tests followed by any CUDA test, on the GPU machine). A pool is
// a handful of bytes of the driver's; its memory is what Close returns.
func (p *Pool) Close() error {
	if p.shared {
		return fmt.Errorf("ipc: Pool.Close: the pool of device %d (DevicePool) is shared by the process and stays open", p.dev)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.freed.Broadcast() // allocations waiting for room fail now
	p.mu.Unlock()
	p.retireAll()
	p.mu.Lock()
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
