package ipc_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

// Peers that misbehave, forged with the real wire format: a descriptor
// that reaches past what was shared, a server that never answers, a
// consumer that never reads, a consumer whose done event completes late,
// sockets at paths in use, and a process out of file descriptors.

// forger is the raw end of a socketpair whose other end is a Conn.
type forger struct {
	fd   int
	conn *ipc.Conn
}

func newForger(t *testing.T) *forger {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[1]), "conn")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := ipc.NewConn(nc.(*net.UnixConn))
	t.Cleanup(func() {
		syscall.Close(fds[0])
		c.Close()
	})
	return &forger{fd: fds[0], conn: c}
}

func (f *forger) send(t *testing.T, msg []byte, fd int) {
	t.Helper()
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	if err := syscall.Sendmsg(f.fd, msg, oob, nil, 0); err != nil {
		t.Fatal(err)
	}
}

// TestForgedDescriptor: a producer (this process) shares a 256-byte
// allocation of its pool with a consumer process and describes it as
// 1 GiB, at an offset of 2^61, and as 4 KiB with elements past the 256
// bytes: the consumer checks each descriptor against the range the driver
// really mapped and refuses all three (ErrBadDescriptor); the honest
// descriptor of the same allocation reads right. On the GPU machine too
// (DLBRIDGE_GPU=1).
func TestForgedDescriptor(t *testing.T) {
	needCUDA(t)
	m := newPeerMem(t, 64<<20, 256, func(s *cuda.Stream, p cuda.DevicePtr) error {
		return s.MemsetD32Async(p, 0x5a5a5a5a, 64)
	})
	poolFD, data, ready, uuid := m.poolFD, m.data, m.ready, m.uuid
	sock := sockPath(t)
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	cmd, lines := startChild(t, "forgedrecv", sock)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	uc, err := ul.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	send := func(msg []byte, fd int) {
		var oob []byte
		if fd >= 0 {
			oob = syscall.UnixRights(fd)
		}
		if _, _, err := uc.WriteMsgUnix(msg, oob, nil); err != nil {
			t.Fatal(err)
		}
	}
	var id [16]byte
	id[0] = 7
	send(append(append([]byte{1}, id[:]...), uuid[:]...), poolFD)
	for i, c := range []struct{ size, offset, elems int64 }{
		{1 << 30, 0, 1 << 28},  // 1 GiB described, 256 bytes shared
		{1 << 62, 1 << 61, 16}, // an offset of 2^61
		{4096, 128, 900},       // elements past the 256 bytes mapped
		{256, 0, 64},           // the honest one
	} {
		d := ipc.Descriptor{Pool: id, Device: uuid, Data: data, Size: c.size, Offset: c.offset,
			DType: dlpack.Uint32Type, Shape: []int64{c.elems}, Strides: []int64{1}, Ready: ready, Lease: uint64(i + 1)}
		b, err := d.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		send(append([]byte{2}, b...), -1)
	}
	if got, want := expectLine(t, lines, "forged"), "refused refused refused ok 64 0x5a5a5a5a"; got != want {
		t.Errorf("the consumer saw %q, want %q", got, want)
	}
	// The consumer unmaps before it exits; only then is the allocation
	// freed (the driver's order: newPeerMem's cleanup runs after this).
	if err := cmd.Wait(); err != nil {
		t.Errorf("consumer: %v", err)
	}
}

// peerMem is memory a peer that does not use this package shares: a pool
// made for POSIX-fd handles on device 0 and its exported descriptor, an
// allocation on a stream of the peer's own, the allocation's export data,
// an interprocess event recorded after it was filled, and the device's
// UUID. The test's cleanup frees them, in the driver's order.
type peerMem struct {
	poolFD int
	data   cuda.PoolExportData
	ready  cuda.IPCEventHandle
	uuid   cuda.UUID
}

