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
// and shape and strides inline for up to InlineDims dimensions, one Go
// object. It is pinned (runtime.Pinner) once, when first made, and stays
// pinned while in use and while kept for reuse: a released block goes to a
// FIFO quarantine and is handed out again only after blockQuarantine
// blocks released after it; beyond blockSpares the oldest is unpinned and
// left to the GC. Compared with one allocation and one pin per export this
// more than halves the cost of an export, and keeps its memory hot.
//
// The quarantine is what makes a consumer's second deleter call harmless:
// the table no longer knows the pointer, and the same address names a new
// export only after at least blockQuarantine (512) later exports have come
// and gone. (Calling a DLPack deleter twice is a consumer bug; this limits
// the damage.)
//
// cgo's pointer checks scan the whole Go object a pointer handed to C lies
// in, and panic on any pointer in it to unpinned Go memory. So the block is
// one object per export (no sibling exports in it), holds only pointers to
// itself and to pinned memory (the data, when it is Go memory, is pinned
// before its address is written), and the Go side of an export (Releaser,
// Pinners) lives elsewhere.
type cBlock struct {
	ver  DLManagedTensorVersioned // header of a versioned export
	leg  DLManagedTensor          // header of a legacy export
	dims [2 * InlineDims]int64
}

// blockState is the Go side of a block, reused with it.
type blockState struct {
	blk  *cBlock
	self runtime.Pinner // pins blk, from its making until it is dropped
	data runtime.Pinner // pins the export's data (if Go memory) and dims outside blk
}

const (
	blockQuarantine = 512
	blockSpares     = 1024 // at most 1024 × 288 bytes kept for reuse
)

// blockRing is the FIFO of released blocks.
type blockRing struct {
	buf        [blockSpares]*blockState
	head, size int
}

func (r *blockRing) push(bs *blockState) {
	r.buf[(r.head+r.size)%blockSpares] = bs
	r.size++
}

func (r *blockRing) pop() *blockState {
	bs := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % blockSpares
	r.size--
	return bs
}

var spareBlocks struct {
	mu   sync.Mutex
	ring blockRing
}

// newBlock returns a pinned block: a spare one past its quarantine, or a
// new one.
func newBlock() *blockState {
	spareBlocks.mu.Lock()
	if spareBlocks.ring.size > blockQuarantine {
		bs := spareBlocks.ring.pop()
		spareBlocks.mu.Unlock()
		return bs
	}
	spareBlocks.mu.Unlock()
	bs := &blockState{blk: new(cBlock)}
	bs.self.Pin(bs.blk)
	return bs
}

// recycle takes back a released block (its pointers cleared, its data
// unpinned).
func recycle(bs *blockState) {
	var drop *blockState
	spareBlocks.mu.Lock()
	if spareBlocks.ring.size == blockSpares {
		drop = spareBlocks.ring.pop()
	}
	spareBlocks.ring.push(bs)
	spareBlocks.mu.Unlock()
	if drop != nil {
		drop.self.Unpin() // the block is left to the GC
	}
}

// exportEntry is the table's record of one live export.
type exportEntry struct {
	bs     *blockState
	rel    Releaser
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
	_  [48]byte // keep shards on separate cache lines
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
	}
}

func shardOf(p uintptr) *exportShard {
	// Blocks are 288 bytes apart (legacy headers 80 bytes into theirs):
	// mix bits above the 16-byte alignment.
	return &exportTable[(p>>4^p>>9^p>>14)%exportShards]
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
	bs := newBlock()
	blk := bs.blk
	dims := blk.dims[:]
	if n > InlineDims {
		dims = make([]int64, 2*n)
		bs.data.Pin(&dims[0])
	}
	// C keeps a pointer to the data: pin it if it is Go memory (Pin ignores
	// addresses outside the Go heap), before the address is in the block.
	if d.Data != 0 {
		bs.data.Pin(ptrOf(d.Data))
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
	s.m[uintptr(key)] = exportEntry{bs: bs, rel: r, legacy: legacy}
	s.mu.Unlock()
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
	s.mu.Unlock()
	// Clear the header: a NULL deleter for a Go consumer that asks again
	// (DeleteVersioned; atomic, as a buggy consumer may read it from another
	// thread), and no pointers to memory about to be unpinned, which cgo's
	// checks would find if the block were handed to C again by mistake.
	blk := e.bs.blk
	t := &blk.ver.DLTensor
	if legacy {
		atomic.StoreUintptr(&blk.leg.Deleter, 0)
		t = &blk.leg.DLTensor
	} else {
		atomic.StoreUintptr(&blk.ver.Deleter, 0)
	}
	t.Data, t.Shape, t.Strides = nil, nil, nil
	e.bs.data.Unpin()
	recycle(e.bs)
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
