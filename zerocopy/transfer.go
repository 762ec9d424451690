package zerocopy

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// This file: the transfer engine between pageable host memory and the
// device. Ordinary Go memory cannot be read by the DMA engines directly;
// the driver copies it through small pinned buffers of its own, one at a
// time (8-15 GB/s on the H100 against 55 GB/s from pinned memory,
// bench/results/bandwidth-h100). The Copier does better in two ways:
//
//   - staged: a ring of pinned buffers; the ring's crews of workers (and
//     the caller) copy the next chunks into free buffers while the DMA
//     engine moves the previous ones, so the transfer runs at the speed of
//     a parallel host memcpy rather than the driver's staging (crew.go says
//     why the workers park in the kernel). The workers publish the pieces
//     themselves, without a coordinator. A warm 64 MiB upload is
//     DMA-bound; after the CPUs idled, the host copies are the limit
//     (bench/results/upload-h100 has the timelines);
//   - registered: a Go buffer that is transferred again and again is
//     page-locked once (cuMemHostRegister), after which the DMA engines read
//     it directly at the pinned rate; it is unregistered when the last view
//     of its memory is closed.

// TransferPath is how a copy between pageable host memory and the device
// moves the bytes. A Copier picks one by size and history (PathAuto) unless
// told otherwise.
type TransferPath int

// Transfer paths.
const (
	// PathAuto lets the Copier choose: direct for small copies (below
	// CopierOptions.StagedMin), registered for a buffer seen
	// CopierOptions.RegisterAfter times, staged otherwise.
	PathAuto TransferPath = iota
	// PathDirect hands the memory to the driver as it is: the full rate
	// from pinned memory; from pageable memory the driver stages it itself.
	PathDirect
	// PathStaged copies through the Copier's ring of pinned buffers, with
	// the host copies on several goroutines overlapping the DMA.
	PathStaged
	// PathRegistered page-locks the pageable buffer (cuMemHostRegister)
	// and keeps it registered until its owner releases it; then direct.
	PathRegistered
	// PathHost is reported for copies between two host views (Copy).
	PathHost
	// PathDevice is reported for copies between two device views.
	PathDevice
)

var pathNames = [...]string{"auto", "direct", "staged", "registered", "host", "device"}

func (p TransferPath) String() string {
	if p >= 0 && int(p) < len(pathNames) {
		return pathNames[p]
	}
	return fmt.Sprintf("TransferPath(%d)", int(p))
}

// ParseTransferPath reads the name of a path a caller may force ("auto",
// "direct", "staged", "registered").
func ParseTransferPath(s string) (TransferPath, error) {
	for i, n := range pathNames[:PathRegistered+1] {
		if strings.EqualFold(s, n) {
			return TransferPath(i), nil
		}
	}
	return 0, fmt.Errorf("zerocopy: unknown transfer path %q (want auto, direct, staged or registered)", s)
}

// CopierOptions configure a Copier. Zero fields take the defaults.
type CopierOptions struct {
	// Path forces the transfer path of pageable memory (default PathAuto).
	Path TransferPath
	// ChunkBytes is the size of each pinned staging buffer (default 8 MiB;
	// a transfer uses buffers of a quarter of its size when that is less).
	ChunkBytes int64
	// Buffers is the number of staging buffers in a ring (default 4).
	Buffers int
	// Workers is the number of goroutines that copy chunks on the host,
	// the calling one included (default three quarters of GOMAXPROCS, at
	// most 12); transfers under 64 MiB use at most 8 of them (see
	// smallTransfer). The host copies share the memory bus with the DMA
	// that reads the staging buffers.
	Workers int
	// StagedMin: with PathAuto, pageable copies smaller than this go
	// direct (default 4 MiB: below it the driver's own staging is as fast,
	// bench/results/bandwidth-h100).
	StagedMin int64
	// RegisterAfter: with PathAuto, a pageable buffer of at least
	// RegisterMin bytes is registered on its RegisterAfter-th transfer by
	// this Copier (default 3: registering costs about as much as two staged
	// copies, bench/results/bandwidth-h100).
	RegisterAfter int
	// RegisterMin is the smallest buffer PathAuto registers (default 4 MiB).
	RegisterMin int64
}

// maxDefaultWorkers caps the default Workers. A variable so that a
// diagnosis build (trace_dlbtrace.go) can try other counts in a process it
// does not own, such as Python's.
var maxDefaultWorkers = 12

// Transfers smaller than smallTransfer use at most smallWorkers workers:
// Python uploads on the H100 were faster with 12 workers than with 8 from
// 64 MiB on (also after the CPUs idled) and slower at 16 MiB
// (bench/results/upload-h100).
const (
	smallTransfer = 64 << 20
	smallWorkers  = 8
)

func (o CopierOptions) withDefaults() CopierOptions {
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 8 << 20
	}
	if o.Buffers <= 0 {
		o.Buffers = 4
	}
	if o.Workers <= 0 {
		o.Workers = min(max(runtime.GOMAXPROCS(0)*3/4, 1), maxDefaultWorkers)
	}
	if o.StagedMin <= 0 {
		o.StagedMin = 4 << 20
	}
	if o.RegisterAfter <= 0 {
		o.RegisterAfter = 3
	}
	if o.RegisterMin <= 0 {
		o.RegisterMin = 4 << 20
	}
	return o
}

// Copier copies between views with the CUDA driver (see Copy) and owns the
// resources of fast transfers: rings of pinned staging buffers, one per
// concurrent transfer and device, and the transfer history PathAuto uses.
// It is safe for concurrent use. CopyCUDA uses a default Copier that lives
// as long as the process.
type Copier struct {
	opts CopierOptions

	mu     sync.Mutex
	free   map[int][]*ring // idle rings by device ordinal
	all    []*ring
	hist   map[histKey]*histEntry
	tick   uint64
	closed bool
}

