package nccl

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// UniqueID is an ncclUniqueId: made by one rank (NewUniqueID), handed to
// the others (FromEnv does it over TCP), the same for every rank of a
// communicator. Any NCCL rank with it joins: CuPy's
// cupy.cuda.nccl.NcclCommunicator(n, id, rank) and PyTorch ranks through
// dlbridge.nccl included.
type UniqueID [128]byte

// NewUniqueID asks NCCL for a unique id (ncclGetUniqueId). With the real
// NCCL it holds the address its bootstrap listens on: NCCL_SOCKET_IFNAME
// picks the interface (docs/nccl.md).
func NewUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := load(); err != nil {
		return id, err
	}
	if r := call(sym_ncclGetUniqueId, uintptr(unsafe.Pointer(&id))); r != success {
		return id, newError("ncclGetUniqueId", r, 0)
	}
	return id, nil
}

// key names a communicator among the ranks (in errors and the control
// plane): a digest of its unique id, never the id itself.
func (id UniqueID) key() string {
	h := sha256.Sum256(id[:])
	return hex.EncodeToString(h[:6])
}

// DefaultTimeout is the deadline of an operation when Config gives none:
// torch.distributed's default for NCCL process groups.
const DefaultTimeout = 10 * time.Minute

// Config sets up a communicator. The zero Config is usable.
type Config struct {
	// Timeout bounds every wait: initialization, each operation from the
	// moment it is queued until its stream has run it, finalization.
	// When it passes, the communicator is aborted and the operation's
	// error names the ranks that did not come. 0: DefaultTimeout.
	Timeout time.Duration
	// NetName forces NCCL's network plugin ("Socket", "IB"), as NCCL_NET.
	NetName string
	// Nonblocking makes the communicator nonblocking (ncclConfig_t
	// blocking = 0): every NCCL call returns at once and is waited for
	// by polling ncclCommGetAsyncError, so that no thread ever stays in
	// NCCL. It costs tens of microseconds per operation (NCCL starts a
	// launch thread for each: 4 KiB all_reduce over NVLink 140-182 us
	// against 14.4 us blocking, bench/results/nccl-h100x2). The default,
	// blocking, is what
	// torch.distributed uses: a call returns once NCCL queued the work,
	// and the watchdog aborts the communicator from its own goroutine
	// when a call or an operation passes the deadline, which ends a call
	// stuck waiting for a peer.
	Nonblocking bool
}

