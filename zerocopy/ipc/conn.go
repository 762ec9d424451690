package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The wire: a SOCK_SEQPACKET Unix socket (message boundaries kept), one
// message per packet, its first byte the kind.
//
//	msgPool    pool id (16), device UUID (16); the pool's file descriptor
//	           rides along (SCM_RIGHTS). Sent once per pool and peer,
//	           before the first tensor of that pool.
//	msgTensor  a Descriptor (MarshalBinary).
//	msgRelease lease (8), has-event (1), the "done" event's handle (64):
//	           the importer is done with the lease once that event's record
//	           completes on its device.
//	msgClaim   token (8): asks a Server for the tensor it offered under
//	           token; answered by a msgTensor with Tag = token, or
//	msgRefuse  token (8), a message.
//	msgRetire  pool id (16), export data (64): the sender is about to free
//	           an allocation it sent before and that the importer holds no
//	           lease on; the importer unmaps it (it keeps allocations
//	           mapped after their last lease, for the next tensor of the
//	           same allocation) and answers
//	msgRetired pool id (16), export data (64), has-event (1), the "done"
//	           event's handle (64): the importer's unmap is queued before
//	           that event's record (has-event 0: nothing to wait for, as
//	           for an allocation it did not map).
//	msgBye     nothing: the sender sends no more tensors (it called Close).
//	           The connection stays open for what is still to come back:
//	           the receiver's releases (with their done events) and
//	           answers to retires. The receiver's Recv returns io.EOF once
//	           its queue is empty; it closes its end once the last view
//	           received over the connection is closed and it has nothing
//	           leased out to the sender, the sender closes its end once
//	           the receiver gave every lease back (or when the receiver's
//	           end arrives).
const (
	msgPool    = 1
	msgTensor  = 2
	msgRelease = 3
	msgClaim   = 4
	msgRefuse  = 5
	msgRetire  = 6
	msgRetired = 7
	msgBye     = 8
)

// unmapKey names an allocation on the wire: its pool and export data.
type unmapKey struct {
	pool [16]byte
	data cuda.PoolExportData
}

// The wire forms shared by several messages: an allocation (pool id and
// export data, 80 bytes) and an optional "done" event (a flag byte and the
// handle, 65 bytes).

func (k *unmapKey) put(b []byte) {
	copy(b[:16], k.pool[:])
	copy(b[16:80], k.data[:])
}

func unmapKeyFrom(b []byte) (k unmapKey) {
	copy(k.pool[:], b[:16])
	copy(k.data[:], b[16:80])
	return k
}

func putDone(b []byte, done *cuda.IPCEventHandle) {
	if done != nil {
		b[0] = 1
		copy(b[1:65], done[:])
	}
}

func doneFrom(b []byte) *cuda.IPCEventHandle {
	if b[0] != 1 {
		return nil
	}
	h := new(cuda.IPCEventHandle)
	copy(h[:], b[1:65])
	return h
}

const maxPacket = 1 << 16

// Conn is one end of a connection between two processes, either of which
// may send tensors (Send) and receive them (Recv). A Conn's sends and
// receives may be called from several goroutines.
type Conn struct {
	uc   *net.UnixConn
	dev  int    // the device imports are made on (the one of the peer's pool)
	peer string // who the peer is, for errors: its process id and the socket path

	timeout     atomic.Int64 // nanoseconds: deadline of each write and each wait for an answer
	recvTimeout atomic.Int64 // nanoseconds: how long Recv waits (0: for ever)

	wmu sync.Mutex // one packet at a time

	mu        sync.Mutex
	sentPools map[[16]byte]bool
	mapPools  map[*Pool]struct{}  // pools of which the peer was sent tensors
	leases    map[uint64]*lease   // exported to the peer, not yet given back
	unmaps    map[unmapKey]*block // retires sent to the peer, not yet answered
	settling  map[unmapKey]bool   // retires answered whose block waits for the answer's done event
	nextLease uint64
	doneOpen  map[cuda.IPCEventHandle]*cuda.Event // the peer's done events, opened here
	err       error                               // why the connection ended
	imp       *importer
	closing   bool // Close was called: close the socket when nothing is left to come back
	bye       bool // the peer sent msgBye: no more tensors from it
	shutting  bool // the socket's close has begun (retires for the peer first)
	halfShut  bool // our writing side is shut: the peer's end is awaited
	retiring  int  // retireCached calls under way: the socket waits for them
	closed    bool

	claims  map[uint64]chan claimResult // Claim calls waiting for their answer
	onClaim func(c *Conn, token uint64) // a Server's: answers msgClaim

	lastImport atomic.Int64 // nanoseconds the last tensor message took to become a view

	queue  []claimResult // received, not yet taken by Recv
	ended  bool          // the reader stopped
	qcond  *sync.Cond    // on mu: queue or ended changed
	exited chan struct{} // closed when the reader stops

	peerEnded chan struct{}  // closed when end begins: done events need no wait
	polls     sync.WaitGroup // afterDone's pollers of done events
}

// Listener accepts connections on a Unix socket path.
type Listener struct {
	ul   *net.UnixListener
	path string
	file os.FileInfo // the socket file made at path

	mu     sync.Mutex
	closed bool
}

