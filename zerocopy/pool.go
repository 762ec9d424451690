package zerocopy

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// This file: the two caches that make new tensors cheap. Device memory
// comes from each device's stream-ordered pool (cuMemAllocAsync on the
// default pool, AllocCUDAAsync), which keeps freed memory up to a release
// threshold; page-locked host memory for tensors that receive device data
// comes from a capped caching pool (AllocPinnedPooled), because
// cuMemHostAlloc costs milliseconds per allocation while a copy into
// pinned memory runs at the full bus rate.

// poolState is a device's stream-ordered pool, set up on first use.
type poolState struct {
	poolOnce sync.Once
	pool     *cuda.MemPool
	poolErr  error
}

// poolKeepFraction: a device pool keeps up to 1/poolKeepFraction of the
// device's memory reserved when memory is freed to it (its release
// threshold), so that tensors made and dropped again and again reuse it
// without a trip to the driver's allocator, while a large enough share
// stays free for other libraries' allocators.
const poolKeepFraction = 4

// memPool returns d's default memory pool, setting its release threshold
// the first time.
func (d *devState) memPool() (*cuda.MemPool, error) {
	d.poolOnce.Do(func() {
		p, err := d.ctx.Device().DefaultMemPool()
		if err != nil {
			d.poolErr = err
			return
		}
		total, err := d.ctx.Device().TotalMem()
		if err == nil {
			err = p.SetReleaseThreshold(total / poolKeepFraction)
		}
		d.pool, d.poolErr = p, err
	})
	return d.pool, d.poolErr
}

// DevicePoolUsage reports the bytes CUDA device dev's stream-ordered pool
// (the one AllocCUDAAsync allocates from) has reserved from the device and
// the bytes of those in use. A device this package has not used yet
// reports zeros (asking does not start it).
func DevicePoolUsage(dev int) (reserved, used uint64, err error) {
	devices.Lock()
	d := devices.m[dev]
	devices.Unlock()
	if d == nil {
		return 0, 0, nil
	}
	p, err := d.memPool()
	if err != nil {
		return 0, 0, fmt.Errorf("zerocopy: DevicePoolUsage: %w", err)
	}
	return p.Usage()
}

// ErrPinnedPoolFull is matched (errors.Is) by AllocPinnedPooled errors when
// the allocation would take the pinned pool past its limit.
var ErrPinnedPoolFull = errors.New("zerocopy: pinned pool limit reached")

// pinnedPool caches page-locked host blocks by size class (powers of two
// from minPinnedClass). Bytes held (in use plus cached) never exceed limit.
type pinnedPool struct {
	mu     sync.Mutex
	limit  int64
	inUse  int64
	cached int64
	free   map[int64][]*cuda.HostMem
}

// DefaultPinnedPoolLimit is the pinned pool's limit until
// SetPinnedPoolLimit changes it.
const DefaultPinnedPoolLimit = 4 << 30

const minPinnedClass = 64 << 10

var pinned = pinnedPool{limit: DefaultPinnedPoolLimit, free: map[int64][]*cuda.HostMem{}}

// SetPinnedPoolLimit sets how many bytes of page-locked host memory the
// pinned pool may hold, in use and cached together (0 turns caching and
// pooled allocation off). Cached blocks beyond the new limit are freed.
func SetPinnedPoolLimit(n int64) error {
	if n < 0 {
		return fmt.Errorf("zerocopy: SetPinnedPoolLimit(%d): the limit must be >= 0 bytes", n)
	}
	pinned.mu.Lock()
	pinned.limit = n
	drop := pinned.evictLocked(0)
	pinned.mu.Unlock()
	return freeBlocks(drop)
}

// PinnedPoolStats reports the pinned pool: bytes cached (free for reuse),
// bytes in use by views, and the limit.
func PinnedPoolStats() (cached, inUse, limit int64) {
	pinned.mu.Lock()
	defer pinned.mu.Unlock()
	return pinned.cached, pinned.inUse, pinned.limit
}

// pinnedClass is the size class of an n-byte request.
func pinnedClass(n int64) int64 {
	if n <= minPinnedClass {
		return minPinnedClass
	}
	return 1 << (64 - bits.LeadingZeros64(uint64(n-1)))
}

// evictLocked takes cached blocks out of the pool, largest first, until
// need more bytes fit under the limit; it returns them for freeing outside
// the lock.
func (p *pinnedPool) evictLocked(need int64) []*cuda.HostMem {
	var out []*cuda.HostMem
	if p.inUse+p.cached+need <= p.limit {
		return nil
	}
	classes := make([]int64, 0, len(p.free))
	for c := range p.free {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool { return classes[i] > classes[j] })
	for _, c := range classes {
		for len(p.free[c]) > 0 && p.inUse+p.cached+need > p.limit {
			bs := p.free[c]
			out = append(out, bs[len(bs)-1])
			p.free[c] = bs[:len(bs)-1]
			p.cached -= c
		}
		if len(p.free[c]) == 0 {
			delete(p.free, c)
		}
	}
	return out
}

func freeBlocks(bs []*cuda.HostMem) error {
	var first error
	for _, b := range bs {
		if err := b.Free(); err != nil && first == nil {
			first = fmt.Errorf("zerocopy: freeing pinned memory: %w", err)
		}
	}
	return first
}