func (c *Config) timeout() time.Duration {
	if c == nil || c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// ncclConfig mirrors ncclConfig_t as NCCL 2.18 laid it out. NCCL reads a
// config by the size and version the caller wrote (fields it knows of
// that version, defaults for the rest), so this prefix works with every
// NCCL since and asks for nothing newer than it needs.
type ncclConfig struct {
	size           uint64
	magic          uint32
	version        uint32
	blocking       int32
	cgaClusterSize int32
	minCTAs        int32
	maxCTAs        int32
	netName        uintptr
	splitShare     int32
	_              int32
}

const configUndef = math.MinInt32

// newConfig: blocking unless c asks for Nonblocking (see Config).
func newConfig(c *Config) (*ncclConfig, []byte) {
	cfg := &ncclConfig{size: 48, magic: 0xcafebeef, version: 21800, blocking: 1,
		cgaClusterSize: configUndef, minCTAs: configUndef, maxCTAs: configUndef, splitShare: configUndef}
	if c != nil && c.Nonblocking {
		cfg.blocking = 0
	}
	var name []byte
	if c != nil && c.NetName != "" {
		name = append([]byte(c.NetName), 0)
		cfg.netName = uintptr(ptrBytes(name))
	}
	return cfg, name
}

// Missing names the ranks that did not come to operation seq of the
// communicator with the given key, and what is known of the others. The
// control plane of a World implements it; a communicator without one
// reports no ranks.
type Missing interface {
	Missing(key string, seq uint64) (ranks []int, detail string)
}

// splitAdopter is a Missing that also answers for the communicators split
// from one it answers for (World): Split has it learn their members.
type splitAdopter interface {
	adoptSplit(parent, child *Comm) error
}

// Comm is a communicator: one rank of an NCCL clique, on one device. Its
// methods may be called from any goroutine; operations of one
// communicator must be issued in the same order on every rank, as NCCL
// requires (issue them from one goroutine, or order them yourself).
type Comm struct {
	mu sync.RWMutex // R: a call into NCCL with h; W: abort and destroy
	// calls serializes the calls of NCCL on h (for a nonblocking
	// communicator from the call that queues work until
	// ncclCommGetAsyncError says it is no longer in progress): NCCL's
	// communicator is not safe for concurrent calls (2.28's
	// ncclCommGetAsyncError joins and frees the launch thread of a
	// nonblocking group; two callers free it twice), and a call made
	// while the previous one is in progress fails with "Attempt to use
	// communicator before the previous operation returned ncclSuccess".
	// ncclCommAbort goes around it, as NCCL allows, so that a failure
	// never waits for a call to end; so does ncclCommGetAsyncError of a
	// blocking communicator, which then only reads NCCL's error state
	// (torch.distributed's watchdog thread calls it so).
	calls    sync.Mutex
	blocking bool
	// inCall is the blocking call in NCCL now, which the watchdog ends
	// (by ncclCommAbort) at its deadline or when a peer is gone.
	inCall atomic.Pointer[busyCall]
	// aborted: ncclCommAbort was called (by abort, or by the watchdog on
	// a call in progress without mu, which that call holds).
	aborted atomic.Bool
	order   uint64  // rank of the communicator in the order calls are taken
	h       uintptr // ncclComm_t; 0 once aborted or destroyed
	rank    int
	size    int
	dev     int
	ctx     *cuda.Context
	key     string
	timeout time.Duration
	missing Missing

	seq    atomic.Uint64 // operations issued
	failed atomic.Pointer[error]
	// gone is set when a rank of the communicator is known to have
	// exited (the control plane of a World saw its connection close):
	// NCCL itself may never notice (over NVLink and shared memory its
	// kernels wait for the peer for ever), so the operations in flight,
	// and the next one issued, fail at once instead of at the deadline.
	gone atomic.Pointer[goneRanks]

	wmu      sync.Mutex
	flights  []flight
	watching bool
	events   []*cuda.Event
}

// commOrder numbers communicators as they are made: calls of several are
// taken in that order (a batch over several communicators).
var commOrder atomic.Uint64

// newComm makes the Go side of a communicator.
func newComm(h uintptr, rank, size, dev int, ctx *cuda.Context, key string, timeout time.Duration, blocking bool) *Comm {
	return &Comm{h: h, rank: rank, size: size, dev: dev, ctx: ctx, key: key, timeout: timeout, order: commOrder.Add(1), blocking: blocking}
}

// busyCall is a blocking call in NCCL: hp holds the handle it uses (for
// initialization, where NCCL writes it before it waits for the peers).
type busyCall struct {
	op       string
	seq      uint64
	start    time.Time
	deadline time.Time
	hp       *uintptr
}

// enter registers a call into NCCL of a blocking communicator with the
// watchdog, which is started if it is not running; the returned func
// ends it. A nonblocking communicator's calls return at once: nothing to
// do.
func (c *Comm) enter(op string, seq uint64, hp *uintptr) func() {
	if !c.blocking {
		return func() {}
	}
	c.wmu.Lock()
	now := time.Now()
	c.inCall.Store(&busyCall{op: op, seq: seq, start: now, deadline: now.Add(c.timeout), hp: hp})
	start := !c.watching
	c.watching = true
	c.wmu.Unlock()
	if start {
		go c.watchdog()
	}
	return func() { c.inCall.Store(nil) }
}

// kickAfter is how long a call must have been in progress before kick
// aborts the communicator under it. A call is registered (enter) a little
// before it reaches NCCL: an abort in that moment would free the
// communicator under a call that has yet to start, which then uses it
// (the fake NCCL crashed so under qemu, in TestKilledRank). So kick
// waits while the call is younger: one that returns meanwhile needs no
// kick (abort then takes mu), one still in NCCL after kickAfter is
// waiting there.
const kickAfter = 200 * time.Millisecond

// kick aborts the communicator under the blocking call in progress, if
// any, without mu (which that call holds): NCCL lets another thread abort
// a communicator to end a call waiting for a peer.
func (c *Comm) kick() {
	b := c.inCall.Load()
	for b != nil && time.Since(b.start) < kickAfter {
		time.Sleep(time.Millisecond)
		b = c.inCall.Load()
	}
	if b == nil {
		return
	}
	h := atomic.LoadUintptr(b.hp)
	if h != 0 && c.aborted.CompareAndSwap(false, true) {
		_ = onDevice(c.ctx, func() { call(sym_ncclCommAbort, h) })
	}
}

// flight is an operation queued on a stream and not yet seen complete.
type flight struct {
	ev       *cuda.Event
	op       string
	seq      uint64
	deadline time.Time
}

func (c *Comm) String() string {
	return fmt.Sprintf("nccl.Comm(rank %d of %d, cuda:%d, %s)", c.rank, c.size, c.dev, c.key)
}

// Rank is this rank's number in the communicator.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Device is the CUDA device ordinal of this rank.
func (c *Comm) Device() int { return c.dev }

// Key names the communicator in errors and logs (a digest of its id).
func (c *Comm) Key() string { return c.key }

// Timeout is the deadline of every wait of the communicator.
func (c *Comm) Timeout() time.Duration { return c.timeout }

// Issued is the number of operations queued so far.
func (c *Comm) Issued() uint64 { return c.seq.Load() }

// SetMissing installs what names the ranks that did not come when an
// operation fails (a World does this for the communicators it builds).
func (c *Comm) SetMissing(m Missing) { c.missing = m }

// onDevice runs fn on a locked OS thread with the communicator's device
// current: NCCL takes the device of a new communicator, and launches,
// from the CUDA runtime's current device, which follows the driver's
// current (primary) context.
func onDevice(ctx *cuda.Context, fn func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore, err := ctx.SetCurrent()
	if err != nil {
		return err
	}
	defer restore()
	fn()
	return nil
}

// InitRank joins communicator id as rank of nranks on CUDA device dev
// (ncclCommInitRankScalable with one id), waiting at most cfg's timeout
// for the other ranks.
func InitRank(id UniqueID, nranks, rank, dev int, cfg *Config) (*Comm, error) {
	if nranks < 1 {
		return nil, fmt.Errorf("nccl: InitRank: nranks %d: must be at least 1", nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("nccl: InitRank: rank %d outside [0, %d)", rank, nranks)
	}
	if err := load(); err != nil {
		return nil, err
	}
	ctx, err := zerocopy.DeviceContext(dev)
	if err != nil {
		return nil, fmt.Errorf("nccl: InitRank: %w", err)
	}
	c := newComm(0, rank, nranks, dev, ctx, id.key(), cfg.timeout(), cfg == nil || !cfg.Nonblocking)
	ncfg, name := newConfig(cfg)
	var r Result
	// A blocking initialization waits in NCCL for the other ranks: the
	// watchdog aborts the communicator at the deadline, which ends the
	// wait. NCCL writes the handle into hs[0] before it waits; only the
	// watchdog reads it meanwhile.
	hs := make([]uintptr, 1)
	done := c.enter("init", 0, &hs[0])
	err = onDevice(ctx, func() {
		r = call(sym_ncclCommInitRankScalable, uintptr(unsafe.Pointer(&hs[0])), uintptr(nranks), uintptr(rank), 1, uintptr(unsafe.Pointer(&id)), uintptr(unsafe.Pointer(ncfg)))
	})
	done()
	c.mu.Lock()
	c.h = atomic.LoadUintptr(&hs[0])
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("nccl: InitRank: %w", err)
	}
	runtime.KeepAlive(name)
	if err := c.settle("init", r, "ncclCommInitRankScalable", 0); err != nil {
		return nil, err
	}
	return c, nil
}

// InitDevices makes one communicator per device of devs, all driven by
// this process (as ncclCommInitAll does, but with the
// deadline of cfg): rank i runs on devs[i].
func InitDevices(devs []int, cfg *Config) ([]*Comm, error) {
	if len(devs) == 0 {
		return nil, errors.New("nccl: InitDevices: no devices")
	}
	seen := map[int]bool{}
	for _, d := range devs {
		if seen[d] {
			return nil, fmt.Errorf("nccl: InitDevices: device %d listed twice", d)
		}
		seen[d] = true
	}
	id, err := NewUniqueID()
	if err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(devs))
	ctxs := make([]*cuda.Context, len(devs))
	for i, d := range devs {
		if ctxs[i], err = zerocopy.DeviceContext(d); err != nil {
			return nil, fmt.Errorf("nccl: InitDevices: %w", err)
		}
		comms[i] = newComm(0, i, len(devs), d, ctxs[i], id.key(), cfg.timeout(), cfg == nil || !cfg.Nonblocking)
	}
	ncfg, name := newConfig(cfg)
	var first error
	// Blocking: ncclGroupEnd initializes them all, this process being
	// every rank; the watchdogs still bound it.
	dones := make([]func(), len(comms))
	hs := make([]uintptr, len(comms)) // as InitRank's
	for i, c := range comms {
		dones[i] = c.enter("init", 0, &hs[i])
	}
	runtime.LockOSThread()
	if r := call(sym_ncclGroupStart); r != success {
		runtime.UnlockOSThread()
		return nil, newError("ncclGroupStart", r, 0)
	}
	for i := range devs {
		restore, err := ctxs[i].SetCurrent()
		if err != nil {
			first = err
			break
		}
		r := call(sym_ncclCommInitRankScalable, uintptr(unsafe.Pointer(&hs[i])), uintptr(len(devs)), uintptr(i), 1, uintptr(unsafe.Pointer(&id)), uintptr(unsafe.Pointer(ncfg)))
		restore()
		if r != success && r != inProgress {
			first = newError("ncclCommInitRankScalable", r, 0)
			break
		}
	}
	r := call(sym_ncclGroupEnd)
	runtime.UnlockOSThread()
	runtime.KeepAlive(name)
	for i, done := range dones {
		done()
		comms[i].mu.Lock()
		comms[i].h = atomic.LoadUintptr(&hs[i])
		comms[i].mu.Unlock()
	}
	if first == nil && r != success && r != inProgress {
		first = newError("ncclGroupEnd", r, 0)
	}
	for _, c := range comms {
		if c.h == 0 {
			continue
		}
		if first != nil {
			c.abort()
			continue
		}
		if err := c.settle("init", inProgress, "ncclGroupEnd", 0); err != nil {
			first = err
		}
	}
	if first != nil {
		for _, c := range comms {
			c.abort()
		}
		return nil, first
	}
	return comms, nil
}

