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

// exportBlock is everything one export hands to C, in one Go allocation:
// the header (versioned or legacy), and shape and strides inline for up to
// InlineDims dimensions. It is kept reachable from the export table and
// pinned (runtime.Pinner) from Export until the deleter runs, so the GC
// neither frees nor moves it and cgo's pointer checks accept it.
type exportBlock struct {
	ver    DLManagedTensorVersioned // header of a versioned export
	leg    DLManagedTensor          // header of a legacy export
	dims   [2 * InlineDims]int64
	rel    Releaser
	pin    runtime.Pinner
	legacy bool
}

// The export table maps the address handed to C to its block. The deleter
// looks its argument up here before touching anything, so a second call
// with the same pointer finds nothing and is ignored instead of reading or
// writing memory that may have been reused. Sharded to keep exports and
// deleters on different threads from contending on one lock.
const exportShards = 16

type exportShard struct {
	mu sync.Mutex
	m  map[uintptr]*exportBlock
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
		exportTable[i].m = make(map[uintptr]*exportBlock)
	}
}

func shardOf(p uintptr) *exportShard {
	// Blocks are at least 16-byte aligned and a few hundred bytes apart:
	// mix bits above the alignment.
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
// that stays pinned and reachable until then. Strides are always filled
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
	b := new(exportBlock)
	dims := b.dims[:]
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
	b.rel, b.legacy = r, legacy
	var key unsafe.Pointer
	if legacy {
		b.leg = DLManagedTensor{DLTensor: t, ManagerCtx: unsafe.Pointer(b), Deleter: fnL}
		key = unsafe.Pointer(&b.leg)
	} else {
		b.ver = DLManagedTensorVersioned{Version: CurrentVersion, ManagerCtx: unsafe.Pointer(b),
			Deleter: fnV, Flags: d.Flags, DLTensor: t}
		key = unsafe.Pointer(&b.ver)
	}
	// Pin the block, a separate dims array and the data when it is Go
	// memory (Pin ignores addresses outside the Go heap): C keeps pointers
	// to all of them after this call returns.
	b.pin.Pin(b)
	if n > InlineDims {
		b.pin.Pin(&dims[0])
	}
	if d.Data != 0 {
		b.pin.Pin(ptrOf(d.Data))
	}
	s := shardOf(uintptr(key))
	s.mu.Lock()
	s.m[uintptr(key)] = b
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
	b := s.m[p]
	if b == nil || b.legacy != legacy {
		s.mu.Unlock()
		ignoredDelete.Add(1)
		return false
	}
	delete(s.m, p)
	s.mu.Unlock()
	// Clear the header's deleter so that a Go consumer that asks again
	// (DeleteVersioned) sees a NULL deleter. Atomic: a buggy consumer may
	// read it from another thread.
	if legacy {
		atomic.StoreUintptr(&b.leg.Deleter, 0)
	} else {
		atomic.StoreUintptr(&b.ver.Deleter, 0)
	}
	b.pin.Unpin()
	liveExports.Add(-1)
	r := b.rel
	b.rel = nil
	if r != nil {
		r.Release()
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
	b := s.m[uintptr(p)]
	s.mu.Unlock()
	if b == nil {
		return nil, false
	}
	return b.rel, true
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
