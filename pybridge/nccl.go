package pybridge

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/nccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// This file: the glue of dlbridge.nccl (package nccl for Python). Worlds
// (a job joined from the environment), communicators and batches (grouped
// operations) live in one handle table; tensors are tensor handles.
//
// The stream of an operation is PlanStream's (EntryCollective): the stream
// the caller names; else the stream the tensors' pending write is on,
// which for a tensor imported from PyTorch or CuPy is that framework's
// current stream (dlbridge.from_dlpack records it); else dlbridge's work
// stream of the communicator's device. The other tensors' pending writes
// are ordered before it by events and the results are left pending on it:
// the host never waits.

var ncclObjects Table[any]

func ncclGet[T any](h Handle, what string) (T, error) {
	return objectOf[T](&ncclObjects, h, "dlbridge.nccl", what)
}

// NCCLFailure is what Python's dlbridge.nccl.NCCLError carries: the
// operation, the ranks that did not come, whether a deadline passed.
type NCCLFailure struct {
	Op      string  `json:"op"`
	Seq     uint64  `json:"seq"`
	Rank    int     `json:"rank"`
	Size    int     `json:"size"`
	Missing []int   `json:"missing"`
	Timeout float64 `json:"timeout"` // seconds; 0: the cause was not a deadline
	Message string  `json:"message"`
}

// failures holds the last NCCL failure of each OS thread that called an
// entry point of dlbridge.nccl, as the message of every failure is kept
// per thread (LastError): Python reads it right after the call raised, on
// the same thread, with NCCLLastFailure. Every entry point of the glue
// sets or clears its thread's entry, so a record is never stale.
var failures sync.Map // tid -> *NCCLFailure

// ncclDone is the outcome of an entry point of dlbridge.nccl: err
// classified for Python, with the structured failure recorded for this
// thread. op names the operation when err is no *nccl.OpError.
func ncclDone(op string, err error) error {
	tid := syscall.Gettid()
	if err == nil {
		failures.Delete(tid)
		return nil
	}
	f, code := classifyNCCL(op, err)
	if f == nil {
		failures.Delete(tid)
	} else {
		failures.Store(tid, f)
	}
	return WithCode(code, err)
}

// classifyNCCL: a failure of a communicator (an OpError, an NCCL call's
// error, a refused use of an aborted one, a rendezvous past its deadline)
// is an NCCLError, raised as TimeoutError when a deadline passed and as
// RuntimeError otherwise; an argument the checks refused keeps its class
// (zerocopy's mismatches: TypeError or ValueError; the operations' own
// checks: ValueError).
func classifyNCCL(op string, err error) (*NCCLFailure, Code) {
	if c := CodeOf(err); c != RuntimeError {
		return nil, c // classified already (a mismatch, a closed tensor, out of memory)
	}
	timedOut := errors.Is(err, nccl.ErrTimeout) || isNetTimeout(err)
	var oe *nccl.OpError
	var ne *nccl.Error
	var ce *cuda.Error
	switch {
	case errors.As(err, &oe):
		f := &NCCLFailure{Op: oe.Op, Seq: oe.Seq, Rank: oe.Rank, Size: oe.Size, Missing: oe.Missing, Message: err.Error()}
		if oe.Timeout > 0 {
			f.Timeout = oe.Timeout.Seconds()
		}
		return f, failureCode(timedOut)
	case errors.As(err, &ce), errors.Is(err, nccl.ErrMissingSymbol), errors.Is(err, nccl.ErrNoLibrary):
		return nil, RuntimeError // the driver or the library, not the communicator
	case !errors.As(err, &ne) && !errors.Is(err, nccl.ErrAborted) && !timedOut &&
		ncclArgOps[op]:
		return nil, ValueError // nccl's checks of the arguments, before NCCL saw anything
	}
	f := &NCCLFailure{Op: op, Rank: -1, Size: -1, Message: err.Error()}
	if timedOut {
		f.Timeout = -1 // a deadline passed; its length is in the message
	}
	return f, failureCode(timedOut)
}