// Listen listens on the Unix socket path. The socket is made 0600 (only
// this user may connect) whatever the umask: it is bound in a private 0700
// folder beside path, its mode set, and only then linked at path, which
// fails if anything appeared there meanwhile. A stale socket left at path
// (nothing bound to it any more) is removed first; a live one, of any
// socket type (stream, datagram, seqpacket), or anything that is not a
// socket, is refused (syscall.EADDRINUSE), rather than taken from whoever
// uses it.
func Listen(path string) (*Listener, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("ipc: Listen: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("ipc: Listen: %s: %w (a %v that is not a socket is there)", path, syscall.EADDRINUSE, fi.Mode().Type())
		}
		if live(path) {
			return nil, fmt.Errorf("ipc: Listen: %s: %w (a live socket is there)", path, syscall.EADDRINUSE)
		}
		os.Remove(path)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".dlbridge-sock-")
	if err != nil {
		return nil, fmt.Errorf("ipc: Listen: a private folder beside %s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	if len(tmp) > maxPath {
		// The private folder's name makes the path too long: bind at path
		// itself and set the mode before anyone can know the socket is
		// there (its folder is the caller's).
		tmp = path
	}
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("ipc: Listen: %w", err)
	}
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ul.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("ipc: Listen: %w", err)
	}
	if tmp != path {
		if err := os.Link(tmp, path); err != nil {
			ul.Close()
			return nil, fmt.Errorf("ipc: Listen: %w", err)
		}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ul.Close()
		return nil, fmt.Errorf("ipc: Listen: %w", err)
	}
	return &Listener{ul: ul, path: path, file: fi}, nil
}

// live reports whether a socket is bound at path, whatever its type: a
// datagram socket connected to answers at once (no peer is made), a socket
// of another type answers EPROTOTYPE, and a stale one ECONNREFUSED.
func live(path string) bool {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return true // cannot tell: refuse rather than unlink
	}
	defer syscall.Close(fd)
	err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
	return err == nil || errors.Is(err, syscall.EPROTOTYPE) || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT))
}

// maxPath is the longest path a Unix socket address holds (sun_path less
// its terminating NUL, on Linux).
const maxPath = 107

func checkPath(path string) error {
	if path == "" {
		return fmt.Errorf("empty socket path")
	}
	if len(path) > maxPath {
		return fmt.Errorf("socket path %.40q... is %d bytes, longer than the %d a Unix socket address holds", path, len(path), maxPath)
	}
	return nil
}

// Addr is the socket path.
func (l *Listener) Addr() string { return l.path }

// Accept waits for the next peer. Errors that a later accept may not have
// (too many open files: EMFILE, ENFILE; a peer gone before it was
// accepted; no buffer memory) are waited out with a growing pause (5 ms to
// 1 s), as Go's net/http server does, rather than ending the accepting.
func (l *Listener) Accept() (*Conn, error) {
	var pause time.Duration
	for {
		uc, err := l.ul.AcceptUnix()
		if err == nil {
			return newConnWith(uc, nil, l.path), nil
		}
		if !temporary(err) {
			return nil, fmt.Errorf("ipc: Accept: %w", err)
		}
		reportError(fmt.Errorf("ipc: Accept on %s: %w; retrying in %v", l.path, err, pause))
		if pause == 0 {
			pause = 5 * time.Millisecond
		} else if pause *= 2; pause > time.Second {
			pause = time.Second
		}
		time.Sleep(pause)
		l.mu.Lock()
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("ipc: Accept: %w", net.ErrClosed)
		}
	}
}

// temporary reports whether an accept error may go away by itself.
func temporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS, syscall.ENOMEM, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Close stops listening and removes the socket (if the file at the path
// is still the one this listener made).
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) {
		os.Remove(l.path)
	}
	return l.ul.Close()
}

// Dial connects to a Listener's socket path.
func Dial(path string) (*Conn, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("ipc: Dial: %w", err)
	}
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("ipc: Dial: %w", err)
	}
	return newConnWith(uc, nil, path), nil
}

// NewConn wraps a connected SOCK_SEQPACKET Unix socket (for example one end
// of a socketpair handed to a child process).
func NewConn(uc *net.UnixConn) *Conn { return newConn(uc) }

func newConn(uc *net.UnixConn) *Conn { return newConnWith(uc, nil, "") }

// newConnWith makes a Conn of uc whose claims go to onClaim (a Server's),
// naming the socket path in errors (empty: the socket's own address).
func newConnWith(uc *net.UnixConn, onClaim func(*Conn, uint64), path string) *Conn {
	c := &Conn{
		onClaim:   onClaim,
		uc:        uc,
		dev:       -1,
		peer:      peerName(uc, path),
		sentPools: map[[16]byte]bool{},
		mapPools:  map[*Pool]struct{}{},
		leases:    map[uint64]*lease{},
		unmaps:    map[unmapKey]*block{},
		settling:  map[unmapKey]bool{},
		doneOpen:  map[cuda.IPCEventHandle]*cuda.Event{},
		claims:    map[uint64]chan claimResult{},
		exited:    make(chan struct{}),
		peerEnded: make(chan struct{}),
	}
	c.qcond = sync.NewCond(&c.mu)
	c.timeout.Store(int64(DefaultTimeout))
	c.imp = newImporter(c)
	go c.read()
	return c
}