// NewCopier returns a Copier with opts. Close it to free its pinned memory.
func NewCopier(opts CopierOptions) *Copier {
	return &Copier{opts: opts.withDefaults(), free: make(map[int][]*ring), hist: make(map[histKey]*histEntry)}
}

var defaultCopier = sync.OnceValue(func() *Copier { return NewCopier(CopierOptions{}) })

// DefaultCopier returns the Copier CopyCUDA uses.
func DefaultCopier() *Copier { return defaultCopier() }

// Options returns the options in effect (defaults filled in).
func (c *Copier) Options() CopierOptions { return c.opts }

// Close frees the staging buffers. Copies must not be running. Memory the
// Copier registered stays registered until its owner releases it (or
// UnregisterHost). Close is idempotent.
func (c *Copier) Close() error {
	c.mu.Lock()
	rings := c.all
	c.all, c.free, c.closed = nil, map[int][]*ring{}, true
	c.mu.Unlock()
	var first error
	for _, r := range rings {
		if err := r.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ring is a set of pinned staging buffers, each with the event recorded
// after the last DMA that uses it.
type ring struct {
	d    *devState
	bufs []*cuda.HostMem
	evs  []*cuda.Event
	size int64
	// Its host-copy workers, started by its first staged transfer of
	// several pieces: crews[0] works in every transfer, crews[1] joins it
	// from smallTransfer on. Two crews, not one of which a transfer wakes
	// a part: the futex wakes the threads that slept longest, so a small
	// upload's workers were taken in turn from all of them, and 4 MiB
	// uploads ran 10% slower (bench/results/upload-h100).
	crews [2]*crew
}

func (r *ring) close() error {
	for _, c := range r.crews {
		if c != nil {
			c.close()
		}
	}
	var first error
	for i := range r.bufs {
		// The buffer may still be read or written by a DMA: wait for it.
		if err := r.evs[i].Synchronize(); err != nil && first == nil {
			first = err
		}
		if err := r.evs[i].Destroy(); err != nil && first == nil {
			first = err
		}
		if err := r.bufs[i].Free(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// getRing takes an idle ring of device d whose buffers hold at least want
// bytes, or makes one (an idle ring too small is replaced: rings grow to
// the transfers they serve, up to ChunkBytes).
func (c *Copier) getRing(d *devState, want int64) (*ring, error) {
	ord := d.ctx.Device().Ordinal()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("zerocopy: Copier is closed")
	}
	var small *ring
	if rs := c.free[ord]; len(rs) > 0 {
		r := rs[len(rs)-1]
		c.free[ord] = rs[:len(rs)-1]
		if r.size >= want {
			c.mu.Unlock()
			return r, nil
		}
		small = r
		c.all = slices.DeleteFunc(c.all, func(x *ring) bool { return x == r })
	}
	c.mu.Unlock()
	if small != nil {
		if err := small.close(); err != nil {
			return nil, err
		}
	}
	r := &ring{d: d, size: want}
	for range c.opts.Buffers {
		h, err := d.ctx.MemAllocHost(int(r.size), 0)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("staging buffer of %d bytes: %w", r.size, err)
		}
		e, err := d.ctx.NewEvent(0)
		if err != nil {
			h.Free()
			r.close()
			return nil, err
		}
		r.bufs = append(r.bufs, h)
		r.evs = append(r.evs, e)
	}
	c.mu.Lock()
	c.all = append(c.all, r)
	c.mu.Unlock()
	return r, nil
}

// ringSize is the buffer size a staged transfer of n bytes wants: a
// quarter of it (so the host copies overlap the DMA), a power of two from
// 256 KiB up to ChunkBytes.
func (c *Copier) ringSize(n int64) int64 {
	want := int64(256 << 10)
	for want < n/4 && want < c.opts.ChunkBytes {
		want *= 2
	}
	return min(want, c.opts.ChunkBytes)
}

func (c *Copier) putRing(r *ring) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		r.close()
		return
	}
	ord := r.d.ctx.Device().Ordinal()
	c.free[ord] = append(c.free[ord], r)
}

// histKey names a host buffer by its byte span.
type histKey struct{ start, end uintptr }

type histEntry struct {
	owner  weak.Pointer[Owner] // the memory seen last at this span
	count  int
	failed bool // registration failed: do not try again
	tick   uint64
}

const maxHist = 256

// seen counts a transfer of the host span of v and returns how many this
// Copier has seen of that buffer (this one included) and whether
// registering it failed before.
func (c *Copier) seen(k histKey, o *Owner) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	e := c.hist[k]
	w := weak.Make(o)
	if e == nil || e.owner != w {
		if e == nil && len(c.hist) >= maxHist {
			// Forget the entry unused the longest.
			var old histKey
			var t uint64 = ^uint64(0)
			for k2, e2 := range c.hist {
				if e2.tick < t {
					old, t = k2, e2.tick
				}
			}
			delete(c.hist, old)
		}
		e = &histEntry{owner: w}
		c.hist[k] = e
	}
	e.count++
	e.tick = c.tick
	return e.count, e.failed
}

func (c *Copier) markFailed(k histKey) {
	c.mu.Lock()
	if e := c.hist[k]; e != nil {
		e.failed = true
	}
	c.mu.Unlock()
}

