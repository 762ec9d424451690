package zerocopy

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// This file: the pending write of a view (the CUDA stream whose queued work
// writes its memory) and how readers on other streams are ordered after
// it. One rule for every reader (a DLPack or CAI consumer, a copy, the
// host): the write is marked once, lazily, by an event recorded on its
// stream, and every reader on another stream waits for that event. A
// reader on the pending stream itself needs nothing. Nothing here
// synchronizes a device; only Synchronize blocks the host, for one write.

// pendingWrite is one write queued on a CUDA stream. Views derived from a
// view share its pendingWrite, so the event is recorded once for all.
type pendingWrite struct {
	stream uintptr // the CUstream (1: legacy default, 2: per-thread default)
	dev    int     // ordinal of the stream's device, -1 when unknown

	mu     sync.Mutex
	ev     *cuda.Event // recorded on stream after the write; nil until a reader needs it
	evd    *devState   // the device ev belongs to
	waited []uintptr   // streams already made to wait for ev (a few)
	done   atomic.Bool // the write is known to be complete
}

// maxWaited bounds the streams a pending write remembers as ordered.
const maxWaited = 8

// ordered reports whether stream h already waits for the write, and
// remembers that it will when it does not (the caller makes it wait).
func (p *pendingWrite) ordered(h uintptr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.waited {
		if w == h {
			return true
		}
	}
	if len(p.waited) < maxWaited {
		p.waited = append(p.waited, h)
	}
	return false
}

// forget undoes ordered(h) after the wait failed.
func (p *pendingWrite) forget(h uintptr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, w := range p.waited {
		if w == h {
			p.waited = append(p.waited[:i], p.waited[i+1:]...)
			return
		}
	}
}

// newPending describes a write queued on stream handle h (0: none) of
// device dev (-1: unknown; the device of one of this package's own streams
// is looked up when a reader needs it, not here: a call's arguments make a
// pending write each, and most are never waited for:
// bench/results/callpath-2core).
func newPending(h uintptr, dev int) *pendingWrite {
	if h == 0 {
		return nil
	}
	return &pendingWrite{stream: h, dev: dev}
}

// reusable reports whether an owner's Init may keep p for the owner's next
// use: no event marks it, so no cleanup was registered on it and no stream
// waits for it. The owner was released, which every marker's write of ev
// comes before (its view held a reference), and no view reaches p now: ev
// is read without p.mu, whose lock cost a call argument a tenth of its
// time (bench/results/callpath-2core).
func (p *pendingWrite) reusable() bool { return p.ev == nil }

// pendingOn is a pending write on stream h for a new use of o: its spare
// (see Owner.spare) made new again, else a new one.
func (o *Owner) pendingOn(h uintptr) *pendingWrite {
	p := o.spare
	if p == nil {
		return newPending(h, -1)
	}
	o.spare = nil
	p.stream, p.dev, p.evd, p.waited = h, -1, nil, p.waited[:0]
	p.done.Store(false)
	return p
}

// device is the ordinal of the write's stream's device, -1 when unknown.
func (p *pendingWrite) device() int {
	if p.dev < 0 {
		if o, ok := streamOwners.Load(p.stream); ok {
			return o.(int)
		}
	}
	return p.dev
}

// pendingOn describes a write queued on s.
func pendingOn(s *cuda.Stream) *pendingWrite {
	return &pendingWrite{stream: s.Handle(), dev: s.Context().Device().Ordinal()}
}

// Stream is the CUDA stream (CUstream handle; 1 the legacy default, 2 the
// per-thread default stream) of the last write to v's memory that may still
// be running, 0 if none.
func (v *View) Stream() uintptr {
	p := v.owner.pend.Load()
	if p == nil || p.done.Load() {
		return 0
	}
	return p.stream
}