// DefaultTimeout is how long a Conn waits, unless told otherwise
// (SetTimeout), for a write to the peer's socket to go through and for the
// peer to answer a claim or a retire: a peer that is stopped, stuck or
// hostile must not hang this process.
const DefaultTimeout = 60 * time.Second

// ErrTimeout is matched (errors.Is) by the errors of a wait on the peer
// that passed its deadline; they match os.ErrDeadlineExceeded too.
var ErrTimeout = fmt.Errorf("ipc: the peer did not answer in time: %w", os.ErrDeadlineExceeded)

// SetTimeout sets how long each write to the peer and each wait for its
// answer (Claim, Close's and Trim's retires) may take; 0 or less: no
// deadline. Past it the call fails with an error matching ErrTimeout that
// names the peer and the operation.
func (c *Conn) SetTimeout(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.timeout.Store(int64(d))
}

// Timeout is what SetTimeout set (DefaultTimeout unless changed).
func (c *Conn) Timeout() time.Duration { return time.Duration(c.timeout.Load()) }

// SetRecvTimeout sets how long Recv waits for a tensor (0 or less: for
// ever, the default: a producer may take its time).
func (c *Conn) SetRecvTimeout(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.recvTimeout.Store(int64(d))
}

// Peer names the peer for messages: its process id (SO_PEERCRED) and the
// socket path.
func (c *Conn) Peer() string { return c.peer }

func (c *Conn) timeoutErr(op string, d time.Duration) error {
	return fmt.Errorf("ipc: %s with %s: no progress within %v: %w", op, c.peer, d, ErrTimeout)
}

// peerName finds the peer's process id (SO_PEERCRED) and names it with
// the socket path (where empty, the socket's own address: a Listener binds
// in a private folder and links the socket at its path).
func peerName(uc *net.UnixConn, path string) string {
	pid := -1
	if rc, err := uc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if cr, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
				pid = int(cr.Pid)
			}
		})
	}
	if path == "" {
		if a, ok := uc.LocalAddr().(*net.UnixAddr); ok && a.Name != "" {
			path = a.Name
		} else if a, ok := uc.RemoteAddr().(*net.UnixAddr); ok && a != nil {
			path = a.Name
		}
	}
	name := "peer"
	if pid > 0 {
		name = fmt.Sprintf("peer process %d", pid)
	}
	if path != "" {
		name += " on " + path
	}
	return name
}

// write sends one packet (and fd, if >= 0) within the connection's
// timeout: a peer that stopped reading fills the socket's buffer, and a
// write must not wait for it for ever.
func (c *Conn) write(op string, b []byte, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	d := c.Timeout()
	var dl time.Time
	if d > 0 {
		dl = time.Now().Add(d)
	}
	c.uc.SetWriteDeadline(dl)
	n, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return c.timeoutErr(op, d)
	}
	return err
}

// Send shares v, a view of p's memory, with the peer: the pool's
// descriptor first if this peer has not had it, then the tensor's
// descriptor. The peer may use the memory after the work queued on s (nil:
// the view's pending stream) is done: it waits for that on its device,
// never on the host. The memory stays allocated until the peer released
// the tensor (or went away), whatever the producer does with v.
func (c *Conn) Send(p *Pool, v *zerocopy.View, s *cuda.Stream) error {
	return c.send(p, v, s, 0)
}

func (c *Conn) send(p *Pool, v *zerocopy.View, s *cuda.Stream, tag uint64) error {
	d, l, err := p.export(v, s)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed || c.closing || c.shutting || c.err != nil {
		err := c.err
		c.mu.Unlock()
		l.end()
		if err == nil {
			err = ErrClosed
		}
		return fmt.Errorf("ipc: Send: %w", err)
	}
	c.nextLease++
	d.Lease, d.Tag = c.nextLease, tag
	c.leases[d.Lease] = l
	needPool := !c.sentPools[p.id]
	c.sentPools[p.id] = true
	c.mapPools[p] = struct{}{}
	// The peer keeps the allocation mapped from now on (until a retire,
	// or the connection's end, which drops it from every block of p).
	p.addMapper(l.u.b, c)
	c.mu.Unlock()
	fail := func(err error) error {
		c.mu.Lock()
		if c.leases[d.Lease] == l {
			delete(c.leases, d.Lease)
			l.end()
		}
		c.mu.Unlock()
		return fmt.Errorf("ipc: Send: %w", err)
	}
	if needPool {
		fd, err := p.exportFD()
		if err != nil {
			return fail(err)
		}
		msg := make([]byte, 33)
		msg[0] = msgPool
		copy(msg[1:], p.id[:])
		copy(msg[17:], p.uuid[:])
		if err := c.write("sending a pool", msg, fd); err != nil {
			c.mu.Lock()
			delete(c.sentPools, p.id)
			c.mu.Unlock()
			return fail(err)
		}
	}
	body, err := d.MarshalBinary()
	if err != nil {
		return fail(err)
	}
	if err := c.write("sending a tensor", append([]byte{msgTensor}, body...), -1); err != nil {
		return fail(err)
	}
	return nil
}