// ncclArgOps are the operations whose other errors are checks of their
// arguments.
var ncclArgOps = map[string]bool{"all_reduce": true, "broadcast": true, "reduce": true, "all_gather": true,
	"reduce_scatter": true, "send": true, "recv": true, "all_to_all": true, "group": true}

func failureCode(timedOut bool) Code {
	if timedOut {
		return TimeoutError
	}
	return RuntimeError
}

func isNetTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// NCCLLastFailure is the JSON of this thread's last NCCL failure (see
// failures), or "" when the last call of dlbridge.nccl on it did not fail
// as a communicator does.
func NCCLLastFailure() (string, error) {
	f, ok := failures.Load(syscall.Gettid())
	if !ok {
		return "", nil
	}
	b, err := json.Marshal(f)
	return string(b), err
}

func ncclConfig(timeoutMS int64) (*nccl.Config, error) {
	if timeoutMS < 0 {
		return nil, Errorf(ValueError, "dlbridge.nccl: timeout %d ms: must be positive (0: the default)", timeoutMS)
	}
	return &nccl.Config{Timeout: time.Duration(timeoutMS) * time.Millisecond}, nil
}

// NCCLUniqueID asks NCCL for a unique id.
func NCCLUniqueID() (nccl.UniqueID, error) {
	id, err := nccl.NewUniqueID()
	return id, ncclDone("get_unique_id", err)
}

// NCCLInitRank joins the communicator of id (256 hex digits, the 128 bytes
// of an ncclUniqueId) as rank of nranks on CUDA device dev.
func NCCLInitRank(idHex string, nranks, rank, dev int, timeoutMS int64) (Handle, error) {
	var id nccl.UniqueID
	b, err := hex.DecodeString(idHex)
	if err != nil || len(b) != len(id) {
		return 0, Errorf(ValueError, "dlbridge.nccl: unique id %.32q...: want %d bytes as %d hex digits", idHex, len(id), 2*len(id))
	}
	copy(id[:], b)
	if err := checkDevice(dlpack.CUDADevice(dev)); err != nil {
		return 0, err
	}
	cfg, err := ncclConfig(timeoutMS)
	if err != nil {
		return 0, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return 0, Errorf(ValueError, "dlbridge.nccl: rank %d of %d ranks: want 0 <= rank < nranks", rank, nranks)
	}
	c, err := nccl.InitRank(id, nranks, rank, dev, cfg)
	if err != nil {
		return 0, ncclDone("init", err)
	}
	failures.Delete(syscall.Gettid())
	return ncclObjects.Add(c), nil
}

// NCCLJoin joins the job the environment env describes ("NAME=value"
// lines: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
// DLBRIDGE_NCCL_TIMEOUT, as nccl.FromEnv reads them), and returns the
// world's handle and its communicator's.
func NCCLJoin(env string, dev int, timeoutMS int64) (Handle, Handle, error) {
	vars := map[string]string{}
	for _, line := range strings.Split(env, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	cfg, err := ncclConfig(timeoutMS)
	if err != nil {
		return 0, 0, err
	}
	if timeoutMS == 0 {
		cfg = nil
	}
	o, err := nccl.EnvOptions(func(k string) string { return vars[k] }, cfg)
	if err != nil {
		return 0, 0, Errorf(ValueError, "dlbridge.nccl: %v", err)
	}
	if dev >= 0 {
		o.Device = dev
	}
	d := o.Device
	if d < 0 {
		d = o.LocalRank
	}
	if err := checkDevice(dlpack.CUDADevice(d)); err != nil {
		return 0, 0, err
	}
	w, err := nccl.Join(o)
	if err != nil {
		return 0, 0, ncclDone("rendezvous", err)
	}
	failures.Delete(syscall.Gettid())
	return ncclObjects.Add(w), ncclObjects.Add(w.Comm()), nil
}

// NCCLWorldInfo describes world h as JSON: rank, size, local_rank, the
// job ranks of the current communicator (members) and those gone (dead).
func NCCLWorldInfo(h Handle) (string, error) {
	w, err := ncclGet[*nccl.World](h, "world")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{"rank": w.Rank, "size": w.Size, "local_rank": w.LocalRank,
		"members": w.Members(), "dead": nonNil(w.Dead())})
	return string(b), err
}

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// NCCLWorldRebuild aborts world h's communicator and builds one of the
// ranks still alive (every survivor calls it); the new communicator's
// handle. The old handle stays valid (aborted) until closed.
func NCCLWorldRebuild(h Handle) (Handle, error) {
	w, err := ncclGet[*nccl.World](h, "world")
	if err != nil {
		return 0, err
	}
	c, err := w.Rebuild()
	if err != nil {
		return 0, ncclDone("rebuild", err)
	}
	failures.Delete(syscall.Gettid())
	return ncclObjects.Add(c), nil
}

