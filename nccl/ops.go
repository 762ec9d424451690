package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Op is a reduction (ncclRedOp_t).
type Op int

// The reductions NCCL has built in.
const (
	Sum  Op = 0
	Prod Op = 1
	Max  Op = 2
	Min  Op = 3
	Avg  Op = 4
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Max:
		return "max"
	case Min:
		return "min"
	case Avg:
		return "avg"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// ncclType maps a DLPack dtype to ncclDataType_t.
func ncclType(t dlpack.DataType) (int, bool) {
	switch t {
	case dlpack.Int8Type:
		return 0, true
	case dlpack.Uint8Type, dlpack.BoolType:
		return 1, true
	case dlpack.Int32Type:
		return 2, true
	case dlpack.Uint32Type:
		return 3, true
	case dlpack.Int64Type:
		return 4, true
	case dlpack.Uint64Type:
		return 5, true
	case dlpack.Float16Type:
		return 6, true
	case dlpack.Float32Type:
		return 7, true
	case dlpack.Float64Type:
		return 8, true
	case dlpack.Bfloat16Type:
		return 9, true
	}
	return 0, false
}

type kind int

const (
	kAllReduce kind = iota
	kBroadcast
	kReduce
	kAllGather
	kReduceScatter
	kSend
	kRecv
)

// kindCalls are the entry points, named in errors.
var kindCalls = [...]string{"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv"}

// spec is one NCCL call: what the caller asked, checked, ready to launch.
type spec struct {
	comm     *Comm
	kind     kind
	src, dst *zerocopy.View
	count    int64
	dtype    int
	op       Op
	root     int // or peer
	stream   *cuda.Stream
}

// check validates s before NCCL sees anything: views open, on the
// communicator's device, contiguous, of a type NCCL has, of the shapes
// the operation needs (zerocopy.Want, which names every mismatch).
func (s *spec) check(name string) error {
	c := s.comm
	if err := c.usable(name); err != nil {
		return err
	}
	if s.op < Sum || s.op > Avg {
		return fmt.Errorf("nccl: %s: reduction %v: not one of sum, prod, max, min, avg", name, s.op)
	}
	if s.kind == kBroadcast || s.kind == kReduce {
		if s.root < 0 || s.root >= c.size {
			return fmt.Errorf("nccl: %s: root %d outside [0, %d)", name, s.root, c.size)
		}
	}
	if s.kind == kSend || s.kind == kRecv {
		if s.root < 0 || s.root >= c.size {
			return fmt.Errorf("nccl: %s: peer %d outside [0, %d)", name, s.root, c.size)
		}
	}
	base := s.src
	if base == nil {
		base = s.dst
	}
	if base == nil {
		return fmt.Errorf("nccl: %s: nil view", name)
	}
	dt := base.DType()
	t, ok := ncclType(dt)
	if !ok {
		return fmt.Errorf("nccl: %s: dtype %v: NCCL has int8, uint8, bool, int32, uint32, int64, uint64, float16, bfloat16, float32, float64", name, dt)
	}
	s.dtype = t
	dev := dlpack.CUDADevice(c.dev)
	want := func(arg string, v *zerocopy.View, shape []int64, writable bool) error {
		if v == nil {
			return fmt.Errorf("nccl: %s: %s: nil view", name, arg)
		}
		w := zerocopy.Want{DTypes: []dlpack.DataType{dt}, Order: zerocopy.COrder, Device: dev, Writable: writable}
		if shape != nil {
			w.Shape = zerocopy.Extents(shape...)
		}
		if err := w.Check(v); err != nil {
			return fmt.Errorf("nccl: %s: %s: %w", name, arg, err)
		}
		return nil
	}
	n := int64(-1)
	if s.src != nil {
		if err := want("src", s.src, nil, false); err != nil {
			return err
		}
		n = s.src.Len()
	}
	switch s.kind {
	case kAllReduce, kBroadcast:
		if err := want("dst", s.dst, nil, true); err != nil {
			return err
		}
		if s.dst.Len() != n {
			return fmt.Errorf("nccl: %s: dst has %d elements, src %d: they must agree", name, s.dst.Len(), n)
		}
		s.count = n
	case kReduce:
		s.count = n
		if s.dst != nil || s.comm.rank == s.root {
			if err := want("dst", s.dst, nil, true); err != nil {
				return err
			}
			if s.dst.Len() != n {
				return fmt.Errorf("nccl: %s: dst has %d elements, src %d: they must agree", name, s.dst.Len(), n)
			}
		}
	case kAllGather:
		if err := want("dst", s.dst, nil, true); err != nil {
			return err
		}
		if s.dst.Len() != n*int64(c.size) {
			return fmt.Errorf("nccl: %s: dst has %d elements; it needs src's %d times the %d ranks = %d", name, s.dst.Len(), n, c.size, n*int64(c.size))
		}
		s.count = n
	case kReduceScatter:
		if err := want("dst", s.dst, nil, true); err != nil {
			return err
		}
		if s.dst.Len()*int64(c.size) != n {
			return fmt.Errorf("nccl: %s: src has %d elements; it needs dst's %d times the %d ranks = %d", name, n, s.dst.Len(), c.size, s.dst.Len()*int64(c.size))
		}
		s.count = s.dst.Len()
	case kSend:
		s.count = n
	case kRecv:
		if err := want("dst", s.dst, nil, true); err != nil {
			return err
		}
		s.count = s.dst.Len()
	}
	if s.stream == nil {
		st, err := zerocopy.WorkStream(c.dev)
		if err != nil {
			return fmt.Errorf("nccl: %s: %w", name, err)
		}
		s.stream = st
	} else if s.stream.Context().Device().Ordinal() != c.dev {
		return fmt.Errorf("nccl: %s: stream of cuda:%d for a communicator on cuda:%d", name, s.stream.Context().Device().Ordinal(), c.dev)
	}
	return nil
}

// order makes the spec's stream wait for the writes pending on its views
// (an event wait, never the host), as every reader in dlbridge does.
func (s *spec) order() error {
	h := s.stream.Handle()
	for _, v := range []*zerocopy.View{s.src, s.dst} {
		if v != nil {
			if err := v.OrderBefore(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// addr is a view's data pointer as NCCL takes it (0 for none).
func addr(v *zerocopy.View) uintptr {
	if v == nil {
		return 0
	}
	return v.Ptr()
}

// enqueue makes the NCCL call of s (on a thread with its device current).
func (s *spec) enqueue(h uintptr) Result {
	st := s.stream.Handle()
	n := uintptr(s.count)
	switch s.kind {
	case kAllReduce:
		return call(sym_ncclAllReduce, addr(s.src), addr(s.dst), n, uintptr(s.dtype), uintptr(s.op), h, st)
	case kBroadcast:
		return call(sym_ncclBroadcast, addr(s.src), addr(s.dst), n, uintptr(s.dtype), uintptr(s.root), h, st)
	case kReduce:
		return call(sym_ncclReduce, addr(s.src), addr(s.dst), n, uintptr(s.dtype), uintptr(s.op), uintptr(s.root), h, st)
	case kAllGather:
		return call(sym_ncclAllGather, addr(s.src), addr(s.dst), n, uintptr(s.dtype), h, st)
	case kReduceScatter:
		return call(sym_ncclReduceScatter, addr(s.src), addr(s.dst), n, uintptr(s.dtype), uintptr(s.op), h, st)
	case kSend:
		return call(sym_ncclSend, addr(s.src), n, uintptr(s.dtype), uintptr(s.root), h, st)
	case kRecv:
		return call(sym_ncclRecv, addr(s.dst), n, uintptr(s.dtype), uintptr(s.root), h, st)
	}
	return ErrInvalidArgument
}

// run checks, orders, launches (in one NCCL group when there are several)
// and watches the specs; name is the operation in errors. The host never
// waits for the device: results are left pending on the specs' streams.
func run(name string, specs []*spec) error {
	for _, s := range specs {
		if err := s.check(name); err != nil {
			return err
		}
	}
	for _, s := range specs {
		if err := s.order(); err != nil {
			return fmt.Errorf("nccl: %s: %w", name, err)
		}
	}
	// NCCL takes one call of a communicator at a time, until it settled
	// (see Comm.calls); the locks of several are taken in one order.
	comms := distinct(specs)
	sort.Slice(comms, func(i, j int) bool { return comms[i].order < comms[j].order })
	for _, c := range comms {
		c.calls.Lock()
	}
	defer func() {
		for _, c := range comms {
			c.calls.Unlock()
		}
	}()
	for _, c := range comms {
		if err := c.lost(name); err != nil {
			return err
		}
	}
	// The communicators' handles stay valid (no abort frees them) while
	// the calls are made.
	for _, c := range comms {
		c.mu.RLock()
	}
	unlock := func() {
		for _, c := range comms {
			c.mu.RUnlock()
		}
	}
	for _, c := range comms {
		if c.h == 0 {
			unlock()
			return c.err(name)
		}
	}
	seqs := make(map[*Comm]uint64, len(comms))
	hs := make([]uintptr, len(comms))
	for i, c := range comms {
		seqs[c] = c.seq.Add(1)
		hs[i] = c.h
	}
	// A blocking communicator's call may wait in NCCL (connecting to a
	// peer on first use): the watchdog bounds it. The registration ends
	// with the calls, before a failure is handled (an abort then waits
	// for no call).
	dones := make([]func(), len(comms))
	for i, c := range comms {
		dones[i] = c.enter(name, seqs[c], &hs[i])
	}
	var r Result
	var failedOn *Comm
	fn := kindCalls[specs[0].kind]
	func() {
		defer func() {
			for _, done := range dones {
				done()
			}
		}()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var cur *cuda.Context
		var restore func()
		defer func() {
			if restore != nil {
				restore()
			}
		}()
		group := len(specs) > 1
		if group {
			if r = call(sym_ncclGroupStart); r != success {
				fn = "ncclGroupStart"
				return
			}
		}
		for _, s := range specs {
			if s.comm.ctx != cur {
				if restore != nil {
					restore()
				}
				var err error
				if restore, err = s.comm.ctx.SetCurrent(); err != nil {
					restore = nil
					r, fn = ErrUnhandledCUDA, "cuCtxSetCurrent"
					break
				}
				cur = s.comm.ctx
			}
			if r = s.enqueue(s.comm.h); r != success && r != inProgress {
				failedOn, fn = s.comm, kindCalls[s.kind]
				break
			}
		}
		if group {
			if e := call(sym_ncclGroupEnd); r == success || r == inProgress {
				r, fn = e, "ncclGroupEnd"
			}
		}
	}()
	unlock()
	for _, s := range specs {
		runtime.KeepAlive(s.src)
		runtime.KeepAlive(s.dst)
	}
	if r != success && r != inProgress {
		// The watchdog ended the call (deadline, a rank gone): its
		// failure is the one to report.
		for _, c := range comms {
			if c.failed.Load() != nil {
				return c.err(name)
			}
		}
		if failedOn == nil {
			failedOn = specs[0].comm
		}
		err := newError(fn, r, 0)
		// A refused argument leaves the communicator usable, as in NCCL.
		var ne *Error
		if errors.As(err, &ne) && (r == ErrInvalidArgument || r == ErrInvalidUsage) {
			return fmt.Errorf("nccl: %s: %w", name, err)
		}
		failedOn.fail(failedOn.opError(name, seqs[failedOn], 0, err))
		return failedOn.err(name)
	}
	if r == inProgress {
		for _, c := range comms {
			if err := c.settle(name, inProgress, fn, seqs[c]); err != nil {
				return err
			}
		}
	}
	for _, s := range specs {
		if s.dst != nil && (s.kind != kReduce || s.comm.rank == s.root) {
			s.dst.SetStream(s.stream.Handle())
		}
	}
	for _, c := range comms {
		if c.failed.Load() != nil {
			return c.err(name)
		}
	}
	// One watched event per communicator and stream.
	type cs struct {
		c *Comm
		h uintptr
	}
	seen := map[cs]bool{}
	for _, s := range specs {
		k := cs{s.comm, s.stream.Handle()}
		if seen[k] {
			continue
		}
		seen[k] = true
		if err := s.comm.watch(name, seqs[s.comm], s.stream); err != nil {
			return err
		}
	}
	return nil
}

func distinct(specs []*spec) []*Comm {
	var out []*Comm
	for _, s := range specs {
		dup := false
		for _, c := range out {
			dup = dup || c == s.comm
		}
		if !dup {
			out = append(out, s.comm)
		}
	}
	return out
}

// AllReduce reduces src over all ranks with op into dst (same dtype and
// number of elements; dst may be src: in place) on stream s (nil: the
// device's work stream). Views must be contiguous and on the
// communicator's device. dst is left pending on s.
func (c *Comm) AllReduce(dst, src *zerocopy.View, op Op, s *cuda.Stream) error {
	return run("all_reduce", []*spec{{comm: c, kind: kAllReduce, src: src, dst: dst, op: op, stream: s}})
}

// Broadcast copies root's src into every rank's dst (src is read on root
// only; other ranks may pass dst as src).
func (c *Comm) Broadcast(dst, src *zerocopy.View, root int, s *cuda.Stream) error {
	return run("broadcast", []*spec{{comm: c, kind: kBroadcast, src: src, dst: dst, root: root, stream: s}})
}

// Reduce reduces src over all ranks with op into root's dst (dst is
// ignored on the other ranks and may be nil there).
func (c *Comm) Reduce(dst, src *zerocopy.View, op Op, root int, s *cuda.Stream) error {
	if c != nil && c.rank != root {
		dst = nil
	}
	return run("reduce", []*spec{{comm: c, kind: kReduce, src: src, dst: dst, op: op, root: root, stream: s}})
}

// AllGather gathers every rank's src into dst, rank by rank (dst holds
// Size() times src's elements).
func (c *Comm) AllGather(dst, src *zerocopy.View, s *cuda.Stream) error {
	return run("all_gather", []*spec{{comm: c, kind: kAllGather, src: src, dst: dst, stream: s}})
}

// ReduceScatter reduces src over all ranks with op and leaves block Rank()
// of the result in dst (src holds Size() times dst's elements).
func (c *Comm) ReduceScatter(dst, src *zerocopy.View, op Op, s *cuda.Stream) error {
	return run("reduce_scatter", []*spec{{comm: c, kind: kReduceScatter, src: src, dst: dst, op: op, stream: s}})
}

// P2P is one send or receive of a grouped exchange (SendRecv).
type P2P struct {
	Peer int
	View *zerocopy.View
	Recv bool // receive into View; false: send View
}

// Send sends v to rank peer, which receives it with Recv (or a P2P with
// Recv set) of the same dtype and element count.
func (c *Comm) Send(v *zerocopy.View, peer int, s *cuda.Stream) error {
	return c.SendRecv(s, P2P{Peer: peer, View: v})
}

// Recv receives into v from rank peer.
func (c *Comm) Recv(v *zerocopy.View, peer int, s *cuda.Stream) error {
	return c.SendRecv(s, P2P{Peer: peer, View: v, Recv: true})
}

// SendRecv runs sends and receives as one NCCL group (ncclGroupStart/End),
// as torch.distributed.batch_isend_irecv does, so that exchanges in a ring
// or with every peer cannot deadlock on their order.
func (c *Comm) SendRecv(s *cuda.Stream, ops ...P2P) error {
	if len(ops) == 0 {
		return nil
	}
	specs := make([]*spec, len(ops))
	for i, o := range ops {
		sp := &spec{comm: c, root: o.Peer, stream: s}
		if o.Recv {
			sp.kind, sp.dst = kRecv, o.View
		} else {
			sp.kind, sp.src = kSend, o.View
		}
		specs[i] = sp
	}
	return run("send_recv", specs)
}

// AllToAll sends block j of src to rank j and receives rank j's block
// Rank() into block j of dst (both hold Size() equal blocks along their
// first dimension), as grouped sends and receives.
func (c *Comm) AllToAll(dst, src *zerocopy.View, s *cuda.Stream) error {
	if err := c.usable("all_to_all"); err != nil {
		return err
	}
	if src == nil || dst == nil {
		return errors.New("nccl: all_to_all: nil view")
	}
	n := int64(c.size)
	if src.NDim() == 0 || src.Shape()[0]%n != 0 {
		return fmt.Errorf("nccl: all_to_all: src shape %v: the first dimension must split into %d equal blocks", src.Shape(), n)
	}
	if err := (zerocopy.Want{Shape: zerocopy.Extents(src.Shape()...), DTypes: []dlpack.DataType{src.DType()}}).Check(dst); err != nil {
		return fmt.Errorf("nccl: all_to_all: dst must match src: %w", err)
	}
	ops := make([]P2P, 0, 2*c.size)
	step := src.Shape()[0] / n
	for j := 0; j < c.size; j++ {
		sb, err := src.Slice(0, int64(j)*step, int64(j+1)*step, 1)
		if err != nil {
			return fmt.Errorf("nccl: all_to_all: %w", err)
		}
		db, err := dst.Slice(0, int64(j)*step, int64(j+1)*step, 1)
		if err != nil {
			return fmt.Errorf("nccl: all_to_all: %w", err)
		}
		ops = append(ops, P2P{Peer: j, View: sb}, P2P{Peer: j, View: db, Recv: true})
	}
	err := c.SendRecv(s, ops...)
	var first error
	for _, o := range ops {
		if e := o.View.Close(); e != nil && first == nil {
			first = e
		}
	}
	if err != nil {
		return err
	}
	return first
}

// Batch is several operations of one or several communicators launched as
// one NCCL group: how one process drives a communicator per device
// (InitDevices), and the one entry point a foreign caller needs.
type Batch struct {
	specs []*spec
	name  string
}

// AllReduce adds an all-reduce of c to the batch (see Comm.AllReduce).
func (b *Batch) AllReduce(c *Comm, dst, src *zerocopy.View, op Op, s *cuda.Stream) {
	b.add("all_reduce", &spec{comm: c, kind: kAllReduce, src: src, dst: dst, op: op, stream: s})
}

// Broadcast adds a broadcast (see Comm.Broadcast).
func (b *Batch) Broadcast(c *Comm, dst, src *zerocopy.View, root int, s *cuda.Stream) {
	b.add("broadcast", &spec{comm: c, kind: kBroadcast, src: src, dst: dst, root: root, stream: s})
}

// Reduce adds a reduce (see Comm.Reduce).
func (b *Batch) Reduce(c *Comm, dst, src *zerocopy.View, op Op, root int, s *cuda.Stream) {
	if c != nil && c.rank != root {
		dst = nil
	}
	b.add("reduce", &spec{comm: c, kind: kReduce, src: src, dst: dst, op: op, root: root, stream: s})
}

// AllGather adds an all-gather (see Comm.AllGather).
func (b *Batch) AllGather(c *Comm, dst, src *zerocopy.View, s *cuda.Stream) {
	b.add("all_gather", &spec{comm: c, kind: kAllGather, src: src, dst: dst, stream: s})
}

// ReduceScatter adds a reduce-scatter (see Comm.ReduceScatter).
func (b *Batch) ReduceScatter(c *Comm, dst, src *zerocopy.View, op Op, s *cuda.Stream) {
	b.add("reduce_scatter", &spec{comm: c, kind: kReduceScatter, src: src, dst: dst, op: op, stream: s})
}

// Send adds a send (see Comm.Send).
func (b *Batch) Send(c *Comm, v *zerocopy.View, peer int, s *cuda.Stream) {
	b.add("send", &spec{comm: c, kind: kSend, src: v, root: peer, stream: s})
}

// Recv adds a receive (see Comm.Recv).
func (b *Batch) Recv(c *Comm, v *zerocopy.View, peer int, s *cuda.Stream) {
	b.add("recv", &spec{comm: c, kind: kRecv, dst: v, root: peer, stream: s})
}

func (b *Batch) add(name string, s *spec) {
	if b.name == "" {
		b.name = name
	} else if b.name != name {
		b.name = "group"
	}
	b.specs = append(b.specs, s)
}

// Launch checks every operation, then launches them all in one NCCL group;
// the batch is empty afterwards.
func (b *Batch) Launch() error {
	specs, name := b.specs, b.name
	b.specs, b.name = nil, ""
	if len(specs) == 0 {
		return nil
	}
	return run(name, specs)
}

// ptrBytes is the address of b's first byte (b is non-empty and kept
// alive by the caller while C uses it).
func ptrBytes(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// watch records an event on s after operation seq and has the
// communicator's watchdog follow it: when the event has not completed by
// the deadline, or NCCL reports an asynchronous error first, the
// communicator is aborted and the failure kept for the next call.
func (c *Comm) watch(op string, seq uint64, s *cuda.Stream) error {
	c.wmu.Lock()
	var ev *cuda.Event
	if n := len(c.events); n > 0 {
		ev, c.events = c.events[n-1], c.events[:n-1]
	}
	c.wmu.Unlock()
	if ev == nil {
		var err error
		if ev, err = c.ctx.NewEvent(0); err != nil {
			return fmt.Errorf("nccl: %s: %w", op, err)
		}
	}
	if err := ev.Record(s); err != nil {
		return fmt.Errorf("nccl: %s: %w", op, err)
	}
	c.wmu.Lock()
	c.flights = append(c.flights, flight{ev: ev, op: op, seq: seq, deadline: time.Now().Add(c.timeout)})
	start := !c.watching
	c.watching = true
	c.wmu.Unlock()
	if start {
		go c.watchdog()
	}
	return nil
}

// watchdog follows the operations in flight until none is left (then it
// ends; the next operation starts it again). It polls: event queries and
// ncclCommGetAsyncError cost well under a microsecond, and the pause grows
// from 20 us to 5 ms while nothing completes.
func (c *Comm) watchdog() {
	var pause time.Duration
	for {
		c.wmu.Lock()
		call := c.inCall.Load()
		if (len(c.flights) == 0 && call == nil) || (c.failed.Load() != nil && call == nil) {
			c.release(c.flights)
			c.flights = nil
			c.watching = false
			c.wmu.Unlock()
			return
		}
		var f flight
		have := len(c.flights) > 0
		if have {
			f = c.flights[0]
		}
		c.wmu.Unlock()
		if c.failed.Load() != nil {
			// A blocking call is still in NCCL: abort under it
			// until it returns (its handle may not be written yet).
			c.kick()
			pause = backoff(pause)
			time.Sleep(pause)
			continue
		}
		// The failure is blamed on the oldest operation in flight, else
		// on the call in progress.
		blame := func(timeout time.Duration, cause error) {
			if have {
				c.fail(c.opError(f.op, f.seq, timeout, cause))
			} else {
				c.fail(c.opError(call.op, call.seq, timeout, cause))
			}
		}

		// A blocking communicator's error state may be read at any
		// time; a nonblocking one's only between calls of the issuing
		// goroutines (Comm.calls): while one is in progress its caller
		// polls the same state and reports what goes wrong.
		var a Result
		var aerr error = errSkipped
		if c.blocking {
			a, aerr = c.asyncError()
		} else if c.calls.TryLock() {
			a, aerr = c.asyncError()
			c.calls.Unlock()
		}
		if aerr == nil && a != success && a != inProgress {
			blame(0, newError("ncclCommGetAsyncError", a, 0))
			continue
		}
		if call != nil {
			// Finalize waits for this rank's own operations only: those
			// the lost rank had come to may complete (the flights
			// fail the others, which aborts the communicator).
			if g := c.gone.Load(); g != nil && call.op != "finalize" {
				c.fail(c.opError(call.op, call.seq, 0, g.err))
				continue
			}
			if time.Now().After(call.deadline) {
				c.fail(c.opError(call.op, call.seq, c.timeout, ErrTimeout))
				continue
			}
		}
		if have {
			done, qerr := f.ev.Query()
			switch {
			case qerr != nil:
				c.fail(c.opError(f.op, f.seq, 0, qerr))
				continue
			case done:
				c.wmu.Lock()
				c.flights = c.flights[1:]
				c.events = append(c.events, f.ev)
				c.wmu.Unlock()
				pause = 0
				continue
			case c.gone.Load() != nil:
				c.fail(c.opError(f.op, f.seq, 0, c.gone.Load().err))
				continue
			case time.Now().After(f.deadline):
				c.fail(c.opError(f.op, f.seq, c.timeout, ErrTimeout))
				continue
			}
		}
		pause = backoff(pause)
		time.Sleep(pause)
	}
}

// errSkipped: the watchdog did not ask NCCL this time.
var errSkipped = errors.New("nccl: not asked")

// release destroys the events of flights that will not be followed.
func (c *Comm) release(fs []flight) {
	for _, f := range fs {
		_ = f.ev.Destroy()
	}
}

// Wait blocks until every operation issued so far has completed on its
// stream, or the communicator failed (its error). It is for hosts that
// must know (tests, shutdown); operations themselves never need it.
func (c *Comm) Wait() error {
	for pause := time.Duration(0); ; {
		if p := c.failed.Load(); p != nil {
			return *p
		}
		c.wmu.Lock()
		n := len(c.flights)
		c.wmu.Unlock()
		if n == 0 {
			if p := c.failed.Load(); p != nil {
				return *p
			}
			return nil
		}
		pause = backoff(pause)
		time.Sleep(pause)
	}
}

// ParseOp reads a reduction by name as torch.distributed.ReduceOp and
// CuPy spell them ("sum", "SUM", "product", "avg", ...).
func ParseOp(name string) (Op, error) {
	switch strings.ToLower(name) {
	case "sum":
		return Sum, nil
	case "prod", "product":
		return Prod, nil
	case "max":
		return Max, nil
	case "min":
		return Min, nil
	case "avg", "mean":
		return Avg, nil
	}
	return 0, fmt.Errorf("nccl: reduction %q: want sum, prod, max, min or avg", name)
}