// Leases is the number of tensors sent over c that the peer has not
// given back yet.
func (c *Conn) Leases() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.leases)
}

// Recv returns the next tensor the peer sent (or the error that kept it
// from becoming one: the peer's lease was given back), as a view of the peer's
// memory on this process's device (no copy): its pending stream waits
// for the peer's "ready" event, so work ordered after the view (CopyCUDA,
// OrderBefore, DLPack consumers) never reads early. Close it when done:
// that gives the lease back, ordered after the work queued on the view's
// stream. Recv fails with io.EOF once the peer closed the connection,
// died, or said it sends no more (its Close: the views received stay
// valid and their releases still reach it), and with ErrClosed after
// Close.
func (c *Conn) Recv() (*zerocopy.View, error) {
	d := time.Duration(c.recvTimeout.Load())
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
		t := time.AfterFunc(d, func() {
			c.mu.Lock()
			c.qcond.Broadcast()
			c.mu.Unlock()
		})
		defer t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) == 0 && !c.ended && !c.closing && !c.bye {
		if d > 0 && !time.Now().Before(deadline) {
			return nil, c.timeoutErr("Recv", d)
		}
		c.qcond.Wait()
	}
	if len(c.queue) == 0 {
		if c.err != nil {
			return nil, c.err
		}
		if c.bye && !c.closing {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("ipc: Recv: %w", ErrClosed)
	}
	r := c.queue[0]
	c.queue[0] = claimResult{}
	c.queue = c.queue[1:]
	if r.err != nil {
		return nil, fmt.Errorf("ipc: Recv: %w", r.err)
	}
	return r.v, nil
}

// read is the connection's reader: pools and tensors from the peer, the
// peer's releases of what we sent.
func (c *Conn) read() {
	defer close(c.exited)
	buf := make([]byte, maxPacket)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	var err error
	for {
		var n, oobn int
		n, oobn, _, _, err = c.uc.ReadMsgUnix(buf, oob)
		if err == nil && n == 0 {
			err = io.EOF
		}
		if err != nil {
			break
		}
		fds := parseFDs(oob[:oobn])
		if err = c.handle(buf[:n], fds); err != nil {
			for _, fd := range fds {
				closeFD(fd)
			}
			// %v, not %w: what was wrong with the message is told, but
			// the error matches ErrProtocol only (not ErrBadDescriptor).
			err = fmt.Errorf("%w (%s): %v", ErrProtocol, c.peer, err)
			reportError(err)
			break
		}
	}
	c.end(err)
	// A closing side whose peer's end came before its leases: the socket
	// closes now.
	c.mu.Lock()
	c.closeLaterLocked()
	c.mu.Unlock()
}

func parseFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// handle processes one packet. An error ends the connection: a peer that
// sends garbage is not trusted further.
func (c *Conn) handle(m []byte, fds []int) error {
	if c.onClaim != nil && (m[0] == msgPool || m[0] == msgTensor) {
		// A Server's peers claim; nobody receives what they would send.
		return fmt.Errorf("ipc: %s sent a Server a pool or tensor (kind %d): a Server's peers only claim", c.peer, m[0])
	}
	switch m[0] {
	case msgPool:
		if len(m) != 33 || len(fds) != 1 {
			return fmt.Errorf("ipc: malformed pool message (%d bytes, %d descriptors)", len(m), len(fds))
		}
		var id [16]byte
		var uuid cuda.UUID
		copy(id[:], m[1:17])
		copy(uuid[:], m[17:33])
		return c.imp.addPool(id, uuid, fds[0])
	case msgTensor:
		t0 := time.Now()
		if len(fds) != 0 {
			return fmt.Errorf("ipc: tensor message with file descriptors")
		}
		var d Descriptor
		if err := d.UnmarshalBinary(m[1:]); err != nil {
			return err
		}
		c.mu.Lock()
		halfShut := c.halfShut
		c.mu.Unlock()
		if halfShut {
			// Our mappings are gone and the peer was told: a tensor sent
			// meanwhile is not mapped (its lease ends with the connection).
			return nil
		}
		v, err := c.imp.open(&d)
		c.lastImport.Store(int64(time.Since(t0)))
		if err != nil {
			// The peer holds a lease we will not use: give it back, and
			// tell whoever waits for this tensor why it does not come.
			c.sendRelease(d.Lease, nil)
		}
		c.mu.Lock()
		if w := c.claims[d.Tag]; d.Tag != 0 && w != nil {
			delete(c.claims, d.Tag)
			c.mu.Unlock()
			w <- claimResult{v: v, err: err}
			return nil
		}
		// A closing side takes no tensor; nor does anyone want the answer
		// to a claim that timed out.
		if c.closing || d.Tag != 0 {
			c.mu.Unlock()
			if v != nil {
				// Not on the reader: its release may close the socket,
				// which waits for the reader.
				go v.Close()
			}
			return nil
		}
		c.queue = append(c.queue, claimResult{v: v, err: err})
		c.qcond.Broadcast()
		c.mu.Unlock()
		return nil
	case msgClaim:
		if len(m) != 9 || len(fds) != 0 || c.onClaim == nil {
			return fmt.Errorf("ipc: unexpected claim message (%d bytes)", len(m))
		}
		c.onClaim(c, binary.LittleEndian.Uint64(m[1:]))
		return nil
	case msgRefuse:
		if len(m) < 9 || len(fds) != 0 {
			return fmt.Errorf("ipc: malformed refusal (%d bytes)", len(m))
		}
		token := binary.LittleEndian.Uint64(m[1:])
		c.mu.Lock()
		w := c.claims[token]
		delete(c.claims, token)
		c.mu.Unlock()
		if w != nil {
			w <- claimResult{err: fmt.Errorf("ipc: the peer refused claim %d: %s", token, m[9:])}
		}
		return nil
	case msgRetire:
		if len(m) != 81 || len(fds) != 0 {
			return fmt.Errorf("ipc: malformed retire message (%d bytes)", len(m))
		}
		if err := c.imp.retire(unmapKeyFrom(m[1:81])); err != nil {
			c.mu.Lock()
			halfShut := c.halfShut
			c.mu.Unlock()
			if !halfShut {
				return err
			}
			// The answer cannot go out after our writing side was shut;
			// the peer counts our mappings gone when our end arrives, and
			// they were freed before that.
		}
		return nil
	case msgRetired:
		if len(m) != 146 || len(fds) != 0 {
			return fmt.Errorf("ipc: malformed retired message (%d bytes)", len(m))
		}
		k, h := unmapKeyFrom(m[1:81]), doneFrom(m[81:146])
		return c.retiredAnswer(k, h)
	case msgBye:
		if len(m) != 1 || len(fds) != 0 {
			return fmt.Errorf("ipc: malformed bye message (%d bytes)", len(m))
		}
		c.mu.Lock()
		c.bye = true
		c.qcond.Broadcast()
		c.mu.Unlock()
		go c.maybeClose()
		return nil
	case msgRelease:
		if len(m) != 74 || len(fds) != 0 {
			return fmt.Errorf("ipc: malformed release message (%d bytes)", len(m))
		}
		return c.released(binary.LittleEndian.Uint64(m[1:]), doneFrom(m[9:74]))
	}
	return fmt.Errorf("ipc: unknown message kind %d", m[0])
}

// released ends a lease the peer gave back, once the peer's done event
// completed (afterDone): only then may the allocation be reused or freed.
func (c *Conn) released(lease uint64, h *cuda.IPCEventHandle) error {
	c.mu.Lock()
	l := c.leases[lease]
	c.mu.Unlock()
	if l == nil {
		return fmt.Errorf("ipc: the peer released lease %d, which it does not hold", lease)
	}
	// The lease counts until the allocation's reference is gone (Leases,
	// Pool.Live and the pool's usage agree once it reads 0).
	end := func() {
		c.mu.Lock()
		if c.leases[lease] == l {
			delete(c.leases, lease)
			l.end()
		}
		c.closeLaterLocked() // the last lease back may close the socket
		c.mu.Unlock()
	}
	if h == nil {
		end()
		return nil
	}
	c.afterDone(l.u.b, *h, end)
	return nil
}

// afterDone runs then once the peer's done event h (opened once per event)
// completed: the free or reuse that follows must not come before the
// peer's work. The wait runs on the host, in a goroutine of its own when
// the event is not complete yet, never on a stream of the pool: a stream
// that waited for one consumer's event would hold back every allocation
// and free queued behind it, and so every other consumer, for as long as
// that consumer's work runs (or for ever, for a consumer that never
// completes it).
func (c *Conn) afterDone(b *block, h cuda.IPCEventHandle, then func()) {
	p := b.pool
	c.mu.Lock()
	ev := c.doneOpen[h]
	c.mu.Unlock()
	if ev == nil {
		var err error
		if ev, err = p.ctx.OpenIPCEvent(h); err != nil {
			// Without the event the free cannot be ordered after the
			// peer's work: the peer's connection ending is what frees it
			// (a dead process's work ended with its context).
			reportError(fmt.Errorf("ipc: opening the done event of %s: %w", c.peer, err))
			go func() {
				<-c.peerEnded
				then()
			}()
			return
		}
		c.mu.Lock()
		if o := c.doneOpen[h]; o != nil {
			c.mu.Unlock()
			ev.Destroy()
			ev = o
		} else {
			c.doneOpen[h] = ev
			c.mu.Unlock()
		}
	}
	if ok, err := ev.Query(); err == nil && ok {
		then()
		return
	}
	c.polls.Add(1)
	go func() {
		defer then()
		defer c.polls.Done()
		wait := 20 * time.Microsecond
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			ok, err := ev.Query()
			if ok {
				return
			}
			if err != nil {
				// An event the driver cannot answer for: wait for the
				// peer's end instead.
				reportError(fmt.Errorf("ipc: the done event of %s: %w", c.peer, err))
				<-c.peerEnded
				return
			}
			select {
			case <-c.peerEnded:
				// The peer closed (its unmaps and work finished before
				// its end) or died (its work ended with its context).
				return
			case <-t.C:
			}
			if wait < time.Millisecond {
				wait *= 2
			}
			t.Reset(wait)
		}
	}()
}