// hostDevice copies between a host view (pageable or pinned) and device or
// managed memory.
func (x *xfer) hostDevice(host *View, path TransferPath) (TransferPath, error) {
	p := planBytes(x.shape, x.dst.strides, x.src.strides, x.is)
	if p.empty {
		return PathDirect, nil
	}
	pitched := p.dmaFriendly()
	hk := x.dst.kind
	if !hk.host() {
		hk = x.src.kind
	}
	nb := p.bytes()

	if hk == memPinned {
		if !pitched {
			return PathStaged, x.staged()
		}
		if err := dma(x.s, &p, x.dst.base, x.src.base, x.dst.kind, x.src.kind); err != nil {
			return PathDirect, err
		}
		if host.device.Type != dlpack.CPU {
			return PathDirect, nil // cuda_host memory: stream-ordered like device memory
		}
		// Registered Go or C memory is done with on return, like any
		// pageable memory.
		return PathDirect, x.sync()
	}

	// Pageable memory.
	auto := path == PathAuto
	if auto {
		path = x.c.choose(host, nb)
	}
	switch path {
	case PathRegistered:
		if err := registerView(host, x.d); err != nil {
			if !auto {
				return PathRegistered, err
			}
			// Not registrable (shares pages with a registration, or the
			// system refuses): remember, and stage.
			lo, hi := host.ByteSpan()
			x.c.markFailed(histKey{host.Ptr() + uintptr(lo), host.Ptr() + uintptr(hi)})
			return PathStaged, x.staged()
		}
		if x.dst.kind.host() {
			x.dst.kind = memPinned
		} else {
			x.src.kind = memPinned
		}
		if !pitched {
			return PathRegistered, x.staged()
		}
		if err := dma(x.s, &p, x.dst.base, x.src.base, x.dst.kind, x.src.kind); err != nil {
			return PathRegistered, err
		}
		return PathRegistered, x.sync()
	case PathDirect:
		if p.nd == 0 {
			if err := linear(x.s, x.dst.base+uintptr(p.doff), x.src.base+uintptr(p.soff), p.run, x.dst.kind, x.src.kind); err != nil {
				return PathDirect, err
			}
			if x.src.kind == memPageable {
				// The driver copies a pageable source into staging memory
				// of its own before cuMemcpyHtoDAsync returns: the source is
				// done with, and the device destination may stay in flight
				// (pending on the stream) as for any device destination.
				return PathDirect, nil
			}
			return PathDirect, x.sync()
		}
		if pitched {
			if err := dma(x.s, &p, x.dst.base, x.src.base, x.dst.kind, x.src.kind); err == nil {
				return PathDirect, x.sync()
			}
			// The driver refused pitched copies of pageable memory: stage.
		}
		return PathStaged, x.staged()
	}
	return PathStaged, x.staged()
}

// choose picks the path of a pageable transfer by size and history.
func (c *Copier) choose(host *View, nb int64) TransferPath {
	if nb < c.opts.StagedMin {
		return PathDirect
	}
	lo, hi := host.ByteSpan()
	k := histKey{host.Ptr() + uintptr(lo), host.Ptr() + uintptr(hi)}
	n, failed := c.seen(k, host.owner)
	if !failed && nb >= c.opts.RegisterMin && n >= c.opts.RegisterAfter {
		return PathRegistered
	}
	return PathStaged
}

// piece is a part of a staged transfer: a sub-block of the shape at element
// offsets from the host and device bases, small enough for one buffer.
type piece struct {
	shape      []int64
	hoff, doff int64
}

// pieces splits shape into blocks of at most chunk bytes, cutting the
// outermost dimension of the device side first (so that each block is a
// few long runs of device memory).
func pieces(shape, hs, ds []int64, is, chunk int64) []piece {
	var order []int
	for i, e := range shape {
		if e > 1 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return abs64(ds[order[a]]) > abs64(ds[order[b]]) })
	var out []piece
	var rec func(sh []int64, level int, hoff, doff int64)
	rec = func(sh []int64, level int, hoff, doff int64) {
		n := is
		for _, e := range sh {
			n *= e
		}
		if n <= chunk || level == len(order) {
			out = append(out, piece{shape: sh, hoff: hoff, doff: doff})
			return
		}
		dim := order[level]
		e := sh[dim]
		per := n / e
		if per <= chunk {
			k := chunk / per
			for i := int64(0); i < e; i += k {
				sub := slices.Clone(sh)
				sub[dim] = min(k, e-i)
				out = append(out, piece{shape: sub, hoff: hoff + i*hs[dim], doff: doff + i*ds[dim]})
			}
			return
		}
		for i := int64(0); i < e; i++ {
			sub := slices.Clone(sh)
			sub[dim] = 1
			rec(sub, level+1, hoff+i*hs[dim], doff+i*ds[dim])
		}
	}
	rec(slices.Clone(shape), 0, 0, 0)
	return out
}

// staged moves the data through the Copier's ring of pinned buffers. Each
// piece is packed on the host into a buffer laid out like the device side
// (so the DMA is the device side's own runs) while the DMA of earlier
// pieces runs. The host copies are cut into tasks of about a worker's share
// of a piece, and a pool of workers takes them in order without waiting at
// piece boundaries: an upload's DMAs are queued in piece order as the
// pieces are packed (packed), and a download's tasks wait only for their
// own piece's DMA. It returns when the host memory is done with: for a device
// destination the last DMAs may still be in flight on the stream, reading
// pinned memory only.
func (x *xfer) staged() error {
	trace("staged", -1)
	r, err := x.c.getRing(x.d, x.c.ringSize(x.bytes()))
	trace("ring", -1)
	if err != nil {
		return err
	}
	defer x.c.putRing(r)
	p := &pipeline{x: x, r: r, h2d: x.src.kind.host()}
	p.host, p.dev = x.src, x.dst
	if !p.h2d {
		p.host, p.dev = x.dst, x.src
	}
	chunk := min(r.size, x.c.ringSize(x.bytes()))
	p.ps = ramp(pieces(x.shape, p.host.strides, p.dev.strides, x.is, chunk), p.host.strides, p.dev.strides, x.is, chunk)
	return p.run()
}