// SetStream records that work queued on stream s (a CUstream handle; 0:
// none) writes v's memory: readers on other streams wait for it (CopyCUDA,
// OrderBefore, the CUDA Array Interface), the host with Synchronize. It
// replaces the write pending before, which must be ordered before s's new
// work by the caller. Every view of the same memory (the same Owner) shares
// the write, whenever it was made.
func (v *View) SetStream(s uintptr) {
	if p := v.owner.pend.Load(); p != nil && p.stream == s && p.unmarked() {
		// The write already pending on s is not marked yet: the event a
		// reader records later marks this one too (a call's written
		// argument, pending on the call's stream before and after).
		return
	}
	v.owner.pend.Store(newPending(s, -1))
}

// unmarked reports whether no event marks the write yet and it is not
// known complete: a later write on its stream may then take its place.
func (p *pendingWrite) unmarked() bool {
	if p.done.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ev == nil
}

// setPending records a write queued on s (nil: none).
func (v *View) setPending(s *cuda.Stream) {
	if s == nil {
		v.owner.pend.Store(nil)
		return
	}
	v.owner.pend.Store(pendingOn(s))
}

// OrderBefore makes work queued from now on on the consumer stream (a
// CUstream handle; 1 and 2 the legacy and per-thread default streams of v's
// device) wait for the write pending on v, without blocking the host: the
// __dlpack__(stream=consumer) handshake, and what CopyCUDA does for its own
// stream. Nothing is done when no write is pending or the consumer is the
// pending stream itself, or a consumer stream already ordered after this
// write. The write is marked by one event, recorded on its stream the first
// time a reader needs it and reused by every later reader.
func (v *View) OrderBefore(consumer uintptr) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("zerocopy: OrderBefore: %w", err)
	}
	if consumer == 0 {
		return fmt.Errorf("zerocopy: OrderBefore: stream 0 is ambiguous (use 1 for the legacy default stream, 2 for the per-thread one)")
	}
	p := v.owner.pend.Load()
	// Stream-ordered memory is freed after the work the consumer has
	// queued by now (what it queues later is its own to order: it holds
	// the tensor until then, as with PyTorch's and CuPy's exports).
	noteUseHandle(v, consumer)
	if p == nil || p.done.Load() || p.stream == consumer || p.ordered(consumer) {
		return nil
	}
	e, d, err := p.marker(v.device)
	if err == nil {
		ctx := d.ctx
		if cd := viewDevice(v); cd != nil {
			ctx = cd.ctx // an implicit consumer stream means the view device's
		}
		err = ctx.WrapStream(consumer).WaitEvent(e)
	}
	if err != nil {
		p.forget(consumer)
		return fmt.Errorf("zerocopy: ordering stream %#x after the write pending on stream %#x: %w", consumer, p.stream, err)
	}
	return nil
}

// MarkPending records now the event that marks the write pending on v
// (readers otherwise record it when they first need it), so that readers
// and Synchronize wait for that event and never name the write's stream
// again: for a write queued on a stream whose owner may destroy it before
// the readers come, such as the caller's stream of a Go function called
// from Python. Nothing pending: nothing to do.
func (v *View) MarkPending() error {
	p := v.owner.pend.Load()
	if p == nil || p.done.Load() {
		return nil
	}
	if _, _, err := p.marker(v.device); err != nil {
		return fmt.Errorf("zerocopy: MarkPending: %w", err)
	}
	return nil
}

// waitOn makes s wait for the write pending on v (see OrderBefore).
func (v *View) waitOn(s *cuda.Stream) error {
	p := v.owner.pend.Load()
	if p == nil || p.done.Load() || p.stream == s.Handle() || p.ordered(s.Handle()) {
		return nil
	}
	e, _, err := p.marker(v.device)
	if err == nil {
		err = s.WaitEvent(e)
	}
	if err != nil {
		p.forget(s.Handle())
		return fmt.Errorf("zerocopy: ordering %v after the write pending on stream %#x: %w", s, p.stream, err)
	}
	return nil
}

// Synchronize blocks until the write pending on v (View.Stream) is done and
// clears it, so that host code may read v's memory (pinned or managed host
// memory after an asynchronous copy into it). A view with nothing pending
// returns at once. It waits for that one write, never for the device.
func (v *View) Synchronize() error {
	if err := v.check(); err != nil {
		return err
	}
	p := v.owner.pend.Load()
	if p == nil {
		return nil
	}
	if err := p.wait(v.device); err != nil {
		return err
	}
	v.owner.pend.CompareAndSwap(p, nil)
	return nil
}

