package dlpack

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Releaser is what keeps exported memory alive: Release is called exactly
// once, when the consumer calls the tensor's deleter (from any thread).
// zerocopy passes a reference on a view's Owner.
type Releaser interface {
	Release()
}

// What C sees of an export is a cBlock: the header (versioned or legacy)
// and shape and strides inline for up to InlineDims dimensions. cBlocks are
// carved out of chunks of chunkBlocks, each chunk one Go allocation pinned
// (runtime.Pinner) once. A chunk whose blocks have all been released goes
// to a FIFO quarantine and is carved again only after chunkQuarantine
// chunks drained after it; beyond chunkSpares drained chunks the oldest is
// unpinned and left to the GC. Compared with one allocation and one pin per
// export this halves the cost of an export, and keeps its memory hot.
//
// The quarantine is what makes a consumer's second deleter call harmless:
// the table no longer knows the pointer, and the same address names a new
// export only after at least chunkQuarantine × chunkBlocks (480) exports
// made later have come and gone.
//
// cgo's pointer checks scan the whole Go object a pointer handed to C lies
// in, so a chunk holds no pointers but to pinned memory: itself, and data
// that is Go memory (pinned per export). The Go side of an export (its
// Releaser, the Pinner of its data) lives in the export table, and a
// released block's pointers are cleared.
type cBlock struct {
	ver  DLManagedTensorVersioned // header of a versioned export
	leg  DLManagedTensor          // header of a legacy export
	dims [2 * InlineDims]int64
}

const (
	chunkBlocks     = 15 // × 272 bytes = 4080: fills the 4096-byte size class
	chunkQuarantine = 32
	chunkSpares     = 64 // at most 256 KiB of drained chunks kept
)

type chunk [chunkBlocks]cBlock

type chunkState struct {
	c         *chunk
	pin       runtime.Pinner
	remaining atomic.Int32 // blocks not yet released
}

// done releases one block of the chunk; the last one sends the chunk to
// the quarantine.
func (cs *chunkState) done() {
	if cs.remaining.Add(-1) != 0 {
		return
	}
	carver.mu.Lock()
	if carver.drained.len() == chunkSpares {
		old := carver.drained.pop()
		old.pin.Unpin() // the chunk is left to the GC
	}
	carver.drained.push(cs)
	carver.mu.Unlock()
}

// chunkRing is the FIFO of drained chunks.
type chunkRing struct {
	buf        [chunkSpares]*chunkState
	head, size int
}

func (r *chunkRing) len() int { return r.size }

func (r *chunkRing) push(cs *chunkState) {
	r.buf[(r.head+r.size)%chunkSpares] = cs
	r.size++
}

func (r *chunkRing) pop() *chunkState {
	cs := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % chunkSpares
	r.size--
	return cs
}

// carver hands out the blocks of the current chunk in order.
var carver struct {
	mu      sync.Mutex
	cur     *chunkState
	next    int
	drained chunkRing
}

func newBlock() (*cBlock, *chunkState) {
	carver.mu.Lock()
	cs := carver.cur
	if cs == nil || carver.next == chunkBlocks {
		if carver.drained.len() > chunkQuarantine {
			cs = carver.drained.pop() // still pinned
		} else {
			cs = &chunkState{c: new(chunk)}
			cs.pin.Pin(cs.c)
		}
		cs.remaining.Store(chunkBlocks)
		carver.cur, carver.next = cs, 0
	}
	b := &cs.c[carver.next]
	carver.next++
	carver.mu.Unlock()
	return b, cs
}

// exportEntry is the Go side of one export.
type exportEntry struct {
	blk    *cBlock
	cs     *chunkState
	rel    Releaser
	pin    *runtime.Pinner // pins the data (if Go memory) and dims outside the block
	legacy bool
}

// The export table maps the address handed to C to its entry. The deleter
// looks its argument up here before touching anything, so a second call
// with the same pointer finds nothing and is ignored instead of reading or
// writing memory that may have been reused. Sharded to keep exports and
// deleters on different threads from contending on one lock.
const exportShards = 16

type exportShard struct {
	mu sync.Mutex
	m  map[uintptr]exportEntry
	// Spare Pinners for the data of exports. A Pinner keeps its internals
	// across Unpin; a fresh one costs an allocation and a finalizer on its
	// first Pin. (Not a sync.Pool: the GC empties those.)
	spare []*runtime.Pinner
	_     [24]byte // keep shards on separate cache lines
}

const sparePinners = 32 // per shard

// takePinner pops a spare Pinner; s.mu is held.
func (s *exportShard) takePinner() *runtime.Pinner {
	if n := len(s.spare); n > 0 {
		p := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return p
	}
	return new(runtime.Pinner)
}

var (
	exportTable   [exportShards]exportShard
	liveExports   atomic.Int64
	ignoredDelete atomic.Int64 // deleter calls with a pointer not (or no longer) in the table
	deleterPanics atomic.Int64 // panics recovered in the C-callable deleters
)