// ramp cuts the first and the last of several pieces into quarters. The
// first DMA then starts after a quarter of a buffer is packed instead of a
// whole one (BenchmarkStagedTimeline shows when it starts), and after the
// last host copy only a quarter buffer's DMA is left to wait for (for a
// download: the first host copy starts sooner, the last is shorter). Only
// those two are quartered: 2 MiB DMAs run a little slower than 8 MiB ones
// (BenchmarkDMAUnderLoad), and quartering the last piece measured the same
// as not (bench/results/staged-h100).
func ramp(ps []piece, hs, ds []int64, is, chunk int64) []piece {
	if len(ps) < 2 || chunk < 4*minPart {
		return ps
	}
	quarters := func(p piece) []piece {
		q := pieces(p.shape, hs, ds, is, chunk/4)
		for i := range q {
			q[i].hoff += p.hoff
			q[i].doff += p.doff
		}
		return q
	}
	out := quarters(ps[0])
	out = append(out, ps[1:len(ps)-1]...)
	return append(out, quarters(ps[len(ps)-1])...)
}

// pipeline is one staged transfer in progress.
type pipeline struct {
	x         *xfer
	r         *ring
	h2d       bool
	workers   int // that copy, the caller included (see smallTransfer)
	host, dev side
	ps        []piece
	at        []slot // where each piece is staged (see place)

	left []atomic.Int32 // host copy tasks not yet done, per piece
	err  atomic.Pointer[error]

	// The host copies of every piece, in piece order; piece i's are
	// all[first[i]:first[i+1]]. A piece's tasks are published once they
	// are cut and its buffer is ready (see publishReady); the workers
	// claim them in order. The caller cuts them (cutPiece), the first
	// piece's before the crew may start.
	all       []pipeTask
	nall      int // all[:nall] are cut; the caller's alone
	first     []int
	cut       atomic.Int32  // pieces [0, cut) are cut
	published gate          // tasks [0, published) may be taken
	claimed   atomic.Uint32 // the next task to claim

	// Publishing, by one worker at a time (see publishReady).
	publishing oneAtATime
	nextPub    atomic.Int32 // the first piece not published

	// An upload's DMAs are queued by one worker at a time, in piece
	// order unless the first piece not queued is late (see packed).
	queuing oneAtATime
	nextDMA atomic.Int32  // the first piece whose DMA is not queued
	queued  []atomic.Bool // an upload's pieces whose DMA is queued
	nqueued int           // how many; the queuing worker's alone

	// An upload's buffers go to its uses as they come free (see take):
	// held[b] is the first piece of the use buffer b was last given to
	// (-1: none yet). The publishing worker's alone.
	held       []int
	downloaded atomic.Int32 // a download's pieces whose host copies are done

	end gate // 1 once every host copy is done (and, for an upload, every DMA queued)
}

// slot is where a piece is staged: buffer b from byte off. The pieces
// packed into a buffer together (a use of it, pieces start to end) are
// published together, after one wait for the buffer; first says that the
// piece opens its use. A download's buffers go round in turn, fixed here,
// and prev is the last piece of the buffer's previous use (-1: none); an
// upload's use gets its buffer when it is published (take), and b is -1
// until then.
type slot struct {
	b          int
	off        int64
	prev       int
	first      bool
	start, end int

	strides []int64 // the piece's layout in the buffer: compact, like the device side
	elem0   int64   // the byte offset of its element [0,...] from off
}

// place gives each piece its slot. An upload packs consecutive pieces
// into a buffer while they fit, so ramp's four quarters share one and the
// other buffers take the next pieces at once: when each quarter had a
// buffer of its own, the first whole piece waited for the first quarter's
// DMA and then took longer to pack than the quarters' DMAs, so the DMA
// engine idled (BenchmarkStagedTimeline on the H100: 0.16 ms of 1.5). A
// download gives each piece a buffer of its own, in turn: its workers wait
// for their piece's DMA by the buffer's event, which a later piece in the
// same buffer would move past it.
func (p *pipeline) place() {
	k := len(p.r.bufs)
	p.at = make([]slot, len(p.ps))
	last := make([]int, k) // per buffer: the last piece staged in it (downloads)
	for b := range last {
		last[b] = -1
	}
	b, fill := -1, p.r.size
	for i, pc := range p.ps {
		like, off, n := likeStrides(pc.shape, p.dev.strides)
		n = (n*p.x.is + 255) &^ 255 // pieces start 256-byte aligned
		switch {
		case !p.h2d:
			b = (b + 1) % k
			p.at[i] = slot{b: b, prev: last[b], first: true, start: i}
			last[b] = i
		case fill+n > p.r.size:
			fill = 0
			p.at[i] = slot{b: -1, prev: -1, first: true, start: i}
		default:
			p.at[i] = slot{b: -1, prev: -1, off: fill, start: p.at[i-1].start}
		}
		p.at[i].strides, p.at[i].elem0 = like, off*p.x.is
		fill += n
	}
	for i := len(p.at) - 1; i >= 0; i-- {
		p.at[i].end = i
		if i+1 < len(p.at) && !p.at[i+1].first {
			p.at[i].end = p.at[i+1].end
		}
	}
	if p.h2d {
		p.held = slices.Repeat([]int{-1}, k)
	}
}

