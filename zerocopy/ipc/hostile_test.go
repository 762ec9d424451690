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

// TestForgedDescriptor: a peer shares a 256-byte allocation of its pool and
// describes it as 1 GiB, or at an offset of 2^61: the importer checks each
// descriptor against the range the driver really mapped and refuses both
// (ErrBadDescriptor); the honest descriptor of the same allocation works.
func TestForgedDescriptor(t *testing.T) {
	needCUDA(t)
	ctx, err := cuda.Retain(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Release()
	mp, err := ctx.NewIPCMemPool(cuda.HandlePOSIXFD, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	poolFD, err := mp.ExportFD()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(poolFD)
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ptr, err := s.MemAllocFromPoolAsync(mp, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer s.MemFreeAsync(ptr)
	data, err := cuda.ExportPointer(ptr)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := ctx.NewEvent(cuda.EventInterprocess)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	ready, err := ev.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	uuid, err := ctx.Device().UUID()
	if err != nil {
		t.Fatal(err)
	}
	ipc.SetErrorHandler(func(err error) { t.Log("reported:", err) })
	defer ipc.SetErrorHandler(nil)
	f := newForger(t)
	var id [16]byte
	id[0] = 7
	msg := append(append([]byte{1}, id[:]...), uuid[:]...)
	f.send(t, msg, poolFD)
	tensor := func(size, offset, n int64, lease uint64) {
		d := ipc.Descriptor{Pool: id, Device: uuid, Data: data, Size: size, Offset: offset,
			DType: dlpack.Uint8Type, Shape: []int64{n}, Strides: []int64{1}, Ready: ready, Lease: lease}
		b, err := d.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		f.send(t, append([]byte{2}, b...), -1)
	}
	f.conn.SetRecvTimeout(30 * time.Second)
	for _, c := range []struct {
		name                string
		size, offset, elems int64
	}{
		{"size 1 GiB", 1 << 30, 0, 1 << 30},
		{"offset 2^61", 1 << 62, 1 << 61, 16},
		{"size 4 KiB, elements past the mapping", 4096, 200, 1000},
	} {
		tensor(c.size, c.offset, c.elems, 1)
		v, err := f.conn.Recv()
		if !errors.Is(err, ipc.ErrBadDescriptor) {
			if v != nil {
				v.Close()
			}
			t.Errorf("%s: Recv = %v, want ErrBadDescriptor", c.name, err)
		}
	}
	tensor(256, 0, 256, 2)
	v, err := f.conn.Recv()
	if err != nil {
		t.Fatalf("the honest descriptor: %v", err)
	}
	if got := v.Shape(); len(got) != 1 || got[0] != 256 {
		t.Errorf("honest tensor of shape %v", got)
	}
	v.Close()
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
	for _, want := range []string{"Claim(42)", "peer process " + itoa(os.Getpid())} {
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

// TestStuckDoneEvent: a consumer's done event completes only 3 s after its
// release (the fake's FAKECUDA_IPC_DELAY_MS in the consumer): the lease
// ends then, and meanwhile the pool's stream runs other work at once: the
// wait for the event is not queued on it, where it would hold back every
// other consumer's allocations and frees.
func TestStuckDoneEvent(t *testing.T) {
	needFake(t)
	pool, _, ln, sock := producerSide(t, 16<<20)
	cmd, lines, peer := acceptChild(t, ln, "release", sock, "FAKECUDA_IPC_DELAY_MS=3000")
	defer endChild(t, cmd, "release")
	s := pool.Stream()
	v, err := pool.Alloc(s, dlpack.Uint32Type, 1024)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, v, 5)
	if err := peer.Send(pool, v, nil); err != nil {
		t.Fatal(err)
	}
	v.Close()
	expectLine(t, lines, "released")
	time.Sleep(300 * time.Millisecond) // the release reaches this side's reader
	t0 := time.Now()
	w, err := pool.Alloc(s, dlpack.Uint32Type, 4096)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, w, 6)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("other work on the pool's stream waited %v behind a consumer's done event", d)
	}
	w.Close()
	waitFor(t, "the late done event to end the lease", func() bool { return peer.Leases() == 0 })
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
	low.Cur = uint64(openFDs(t) + 24)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip("cannot lower RLIMIT_NOFILE:", err)
	}
	// Hold connections until the server runs out of descriptors.
	var held []*net.UnixConn
	for i := 0; i < 64; i++ {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			break
		}
		held = append(held, c)
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