// NoColor as Split's color: this rank joins no new communicator.
const NoColor = -1

// Split makes new communicators of the ranks of c (ncclCommSplit): ranks
// that pass the same color form one, numbered by key (then by their rank
// in c). Every rank of c must call it. color NoColor gives nil, nil.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if color < NoColor {
		return nil, fmt.Errorf("nccl: Split: color %d: must be >= 0, or NoColor", color)
	}
	if err := c.usable("split"); err != nil {
		return nil, err
	}
	c.calls.Lock()
	defer c.calls.Unlock()
	if err := c.lost("split"); err != nil {
		return nil, err
	}
	seq := c.seq.Add(1)
	ncfg, name := newConfig(&Config{Timeout: c.timeout, Nonblocking: !c.blocking})
	var nh uintptr
	var r Result
	c.mu.RLock()
	h := c.h
	if h == 0 {
		c.mu.RUnlock()
		return nil, c.err("split")
	}
	done := c.enter("split", seq, &h)
	err := onDevice(c.ctx, func() {
		r = call(sym_ncclCommSplit, h, uintptr(int64(color)), uintptr(int64(key)), uintptr(unsafe.Pointer(&nh)), uintptr(unsafe.Pointer(ncfg)))
	})
	done()
	c.mu.RUnlock()
	runtime.KeepAlive(name)
	if err != nil {
		return nil, fmt.Errorf("nccl: Split: %w", err)
	}
	if err := c.settle("split", r, "ncclCommSplit", seq); err != nil {
		return nil, err
	}
	if nh == 0 {
		return nil, nil
	}
	nc := newComm(nh, 0, 0, c.dev, c.ctx, fmt.Sprintf("%s.%d.%d", c.key, seq, color), c.timeout, c.blocking)
	if err := nc.settle("split", inProgress, "ncclCommSplit", 0); err != nil {
		return nil, err
	}
	var n, rk int32
	if r := call(sym_ncclCommCount, nh, uintptr(unsafe.Pointer(&n))); r != success {
		nc.abort()
		return nil, newError("ncclCommCount", r, nh)
	}
	if r := call(sym_ncclCommUserRank, nh, uintptr(unsafe.Pointer(&rk))); r != success {
		nc.abort()
		return nil, newError("ncclCommUserRank", r, nh)
	}
	nc.size, nc.rank = int(n), int(rk)
	if a, ok := c.missing.(splitAdopter); ok {
		if err := a.adoptSplit(c, nc); err != nil {
			nc.abort()
			return nil, fmt.Errorf("nccl: Split: %w", err)
		}
	}
	return nc, nil
}