// pipeTask is one host copy: part of piece i, between the host memory and
// the piece's buffer.
type pipeTask struct {
	i        int
	shape    []int64
	hp       uintptr // element [0,...] of the part on the host
	bo       uintptr // and its byte offset in the piece's buffer (see base)
	bstrides []int64 // the buffer's strides
}

func (p *pipeline) fail(err error) {
	p.err.CompareAndSwap(nil, &err)
}

func (p *pipeline) failed() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// stage returns where piece i lives in its buffer: the element [0,...] of
// a compact layout like the device side, and its strides. The piece must
// have its buffer (it is published).
func (p *pipeline) stage(i int) (uintptr, []int64) {
	s := &p.at[i]
	return p.base(i) + uintptr(s.off+s.elem0), s.strides
}

// base is the address of piece i's buffer (it must have one).
func (p *pipeline) base(i int) uintptr { return uintptr(p.r.bufs[p.at[i].b].Ptr()) }

// queue queues the DMA of piece i between its buffer and the device, and
// records the buffer's event after it.
func (p *pipeline) queue(i int) error {
	if err := p.move(i); err != nil {
		return err
	}
	trace("dma-moved", i)
	return p.r.evs[p.at[i].b].Record(p.x.s)
}

// move queues the DMA of piece i between its buffer and the device.
func (p *pipeline) move(i int) error {
	x, pc := p.x, p.ps[i]
	bp, bs := p.stage(i)
	db := p.dev.base + uintptr(pc.doff*x.is)
	var pl bytePlan
	if p.h2d {
		pl = planBytes(pc.shape, p.dev.strides, bs, x.is)
		return dmaOrKernel(x, &pl, db, bp, p.dev.kind, memPinned)
	}
	pl = planBytes(pc.shape, bs, p.dev.strides, x.is)
	return dmaOrKernel(x, &pl, bp, db, memPinned, p.dev.kind)
}

// split cuts piece i into host copy tasks (as cuts says) and returns how
// many.
func (p *pipeline) split(i int, emit func(pipeTask)) int {
	// Cut before the piece has a buffer: offsets in it.
	pc, sl := p.ps[i], &p.at[i]
	bo, bs := uintptr(sl.off+sl.elem0), sl.strides
	hp := p.host.base + uintptr(pc.hoff*p.x.is)
	dim, per, count := p.cuts(i)
	if dim < 0 {
		emit(pipeTask{i: i, shape: pc.shape, hp: hp, bo: bo, bstrides: bs})
		return 1
	}
	nd := len(pc.shape)
	shapes := make([]int64, int(count)*nd) // the tasks' shapes, one allocation
	ext := pc.shape[dim]
	for k := range int(count) {
		start := int64(k) * per
		sub := shapes[k*nd : (k+1)*nd : (k+1)*nd]
		copy(sub, pc.shape)
		sub[dim] = min(per, ext-start)
		emit(pipeTask{i: i, shape: sub, bstrides: bs,
			hp: hp + uintptr(start*p.host.strides[dim]*p.x.is),
			bo: bo + uintptr(start*bs[dim]*p.x.is)})
	}
	return int(count)
}

// cuts says how split cuts piece i: along its largest dimension dim, per
// elements of it a task, count tasks (about one per worker, none smaller
// than minPart bytes); dim is -1 for one task of the whole piece.
func (p *pipeline) cuts(i int) (dim int, per, count int64) {
	n, ext := p.x.is, int64(1)
	dim = -1
	for d, e := range p.ps[i].shape {
		n *= e
		if e > ext {
			dim, ext = d, e
		}
	}
	parts := min(int64(p.workers), max(n/minPart, 1), ext)
	if parts <= 1 || dim < 0 {
		return -1, 0, 1
	}
	per = (ext + parts - 1) / parts
	return dim, per, (ext + per - 1) / per
}

// stagedTrace, when a benchmark of this package sets it, hears each step
// of a staged transfer (what, which piece) as it happens, so that where a
// transfer's time goes can be seen on the GPU machine.
var stagedTrace func(step string, piece int)

func trace(step string, piece int) {
	if stagedTrace != nil {
		stagedTrace(step, piece)
	}
}

func (p *pipeline) run() error {
	p.workers = p.x.c.opts.Workers
	if p.x.bytes() < smallTransfer {
		p.workers = min(p.workers, smallWorkers)
	}
	p.place()
	p.prepare()
	if len(p.ps) == 1 {
		if p.cutPiece(0); p.nall == 1 {
			return p.inline()
		}
	}
	if p.r.crews[0] == nil {
		// The caller works beside the crews, so Workers goroutines copy
		// in all.
		small := min(p.x.c.opts.Workers, smallWorkers)
		p.r.crews[0] = newCrew(small - 1)
		p.r.crews[1] = newCrew(p.x.c.opts.Workers - small)
	}
	// The crews are woken first: their threads come up (tens of
	// microseconds on the H100 machine) while this one cuts the tasks.
	p.r.crews[0].start(p.work)
	if p.workers > smallWorkers {
		p.r.crews[1].start(p.work)
	}
	trace("crew", -1)
	// There is no coordinator: the workers publish the pieces themselves
	// (publishReady), this goroutine the first ones. A coordinator
	// goroutine that waited on channels was woken by the Go scheduler,
	// tens of microseconds late on the H100 machine each time a buffer
	// came free, while a worker that frees a buffer is running already.
	// The first piece is published as soon as it is cut, so that the
	// crew starts on it while this goroutine cuts the rest (tens of
	// microseconds for a large transfer, bench/results/upload-h100).
	for i := int(p.cut.Load()); i < len(p.ps); i++ {
		p.cutPiece(i)
		if i == 0 {
			p.publishReady()
		}
	}
	trace("tasks", -1)
	p.publishReady()
	p.work()
	p.end.spinUntil(1, taskSpin) // the other workers' last tasks
	trace("done", -1)
	return p.failed()
}