// sendRetire asks the peer to unmap b, an idle block of p (its answer
// comes to retiredAnswer).
func (c *Conn) sendRetire(p *Pool, b *block) error {
	k := unmapKey{pool: p.id, data: b.data}
	c.mu.Lock()
	if c.err != nil || c.ended || c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.unmaps[k] = b
	c.mu.Unlock()
	msg := make([]byte, 81)
	msg[0] = msgRetire
	k.put(msg[1:])
	if err := c.write("sending a retire", msg, -1); err != nil {
		c.mu.Lock()
		delete(c.unmaps, k)
		c.mu.Unlock()
		return err
	}
	return nil
}

// unmappedAtEnd: a retire of b could not be sent to the peer: it is gone,
// or stuck (the write passed its deadline). Its mappings go before its
// end (a closing peer unmaps first; a dead one's went with its context),
// so b counts as unmapped by it when its end arrives, never earlier: a
// stuck peer may still read the memory.
func (c *Conn) unmappedAtEnd(b *block) {
	<-c.peerEnded
	b.pool.unmapped(b, c)
}

// retiredAnswer: the peer unmapped an allocation we retired, in stream
// order before the done event h (nil: nothing to wait for). The block's
// stream waits for it; the block is freed once every peer answered.
func (c *Conn) retiredAnswer(k unmapKey, h *cuda.IPCEventHandle) error {
	c.mu.Lock()
	b := c.unmaps[k]
	delete(c.unmaps, k)
	if b != nil {
		// Until the block is handed back (after the done event), a Close
		// waiting for its retires still waits for this one: its caller
		// counts on the blocks only this peer mapped being gone.
		c.settling[k] = true
	}
	c.mu.Unlock()
	if b == nil {
		return fmt.Errorf("ipc: the peer answered a retire of an allocation of pool %x that was not asked", k.pool)
	}
	done := func() {
		b.pool.unmapped(b, c)
		c.mu.Lock()
		delete(c.settling, k)
		c.qcond.Broadcast() // a Close waiting for its retires' answers
		c.closeLaterLocked()
		c.mu.Unlock()
	}
	if h == nil {
		done()
	} else {
		c.afterDone(b, *h, done)
	}
	return nil
}

func (c *Conn) sendRetired(k unmapKey, done *cuda.IPCEventHandle) error {
	msg := make([]byte, 146)
	msg[0] = msgRetired
	k.put(msg[1:])
	putDone(msg[81:], done)
	return c.write("answering a retire", msg, -1)
}

func (c *Conn) sendRelease(lease uint64, done *cuda.IPCEventHandle) error {
	msg := make([]byte, 74)
	msg[0] = msgRelease
	binary.LittleEndian.PutUint64(msg[1:], lease)
	putDone(msg[9:], done)
	return c.write("giving a lease back", msg, -1)
}

// end runs when the reader stops (the peer closed, died, or misbehaved):
// every lease the peer held is given back at once (a dead process's work
// on the memory was torn down with its context), received tensors not yet
// taken are closed.
func (c *Conn) end(err error) {
	close(c.peerEnded)
	c.mu.Lock()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = io.EOF
	}
	if c.closing && err == io.EOF {
		err = fmt.Errorf("ipc: %w", ErrClosed)
	}
	c.err = err
	c.unmaps = map[unmapKey]*block{}
	var pools []*Pool
	for p := range c.mapPools {
		pools = append(pools, p)
	}
	c.mu.Unlock()
	// The peer maps nothing of ours any more (it closed or died): cached
	// allocations no other peer maps are freed now, retires wait for it no
	// longer. Before the leases end, so that an allocation whose last
	// reference was a lease is freed by it, not cached for this peer.
	for _, p := range pools {
		p.dropPeer(c)
	}
	c.mu.Lock()
	for id, l := range c.leases {
		delete(c.leases, id)
		l.end()
	}
	opened := c.doneOpen
	c.doneOpen = map[cuda.IPCEventHandle]*cuda.Event{}
	c.mu.Unlock()
	c.polls.Wait() // no poller uses an event any more
	for _, e := range opened {
		e.Destroy()
	}
	c.mu.Lock()
	c.ended = true
	c.qcond.Broadcast()
	claims := c.claims
	c.claims = map[uint64]chan claimResult{}
	c.mu.Unlock()
	for _, w := range claims {
		w <- claimResult{err: fmt.Errorf("ipc: claim: connection ended: %w", err)}
	}
	c.imp.peerGone()
}

// retireWait bounds how long a call waits for peers' answers to retires:
// a peer that is alive but frozen (stopped, or its reader stuck) must not
// hang the producer. Past it, Close returns, Trim and an Alloc at the limit
// return an error; the allocations stay retired, to be freed when the peer
// answers or its connection ends (the socket of a closed connection stays
// open until then).
const retireWait = 2 * time.Second