// settle turns the result r of call fn into an error, waiting (with the
// deadline) while the nonblocking communicator reports ncclInProgress. A
// failure aborts the communicator; a call the watchdog ended fails with
// what the watchdog saw (the deadline, a rank gone). The caller holds
// c.calls (or is the only user of c): NCCL takes no other call of c until
// this one settled.
func (c *Comm) settle(op string, r Result, fn string, seq uint64) error {
	if r != success && r != inProgress {
		if c.failed.Load() != nil {
			return c.err(op)
		}
		err := newError(fn, r, 0)
		c.fail(&OpError{Op: op, Seq: seq, Rank: c.rank, Size: c.size, Err: err})
		return c.err(op)
	}
	if r == success && c.blocking {
		// The call returned: NCCL queued the work (or, for
		// initialization and finalization, did it). The watchdog
		// follows what is queued.
		if c.failed.Load() != nil {
			return c.err(op)
		}
		return nil
	}
	start := time.Now()
	deadline := start.Add(c.timeout)
	for pause := time.Duration(0); ; {
		a, err := c.asyncError()
		if err != nil {
			return err
		}
		if a == success {
			return nil
		}
		if a != inProgress {
			c.fail(c.opError(op, seq, 0, newError(fn, a, c.h)))
			return c.err(op)
		}
		// Finalize waits for this rank's own operations only: those the
		// lost rank had come to may complete (the watchdog fails the
		// others, which aborts the communicator and ends this wait).
		if p := c.gone.Load(); p != nil && op != "finalize" {
			c.fail(c.opError(op, seq, 0, p.err))
			return c.err(op)
		}
		now := time.Now()
		if now.After(deadline) {
			c.fail(c.opError(op, seq, c.timeout, ErrTimeout))
			return c.err(op)
		}
		// A nonblocking launch takes tens of microseconds (NCCL's own
		// thread); a timer sleeps no shorter than about a millisecond on
		// Linux, which per operation would be most of a small
		// collective's cost. So: yield and poll again for a while, and
		// only then sleep, longer and longer (initialization, a slow peer).
		if now.Sub(start) < spinFor {
			runtime.Gosched()
			continue
		}
		pause = backoff(pause)
		time.Sleep(pause)
	}
}