// NCCLWorldClose leaves the job's control plane (finalize or abort the
// communicators first); a second close is a ValueError.
func NCCLWorldClose(h Handle) error {
	if _, err := ncclGet[*nccl.World](h, "world"); err != nil {
		return err
	}
	o, err := ncclObjects.Delete(h)
	if err != nil {
		return err
	}
	return o.(*nccl.World).Close()
}

// NCCLCommInfo is communicator h's rank, size, device, timeout in
// milliseconds and number of operations issued.
func NCCLCommInfo(h Handle) ([5]int64, error) {
	c, err := ncclGet[*nccl.Comm](h, "communicator")
	if err != nil {
		return [5]int64{}, err
	}
	return [5]int64{int64(c.Rank()), int64(c.Size()), int64(c.Device()), c.Timeout().Milliseconds(), int64(c.Issued())}, nil
}

// NCCLCommClose forgets communicator h, aborting it unless it was
// finalized or aborted already (ncclCommAbort frees what it holds).
func NCCLCommClose(h Handle) error {
	if _, err := ncclGet[*nccl.Comm](h, "communicator"); err != nil {
		return err
	}
	o, err := ncclObjects.Delete(h)
	if err != nil {
		return err
	}
	// Abort does nothing to a communicator finalized or aborted already.
	return o.(*nccl.Comm).Abort()
}

// NCCLAbort aborts communicator h (ncclCommAbort).
func NCCLAbort(h Handle) error {
	c, err := ncclGet[*nccl.Comm](h, "communicator")
	if err != nil {
		return err
	}
	return c.Abort()
}

// NCCLFinalize flushes and frees communicator h (ncclCommFinalize, then
// ncclCommDestroy), within its deadline.
func NCCLFinalize(h Handle) error {
	c, err := ncclGet[*nccl.Comm](h, "communicator")
	if err != nil {
		return err
	}
	return ncclDone("finalize", c.Finalize())
}

// NCCLAsyncError is communicator h's state: "" while healthy, else the
// failure (recorded for NCCLLastFailure, as a failed call's would be).
func NCCLAsyncError(h Handle) (string, error) {
	c, err := ncclGet[*nccl.Comm](h, "communicator")
	if err != nil {
		return "", err
	}
	e := c.AsyncError()
	if e == nil {
		failures.Delete(syscall.Gettid())
		return "", nil
	}
	_ = ncclDone("async_error", e)
	return e.Error(), nil
}

// NCCLWait blocks until every operation issued on communicator h has
// completed on its stream, or the communicator failed (for tests and
// shutdown; operations never need it).
func NCCLWait(h Handle) error {
	c, err := ncclGet[*nccl.Comm](h, "communicator")
	if err != nil {
		return err
	}
	return ncclDone("wait", c.Wait())
}

// The kinds of NCCLCollective and NCCLBatchAdd, as dlbridge.nccl numbers them.
const (
	NCCLAllReduce = iota
	NCCLBroadcast
	NCCLReduce
	NCCLAllGather
	NCCLReduceScatter
	NCCLSend
	NCCLRecv
	ncclKinds
)