// Close ends the connection gracefully and returns promptly: within
// retireWait (2 s) whatever the peer does. The idle (cached) allocations of
// our pools that the peer keeps mapped are retired for this peer first: it
// unmaps them and answers, and Close waits for the answers (up to
// retireWait, or until the connection ends), so that each is freed, if no
// other peer maps it, after the peer's unmap, as the driver requires. The
// allocations of the peer mapped here with no view open are unmapped (and
// the unmaps finished) before the peer hears anything, and those of views
// still open are unmapped as each view's last lease goes. Then the peer is
// told that no more tensors come (msgBye: its Recv returns io.EOF once its
// queue is empty), tensors received and not taken by Recv are closed, and
// nothing more is sent. Leases the peer still holds do not end: the
// connection stays open in the background until the peer gave every one of
// them back (each release ordered after its done event, as usual), the
// allocations cached meanwhile were retired for it, and the views received
// over c are closed; then our writing side shuts, and the socket closes
// once the peer's end arrives: only then are the allocations it mapped
// counted unmapped. If the peer closes or dies first, its end closes the
// socket and ends what it held, as it does without Close. A peer that
// never gives its tensors back keeps their memory allocated until it does
// or goes away. Done tells when the connection ended.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	c.closing = true
	queued := c.queue
	c.queue = nil
	c.qcond.Broadcast()
	c.mu.Unlock()
	// From now on an allocation of the peer whose last view closes is
	// unmapped at once (before the done event the peer waits for), and the
	// idle ones go now: the peer may free them once it sees our end.
	c.imp.startClosing()
	// Tensors received but never taken go back now.
	for _, r := range queued {
		if r.v != nil {
			r.v.Close()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.retireCached()
		c.sendBye()
		c.maybeClose()
	}()
	t := time.NewTimer(retireWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// A peer that does not read: the rest goes on in the background,
		// bounded by the connection's write timeout.
	}
	return nil
}

// Done is closed once the connection has ended: its reader stopped (the
// peer closed or died, or the socket closed after Close once nothing was
// left to come back), and every lease the peer held ended.
func (c *Conn) Done() <-chan struct{} { return c.exited }

// sendBye tells the peer that no more tensors come from this side.
func (c *Conn) sendBye() {
	c.mu.Lock()
	skip := c.ended || c.closed || c.shutting
	c.mu.Unlock()
	if !skip {
		c.write("saying bye", []byte{msgBye}, -1)
	}
}

// retireCached retires, for this peer only, the idle allocations of our
// pools it keeps mapped (the peer is moved from their mappers to
// unmapping; other peers keep theirs) and waits until each retire was
// answered and its block handed back to the pool (after the answer's done
// event), the connection ended, or retireWait passed. An allocation no
// peer maps any more is freed then (or when the connection ends).
func (c *Conn) retireCached() {
	c.mu.Lock()
	// Until its retires are sent and in c.unmaps, an answer to one of them
	// must not let the socket close: the others would go unsent, and the
	// connection's end would free their allocations while the peer maps
	// them.
	c.retiring++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.retiring--
		c.mu.Unlock()
	}()
	c.mu.Lock()
	var pools []*Pool
	for p := range c.mapPools {
		pools = append(pools, p)
	}
	c.mu.Unlock()
	var ret []retireReq
	for _, p := range pools {
		ret = append(ret, p.retireFor(c)...)
	}
	if len(ret) == 0 {
		return
	}
	var keys []unmapKey
	untold := false // a retire could not be sent: wait for the end
	for _, r := range ret {
		if err := c.sendRetire(r.b.pool, r.b); err != nil {
			untold = true
			continue
		}
		keys = append(keys, unmapKey{pool: r.b.pool.id, data: r.b.data})
	}
	deadline := time.Now().Add(retireWait)
	t := time.AfterFunc(retireWait, func() {
		c.mu.Lock()
		c.qcond.Broadcast()
		c.mu.Unlock()
	})
	defer t.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.ended && time.Now().Before(deadline) {
		waiting := untold
		for _, k := range keys {
			if c.unmaps[k] != nil || c.settling[k] {
				waiting = true
				break
			}
		}
		if !waiting {
			return
		}
		c.qcond.Wait()
	}
}

// closeReady reports whether the socket may shut its writing side:
// Close was called or the peer said bye, no view received over c is open,
// the peer holds no lease and no retire awaits its answer; or, once the
// connection ended (the peer's end arrived), whether it may close for good:
// no view received over c is open. Called with c.mu held.
func (c *Conn) closeReady() bool {
	if c.ended {
		return c.imp.openViews() == 0
	}
	if !c.closing && !c.bye {
		return false
	}
	if c.retiring > 0 || c.imp.openViews() > 0 {
		return false
	}
	return len(c.leases) == 0 && len(c.unmaps) == 0
}

// closeLaterLocked starts maybeClose in a goroutine of its own when the
// connection is closing (Close was called, or the peer said bye) or ended,
// and the socket is not closed: the callers run on the reader or hold
// locks, and maybeClose may wait. Called with c.mu held.
func (c *Conn) closeLaterLocked() {
	if (c.closing || c.bye || c.ended) && !c.closed {
		go c.maybeClose()
	}
}