// spinFor: how long settle polls without sleeping.
const spinFor = 500 * time.Microsecond

// backoff: the next pause of a polling loop, from 20 us to 5 ms.
func backoff(p time.Duration) time.Duration {
	switch {
	case p < 20*time.Microsecond:
		return 20 * time.Microsecond
	case p >= 5*time.Millisecond:
		return 5 * time.Millisecond
	}
	return p * 2
}

// asyncError asks NCCL for the communicator's state (ncclCommGetAsyncError).
func (c *Comm) asyncError() (Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return 0, c.err("")
	}
	var a int32
	if r := call(sym_ncclCommGetAsyncError, c.h, uintptr(unsafe.Pointer(&a))); r != success {
		return 0, newError("ncclCommGetAsyncError", r, c.h)
	}
	return Result(a), nil
}

// AsyncError returns NCCL's asynchronous error of the communicator (nil
// while it is healthy), or the failure that aborted it.
func (c *Comm) AsyncError() error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	var a Result
	var err error
	if c.blocking {
		a, err = c.asyncError()
	} else {
		c.calls.Lock()
		a, err = c.asyncError()
		c.calls.Unlock()
	}
	if err != nil {
		return err
	}
	if a == success || a == inProgress {
		return nil
	}
	return newError("ncclCommGetAsyncError", a, c.h)
}

func (c *Comm) opError(op string, seq uint64, timeout time.Duration, cause error) *OpError {
	e := &OpError{Op: op, Seq: seq, Rank: c.rank, Size: c.size, Timeout: timeout, Err: cause}
	if g := c.gone.Load(); g != nil && cause == g.err {
		// Known: asking the others now would find the survivors
		// already failing the same way, or gone on without this one.
		e.Missing = g.ranks
		return e
	}
	if c.missing != nil {
		e.Missing, e.Detail = c.missing.Missing(c.key, seq)
	}
	return e
}

// fail records the communicator's first failure and aborts it.
func (c *Comm) fail(err error) {
	c.failed.CompareAndSwap(nil, &err)
	c.abort()
}

// err is the failure recorded, or ErrAborted.
func (c *Comm) err(op string) error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	if op == "" {
		return ErrAborted
	}
	return fmt.Errorf("nccl: %s: %w", op, ErrAborted)
}