// prepare makes room for the host copy tasks of every piece and counts
// them: all has a fixed length, so that cutting more tasks never moves
// the ones the workers already read.
func (p *pipeline) prepare() {
	p.left = make([]atomic.Int32, len(p.ps))
	if p.h2d {
		p.queued = make([]atomic.Bool, len(p.ps))
	}
	p.first = make([]int, len(p.ps)+1)
	n := 0
	for i := range p.ps {
		_, _, k := p.cuts(i)
		n += int(k)
	}
	// Counted before the crew starts: a worker that has claimed every
	// published task sleeps until more are published, unless there are
	// no more to come.
	p.all = make([]pipeTask, n)
}

// cutPiece cuts piece i (the next one) into its host copy tasks, and
// then counts it as cut (publish publishes only cut pieces).
func (p *pipeline) cutPiece(i int) {
	// first[i] was set with piece i-1 (first[0] is 0), and publish may
	// be reading it: it is not written again.
	n := p.split(i, func(t pipeTask) { p.all[p.nall] = t; p.nall++ })
	p.left[i].Store(int32(n))
	p.first[i+1] = p.nall
	p.cut.Store(int32(i + 1))
}

// take reports whether piece i's buffer is free of the host work of its
// previous use, and gives an upload's piece its buffer. A download's
// buffer is fixed (place): free once the previous use's host copies out
// of it are done. An upload's use takes whichever buffer comes free first
// (pick); the other pieces of the use follow its first.
func (p *pipeline) take(i int) bool {
	sl := &p.at[i]
	if !p.h2d {
		return sl.prev < 0 || p.left[sl.prev].Load() == 0
	}
	if !sl.first {
		sl.b = p.at[sl.start].b
		return true
	}
	b := p.pick()
	if b < 0 {
		return false
	}
	sl.b, p.held[b] = b, i
	return true
}

// pick chooses the buffer for an upload's next use: of the buffers whose
// last use has all its DMAs queued (in any order; the buffer's event,
// recorded after each, then says when they have read it), the one used
// least recently, whose DMAs are the likeliest done; -1 when none is.
// Buffers go to uses as they come free rather than in turn, so that a use
// whose host copy has stalled (its worker lost its CPU) holds its own
// buffer only, while the others go round and the DMAs of the pieces
// behind it go early (packed).
func (p *pipeline) pick() int {
	best := -1
	for b, s := range p.held {
		if s >= 0 && !p.useQueued(s) {
			continue
		}
		if best < 0 || s < p.held[best] {
			best = b
		}
	}
	return best
}

// useQueued reports whether the DMAs of every piece of the use that
// piece s opens are queued.
func (p *pipeline) useQueued(s int) bool {
	for k := s; k <= p.at[s].end; k++ {
		if !p.queued[k].Load() {
			return false
		}
	}
	return true
}

// publishReady publishes every piece whose buffer is ready, in piece
// order, on whichever worker calls it first. Every worker that may have
// made a piece ready (it finished a piece's host copies, or queued its
// DMA) calls it, and the caller does once the tasks are cut. One worker
// publishes at a time (oneAtATime), so no ready piece is left unpublished
// while the workers sleep.
//
// Publishing piece i into buffer b waits for the buffer's last DMA (its
// event), then, for a download, queues the piece's DMA into the buffer.
// After an error it publishes without either, so that every task is
// claimed (and skipped) and the workers end.
func (p *pipeline) publishReady() { p.publishing.do(p.publish) }

// publish is publishReady's work, on one worker at a time.
func (p *pipeline) publish() {
	for i := int(p.nextPub.Load()); i < int(p.cut.Load()) && p.take(i); i++ {
		if p.at[i].first && p.failed() == nil {
			trace("buffer-free", i)
			if err := p.r.evs[p.at[i].b].Synchronize(); err != nil {
				p.fail(err)
			}
			trace("buffer-dma-done", i)
		}
		if !p.h2d && p.failed() == nil {
			if err := p.queue(i); err != nil {
				p.fail(err)
			}
		}
		p.nextPub.Store(int32(i + 1))
		p.published.store(uint32(p.first[i+1]))
	}
}

// inline runs a transfer of one piece and one task on this goroutine: for
// small transfers, waking workers would cost more than the copy.
func (p *pipeline) inline() error {
	x, ev := p.x, p.r.evs[0]
	p.at[0].b = 0
	if err := ev.Synchronize(); err != nil { // the buffer's last DMA is done
		return err
	}
	t := &p.all[0]
	bp := p.base(0) + t.bo
	if p.h2d {
		hostCopy(t.shape, bp, t.bstrides, t.hp, p.host.strides, x.is)
		return p.queue(0)
	}
	if err := p.queue(0); err != nil {
		return err
	}
	if err := ev.Synchronize(); err != nil {
		return err
	}
	hostCopy(t.shape, t.hp, p.host.strides, bp, t.bstrides, x.is)
	return nil
}

