package ipc

import (
	"fmt"
	"sync"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// importer is a Conn's receiving side: the peer's pools imported here, the
// allocations mapped from them (once each, however many tensors of one
// allocation arrive, and kept mapped after their last lease until the peer
// retires them or the connection ends), the peer's ready events opened
// here, a stream per device the imports are ordered on, and a pool of this
// process's interprocess "done" events.
type importer struct {
	c *Conn

	mu      sync.Mutex
	pools   map[[16]byte]*impPool
	ready   map[cuda.IPCEventHandle]*cuda.Event
	done    []ipcEvent
	nopen   int // imported views not yet closed
	imports int // allocations mapped so far
	gone    bool
	// closing: the connection is closing on this side; an allocation whose
	// last lease goes is unmapped at once, before the done event the peer
	// waits for, since the peer may free it once our end arrives.
	closing bool
	devices map[cuda.UUID]*impDevice
}

// ipcEvent is an interprocess event with its handle, got once: the handle
// does not change when the event is recorded again, and each use saves the
// driver call. A pool's "ready" events and an importer's "done" events.
type ipcEvent struct {
	e *cuda.Event
	h cuda.IPCEventHandle
}

// newIPCEvent makes an interprocess event of ctx and gets its handle.
func newIPCEvent(ctx *cuda.Context) (ipcEvent, error) {
	e, err := ctx.NewEvent(cuda.EventInterprocess)
	if err != nil {
		return ipcEvent{}, err
	}
	h, err := e.IPCHandle()
	if err != nil {
		e.Destroy()
		return ipcEvent{}, err
	}
	return ipcEvent{e, h}, nil
}

type impDevice struct {
	ord    int
	ctx    *cuda.Context
	stream *cuda.Stream
}

type impPool struct {
	dev   *impDevice
	mp    *cuda.MemPool
	alloc map[cuda.PoolExportData]*impAlloc
}

// impAlloc is one imported allocation; refs counts the open leases on it.
// With none it stays mapped, for the next tensor of the allocation.
type impAlloc struct {
	ptr  cuda.DevicePtr
	size int64 // bytes the driver mapped from ptr: what descriptors may describe
	refs int
}

// impLease is the Releaser of one received tensor.
type impLease struct {
	owner zerocopy.Owner
	im    *importer
	pool  *impPool
	data  cuda.PoolExportData
	lease uint64
}

func newImporter(c *Conn) *importer {
	return &importer{
		c: c, pools: map[[16]byte]*impPool{}, ready: map[cuda.IPCEventHandle]*cuda.Event{},
		devices: map[cuda.UUID]*impDevice{},
	}
}

// device finds this process's ordinal of the device with uuid.
func (im *importer) device(uuid cuda.UUID) (*impDevice, error) {
	if d := im.devices[uuid]; d != nil {
		return d, nil
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		dev, err := cuda.GetDevice(i)
		if err != nil {
			return nil, err
		}
		u, err := dev.UUID()
		if err != nil {
			return nil, err
		}
		if u != uuid {
			continue
		}
		ctx, err := cuda.Retain(i)
		if err != nil {
			return nil, err
		}
		s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
		if err != nil {
			ctx.Release()
			return nil, err
		}
		d := &impDevice{ord: i, ctx: ctx, stream: s}
		im.devices[uuid] = d
		return d, nil
	}
	return nil, fmt.Errorf("ipc: the peer's device %v is not visible in this process (CUDA_VISIBLE_DEVICES?)", uuid)
}

// addPool imports a pool the peer sent (the descriptor is closed here).
func (im *importer) addPool(id [16]byte, uuid cuda.UUID, fd int) error {
	defer closeFD(fd)
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.pools[id] != nil {
		return fmt.Errorf("ipc: the peer sent pool %x twice", id)
	}
	d, err := im.device(uuid)
	if err != nil {
		return err
	}
	mp, err := d.ctx.ImportMemPoolFD(fd)
	if err != nil {
		return fmt.Errorf("ipc: importing the peer's pool: %w", err)
	}
	im.pools[id] = &impPool{dev: d, mp: mp, alloc: map[cuda.PoolExportData]*impAlloc{}}
	return nil
}

// open turns a descriptor into a view: the allocation mapped (once), the
// import stream waiting for the ready event.
func (im *importer) open(d *Descriptor) (*zerocopy.View, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	p := im.pools[d.Pool]
	if p == nil {
		return nil, fmt.Errorf("%w: tensor of pool %x, which the peer did not send", ErrBadDescriptor, d.Pool)
	}
	// A mapping kept from an earlier tensor of the allocation is used as
	// it is: the peer retires it before freeing the allocation. A failure
	// below leaves a new mapping kept too, for the retire to find.
	a := p.alloc[d.Data]
	if a == nil {
		ptr, err := p.mp.ImportPointer(d.Data)
		if err != nil {
			return nil, fmt.Errorf("ipc: importing a tensor: %w", err)
		}
		a = &impAlloc{ptr: ptr}
		p.alloc[d.Data] = a
		im.imports++
		// What the driver really mapped bounds what the peer may describe:
		// Size and Offset come from the peer, the range from the driver.
		base, size, err := cuda.MemGetAddressRange(ptr)
		if err != nil {
			return nil, fmt.Errorf("ipc: the range of an imported allocation: %w", err)
		}
		if base != ptr || size == 0 || size > 1<<62 {
			return nil, fmt.Errorf("ipc: the driver maps the imported allocation at %v as %d bytes from %v", ptr, size, base)
		}
		a.size = int64(size)
	}
	if err := d.within(a.size); err != nil {
		return nil, err
	}
	ev := im.ready[d.Ready]
	if ev == nil {
		var err error
		if ev, err = p.dev.ctx.OpenIPCEvent(d.Ready); err != nil {
			return nil, fmt.Errorf("ipc: opening the peer's ready event: %w", err)
		}
		im.ready[d.Ready] = ev
	}
	s := p.dev.stream
	if err := s.WaitEvent(ev); err != nil {
		return nil, fmt.Errorf("ipc: waiting for the peer's ready event: %w", err)
	}
	a.refs++
	im.nopen++
	l := &impLease{im: im, pool: p, data: d.Data, lease: d.Lease}
	l.owner.Init(l, "ipc import")
	return zerocopy.Wrap(zerocopy.Spec{
		Ptr: uintptr(a.ptr) + uintptr(d.Offset), Device: dlpack.CUDADevice(p.dev.ord),
		DType: d.DType, Shape: d.Shape, Strides: d.Strides, ReadOnly: d.ReadOnly, Stream: s.Handle(),
	}, &l.owner)
}

// unmap frees an imported allocation (in stream order on the import
// stream). Called with im.mu held.
func (im *importer) unmap(p *impPool, data cuda.PoolExportData, a *impAlloc) {
	delete(p.alloc, data)
	if err := p.dev.stream.MemFreeAsync(a.ptr); err != nil {
		reportError(fmt.Errorf("ipc: freeing an imported allocation: %w", err))
	}
}

// recordDone records a done event on d's import stream and returns its
// handle, or nil after finishing that stream's work on the host if no event
// could be recorded. Called with im.mu held.
func (im *importer) recordDone(d *impDevice) *cuda.IPCEventHandle {
	s := d.stream
	if de, err := im.doneEvent(d); err != nil {
		reportError(fmt.Errorf("ipc: done event: %w", err))
	} else if err := de.e.Record(s); err != nil {
		reportError(fmt.Errorf("ipc: recording the done event: %w", err))
	} else {
		return &de.h
	}
	// No event to order the peer's free after our work: finish that work
	// first.
	s.Synchronize()
	return nil
}

// retire answers the peer's msgRetire: the allocation is unmapped in
// stream order and the answer carries a done event recorded after the
// unmap. An allocation not mapped here gets an answer with no event; one
// with leases open is a protocol error of the peer (it retires only
// allocations whose leases all came back).
func (im *importer) retire(k unmapKey) error {
	im.mu.Lock()
	var h *cuda.IPCEventHandle
	if p := im.pools[k.pool]; p != nil {
		if a := p.alloc[k.data]; a != nil {
			if a.refs > 0 {
				im.mu.Unlock()
				return fmt.Errorf("ipc: the peer retired an allocation of pool %x with %d leases open here", k.pool, a.refs)
			}
			im.unmap(p, k.data, a)
		}
		// Recorded even for an allocation no longer mapped here: its unmap
		// (a closing side's) may still be queued on the stream, and the
		// peer's free must come after it.
		h = im.recordDone(p.dev)
	}
	im.mu.Unlock()
	return im.c.sendRetired(k, h)
}

// mapped counts the allocations mapped here.
func (im *importer) mapped() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	n := 0
	for _, p := range im.pools {
		n += len(p.alloc)
	}
	return n
}