// usable refuses operations on a failed or closed communicator.
func (c *Comm) usable(op string) error {
	if c == nil {
		return fmt.Errorf("nccl: %s: nil communicator", op)
	}
	if c.failed.Load() != nil {
		return c.err(op)
	}
	return nil
}

// ErrPeerGone matches (errors.Is) an OpError whose cause is a rank of the
// communicator that exited: the control plane of a World saw its
// connection close.
var ErrPeerGone = errors.New("nccl: a rank of the communicator exited")

// goneRanks is what PeerGone was told.
type goneRanks struct {
	ranks []int
	err   error
}

// PeerGone tells the communicator that ranks of it are gone (as its
// Missing numbers them: a World's job ranks; why says how that is known).
// NCCL may never notice (over NVLink and shared memory its kernels wait
// for the peer for ever): the operation in flight fails now, or the next
// one issued, and the communicator is aborted, instead of at the
// deadline; the failure names those ranks. A World calls it for the
// communicator it built when the rendezvous connection of one of its
// ranks closes.
func (c *Comm) PeerGone(ranks []int, why string) {
	g := &goneRanks{ranks: slices.Clone(ranks), err: fmt.Errorf("%w: %s", ErrPeerGone, why)}
	c.gone.CompareAndSwap(nil, g)
	// The watchdog fails the first operation in flight whose stream has
	// not run it (one that completed before the rank exited is no
	// failure: the rank may have finished and left); settle fails the
	// call being made, lost the next one.
}

// lost fails operation op, about to be issued, when a rank is known gone.
func (c *Comm) lost(op string) error {
	p := c.gone.Load()
	if p == nil {
		return nil
	}
	c.fail(c.opError(op, c.seq.Add(1), 0, p.err))
	return c.err(op)
}

// abort calls ncclCommAbort once: kernels of the communicator exit and its
// resources go; the streams its operations were on run on.
func (c *Comm) abort() {
	// A blocking call in NCCL holds mu until it returns: end it first.
	c.kick()
	c.mu.Lock()
	h := c.h
	c.h = 0
	c.mu.Unlock()
	if h != 0 {
		if c.aborted.CompareAndSwap(false, true) {
			_ = onDevice(c.ctx, func() { call(sym_ncclCommAbort, h) })
		}
		c.dropEvents()
	}
}

// dropEvents destroys the watchdog's spare events (the communicator is
// done; events of flights still followed go when the watchdog ends).
func (c *Comm) dropEvents() {
	c.wmu.Lock()
	evs := c.events
	c.events = nil
	c.wmu.Unlock()
	for _, e := range evs {
		_ = e.Destroy()
	}
}

// Abort aborts the communicator (ncclCommAbort): operations in flight end
// without their results, later ones are refused with ErrAborted. Other
// ranks see their operations fail (by their deadline at the latest).
func (c *Comm) Abort() error {
	c.fail(fmt.Errorf("nccl: rank %d of communicator %s: %w by Abort", c.rank, c.key, ErrAborted))
	return nil
}

// Finalize flushes the operations queued (ncclCommFinalize), waits with
// the deadline until the communicator is quiet, and frees it
// (ncclCommDestroy). Every rank calls it; a rank that does not come makes
// the others' Finalize abort at the deadline.
func (c *Comm) Finalize() error {
	if err := c.usable("finalize"); err != nil {
		return err
	}
	c.calls.Lock()
	defer c.calls.Unlock()
	c.mu.RLock()
	h := c.h
	var r Result
	if h != 0 {
		done := c.enter("finalize", c.seq.Load(), &h)
		_ = onDevice(c.ctx, func() { r = call(sym_ncclCommFinalize, h) })
		done()
	}
	c.mu.RUnlock()
	if h == 0 {
		return c.err("finalize")
	}
	if err := c.settle("finalize", r, "ncclCommFinalize", c.seq.Load()); err != nil {
		return err
	}
	c.mu.Lock()
	h, c.h = c.h, 0
	c.mu.Unlock()
	if h == 0 || c.aborted.Load() {
		return c.err("finalize")
	}
	c.failed.CompareAndSwap(nil, ptrErr(fmt.Errorf("nccl: communicator %s: %w (finalized)", c.key, ErrAborted)))
	if err := onDevice(c.ctx, func() { r = call(sym_ncclCommDestroy, h) }); err != nil {
		return err
	}
	c.dropEvents()
	if r != success {
		return newError("ncclCommDestroy", r, 0)
	}
	return nil
}

func ptrErr(err error) *error { return &err }