// get takes a cached block of class c or allocates one.
func (p *pinnedPool) get(c int64) (*cuda.HostMem, error) {
	p.mu.Lock()
	if bs := p.free[c]; len(bs) > 0 {
		b := bs[len(bs)-1]
		p.free[c] = bs[:len(bs)-1]
		p.cached -= c
		p.inUse += c
		p.mu.Unlock()
		return b, nil
	}
	drop := p.evictLocked(c)
	if p.inUse+p.cached+c > p.limit {
		inUse, limit := p.inUse, p.limit
		p.mu.Unlock()
		freeBlocks(drop)
		return nil, fmt.Errorf("%w: %d bytes in use, %d more asked for, limit %d (SetPinnedPoolLimit)", ErrPinnedPoolFull, inUse, c, limit)
	}
	p.inUse += c // reserved before the slow allocation, so concurrent callers respect the limit
	p.mu.Unlock()
	if err := freeBlocks(drop); err != nil {
		reportCUDAError(err)
	}
	d, err := device(0)
	var b *cuda.HostMem
	if err == nil {
		b, err = d.ctx.MemAllocHost(int(c), cuda.HostAllocPortable)
	}
	if err != nil {
		p.mu.Lock()
		p.inUse -= c
		p.mu.Unlock()
		return nil, err
	}
	return b, nil
}

// put gives a block back: cached while the pool is within its limit.
func (p *pinnedPool) put(b *cuda.HostMem, c int64) {
	p.mu.Lock()
	p.inUse -= c
	if p.inUse+p.cached+c <= p.limit {
		p.free[c] = append(p.free[c], b)
		p.cached += c
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if err := b.Free(); err != nil {
		reportCUDAError(fmt.Errorf("zerocopy: freeing pinned memory: %w", err))
	}
}

// pooledBlock returns its block to the pool when the last view is closed.
type pooledBlock struct {
	owner Owner
	b     *cuda.HostMem
	class int64
}

func (m *pooledBlock) Release() { pinned.put(m.b, m.class) }

// AllocPinnedPooled returns a C-contiguous tensor of dtype dt and shape in
// page-locked host memory from the pinned pool: a cached block when one of
// its size class is free, else a new one (cuMemHostAlloc, portable to all
// contexts). The view's device is typ, dlpack.CPU (host memory that CPU
// consumers such as NumPy take as their own, and copies treat as pinned)
// or dlpack.CUDAHost. The memory goes back to the pool when the last view
// is closed; it is uninitialised. The error matches ErrPinnedPoolFull when
// the pool's limit leaves no room (the caller may fall back to pageable
// memory), cuda.ErrNoDriver without a driver.
func AllocPinnedPooled(typ dlpack.DeviceType, dt dlpack.DataType, shape ...int64) (*View, error) {
	if typ != dlpack.CPU && typ != dlpack.CUDAHost {
		return nil, fmt.Errorf("zerocopy: AllocPinnedPooled: device type %v is not cpu or cuda_host", typ)
	}
	nb, err := allocBytes("AllocPinnedPooled", dt, shape)
	if err != nil {
		return nil, err
	}
	spec := Spec{Device: dlpack.Device{Type: typ}, DType: dt, Shape: shape}
	if nb == 0 {
		return Wrap(spec, NewOwner(nil, "pinned pool (empty)"))
	}
	c := pinnedClass(nb)
	b, err := pinned.get(c)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: AllocPinnedPooled(%s%s): %w", dt, FormatShape(shape), err)
	}
	m := &pooledBlock{b: b, class: c}
	m.owner.Init(m, "pinned pool")
	spec.Ptr = uintptr(b.Ptr())
	return Wrap(spec, &m.owner)
}

// peerPairs records the device pairs whose peer access was set up (or
// found impossible), so that it is tried once per pair.
var peerPairs sync.Map // [2]int{low, high} -> struct{}

// enablePeers lets devices a and b reach each other's memory directly,
// once per pair: both contexts' peer access (cuCtxEnablePeerAccess, for
// memory from cuMemAlloc and other libraries) and both default pools'
// access (cuMemPoolSetAccess: pool memory does not follow the contexts).
// Without it the driver stages peer copies through the host: a two-GPU
// run measured 37 GB/s where CuPy, which enables peer access, got 375.
// Failures only leave the driver's staged path in place.
func enablePeers(a, b *devState) {
	x, y := a.ctx.Device().Ordinal(), b.ctx.Device().Ordinal()
	if x == y {
		return
	}
	if _, done := peerPairs.LoadOrStore([2]int{min(x, y), max(x, y)}, struct{}{}); done {
		return
	}
	for _, p := range [][2]*devState{{a, b}, {b, a}} {
		from, to := p[0], p[1]
		if ok, err := from.ctx.Device().CanAccessPeer(to.ctx.Device()); err != nil || !ok {
			return
		}
		if err := from.ctx.EnablePeerAccess(to.ctx); err != nil {
			return
		}
		if pool, err := to.memPool(); err == nil {
			pool.SetPeerAccess(from.ctx.Device(), true) // from reads and writes to's pool memory
		}
	}
}