// wait blocks until the write is done: on its event when one was recorded,
// else on its stream.
func (p *pendingWrite) wait(viewDev dlpack.Device) error {
	if p.done.Load() {
		return nil
	}
	p.mu.Lock()
	e := p.ev
	p.mu.Unlock()
	var err error
	if e != nil {
		err = e.Synchronize()
	} else {
		for _, d := range candidates(p.device(), viewDev) {
			if err = d.ctx.WrapStream(p.stream).Synchronize(); err == nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("zerocopy: waiting for the write pending on stream %#x: %w", p.stream, err)
	}
	p.done.Store(true)
	return nil
}

// marker returns the event that marks the write, recording it on the
// write's stream the first time.
func (p *pendingWrite) marker(viewDev dlpack.Device) (*cuda.Event, *devState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ev != nil {
		return p.ev, p.evd, nil
	}
	var err error
	for _, d := range candidates(p.device(), viewDev) {
		var e *cuda.Event
		if e, err = d.getEvent(); err != nil {
			continue
		}
		if err = e.Record(d.ctx.WrapStream(p.stream)); err != nil {
			d.putEvent(e) // the stream is not one of d's: try the next device
			continue
		}
		p.ev, p.evd = e, d
		// The event goes back to the pool once no view can reach this write.
		runtime.AddCleanup(p, func(r pooledEvent) { r.d.putEvent(r.e) }, pooledEvent{d, e})
		return e, d, nil
	}
	if err == nil {
		err = errors.New("no CUDA device")
	}
	return nil, nil, fmt.Errorf("zerocopy: marking the write pending on stream %#x: %w", p.stream, err)
}

type pooledEvent struct {
	d *devState
	e *cuda.Event
}

// candidates lists the devices whose context a stream may belong to: the
// one it is known to be of, else the device of the view (for host views,
// none), then device 0.
func candidates(known int, viewDev dlpack.Device) []*devState {
	var out []*devState
	add := func(ord int) {
		if d, err := device(ord); err == nil {
			for _, x := range out {
				if x == d {
					return
				}
			}
			out = append(out, d)
		}
	}
	if known >= 0 {
		add(known)
		return out
	}
	if viewDev.Type == dlpack.CUDA || viewDev.Type == dlpack.CUDAManaged {
		add(int(viewDev.ID))
	}
	add(0)
	return out
}

// viewDevice is the device state of a CUDA view, nil for other views.
func viewDevice(v *View) *devState {
	if v.device.Type != dlpack.CUDA && v.device.Type != dlpack.CUDAManaged {
		return nil
	}
	d, err := device(int(v.device.ID))
	if err != nil {
		return nil
	}
	return d
}

// maxPooledEvents bounds the idle events a device keeps for marking writes.
const maxPooledEvents = 64

// getEvent takes an idle event of d (no timing), or makes one. An event
// may be recorded again after streams waited on it: a wait orders after the
// record current when it was queued.
func (d *devState) getEvent() (*cuda.Event, error) {
	d.mu.Lock()
	if n := len(d.events); n > 0 {
		e := d.events[n-1]
		d.events = d.events[:n-1]
		d.mu.Unlock()
		return e, nil
	}
	d.mu.Unlock()
	return d.ctx.NewEvent(0)
}

// putEvent returns an event to d's pool.
func (d *devState) putEvent(e *cuda.Event) {
	d.mu.Lock()
	if len(d.events) < maxPooledEvents {
		d.events = append(d.events, e)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	e.Destroy()
}

// waitStream makes consumer wait for the work queued so far on stream
// handle h (of device dev, -1 unknown; viewDev guides the guess), with a
// pooled event: record on h, wait, give the event back at once (the wait
// keeps the record it saw).
func waitStream(consumer *cuda.Stream, h uintptr, dev int, viewDev dlpack.Device) error {
	// The same handle of another device is another stream: the default
	// streams 1 and 2 have one handle in every context.
	if h == 0 || h == consumer.Handle() && (dev < 0 || dev == consumer.Context().Device().Ordinal()) {
		return nil
	}
	if dev < 0 {
		if o, ok := streamOwners.Load(h); ok {
			dev = o.(int)
		}
	}
	e, d, err := markStream(h, dev, viewDev)
	if err == nil {
		err = consumer.WaitEvent(e)
		d.putEvent(e)
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("zerocopy: ordering %v after stream %#x: %w", consumer, h, err)
}

// markStream records a pooled event on stream handle h (of device dev, or
// of the device that made it, or of viewDev's; dev < 0: unknown), marking
// the work queued on h so far. Put the event back with d.putEvent.
func markStream(h uintptr, dev int, viewDev dlpack.Device) (*cuda.Event, *devState, error) {
	if dev < 0 {
		if o, ok := streamOwners.Load(h); ok {
			dev = o.(int)
		}
	}
	var err error
	for _, d := range candidates(dev, viewDev) {
		var e *cuda.Event
		if e, err = d.getEvent(); err != nil {
			continue
		}
		if err = e.Record(d.ctx.WrapStream(h)); err != nil {
			d.putEvent(e) // the stream is not one of d's: try the next device
			continue
		}
		return e, d, nil
	}
	if err == nil {
		err = errors.New("no CUDA device")
	}
	return nil, nil, err
}

// OrderAfter makes stream consumer wait for the work queued so far on
// stream producer (of the same device or another), with an event from the
// device's pool, never blocking the host.
func OrderAfter(consumer, producer *cuda.Stream) error {
	return waitStream(consumer, producer.Handle(), producer.Context().Device().Ordinal(), dlpack.Device{})
}

// WaitStream makes stream consumer wait for the work queued so far on the
// stream with handle producer (a foreign CUstream, or 1/2 for the default
// streams of consumer's context), with an event, never blocking the host:
// how an importer orders a producer's current work before its own stream
// (the C exchange API's current_work_stream).
func WaitStream(consumer *cuda.Stream, producer uintptr) error {
	if consumer == nil {
		return fmt.Errorf("zerocopy: WaitStream: nil consumer stream")
	}
	return waitStream(consumer, producer, -1, dlpack.CUDADevice(consumer.Context().Device().Ordinal()))
}

// WorkStream returns CUDA device dev's work stream: the non-blocking stream
// (CU_STREAM_NON_BLOCKING, never the legacy default stream) that copies,
// fills and allocations given no stream run on. It lives as long as the
// process. Importers ask producers to order their writes before it, so
// that importing never makes another library's default stream wait.
func WorkStream(dev int) (*cuda.Stream, error) {
	d, err := device(dev)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: WorkStream(%d): %w", dev, err)
	}
	s, err := d.defaultStream()
	if err != nil {
		return nil, fmt.Errorf("zerocopy: WorkStream(%d): %w", dev, err)
	}
	return s, nil
}

// DeviceContext returns CUDA device dev's primary context as this package
// retains it for the life of the process: the context its work streams,
// memory and events belong to (and PyTorch's, CuPy's and JAX's).
func DeviceContext(dev int) (*cuda.Context, error) {
	d, err := device(dev)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: DeviceContext(%d): %w", dev, err)
	}
	return d.ctx, nil
}

// StreamOf returns the stream with handle h (a CUstream another library
// made, or 1 and 2 for the default streams) as a stream of CUDA device dev,
// whose primary context this package holds; h == 0 gives dev's work stream.
// The stream is not owned: nothing is destroyed when it is dropped.
func StreamOf(dev int, h uintptr) (*cuda.Stream, error) {
	if h == 0 {
		return WorkStream(dev)
	}
	d, err := device(dev)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: StreamOf(%d): %w", dev, err)
	}
	// The wrapper of the last handle asked for, unless something
	// destroyed it through the wrapper (its handle is then 0).
	if s := d.wrapped.Load(); s != nil && s.Handle() == h {
		return s, nil
	}
	s := d.ctx.WrapStream(h)
	d.wrapped.Store(s)
	return s, nil
}