// work runs host copy tasks, claimed in order, until none is left. After
// an error the remaining tasks are skipped.
func (p *pipeline) work() {
	x := p.x
	for {
		j, ok := p.claim()
		if !ok {
			return
		}
		t := &p.all[j]
		trace("task-taken", t.i)
		if p.failed() == nil {
			if !p.h2d {
				// The piece's DMA into the buffer must be done.
				if err := p.r.evs[p.at[t.i].b].Synchronize(); err != nil {
					p.fail(err)
				}
			}
		}
		if p.failed() == nil {
			// The piece's buffer was given with its publication, which
			// the claim saw.
			bp := p.base(t.i) + t.bo
			if p.h2d {
				hostCopy(t.shape, bp, t.bstrides, t.hp, p.host.strides, x.is)
				trace("task-copied", t.i)
			} else {
				hostCopy(t.shape, t.hp, p.host.strides, bp, t.bstrides, x.is)
			}
		}
		if p.left[t.i].Add(-1) != 0 {
			continue
		}
		// The last task of the piece: its DMA may go (an upload), and a
		// later piece may now have a free buffer.
		if p.h2d {
			p.packed()
		} else if p.downloaded.Add(1) == int32(len(p.ps)) {
			p.end.store(1)
		}
		p.publishReady()
	}
}

// claim takes the next published task, or false when none is left. A
// worker claims only a task it can start: one that claimed before the
// task was published would hold it while its thread wakes (tens of
// microseconds on the H100 machine, where the first piece's tasks then
// started one after another). Waiting for the next piece, it polls for up
// to taskSpin before it sleeps: the gap is a DMA (0.05-0.2 ms), and a
// sleeping thread must be woken again.
func (p *pipeline) claim() (uint32, bool) {
	var polled time.Time
	for n := 0; ; n++ {
		j := p.claimed.Load()
		if pub := p.published.load(); j < pub {
			if p.claimed.CompareAndSwap(j, j+1) {
				return j, true
			}
			continue
		}
		// all is as long as every task, cut or not (prepare).
		if int(j) >= len(p.all) {
			return 0, false
		}
		if n%64 == 0 { // a clock read every 64 polls
			if polled.IsZero() {
				polled = time.Now()
			} else if time.Since(polled) > taskSpin {
				p.published.waitPast(j)
				polled = time.Time{}
			}
		}
	}
}

// taskSpin is how long a worker polls for the next piece's tasks before
// it sleeps.
const taskSpin = 200 * time.Microsecond

// packed is called by the worker that finishes an upload piece's last
// task. It queues the DMA of every packed piece (no task left) whose
// predecessors' DMAs are queued, in piece order. Pieces finish packing out
// of order (the workers share each piece), but the DMAs run one after
// another on the stream and the buffers are reused in piece order: a DMA
// queued behind its successors' held its buffer, and the host copies
// waiting for it, until all of them were done: the host idled for a
// millisecond (BenchmarkStagedTimeline, bench/results/staged-h100).
//
// Unless the first piece not queued is late: when a piece two or more
// beyond it is packed, one of its tasks has stalled (its worker lost its
// CPU, for milliseconds on the H100's virtual CPUs), and every packed
// piece behind it goes now rather than leave the DMA engine idle until it
// is done. Its buffer's next use waits for it either way (pick).
// bench/results/upload-h100 has a trace of such a stall and an A/B.
//
// One worker queues at a time (oneAtATime).
func (p *pipeline) packed() { p.queuing.do(p.queuePacked) }

// queuePacked is packed's work, on one worker at a time.
func (p *pipeline) queuePacked() {
	// A piece not cut yet has no tasks left either, but nothing packed;
	// the published ones are cut.
	pub := int(p.nextPub.Load())
	j := int(p.nextDMA.Load())
	for ; j < pub && (p.queued[j].Load() || p.left[j].Load() == 0); j++ {
		if !p.queued[j].Load() {
			p.queueDMA(j)
		}
	}
	p.nextDMA.Store(int32(j))
	late := false
	for k := j + 2; k < pub && !late; k++ {
		late = p.left[k].Load() == 0
	}
	for k := j + 1; late && k < pub; k++ {
		if !p.queued[k].Load() && p.left[k].Load() == 0 {
			trace("dma-early", k)
			p.queueDMA(k)
		}
	}
	if p.nqueued == len(p.ps) {
		p.end.store(1)
	}
}

// queueDMA queues the DMA of packed piece k (after an error, only counts
// it, so that publishing goes on and the workers end).
func (p *pipeline) queueDMA(k int) {
	if p.failed() == nil {
		trace("dma-call", k)
		if err := p.queue(k); err != nil {
			p.fail(err)
		}
		trace("dma-queued", k)
	}
	p.queued[k].Store(true)
	p.nqueued++
}

// dmaOrKernel issues the DMA of a staged piece; a device layout the DMA
// engines cannot walk in a few calls goes through a compact device buffer
// and the strided-copy kernel.
func dmaOrKernel(x *xfer, p *bytePlan, dst, src uintptr, dk, sk memKind) error {
	if p.dmaFriendly() {
		return dma(x.s, p, dst, src, dk, sk)
	}
	// Rare: overlapping or deeply nested device strides. Pack on the
	// device into a compact temporary, then one linear copy.
	n := p.bytes()
	tmp, err := x.s.MemAllocAsync(n)
	if err != nil {
		return err
	}
	defer x.s.MemFreeAsync(tmp)
	// The temporary is compact in the plan's order: rebuild plans against it.
	var tp bytePlan
	tp.run, tp.nd, tp.shape = p.run, p.nd, p.shape
	dlpack.FillCStrides(tp.ds[:p.nd], p.shape[:p.nd]) // in runs
	for i := range p.nd {
		tp.ds[i] *= p.run
	}
	tp.ss = tp.ds
	if dk.host() { // device -> tmp (kernel), tmp -> pinned (linear)
		kp := *p
		kp.ds, kp.doff = tp.ds, 0
		if err := x.d.kernelCopy(x.s, &kp, uintptr(tmp), src); err != nil {
			return err
		}
		// The pinned side of a staged piece is compact in the same order.
		return linear(x.s, dst+uintptr(p.doff), uintptr(tmp), n, dk, memDevice)
	}
	if err := linear(x.s, uintptr(tmp), src+uintptr(p.soff), n, memDevice, sk); err != nil {
		return err
	}
	kp := *p
	kp.ss, kp.soff = tp.ss, 0
	return x.d.kernelCopy(x.s, &kp, dst, uintptr(tmp))
}