func (im *importer) importCount() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.imports
}

// doneEvent returns an interprocess event of dev to record: an idle one
// whose last record completed, or a new one. The list is kept oldest
// record first, so the first of dev's that completed is taken, and the
// ones behind it, recorded later, are not asked. Called with im.mu held.
func (im *importer) doneEvent(d *impDevice) (ipcEvent, error) {
	for i, de := range im.done {
		if de.e.Context() != d.ctx {
			continue
		}
		if ok, err := de.e.Query(); err == nil && ok {
			im.done = append(im.done[:i], im.done[i+1:]...)
			im.done = append(im.done, de)
			return de, nil
		}
		break // recorded after this one on the same stream: not done either
	}
	de, err := newIPCEvent(d.ctx)
	if err != nil {
		return ipcEvent{}, err
	}
	im.done = append(im.done, de)
	return de, nil
}

// Release gives a lease back: the import stream records a done event after
// everything queued on it, and the peer hears of the event. The mapping
// stays (the peer retires it before freeing the allocation), unless the
// peer is gone: then the last lease frees it, in stream order.
func (l *impLease) Release() {
	im := l.im
	im.mu.Lock()
	a := l.pool.alloc[l.data]
	gone := im.gone
	if a != nil {
		a.refs--
		if a.refs == 0 && (gone || im.closing) {
			im.unmap(l.pool, l.data, a)
		}
	}
	im.nopen--
	var h *cuda.IPCEventHandle
	if !gone {
		h = im.recordDone(l.pool.dev)
	}
	im.mu.Unlock()
	if !gone {
		if err := im.c.sendRelease(l.lease, h); err != nil {
			reportError(fmt.Errorf("ipc: giving lease %d back: %w", l.lease, err))
		}
	}
	im.c.maybeClose()
}