var ncclKindNames = [ncclKinds]string{"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send", "recv"}

// ncclOp is one operation a caller asked for, its tensors borrowed.
type ncclOp struct {
	comm     *nccl.Comm
	kind     int
	dst, src *zerocopy.View
	op       nccl.Op
	root     int
	given    StreamArg // the caller's stream=
	name     string    // for messages: the kind's name, or all_to_all's
	s        *cuda.Stream
}

// borrowOp takes views of the tensors of an operation (0: none) that are
// its own, so that a batch launched later is not undone by the handles'
// close in between (Python drops the tensor it made of a torch tensor when
// the add returns); release with ret.
func borrowOp(comm Handle, kind int, dst, src Handle, op, root int, stream StreamArg) (*ncclOp, error) {
	if kind < 0 || kind >= ncclKinds {
		return nil, Errorf(ValueError, "dlbridge.nccl: operation kind %d: want 0..%d", kind, ncclKinds-1)
	}
	return borrowNamed(comm, ncclKindNames[kind], kind, dst, src, op, root, stream)
}

// borrowNamed is borrowOp of an operation named name in messages.
func borrowNamed(comm Handle, name string, kind int, dst, src Handle, op, root int, stream StreamArg) (*ncclOp, error) {
	c, err := ncclGet[*nccl.Comm](comm, "communicator")
	if err != nil {
		return nil, err
	}
	o := &ncclOp{comm: c, kind: kind, op: nccl.Op(op), root: root, given: stream, name: name}
	for _, p := range []struct {
		h Handle
		v **zerocopy.View
	}{{dst, &o.dst}, {src, &o.src}} {
		if p.h == 0 {
			continue
		}
		t, err := Borrow(p.h)
		if err != nil {
			o.ret()
			return nil, err
		}
		*p.v, err = t.View.Retain()
		t.Return()
		if err != nil {
			o.ret()
			return nil, WithCode(ValueError, err)
		}
	}
	// Decided now, so that a group's add refuses a wrong stream= itself.
	if o.s, err = o.stream(); err != nil {
		o.ret()
		return nil, err
	}
	return o, nil
}

func (o *ncclOp) ret() {
	for _, v := range []*zerocopy.View{o.dst, o.src} {
		if v != nil {
			v.Close()
		}
	}
}

// stream is the operation's stream (see the top of this file).
func (o *ncclOp) stream() (*cuda.Stream, error) {
	dev := dlpack.CUDADevice(o.comm.Device())
	ask := StreamAsk{Entry: EntryCollective, Op: "dlbridge.nccl." + o.name, Given: o.given, Devices: [2]dlpack.Device{dev}}
	for _, v := range []*zerocopy.View{o.src, o.dst} {
		if v != nil && v.Device() == dev && v.Stream() != 0 {
			ask.Current = v.Stream()
			break
		}
	}
	var plan StreamPlan
	if err := PlanStream(&ask, &plan); err != nil {
		return nil, err
	}
	return plan.Stream, nil
}

// add puts o into b.
func (o *ncclOp) add(b *nccl.Batch) {
	c, dst, src, s := o.comm, o.dst, o.src, o.s
	switch o.kind {
	case NCCLAllReduce:
		b.AllReduce(c, dst, src, o.op, s)
	case NCCLBroadcast:
		b.Broadcast(c, dst, src, o.root, s)
	case NCCLReduce:
		b.Reduce(c, dst, src, o.op, o.root, s)
	case NCCLAllGather:
		b.AllGather(c, dst, src, s)
	case NCCLReduceScatter:
		b.ReduceScatter(c, dst, src, o.op, s)
	case NCCLSend:
		b.Send(c, src, o.root, s)
	case NCCLRecv:
		b.Recv(c, dst, o.root, s)
	}
}