func init() {
	for i := range exportTable {
		exportTable[i].m = make(map[uintptr]exportEntry)
		exportTable[i].spare = make([]*runtime.Pinner, 0, sparePinners)
	}
}

func shardOf(p uintptr) *exportShard {
	// Headers are 16-byte aligned and 272 bytes apart within a chunk: mix
	// bits above the alignment.
	return &exportTable[(p>>4^p>>8^p>>12)%exportShards]
}

// LiveExports is the number of exported tensors whose deleter has not run
// yet (for leak tests and diagnostics).
func LiveExports() int { return int(liveExports.Load()) }

// ErrNoDeleter is returned by Export where no C-callable deleter can be
// made: without cgo on a platform purego does not support.
var ErrNoDeleter = errors.New("dlpack: no C-callable deleter on this platform (build with cgo)")

// Export builds a DLManagedTensorVersioned for d and returns a pointer to
// it for a consumer, which must call its deleter exactly once when done; the
// deleter calls r.Release. The header, shape and strides live in one block
// of Go memory that stays pinned and reachable until then (and so does the
// data, when it is Go memory). Strides are always filled
// (C-contiguous when d.Strides is nil); flags are d.Flags; byte_offset is 0
// and data is d.Data; version is CurrentVersion.
//
// d is validated (ndim, strides length, dtype, device, flags, overflow, NULL
// data with elements). On error nothing is retained: r is not released.
func Export(d *Desc, r Releaser) (unsafe.Pointer, error) { return export(d, r, false) }

// ExportLegacy is Export for a legacy DLManagedTensor (no version, no flags:
// read-only views should not be exported this way; the caller decides).
func ExportLegacy(d *Desc, r Releaser) (unsafe.Pointer, error) { return export(d, r, true) }

func export(d *Desc, r Releaser, legacy bool) (unsafe.Pointer, error) {
	if err := checkExport(d); err != nil {
		return nil, err
	}
	fnV, fnL := deleterPtrs()
	if fnV == 0 {
		return nil, ErrNoDeleter
	}
	n := len(d.Shape)
	blk, cs := newBlock()
	dims := blk.dims[:]
	if n > InlineDims {
		dims = make([]int64, 2*n)
	}
	shape, strides := dims[:n:n], dims[n:2*n:2*n]
	copy(shape, d.Shape)
	if d.Strides == nil {
		FillCStrides(strides, shape)
	} else {
		copy(strides, d.Strides)
	}
	t := DLTensor{
		Data:   ptrOf(d.Data),
		Device: d.Device,
		NDim:   int32(n),
		DType:  d.DType,
		// Never NULL, even for ndim 0: some consumers read shape[0..ndim)
		// without a NULL check, and 1.2+ requires strides.
		Shape:   &dims[0],
		Strides: &dims[n],
	}
	if n == 0 {
		t.Strides = &dims[0]
	}
	var key unsafe.Pointer
	if legacy {
		blk.leg = DLManagedTensor{DLTensor: t, Deleter: fnL}
		key = unsafe.Pointer(&blk.leg)
	} else {
		blk.ver = DLManagedTensorVersioned{Version: CurrentVersion, Deleter: fnV, Flags: d.Flags, DLTensor: t}
		key = unsafe.Pointer(&blk.ver)
	}
	s := shardOf(uintptr(key))
	s.mu.Lock()
	pin := s.takePinner()
	s.m[uintptr(key)] = exportEntry{blk: blk, cs: cs, rel: r, pin: pin, legacy: legacy}
	s.mu.Unlock()
	// C keeps pointers to the data and to dims outside the block: pin them
	// (Pin ignores addresses outside the Go heap). Nobody has the pointer
	// yet, so doing it after publishing the entry is safe.
	if n > InlineDims {
		pin.Pin(&dims[0])
	}
	if d.Data != 0 {
		pin.Pin(ptrOf(d.Data))
	}
	liveExports.Add(1)
	return key, nil
}

// checkExport validates a Desc before it is exported: a consumer trusts
// what we hand out, so an inconsistent layout must not leave.
func checkExport(d *Desc) error {
	n := len(d.Shape)
	if n > MaxNDim {
		return fmt.Errorf("dlpack: export: ndim %d out of range (0..%d)", n, MaxNDim)
	}
	if d.Strides != nil && len(d.Strides) != n {
		return fmt.Errorf("dlpack: export: %d strides for %d dimensions", len(d.Strides), n)
	}
	if !dtypeOK(d.DType) {
		return fmt.Errorf("dlpack: export: %w", d.DType.Validate())
	}
	if !deviceTypeOK(d.Device.Type) {
		return fmt.Errorf("dlpack: export: device type %d is not a DLDeviceType", d.Device.Type)
	}
	if f := d.Flags &^ knownFlags; f != 0 {
		return fmt.Errorf("dlpack: export: unknown flag bits %#x", uint64(f))
	}
	numel, err := NumElements(d.Shape)
	if err != nil {
		return fmt.Errorf("dlpack: export: %w", err)
	}
	if d.Data == 0 && numel != 0 {
		return fmt.Errorf("dlpack: export: data pointer is NULL for %d elements", numel)
	}
	if d.Strides != nil {
		if _, _, err := ByteSpan(d.DType, d.Shape, d.Strides, d.Flags&FlagSubbyteTypePadded != 0); err != nil {
			return fmt.Errorf("dlpack: export: %w", err)
		}
	} else if _, ok := d.DType.StorageBytes(numel, d.Flags&FlagSubbyteTypePadded != 0); !ok {
		return fmt.Errorf("dlpack: export: size of %d %s elements overflows int64", numel, d.DType)
	}
	return nil
}