func (im *importer) openViews() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.nopen
}

// peerGone: the peer closed or died. Imported views stay valid (the
// mappings hold the memory); their releases no longer go anywhere. The
// mappings kept with no lease are freed now (in stream order), the others
// when their last lease goes.
func (im *importer) peerGone() {
	im.mu.Lock()
	im.gone = true
	for _, p := range im.pools {
		for data, a := range p.alloc {
			if a.refs == 0 {
				im.unmap(p, data, a)
			}
		}
	}
	im.mu.Unlock()
}

// startClosing: the connection is closing on this side. The allocations
// mapped here with no view open are unmapped now (in stream order), the
// others as their last view closes.
func (im *importer) startClosing() {
	im.mu.Lock()
	im.closing = true
	im.mu.Unlock()
	im.unmapIdle(false)
}

// unmapIdle unmaps the allocations mapped here that no view uses, and with
// wait set, finishes the import streams' work on the host: after it the
// unmaps have run, so that the peer may free what we mapped.
func (im *importer) unmapIdle(wait bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, p := range im.pools {
		for data, a := range p.alloc {
			if a.refs == 0 {
				im.unmap(p, data, a)
			}
		}
	}
	if !wait {
		return
	}
	for _, d := range im.devices {
		if err := d.stream.Synchronize(); err != nil {
			reportError(fmt.Errorf("ipc: finishing the unmaps of imported allocations: %w", err))
		}
	}
}

// close drops what the importer holds once no view is open: kept mappings
// (freed in stream order, then the streams synchronized), opened events,
// imported pools, import streams.
func (im *importer) close() {
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, p := range im.pools {
		for data, a := range p.alloc {
			im.unmap(p, data, a)
		}
	}
	for _, d := range im.devices {
		d.stream.Synchronize()
	}
	for _, e := range im.ready {
		e.Destroy()
	}
	im.ready = map[cuda.IPCEventHandle]*cuda.Event{}
	for _, de := range im.done {
		de.e.Destroy()
	}
	im.done = nil
	for id, p := range im.pools {
		p.mp.Destroy()
		delete(im.pools, id)
	}
	for u, d := range im.devices {
		d.stream.Destroy()
		d.ctx.Release()
		delete(im.devices, u)
	}
}