// NCCLCollective queues one operation of communicator comm on the stream
// the top of this file says (stream: the caller's stream=): kind
// (NCCLAllReduce...), the tensors dst and src (0: none; src may be dst, in
// place), the reduction op and the root (broadcast, reduce) or peer (send,
// recv).
func NCCLCollective(comm Handle, kind int, dst, src Handle, op, root int, stream StreamArg) error {
	o, err := borrowOp(comm, kind, dst, src, op, root, stream)
	if err != nil {
		return err
	}
	defer o.ret()
	var b nccl.Batch
	o.add(&b)
	return ncclDone(ncclKindNames[kind], b.Launch())
}

// NCCLAllToAll sends block j of src to rank j and receives rank j's block
// into block j of dst, on the stream the top of this file says.
func NCCLAllToAll(comm Handle, dst, src Handle, stream StreamArg) error {
	o, err := borrowNamed(comm, "all_to_all", NCCLSend, dst, src, 0, 0, stream)
	if err != nil {
		return err
	}
	defer o.ret()
	if o.dst == nil || o.src == nil {
		return Errorf(ValueError, "dlbridge.nccl: all_to_all needs both tensors")
	}
	return ncclDone("all_to_all", o.comm.AllToAll(o.dst, o.src, o.s))
}

// ncclBatch is operations gathered for one NCCL group (Python's
// Communicator.group()); their tensors stay borrowed until it launches or
// is closed.
type ncclBatch struct {
	mu  sync.Mutex
	ops []*ncclOp
}

// NCCLBatchNew starts an empty batch.
func NCCLBatchNew() Handle { return ncclObjects.Add(&ncclBatch{}) }

// NCCLBatchAdd adds an operation (as NCCLCollective takes it) to batch h.
func NCCLBatchAdd(h, comm Handle, kind int, dst, src Handle, op, root int, stream StreamArg) error {
	b, err := ncclGet[*ncclBatch](h, "batch")
	if err != nil {
		return err
	}
	o, err := borrowOp(comm, kind, dst, src, op, root, stream)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.ops = append(b.ops, o)
	b.mu.Unlock()
	return nil
}

// NCCLBatchLaunch launches the operations of batch h as one NCCL group
// (ncclGroupStart/End) and closes it.
func NCCLBatchLaunch(h Handle) error {
	ops, err := takeBatch(h)
	if err != nil {
		return err
	}
	defer retAll(ops)
	var b nccl.Batch
	for _, o := range ops {
		o.add(&b)
	}
	return ncclDone("group", b.Launch())
}

// NCCLBatchClose drops batch h without launching it.
func NCCLBatchClose(h Handle) error {
	ops, err := takeBatch(h)
	retAll(ops)
	return err
}

func takeBatch(h Handle) ([]*ncclOp, error) {
	if _, err := ncclGet[*ncclBatch](h, "batch"); err != nil {
		return nil, err
	}
	o, err := ncclObjects.Delete(h)
	if err != nil {
		return nil, err
	}
	b := o.(*ncclBatch)
	b.mu.Lock()
	defer b.mu.Unlock()
	ops := b.ops
	b.ops = nil
	return ops, nil
}

func retAll(ops []*ncclOp) {
	for _, o := range ops {
		o.ret()
	}
}

// LiveNCCLObjects is the number of open worlds, communicators and batches
// (for leak tests).
func LiveNCCLObjects() int { return ncclObjects.Len() }

// NCCLSplit makes a communicator of the ranks of comm that pass the same
// color, numbered by key (ncclCommSplit; every rank calls it); 0 for
// color nccl.NoColor (-1), which joins none.
func NCCLSplit(comm Handle, color, key int) (Handle, error) {
	c, err := ncclGet[*nccl.Comm](comm, "communicator")
	if err != nil {
		return 0, err
	}
	if color < nccl.NoColor {
		return 0, Errorf(ValueError, "dlbridge.nccl: split: color %d: must be >= 0, or -1 for none", color)
	}
	nc, err := c.Split(color, key)
	if err != nil {
		return 0, ncclDone("split", err)
	}
	failures.Delete(syscall.Gettid())
	if nc == nil {
		return 0, nil
	}
	return ncclObjects.Add(nc), nil
}