// releaseExport is the body of both shared deleters: find the block of p,
// forget it, unpin it, release its Releaser. A pointer that is not in the
// table (never exported, or its deleter already ran) or of the other kind
// is counted and ignored. It reports whether p was released.
func releaseExport(p uintptr, legacy bool) bool {
	s := shardOf(p)
	s.mu.Lock()
	e, ok := s.m[p]
	if !ok || e.legacy != legacy {
		s.mu.Unlock()
		ignoredDelete.Add(1)
		return false
	}
	delete(s.m, p)
	// Clear the header: a NULL deleter for a Go consumer that asks again
	// (DeleteVersioned; atomic, as a buggy consumer may read it from another
	// thread), and no pointers to memory about to be unpinned, which cgo's
	// checks would find when a sibling block of the chunk crosses to C.
	t := &e.blk.ver.DLTensor
	if legacy {
		atomic.StoreUintptr(&e.blk.leg.Deleter, 0)
		t = &e.blk.leg.DLTensor
	} else {
		atomic.StoreUintptr(&e.blk.ver.Deleter, 0)
	}
	t.Data, t.Shape, t.Strides = nil, nil, nil
	e.pin.Unpin()
	if len(s.spare) < cap(s.spare) {
		s.spare = append(s.spare, e.pin)
	}
	s.mu.Unlock()
	e.cs.done()
	liveExports.Add(-1)
	if e.rel != nil {
		e.rel.Release()
	}
	return true
}

// deleterEntry runs releaseExport for a call from C: a panic must not
// unwind into C, so it is recovered and counted.
func deleterEntry(p uintptr, legacy bool) {
	defer func() {
		if recover() != nil {
			deleterPanics.Add(1)
		}
	}()
	releaseExport(p, legacy)
}

// LookupExport reports whether p is a DLManagedTensorVersioned or
// DLManagedTensor this package exported whose deleter has not run, and
// returns the Releaser behind it. Bridges use it to recognise their own
// tensors coming back (fast self-import).
func LookupExport(p unsafe.Pointer) (Releaser, bool) {
	s := shardOf(uintptr(p))
	s.mu.Lock()
	e, ok := s.m[uintptr(p)]
	s.mu.Unlock()
	return e.rel, ok
}

// DeleteVersioned calls the deleter of the DLManagedTensorVersioned p, as a
// consumer that is done with it must: directly in Go when it is one of our
// exports, through C otherwise. A NULL p or deleter does nothing. Calling it
// twice on one of our exports is detected and ignored; on a foreign tensor
// it is the caller's double free.
func DeleteVersioned(p unsafe.Pointer) {
	if p == nil {
		return
	}
	// p points to a DLManagedTensorVersioned; deleter is at a stable offset.
	fn := atomic.LoadUintptr(&(*DLManagedTensorVersioned)(p).Deleter)
	callDeleterOf(fn, uintptr(p), false)
}

// DeleteLegacy is DeleteVersioned for a legacy DLManagedTensor.
func DeleteLegacy(p unsafe.Pointer) {
	if p == nil {
		return
	}
	// p points to a DLManagedTensor.
	fn := atomic.LoadUintptr(&(*DLManagedTensor)(p).Deleter)
	callDeleterOf(fn, uintptr(p), true)
}

func callDeleterOf(fn, p uintptr, legacy bool) {
	if fn == 0 {
		return
	}
	ownV, ownL := ownDeleters()
	if (!legacy && fn == ownV) || (legacy && fn == ownL) {
		releaseExport(p, legacy)
		return
	}
	callDeleter(fn, p)
}

// DeleterPtr is the C function pointer of the one deleter that every
// versioned export carries: void (*)(DLManagedTensorVersioned*). It is
// created on first use; 0 where none can be made (see ErrNoDeleter).
func DeleterPtr() uintptr { v, _ := deleterPtrs(); return v }

// LegacyDeleterPtr is DeleterPtr for legacy exports:
// void (*)(DLManagedTensor*).
func LegacyDeleterPtr() uintptr { _, l := deleterPtrs(); return l }