// newPeerMem makes peerMem of a limit-byte pool and an n-byte allocation
// that fill (nil: none) writes on the peer's stream before the event.
func newPeerMem(t *testing.T, limit uint64, n int64, fill func(*cuda.Stream, cuda.DevicePtr) error) *peerMem {
	t.Helper()
	ctx, err := cuda.Retain(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Release() })
	mp, err := ctx.NewIPCMemPool(cuda.HandlePOSIXFD, limit)
	if err != nil {
		t.Fatal(err)
	}
	m := &peerMem{}
	if m.poolFD, err = mp.ExportFD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(m.poolFD) })
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	ptr, err := s.MemAllocFromPoolAsync(mp, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.MemFreeAsync(ptr)
		s.Synchronize()
	})
	if fill != nil {
		if err := fill(s, ptr); err != nil {
			t.Fatal(err)
		}
	}
	if m.data, err = cuda.ExportPointer(ptr); err != nil {
		t.Fatal(err)
	}
	ev, err := ctx.NewEvent(cuda.EventInterprocess)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ev.Destroy() })
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	if m.ready, err = ev.IPCHandle(); err != nil {
		t.Fatal(err)
	}
	if m.uuid, err = ctx.Device().UUID(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUnparsableTensorEndsConnection: a tensor message whose descriptor
// does not parse ends the connection, and Recv says so with ErrProtocol,
// every time and at once, never with ErrBadDescriptor: a consumer that
// skips refused tensors (ErrBadDescriptor, the connection goes on) and
// reads on would otherwise spin on the ended connection (it did, at a
// hundred goroutines, in the soak).
func TestUnparsableTensorEndsConnection(t *testing.T) {
	f := newForger(t)
	f.send(t, []byte{2, 1, 0, 0}, -1) // kind 2 (tensor): a descriptor of 3 bytes
	f.conn.SetRecvTimeout(10 * time.Second)
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		v, err := f.conn.Recv()
		if v != nil {
			v.Close()
		}
		if !errors.Is(err, ipc.ErrProtocol) || errors.Is(err, ipc.ErrBadDescriptor) {
			t.Fatalf("Recv %d: %v; want an error matching ErrProtocol and not ErrBadDescriptor", i+1, err)
		}
		if !strings.Contains(err.Error(), "3 bytes") {
			t.Errorf("Recv %d: %v; want what was wrong with the message (3 bytes)", i+1, err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("Recv %d took %v on an ended connection", i+1, d)
		}
	}
}

// TestClaimDeadline: a server that accepts and never answers: Claim and
// Recv end at their deadlines with ErrTimeout, naming the operation and
// the peer's process.
func TestClaimDeadline(t *testing.T) {
	sock := sockPath(t)
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go func() {
		if c, err := ul.AcceptUnix(); err == nil {
			time.Sleep(10 * time.Second)
			c.Close()
		}
	}()
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetTimeout(200 * time.Millisecond)
	c.SetRecvTimeout(200 * time.Millisecond)
	t0 := time.Now()
	_, err = c.Claim(42)
	if !errors.Is(err, ipc.ErrTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Claim from a silent server: %v, want ErrTimeout", err)
	}
	for _, want := range []string{"Claim(42)", "peer process " + itoa(os.Getpid()) + " on " + sock} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Claim's error %q does not name %q", err, want)
		}
	}
	if _, err := c.Recv(); !errors.Is(err, ipc.ErrTimeout) || !strings.Contains(err.Error(), "Recv") {
		t.Errorf("Recv from a silent server: %v, want ErrTimeout naming Recv", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the two waits took %v", d)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestSendDeadline: a consumer that never reads (stopped): the producer's
// Send fails at its deadline once the socket's buffer is full, instead of
// blocking for ever, and Close returns promptly.
func TestSendDeadline(t *testing.T) {
	needCUDA(t)
	pool, err := ipc.NewPool(0, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	f := newForger(t)
	f.conn.SetTimeout(300 * time.Millisecond)
	v, err := pool.Alloc(nil, dlpack.Uint32Type, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var serr error
	for i := 0; i < 100000 && serr == nil; i++ {
		serr = f.conn.Send(pool, v, nil)
	}
	if !errors.Is(serr, ipc.ErrTimeout) || !strings.Contains(serr.Error(), "sending a tensor") {
		t.Fatalf("Send to a peer that never reads: %v, want ErrTimeout naming the send", serr)
	}
	t0 := time.Now()
	f.conn.Close()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Close with a peer that never reads took %v", d)
	}
}

// TestStuckDoneEvent: consumer A's done event completes late: 3 s after
// its release on the fake (FAKECUDA_IPC_DELAY_MS in A), behind a 2 s
// kernel on a GPU (DLBRIDGE_GPU=1). Meanwhile the pool's stream runs other
// work at once, and consumer B's hand-over of a tensor allocated and
// written on that stream takes less than 10 ms on the GPU (500 ms on the
// loaded fake): the wait for A's event is not queued on the pool's
// stream, where it would hold back every allocation, free and consumer
// behind it. A's lease ends once its event completed.
func TestStuckDoneEvent(t *testing.T) {
	needCUDA(t)
	pool, _, ln, sock := producerSide(t, 16<<20)
	cmdA, linesA, peerA := acceptChild(t, ln, "release", sock, "FAKECUDA_IPC_DELAY_MS=3000", "IPC_TEST_SPIN=2s")
	defer endChild(t, cmdA, "release")
	cmdB, linesB, peerB := acceptChild(t, ln, "handover", sock)
	defer endChild(t, cmdB, "handover")
	s := pool.Stream()
	v, err := pool.Alloc(s, dlpack.Uint32Type, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, v, 5)
	if err := peerA.Send(pool, v, nil); err != nil {
		t.Fatal(err)
	}
	v.Close()
	expectLine(t, linesA, "released")
	time.Sleep(300 * time.Millisecond) // the release reaches this side's reader
	t0 := time.Now()
	w, err := pool.Alloc(s, dlpack.Uint32Type, 4096)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, w, 6)
	if err := peerB.Send(pool, w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("other work on the pool's stream waited %v behind a consumer's done event", d)
	}
	ns, err := strconv.ParseInt(expectLine(t, linesB, "handover"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	limit := 10 * time.Millisecond
	if fakeLib != "" {
		limit = 500 * time.Millisecond
	}
	t.Logf("consumer B's hand-over with A's done event pending: %v", time.Duration(ns))
	if time.Duration(ns) > limit {
		t.Errorf("consumer B's hand-over took %v behind A's pending done event, want < %v", time.Duration(ns), limit)
	}
	waitFor(t, "the late done event to end A's lease", func() bool { return peerA.Leases() == 0 })
}

// TestListenMode: a socket is 0600 whatever the umask.
func TestListenMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	sock := sockPath(t)
	ln, err := ipc.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("socket mode %v under umask 000, want 0600", m)
	}
	if ents, _ := os.ReadDir(filepath.Dir(sock)); len(ents) != 1 {
		t.Errorf("the socket's folder holds %d entries, want the socket alone", len(ents))
	}
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatalf("Dial of the linked socket: %v", err)
	}
	c.Close()
}

// TestListenLiveSockets: a path where a live socket of any type is bound
// (datagram, stream), or a file that is no socket, is refused and left as
// it is.
func TestListenLiveSockets(t *testing.T) {
	for _, network := range []string{"unixgram", "unix"} {
		sock := sockPath(t)
		var closer interface{ Close() error }
		if network == "unixgram" {
			c, err := net.ListenUnixgram(network, &net.UnixAddr{Name: sock, Net: network})
			if err != nil {
				t.Fatal(err)
			}
			closer = c
		} else {
			l, err := net.ListenUnix(network, &net.UnixAddr{Name: sock, Net: network})
			if err != nil {
				t.Fatal(err)
			}
			closer = l
		}
		if _, err := ipc.Listen(sock); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("Listen over a live %s socket: %v, want EADDRINUSE", network, err)
		}
		if _, err := os.Lstat(sock); err != nil {
			t.Errorf("the live %s socket was removed: %v", network, err)
		}
		closer.Close()
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := ipc.Listen(file); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Listen over a plain file: %v, want EADDRINUSE", err)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestServerEndedPeers: the sockets of peers that ended close at once (not
// when the garbage collector runs), and under a low RLIMIT_NOFILE the
// accept loop outlives EMFILE: once descriptors are free again, a new
// peer's claim is answered.
func TestServerEndedPeers(t *testing.T) {
	sock := sockPath(t)
	srv, err := ipc.Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := openFDs(t)
	for i := 0; i < 32; i++ {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	waitFor(t, "the ended peers' sockets to close", func() bool { return openFDs(t) <= base+2 })

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	low := lim
	low.Cur = uint64(openFDs(t) + 64) // headroom for the runtime (and an emulator)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip("cannot lower RLIMIT_NOFILE:", err)
	}
	// Hold connections until the server runs out of descriptors.
	var held []*net.UnixConn
	for i := 0; i < 256; i++ {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			break
		}
		held = append(held, c)
	}
	if len(held) == 256 {
		t.Fatalf("256 peers connected under a limit of %d descriptors: the server never ran out", low.Cur)
	}
	time.Sleep(200 * time.Millisecond) // the accept loop meets EMFILE
	for _, c := range held {
		c.Close()
	}
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetTimeout(10 * time.Second)
	if _, err := c.Claim(12345); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a claim after EMFILE: %v, want the server's refusal", err)
	}
}