// minPart is the smallest share of a piece worth a task of its own (a
// variable for BenchmarkStagedMinPart).
var minPart int64 = 256 << 10

// hostCopy copies a block between two non-overlapping host layouts.
func hostCopy(shape []int64, dst uintptr, ds []int64, src uintptr, ss []int64, is int64) {
	var p pair
	p.simplify(shape, ds, ss, 1, 1, true)
	p.run(hostPointer(dst), hostPointer(src), is)
}

// Registrations of pageable memory made by this package, sorted by start.
var regs struct {
	register sync.Mutex // held across check-and-register
	mu       sync.Mutex // guards list
	n        atomic.Int32
	list     []*registration
}

type registration struct {
	start, end uintptr
	reg        *cuda.HostRegistration
	done       bool
}

// registeredSpan reports whether [a, b) lies inside one registration made here.
func registeredSpan(a, b uintptr) bool {
	if regs.n.Load() == 0 {
		return false
	}
	regs.mu.Lock()
	defer regs.mu.Unlock()
	for _, r := range regs.list {
		if r.start <= a && b <= r.end && a <= b {
			return true
		}
	}
	return false
}

func isRegisteredHere(p uintptr) bool { return registeredSpan(p, p) }

func unregister(r *registration) error {
	regs.mu.Lock()
	if r.done {
		regs.mu.Unlock()
		return nil
	}
	r.done = true
	for i, x := range regs.list {
		if x == r {
			regs.list = slices.Delete(regs.list, i, i+1)
			break
		}
	}
	regs.n.Store(int32(len(regs.list)))
	regs.mu.Unlock()
	if err := r.reg.Unregister(); err != nil {
		return fmt.Errorf("zerocopy: unregistering [%#x, %#x): %w", r.start, r.end, err)
	}
	return nil
}

// registerView page-locks the byte span of a pageable host view
// (cuMemHostRegister) unless it is already, and arranges for the memory to
// be unregistered just before its owner releases it.
func registerView(v *View, d *devState) error {
	lo, hi := v.ByteSpan()
	a, b := v.Ptr()+uintptr(lo), v.Ptr()+uintptr(hi)
	regs.register.Lock() // one registration at a time: no racing twins
	defer regs.register.Unlock()
	if hi <= lo || registeredSpan(a, b) {
		return nil
	}
	// Hold a reference so the owner cannot run its release meanwhile.
	if err := v.owner.Retain(); err != nil {
		return err
	}
	defer v.owner.Release()
	h, err := d.ctx.MemHostRegister(hostPointer(a), int(b-a), cuda.HostRegisterPortable)
	if err != nil {
		return fmt.Errorf("registering %d bytes of host memory: %w", b-a, err)
	}
	r := &registration{start: a, end: b, reg: h}
	regs.mu.Lock()
	i := sort.Search(len(regs.list), func(i int) bool { return regs.list[i].start >= a })
	regs.list = slices.Insert(regs.list, i, r)
	regs.n.Store(int32(len(regs.list)))
	regs.mu.Unlock()
	// Unregister just before the owner's release frees the memory. The
	// reference held above means OnRelease cannot fail; if it did, undo.
	if err := v.owner.OnRelease(func() {
		if err := unregister(r); err != nil {
			reportCUDAError(err)
		}
	}); err != nil {
		return errors.Join(err, unregister(r))
	}
	return nil
}

// RegisterHost page-locks the memory of host view v (cuMemHostRegister on
// its byte span) on CUDA device 0's context, portable to all, so that
// copies between it and device memory run at the pinned rate without
// staging. It stays registered until the last view of the memory is closed
// or UnregisterHost. Registering registered memory again does nothing.
// Copiers with PathAuto register buffers they see again and again by
// themselves; this is for callers who know in advance.
func RegisterHost(v *View) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("zerocopy: RegisterHost: %w", err)
	}
	if v.device.Type != dlpack.CPU {
		return fmt.Errorf("zerocopy: RegisterHost: %v is %v memory, not pageable host memory", v, v.device)
	}
	d, err := device(0)
	if err != nil {
		return fmt.Errorf("zerocopy: RegisterHost: %w", err)
	}
	if err := registerView(v, d); err != nil {
		return fmt.Errorf("zerocopy: RegisterHost: %w", err)
	}
	return nil
}

// UnregisterHost undoes the registration that covers v's memory, made by
// RegisterHost or a Copier. Copies using the memory must be finished. It is
// not an error if the memory is not registered.
func UnregisterHost(v *View) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("zerocopy: UnregisterHost: %w", err)
	}
	lo, hi := v.ByteSpan()
	a, b := v.Ptr()+uintptr(lo), v.Ptr()+uintptr(hi)
	regs.mu.Lock()
	var r *registration
	for _, x := range regs.list {
		if x.start <= a && b <= x.end {
			r = x
			break
		}
	}
	regs.mu.Unlock()
	if r == nil {
		return nil
	}
	return unregister(r)
}

// sync waits for the copy's stream: the copy is complete, nothing stays
// pending on the destination.
func (x *xfer) sync() error {
	x.synced = true
	return x.s.Synchronize()
}

// bytes is the number of bytes an xfer moves (elements times item size).
func (x *xfer) bytes() int64 {
	n := x.is
	for _, e := range x.shape {
		n *= e
	}
	return n
}