// maybeClose moves the socket toward its close once closeReady.
//
// Before the connection ended: the idle allocations the peer keeps mapped
// (cached since Close, or all of them on the side that got the peer's bye)
// are retired for it first, as Close does; then the allocations of the
// peer mapped here are unmapped and those unmaps finished on the device,
// and only then our writing side shuts (the peer's reader sees the end).
// The reader goes on until the peer's end arrives: the peer unmapped what
// it mapped of ours before its end, as this side did, so that every free
// comes after the importers' unmaps, as the driver requires.
//
// Once the connection ended (the peer closed, died or misbehaved) and no
// view received over c is open: what the importer holds is dropped and the
// socket closes at once, not when the garbage collector finds it.
func (c *Conn) maybeClose() {
	c.mu.Lock()
	if c.closed || !c.closeReady() {
		c.mu.Unlock()
		return
	}
	if c.ended {
		c.closed = true
		c.mu.Unlock()
		c.imp.close()
		c.uc.Close()
		return
	}
	if c.shutting {
		c.mu.Unlock()
		return
	}
	c.shutting = true // no lease is added from now on (Send refuses)
	c.mu.Unlock()
	c.retireCached()
	c.mu.Lock()
	if !c.ended && len(c.unmaps) > 0 {
		// The peer did not answer within retireWait (stopped, or stuck):
		// its answer, or its end, closes the socket later. Freeing now
		// could free memory it still maps.
		c.shutting = false
		c.mu.Unlock()
		return
	}
	c.halfShut = true
	c.mu.Unlock()
	c.imp.startClosing()
	c.imp.unmapIdle(true)
	if err := c.uc.CloseWrite(); err != nil {
		// Without a half close the peer sees our end only with the
		// socket's: close it (our unmaps are done).
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.uc.Close()
		<-c.exited
		c.imp.close()
		return
	}
	// The reader sees the peer's end and calls closeLaterLocked again.
	c.mu.Lock()
	ended := c.ended
	c.mu.Unlock()
	if ended {
		c.maybeClose()
	}
}

func closeFD(fd int) { syscall.Close(fd) }

type claimResult struct {
	v   *zerocopy.View
	err error
}

// Claim asks the peer, a Server, for the tensor it offered under token
// (Server.Offer) and returns it as Recv would.
func (c *Conn) Claim(token uint64) (*zerocopy.View, error) {
	if token == 0 {
		return nil, fmt.Errorf("ipc: Claim: token 0")
	}
	w := make(chan claimResult, 1)
	c.mu.Lock()
	if c.ended || c.closing || c.shutting {
		c.mu.Unlock()
		return nil, fmt.Errorf("ipc: Claim: %w", ErrClosed)
	}
	if c.bye {
		c.mu.Unlock()
		return nil, fmt.Errorf("ipc: Claim: the peer sends no more: %w", io.EOF)
	}
	if c.claims[token] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("ipc: Claim: token %d is being claimed already", token)
	}
	c.claims[token] = w
	c.mu.Unlock()
	msg := make([]byte, 9)
	msg[0] = msgClaim
	binary.LittleEndian.PutUint64(msg[1:], token)
	if err := c.write("claiming", msg, -1); err != nil {
		c.mu.Lock()
		delete(c.claims, token)
		c.mu.Unlock()
		return nil, fmt.Errorf("ipc: Claim: %w", err)
	}
	var expired <-chan time.Time
	if d := c.Timeout(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-w:
		return r.v, r.err
	case <-expired:
	}
	c.mu.Lock()
	if c.claims[token] == w {
		delete(c.claims, token)
		c.mu.Unlock()
		// A late answer finds no waiter: its tensor goes to Recv's queue
		// and back with Close; a refusal is dropped.
		return nil, c.timeoutErr(fmt.Sprintf("Claim(%d)", token), c.Timeout())
	}
	c.mu.Unlock()
	r := <-w // answered meanwhile
	return r.v, r.err
}

func (c *Conn) refuse(token uint64, why string) error {
	msg := make([]byte, 9, 9+len(why))
	msg[0] = msgRefuse
	binary.LittleEndian.PutUint64(msg[1:], token)
	return c.write("refusing a claim", append(msg, why...), -1)
}

func (c *Conn) isEnded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// Mapped is the number of the peer's allocations this side keeps mapped:
// those of the tensors received and not closed, and those whose tensors
// were all closed, kept for the next tensor of the same allocation until
// the peer retires them or the connection ends.
func (c *Conn) Mapped() int { return c.imp.mapped() }

// Imports is the number of allocations of the peer this side has mapped
// (cuMemPoolImportPointer) since the connection began: a tensor of an
// allocation already mapped adds none.
func (c *Conn) Imports() int { return c.imp.importCount() }

// LastImport is how long the last tensor received took to turn from a
// descriptor into a view: decoding, the pointer import (once per
// allocation), the event's opening (once per event) and the stream's wait.
// The hand-over's cost on this side, for benchmarks.
func (c *Conn) LastImport() time.Duration { return time.Duration(c.lastImport.Load()) }
