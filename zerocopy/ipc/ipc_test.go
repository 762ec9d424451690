package ipc_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/internal/fakecuda"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

// The tests run real processes: the test binary re-executed with
// IPC_TEST_ROLE set plays the other side, over a real socket, against the
// same driver (the fake of testdata/fakecuda in CI, whose IPC pools and
// events are shared memory across processes; the real one with
// DLBRIDGE_GPU=1).

var (
	fakeLib string
	fakeErr error
)

func init() { fakeLib, fakeErr = fakecuda.Use(1) }

func TestMain(m *testing.M) {
	if role := os.Getenv("IPC_TEST_ROLE"); role != "" {
		if err := child(role, os.Getenv("IPC_TEST_SOCK")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needCUDA(t testing.TB) {
	t.Helper()
	if fakeErr != nil {
		t.Skipf("no fake CUDA driver: %v", fakeErr)
	}
	if !cuda.Available() {
		t.Skipf("no CUDA driver: %v", cuda.Init())
	}
}

func needFake(t testing.TB) {
	t.Helper()
	needCUDA(t)
	if fakeLib == "" {
		t.Skip("needs the fake driver")
	}
}

// startChild runs the test binary as role, with the socket path and extra
// environment; its stdout lines come on the returned channel.
func startChild(t *testing.T, role, sock string, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "IPC_TEST_ROLE="+role, "IPC_TEST_SOCK="+sock), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdins[cmd] = stdin
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// stdins are the children's standard inputs (closing one tells the child
// to go on, where a test says so).
var stdins = map[*exec.Cmd]io.WriteCloser{}

func expectLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("child exited before printing %q", prefix)
		}
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("child printed %q, want %q...", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-time.After(60 * time.Second):
		t.Fatalf("no %q from the child in 60 s", prefix)
	}
	return ""
}

// fill queues a write of value into every element of v (uint32) on s.
func fill(t testing.TB, s *cuda.Stream, v *zerocopy.View, value uint32) {
	t.Helper()
	if err := s.MemsetD32Async(cuda.DevicePtr(v.Ptr()), value, v.Len()); err != nil {
		t.Fatal(err)
	}
}

// read copies v (a received view) to the host after its pending work.
func read(v *zerocopy.View) ([]uint32, error) {
	if err := v.Synchronize(); err != nil {
		return nil, err
	}
	ctx, err := cuda.Retain(int(v.Device().ID))
	if err != nil {
		return nil, err
	}
	defer ctx.Release()
	out := make([]uint32, v.Len())
	if err := ctx.MemcpyDtoH(cuda.SliceBytes(out), cuda.DevicePtr(v.Ptr())); err != nil {
		return nil, err
	}
	return out, nil
}

func usedBytes(t testing.TB, p *ipc.Pool) uint64 {
	t.Helper()
	_, used, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func sockPath(t *testing.T) string { return filepath.Join(t.TempDir(), "s") }

// producerSide makes a pool of limit bytes and a listener, closed when t
// ends, and returns them with the pool's baseline usage.
func producerSide(t *testing.T, limit int64) (*ipc.Pool, uint64, *ipc.Listener, string) {
	t.Helper()
	pool, err := ipc.NewPool(0, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	sock := sockPath(t)
	ln, err := ipc.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return pool, usedBytes(t, pool), ln, sock
}

// TestExchange: a producer sends 1,000 tensors of different sizes and
// values to a consumer process that checks each one and closes it; every
// lease comes back and the pool returns to its baseline.
func TestExchange(t *testing.T) {
	needCUDA(t)
	pool, base, ln, sock := producerSide(t, 64<<20)
	const n = 1000
	cmd, lines := startChild(t, "consume", sock, "IPC_TEST_N="+strconv.Itoa(n))
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := pool.Stream()
	for i := 0; i < n; i++ {
		v, err := pool.Alloc(s, dlpack.Uint32Type, int64(1+i%7), 33)
		if err != nil {
			t.Fatal(err)
		}
		fill(t, s, v, uint32(i)*2654435761)
		if err := peer.Send(pool, v, nil); err != nil {
			t.Fatal(err)
		}
		v.Close() // the lease keeps it
	}
	if got := expectLine(t, lines, "ok"); got != strconv.Itoa(n) {
		t.Fatalf("consumer checked %s tensors, want %d", got, n)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("consumer: %v", err)
	}
	waitFor(t, "every lease back", func() bool { return peer.Leases() == 0 })
	// The consumer closed after its unmaps; the allocations it kept mapped
	// are freed once its connection's end reached this side.
	waitFor(t, "the pool's baseline", func() bool {
		s.Synchronize()
		return pool.Live() == 0 && usedBytes(t, pool) == base
	})
	peer.Close()
}

// TestKilledConsumer: a consumer that holds tensors and is killed gives
// its leases back; the pool returns to its baseline.
func TestKilledConsumer(t *testing.T) {
	needCUDA(t)
	pool, base, ln, sock := producerSide(t, 64<<20)
	cmd, lines := startChild(t, "hold", sock, "IPC_TEST_N=10")
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := pool.Stream()
	for i := 0; i < 10; i++ {
		v, err := pool.Alloc(s, dlpack.Uint32Type, 4096)
		if err != nil {
			t.Fatal(err)
		}
		fill(t, s, v, uint32(i))
		if err := peer.Send(pool, v, nil); err != nil {
			t.Fatal(err)
		}
		v.Close()
	}
	expectLine(t, lines, "holding")
	if peer.Leases() != 10 || pool.Live() != 10 {
		t.Fatalf("while the consumer holds them: %d leases, %d allocations, want 10", peer.Leases(), pool.Live())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitFor(t, "the leases of the killed consumer", func() bool { return peer.Leases() == 0 })
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if pool.Live() != 0 || usedBytes(t, pool) != base {
		t.Errorf("after the kill: %d allocations live, %d bytes used (baseline %d)", pool.Live(), usedBytes(t, pool), base)
	}
	if _, err := peer.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv from the killed peer: %v, want io.EOF", err)
	}
	peer.Close()
}

// TestSlowProducer: the producer's write runs late (the fake runs its
// stream 300 ms after the ready record); the consumer, which waits for the
// ready event, sees the data, while a read that skips the wait sees the
// memory as it was before the write (the control that shows the test can
// fail).
func TestSlowProducer(t *testing.T) {
	needFake(t)
	sock := sockPath(t)
	cmd, lines := startChild(t, "produce", sock, "FAKECUDA_IPC_DELAY_MS=300", "IPC_TEST_N=3")
	expectLine(t, lines, "listening")
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		v, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		early := make([]uint32, v.Len())
		ctx, _ := cuda.Retain(0)
		if err := ctx.MemcpyDtoH(cuda.SliceBytes(early), cuda.DevicePtr(v.Ptr())); err != nil {
			t.Fatal(err)
		}
		ctx.Release()
		if early[0] == 100+uint32(i) {
			t.Errorf("tensor %d: a read without the wait already saw the data: the fake did not delay the producer", i)
		}
		got, err := read(v)
		if err != nil {
			t.Fatal(err)
		}
		for j, x := range got {
			if x != 100+uint32(i) {
				t.Fatalf("tensor %d element %d = %#x, want %d: read before the producer's write", i, j, x, 100+i)
			}
		}
		v.Close()
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("producer: %v", err)
	}
}

// TestSlowConsumer is the "done" direction of the ordering: the consumer
// queues a copy of each tensor on the tensor's stream, gives the tensor back
// at once, and its stream runs 300 ms later (the fake's delay). The
// producer's free waits on the GPU for the consumer's done event, and so
// does the next allocation, which takes the freed block over on the same
// stream (the fake frees in stream order and reuses a block freed on the
// allocating stream): every copy reads the value sent. The control: the
// same producer with its waits for other processes dropped
// (FAKECUDA_IPC_SKIP_WAITS) overwrites the block before the consumer's copy
// runs.
func TestSlowConsumer(t *testing.T) {
	needFake(t)
	for _, tc := range []struct {
		name  string
		env   []string
		right bool
	}{
		{"waits", nil, true},
		{"control", []string{"FAKECUDA_IPC_SKIP_WAITS=1"}, false},
		// The cached block taken again by an allocation on another stream:
		// that stream waits for the event recorded when the block went
		// idle, after the first stream's wait for the consumer.
		{"two streams", []string{"IPC_TEST_STREAMS=2"}, true},
		{"two streams control", []string{"IPC_TEST_STREAMS=2", "FAKECUDA_IPC_SKIP_WAITS=1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			sock := sockPath(t)
			env := append([]string{"IPC_TEST_N=" + strconv.Itoa(n)}, tc.env...)
			prod, plines := startChild(t, "reuse", sock, env...)
			expectLine(t, plines, "listening")
			cons, clines := startChild(t, "slowread", sock, "IPC_TEST_N="+strconv.Itoa(n), "FAKECUDA_IPC_DELAY_MS=300")
			got := strings.Fields(expectLine(t, clines, "read"))
			if r := expectLine(t, plines, "reused"); r != strconv.Itoa(n-1) {
				t.Errorf("the producer's allocations took the block freed before them %s times, want %d", r, n-1)
			}
			if err := cons.Wait(); err != nil {
				t.Fatalf("consumer: %v", err)
			}
			if err := prod.Wait(); err != nil {
				t.Fatalf("producer: %v", err)
			}
			t.Logf("the consumer's late copies read %q", got)
			wrong := 0
			for i, g := range got {
				if g != strconv.Itoa(100+i) {
					wrong++
				}
			}
			if len(got) != n {
				t.Fatalf("the consumer read %q, want %d values", got, n)
			}
			if tc.right && wrong > 0 {
				t.Errorf("the consumer's late copies read %q, want 100 101 102: the producer reused memory before the consumer's done event", got)
			}
			if !tc.right && wrong == 0 {
				t.Errorf("without the producer's waits the late copies still read %q: the fake did not reuse or poison the block early", got)
			}
		})
	}
}

// TestProducerGone: the consumer's views stay valid after the producer
// exited; Recv reports io.EOF and closing the views is harmless.
func TestProducerGone(t *testing.T) {
	needCUDA(t)
	sock := sockPath(t)
	cmd, lines := startChild(t, "produce", sock, "IPC_TEST_N=1", "IPC_TEST_EXIT=1")
	expectLine(t, lines, "listening")
	c, err := ipc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Recv()
	if err != nil {
		t.Fatal(err)
	}
	endChild(t, cmd, "producer")
	if _, err := c.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after the producer exited: %v, want io.EOF", err)
	}
	got, err := read(v)
	if err != nil {
		t.Fatalf("reading a view of a producer that exited: %v", err)
	}
	if got[0] != 100 || got[len(got)-1] != 100 {
		t.Errorf("view of a producer that exited reads %d..%d, want 100", got[0], got[len(got)-1])
	}
	if err := v.Close(); err != nil {
		t.Error(err)
	}
	c.Close()
}

// TestNotIPCMemory: memory of the default pool, or of another pool, is
// refused with ErrNotIPCMemory; CopyIn makes a shareable copy.
func TestNotIPCMemory(t *testing.T) {
	needCUDA(t)
	pool, err := ipc.NewPool(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	other, err := ipc.NewPool(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	peer := localPeer(t)
	plain, err := zerocopy.AllocCUDAAsync(pool.Stream(), dlpack.Float32Type, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := peer.Send(pool, plain, nil); !errors.Is(err, ipc.ErrNotIPCMemory) {
		t.Errorf("Send of default-pool memory: %v, want ErrNotIPCMemory", err)
	}
	ov, err := other.Alloc(nil, dlpack.Float32Type, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if err := peer.Send(pool, ov, nil); !errors.Is(err, ipc.ErrNotIPCMemory) {
		t.Errorf("Send of another pool's memory: %v, want ErrNotIPCMemory", err)
	}
	host, err := zerocopy.FromSlice([]float32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Send(pool, host, nil); !errors.Is(err, ipc.ErrNotIPCMemory) {
		t.Errorf("Send of host memory: %v, want ErrNotIPCMemory", err)
	}
	cp, err := pool.CopyIn(host, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if err := peer.Send(pool, cp, nil); err != nil {
		t.Errorf("Send of a CopyIn: %v", err)
	}
	if _, err := pool.Alloc(nil, dlpack.Float32Type, 1<<20); !errors.Is(err, ipc.ErrPoolFull) {
		t.Errorf("an allocation over the pool's limit: %v, want ErrPoolFull", err)
	}
	if _, err := ipc.NewPool(0, 0); err == nil {
		t.Error("NewPool with limit 0 succeeded")
	}
}

// TestListenInUse: a path another listener serves is refused
// (EADDRINUSE) instead of being taken from it; a stale socket is replaced.
func TestListenInUse(t *testing.T) {
	sock := sockPath(t)
	ln, err := ipc.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ipc.Listen(sock); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Listen on a path in use: %v, want EADDRINUSE", err)
	}
	if _, err := ipc.Serve(sock); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Serve on a path in use: %v, want EADDRINUSE", err)
	}
	ln.Close()
	stale, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the stale socket is gone: %v", err)
	}
	ln, err = ipc.Listen(sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()
	long := filepath.Join(t.TempDir(), strings.Repeat("x", 120))
	if _, err := ipc.Listen(long); err == nil || !strings.Contains(err.Error(), "longer than the 107") {
		t.Errorf("Listen on a %d-byte path: %v, want an error naming its length", len(long), err)
	}
	if _, err := ipc.Dial(""); err == nil || !strings.Contains(err.Error(), "empty socket path") {
		t.Errorf("Dial of an empty path: %v", err)
	}
}

// TestServerClaims: an offered tensor is claimed by token from another
// process (twice: each claim a lease of its own); an unknown token is
// refused; leases and offers end and the pool returns to its baseline.
func TestServerClaims(t *testing.T) {
	needCUDA(t)
	pool, err := ipc.NewPool(0, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	base := usedBytes(t, pool)
	sock := sockPath(t)
	srv, err := ipc.Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	v, err := pool.Alloc(nil, dlpack.Uint32Type, 1000)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, pool.Stream(), v, 77)
	token, err := srv.Offer(pool, v, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.Close() // the offer holds it
	cmd, lines := startChild(t, "claim", sock, "IPC_TEST_TOKEN="+strconv.FormatUint(token, 10))
	if got := expectLine(t, lines, "claimed"); got != "77 77 refused" {
		t.Errorf("child: %q, want \"77 77 refused\"", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if srv.Offers() != 1 {
		t.Errorf("%d offers, want 1", srv.Offers())
	}
	srv.Withdraw(token)
	srv.Close()
	waitFor(t, "the pool's baseline", func() bool {
		pool.Stream().Synchronize()
		return pool.Live() == 0 && usedBytes(t, pool) == base
	})
	plain, err := zerocopy.FromSlice([]uint32{1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Offer(pool, plain, time.Second, 0); !errors.Is(err, ipc.ErrNotIPCMemory) {
		t.Errorf("Offer of host memory: %v, want ErrNotIPCMemory", err)
	}
}

// localPeer is the accepting end of a connection this process dialed to
// a listener of its own (the sending side of in-process tests); both ends
// close when the test ends.
func localPeer(t *testing.T) *ipc.Conn {
	t.Helper()
	sock := sockPath(t)
	ln, err := ipc.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *ipc.Conn, 1)
	go func() { c, _ := ipc.Dial(sock); done <- c }()
	peer, err := ln.Accept()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		peer.Close()
		if c := <-done; c != nil {
			c.Close()
		}
	})
	return peer
}

// acceptChild starts a child as role (see startChild), kills it when the
// test ends, and returns it with its connection.
func acceptChild(t *testing.T, ln *ipc.Listener, role, sock string, env ...string) (*exec.Cmd, <-chan string, *ipc.Conn) {
	t.Helper()
	cmd, lines := startChild(t, role, sock, env...)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return cmd, lines, peer
}

// recycleSide starts a "recycle" consumer of n tensors and returns the
// producer's pool (of limit bytes), its baseline, the connection and the
// child.
func recycleSide(t *testing.T, limit int64, n int) (*ipc.Pool, uint64, *ipc.Conn, *exec.Cmd, <-chan string) {
	t.Helper()
	pool, base, ln, sock := producerSide(t, limit)
	cmd, lines, peer := acceptChild(t, ln, "recycle", sock, "IPC_TEST_N="+strconv.Itoa(n))
	t.Cleanup(func() { peer.Close() })
	return pool, base, peer, cmd, lines
}

// sendRecycled allocates a uint32 tensor of elems elements on s, fills it
// with value, sends it and closes the producer's view.
func sendRecycled(t *testing.T, pool *ipc.Pool, peer *ipc.Conn, s *cuda.Stream, elems int64, value uint32) uintptr {
	t.Helper()
	v, err := pool.Alloc(s, dlpack.Uint32Type, elems)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, v, value)
	if err := peer.Send(pool, v, nil); err != nil {
		t.Fatal(err)
	}
	p := v.Ptr()
	v.Close()
	return p
}

// askMapped has the recycle child report the mappings it keeps.
func askMapped(t *testing.T, cmd *exec.Cmd, lines <-chan string) string {
	t.Helper()
	if _, err := io.WriteString(stdins[cmd], "\n"); err != nil {
		t.Fatal(err)
	}
	return expectLine(t, lines, "mapped")
}

// endChild closes the child's stdin, its cue to finish, and checks that it
// exits cleanly.
func endChild(t *testing.T, cmd *exec.Cmd, role string) {
	t.Helper()
	stdins[cmd].Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("%s: %v", role, err)
	}
}

// trimToBaseline trims pool and checks that it is back at its baseline
// usage base: Trim returned once the consumers answered and the blocks
// were freed (in stream order on s), nothing is cached or live.
func trimToBaseline(t *testing.T, pool *ipc.Pool, s *cuda.Stream, base uint64) {
	t.Helper()
	if err := pool.Trim(); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if c, _ := pool.Cached(); c != 0 || pool.Live() != 0 || usedBytes(t, pool) != base {
		t.Errorf("after Trim: %d cached, %d live, %d bytes used (baseline %d)", c, pool.Live(), usedBytes(t, pool), base)
	}
}

// TestRecycle: tensors of one size sent one after another (each given back
// before the next is allocated) reuse one allocation, which the consumer
// maps once; mixed sizes reuse one allocation per size. Trim retires the
// cached allocations: the consumer unmaps them, the pool is back at its
// baseline.
func TestRecycle(t *testing.T) {
	needCUDA(t)
	for _, tc := range []struct {
		name  string
		sizes []int64 // uint32 elements, in turn
	}{
		{"one size", []int64{4096}},
		{"mixed sizes", []int64{4096, 1000, 70000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 12
			pool, base, peer, cmd, lines := recycleSide(t, 16<<20, n)
			s := pool.Stream()
			first := map[int64]uintptr{}
			for i := 0; i < n; i++ {
				e := tc.sizes[i%len(tc.sizes)]
				p := sendRecycled(t, pool, peer, s, e, 1000+uint32(i))
				if q, ok := first[e]; ok && q != p {
					t.Errorf("tensor %d of %d elements at %#x, the first one at %#x: not reused", i, e, p, q)
				}
				first[e] = p
				waitFor(t, "the lease back", func() bool { return peer.Leases() == 0 })
			}
			k := len(tc.sizes)
			if got := expectLine(t, lines, "imports"); got != fmt.Sprintf("%d %d", k, k) {
				t.Errorf("the consumer's imports and mappings: %s, want %d %d", got, k, k)
			}
			var bytes int64
			for _, e := range tc.sizes {
				bytes += 4 * e
			}
			if c, b := pool.Cached(); c != k || b != bytes {
				t.Errorf("cached: %d blocks of %d bytes, want %d of %d", c, b, k, bytes)
			}
			if pool.Live() != 0 {
				t.Errorf("%d allocations live, want 0 (cached ones do not count)", pool.Live())
			}
			trimToBaseline(t, pool, s, base)
			if got := askMapped(t, cmd, lines); got != "0" {
				t.Errorf("after Trim the consumer keeps %s mappings, want 0", got)
			}
			endChild(t, cmd, "consumer")
		})
	}
}

// TestRecycleKilledConsumer: the cached allocations of a consumer that is
// killed are freed without Trim.
func TestRecycleKilledConsumer(t *testing.T) {
	needCUDA(t)
	const n = 3
	pool, base, peer, cmd, lines := recycleSide(t, 16<<20, n)
	s := pool.Stream()
	for i := 0; i < n; i++ {
		sendRecycled(t, pool, peer, s, int64(1000*(i+1)), 1000+uint32(i))
		waitFor(t, "the lease back", func() bool { return peer.Leases() == 0 })
	}
	expectLine(t, lines, "imports")
	if c, _ := pool.Cached(); c != n {
		t.Fatalf("%d cached, want %d", c, n)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitFor(t, "the pool's baseline", func() bool {
		s.Synchronize()
		c, _ := pool.Cached()
		return c == 0 && pool.Live() == 0 && usedBytes(t, pool) == base
	})
}

// TestRecycleLimit: with two cached allocations filling the pool's limit,
// an allocation of another size retires them (the consumer unmaps both)
// and succeeds.
func TestRecycleLimit(t *testing.T) {
	needCUDA(t)
	const a = 1 << 18 // uint32 elements: 1 MiB
	pool, _, peer, cmd, lines := recycleSide(t, 2*4*a, 3)
	s := pool.Stream()
	v1, err := pool.Alloc(s, dlpack.Uint32Type, a)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := pool.Alloc(s, dlpack.Uint32Type, a)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []*zerocopy.View{v1, v2} {
		fill(t, s, v, 1000+uint32(i))
		if err := peer.Send(pool, v, nil); err != nil {
			t.Fatal(err)
		}
		v.Close()
	}
	waitFor(t, "the leases back", func() bool { return peer.Leases() == 0 })
	if c, b := pool.Cached(); c != 2 || b != 2*4*a {
		t.Fatalf("cached: %d blocks of %d bytes, want 2 of %d", c, b, 2*4*a)
	}
	sendRecycled(t, pool, peer, s, a+a/2, 1002)
	if got := expectLine(t, lines, "imports"); got != "3 1" {
		t.Errorf("the consumer's imports and mappings: %s, want 3 1 (the two retired)", got)
	}
	waitFor(t, "the lease back", func() bool { return peer.Leases() == 0 })
	if c, _ := pool.Cached(); c != 1 {
		t.Errorf("%d cached, want 1", c)
	}
	// Over the limit with nothing left to retire but the block in use.
	v, err := pool.Alloc(s, dlpack.Uint32Type, a+a/2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Alloc(s, dlpack.Uint32Type, a); !errors.Is(err, ipc.ErrPoolFull) {
		t.Errorf("an allocation over the limit with only a block in use: %v, want ErrPoolFull", err)
	}
	v.Close()
	endChild(t, cmd, "consumer")
}

// violations is the fake driver's count of this process's frees of IPC
// pool blocks that ran while another live process still mapped them; 0
// on the real driver, which does not say.
func violations(t *testing.T) int {
	t.Helper()
	if fakeLib == "" {
		return 0
	}
	r, err := fakecuda.Call(fakeLib, "fakecuda_ipc_violations")
	if err != nil {
		t.Fatal(err)
	}
	return int(int32(r))
}

// TestCloseRetiresCached: the producer closes its connection to a consumer
// that is alive and keeps cached allocations mapped. Close retires them for
// that peer and waits for its answers, so each is freed after the
// consumer's unmap (the fake driver counts a free that runs while another
// process maps the block); an allocation another consumer maps stays
// cached for it. Then Trim brings the pool back to its baseline.
func TestCloseRetiresCached(t *testing.T) {
	needFake(t)
	const n = 3
	pool, base, ln, sock := producerSide(t, 16<<20)
	var peers []*ipc.Conn
	var cmds []*exec.Cmd
	var outs []<-chan string
	// The consumers' done events run late (the fake runs each 200 ms after
	// its record), so that the answers to Close's retires arrive well
	// before their blocks can be handed back: Close must wait for the
	// latter (it returned at the first one's, with the others answered
	// and still unsettled, in 4 of 10 runs).
	for i := 0; i < 2; i++ {
		cmd, lines, peer := acceptChild(t, ln, "recycle", sock, "IPC_TEST_N="+strconv.Itoa(n-i), "FAKECUDA_IPC_DELAY_MS=200")
		t.Cleanup(func() { peer.Close() })
		peers, cmds, outs = append(peers, peer), append(cmds, cmd), append(outs, lines)
	}
	before := violations(t)
	s := pool.Stream()
	// Tensor i (n distinct sizes, so that each stays cached) goes to both
	// consumers, except the last one: only to the first.
	for i := 0; i < n; i++ {
		v, err := pool.Alloc(s, dlpack.Uint32Type, int64(1000*(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		fill(t, s, v, 1000+uint32(i))
		to := peers
		if i == n-1 {
			to = peers[:1]
		}
		for _, p := range to {
			if err := p.Send(pool, v, nil); err != nil {
				t.Fatal(err)
			}
		}
		v.Close()
	}
	for i, want := range []int{n, n - 1} {
		if got := expectLine(t, outs[i], "imports"); got != fmt.Sprintf("%d %d", want, want) {
			t.Fatalf("consumer %d's imports and mappings: %s, want %d %d", i, got, want, want)
		}
	}
	waitFor(t, "the leases back", func() bool { return peers[0].Leases() == 0 && peers[1].Leases() == 0 })
	if c, _ := pool.Cached(); c != n {
		t.Fatalf("%d cached, want %d", c, n)
	}
	if err := peers[0].Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned after every retire's answer was handled: the block
	// only this consumer mapped is out of the cache already.
	if c, _ := pool.Cached(); c != n-1 {
		t.Errorf("when Close returned: %d cached, want %d (the ones the other consumer maps)", c, n-1)
	}
	// The frees queued by Close run now, while the first consumer lives.
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := violations(t) - before; got != 0 {
		t.Errorf("%d frees ran while the consumer still mapped the block: Close freed before the peer's unmap", got)
	}
	if cmds[0].ProcessState != nil {
		t.Fatalf("the first consumer exited early")
	}
	if got := askMapped(t, cmds[0], outs[0]); got != "0" {
		t.Errorf("after the producer's Close the first consumer keeps %s mappings, want 0", got)
	}
	if c, _ := pool.Cached(); c != n-1 {
		t.Errorf("after Close: %d cached, want %d (the ones the other consumer maps)", c, n-1)
	}
	if got := askMapped(t, cmds[1], outs[1]); got != strconv.Itoa(n-1) {
		t.Errorf("after the producer closed the other connection the second consumer keeps %s mappings, want %d", got, n-1)
	}
	trimToBaseline(t, pool, s, base)
	if got := violations(t) - before; got != 0 {
		t.Errorf("%d frees ran while a consumer still mapped the block", got)
	}
	if got := askMapped(t, cmds[1], outs[1]); got != "0" {
		t.Errorf("after Trim the second consumer keeps %s mappings, want 0", got)
	}
	for _, cmd := range cmds {
		endChild(t, cmd, "consumer")
	}
}

// TestCloseWhileHeld: the producer closes its connection while a live
// consumer holds tensors. Close returns at once and the leases do not
// end: the consumer's Recv returns io.EOF, the views it holds still read
// the values sent, the pool keeps them live; once the consumer closes them
// (or is killed) the leases end, the connection closes and the pool is
// back at its baseline, and no free ran while the consumer mapped a block.
func TestCloseWhileHeld(t *testing.T) {
	needCUDA(t)
	for _, kill := range []bool{false, true} {
		name := "given back"
		if kill {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) {
			const n = 5
			pool, base, ln, sock := producerSide(t, 16<<20)
			cmd, lines, peer := acceptChild(t, ln, "byehold", sock, "IPC_TEST_N="+strconv.Itoa(n))
			s := pool.Stream()
			for i := 0; i < n; i++ {
				v, err := pool.Alloc(s, dlpack.Uint32Type, int64(1000*(i+1)))
				if err != nil {
					t.Fatal(err)
				}
				fill(t, s, v, 7+uint32(i))
				if err := peer.Send(pool, v, nil); err != nil {
					t.Fatal(err)
				}
				v.Close()
			}
			expectLine(t, lines, "holding")
			before := violations(t)
			t0 := time.Now()
			if err := peer.Close(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("Close took %v with the peer holding tensors", d)
			}
			time.Sleep(100 * time.Millisecond)
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if peer.Leases() != n || pool.Live() != n {
				t.Fatalf("after Close, the consumer holding %d: %d leases, %d allocations live", n, peer.Leases(), pool.Live())
			}
			select {
			case <-peer.Done():
				t.Fatal("the connection ended while the consumer held its tensors")
			default:
			}
			if v, err := pool.Alloc(s, dlpack.Uint32Type, 16); err != nil {
				t.Fatal(err)
			} else {
				if err := peer.Send(pool, v, nil); !errors.Is(err, ipc.ErrClosed) {
					t.Errorf("Send after Close: %v, want ErrClosed", err)
				}
				v.Close()
			}
			io.WriteString(stdins[cmd], "\n")
			if got := expectLine(t, lines, "recv"); got != "EOF" {
				t.Errorf("the consumer's Recv after the producer's Close: %s, want EOF", got)
			}
			if got := expectLine(t, lines, "held"); got != "7 8 9 10 11" {
				t.Errorf("the held views read %s after the producer's Close, want 7 8 9 10 11", got)
			}
			if pool.Live() != n {
				t.Errorf("%d allocations live while the consumer holds %d", pool.Live(), n)
			}
			if kill {
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
			} else {
				stdins[cmd].Close()
				expectLine(t, lines, "released")
				if got := expectLine(t, lines, "closed"); got != "EOF" {
					t.Errorf("the consumer's connection after its last view closed: %s, want it ended by itself (EOF)", got)
				}
				if err := cmd.Wait(); err != nil {
					t.Fatalf("consumer: %v", err)
				}
			}
			select {
			case <-peer.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the connection did not end once the consumer gave its tensors back")
			}
			if peer.Leases() != 0 {
				t.Errorf("%d leases after the connection ended", peer.Leases())
			}
			waitFor(t, "the pool's baseline", func() bool {
				s.Synchronize()
				return pool.Live() == 0 && usedBytes(t, pool) == base
			})
			if got := violations(t) - before; got != 0 {
				t.Errorf("%d frees ran while the consumer still mapped the block", got)
			}
		})
	}
}

// childProducer makes a child's pool and waits for its peer on sock.
func childProducer(sock string) (*ipc.Pool, *ipc.Conn, error) {
	pool, err := ipc.NewPool(0, 16<<20)
	if err != nil {
		return nil, nil, err
	}
	ln, err := ipc.Listen(sock)
	if err != nil {
		return nil, nil, err
	}
	fmt.Println("listening")
	peer, err := ln.Accept()
	return pool, peer, err
}

// child plays the other side of a test.
func child(role, sock string) error {
	n, _ := strconv.Atoi(os.Getenv("IPC_TEST_N"))
	switch role {
	case "claim":
		token, _ := strconv.ParseUint(os.Getenv("IPC_TEST_TOKEN"), 10, 64)
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		var got []string
		for i := 0; i < 2; i++ {
			v, err := c.Claim(token)
			if err != nil {
				return err
			}
			x, err := read(v)
			if err != nil {
				return err
			}
			got = append(got, strconv.Itoa(int(x[999])))
			v.Close()
		}
		if _, err := c.Claim(token + 1); err != nil && strings.Contains(err.Error(), "refused") {
			got = append(got, "refused")
		}
		fmt.Println("claimed", strings.Join(got, " "))
		return c.Close()
	case "consume", "hold":
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		var held []*zerocopy.View
		for i := 0; i < n; i++ {
			v, err := c.Recv()
			if err != nil {
				return fmt.Errorf("tensor %d: %w", i, err)
			}
			if role == "hold" {
				held = append(held, v)
				continue
			}
			got, err := read(v)
			if err != nil {
				return err
			}
			want := uint32(i) * 2654435761
			sh := v.Shape()
			if len(sh) != 2 || sh[0] != int64(1+i%7) || sh[1] != 33 {
				return fmt.Errorf("tensor %d: shape %v", i, sh)
			}
			for j, x := range got {
				if x != want {
					return fmt.Errorf("tensor %d element %d = %#x, want %#x", i, j, x, want)
				}
			}
			v.Close()
		}
		if role == "hold" {
			for _, v := range held {
				if _, err := read(v); err != nil {
					return err
				}
			}
			fmt.Println("holding")
			select {} // until killed
		}
		fmt.Println("ok", n)
		return c.Close()
	case "writeback":
		// Receive n tensors; read each (uint32) and write 1000+i into it
		// in place, then close it; report what was read and the mappings
		// made, and stay until stdin closes.
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		var got []string
		for i := 0; i < n; i++ {
			v, err := c.Recv()
			if err != nil {
				return fmt.Errorf("tensor %d: %w", i, err)
			}
			x, err := read(v)
			if err != nil {
				return err
			}
			got = append(got, strconv.Itoa(int(x[0])))
			ctx, err := cuda.Retain(int(v.Device().ID))
			if err != nil {
				return err
			}
			s := ctx.WrapStream(v.Stream())
			if err := s.MemsetD32Async(cuda.DevicePtr(v.Ptr()), 1000+uint32(i), v.Len()); err == nil {
				err = s.Synchronize()
			}
			ctx.Release()
			if err != nil {
				return err
			}
			v.Close()
		}
		fmt.Println("wrote", strings.Join(got, " "), "imports", c.Imports())
		io.Copy(io.Discard, os.Stdin)
		return c.Close()
	case "release":
		// Receive one tensor, close it (its lease goes back with a done
		// event, which FAKECUDA_IPC_DELAY_MS makes complete late), and
		// stay until stdin closes.
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		v, err := c.Recv()
		if err != nil {
			return err
		}
		if spin, _ := time.ParseDuration(os.Getenv("IPC_TEST_SPIN")); spin > 0 {
			// On a GPU: a kernel that runs that long on the view's
			// stream, before the done event the close records.
			ctx, err := cuda.Retain(int(v.Device().ID))
			if err != nil {
				return err
			}
			defer ctx.Release()
			k, err := ctx.LoadKernels()
			if err != nil {
				return err
			}
			defer k.Unload()
			if err := k.SpinThenWrite(ctx.WrapStream(v.Stream()), cuda.DevicePtr(v.Ptr()), v.Len(), 7, spin); err != nil {
				return err
			}
		}
		v.Close()
		fmt.Println("released")
		io.Copy(io.Discard, os.Stdin)
		return c.Close()
	case "handover":
		// Receive one tensor and time its hand-over: from Recv's return
		// until the view is ready (the producer's ready event completed).
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		v, err := c.Recv()
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := v.Synchronize(); err != nil {
			return err
		}
		fmt.Println("handover", time.Since(t0).Nanoseconds())
		v.Close()
		return c.Close()
	case "forgedrecv":
		// Three forged descriptors (refused), then the honest one.
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		c.SetRecvTimeout(30 * time.Second)
		var got []string
		for i := 0; i < 3; i++ {
			v, err := c.Recv()
			switch {
			case errors.Is(err, ipc.ErrBadDescriptor):
				got = append(got, "refused")
			case err != nil:
				return err
			default:
				got = append(got, fmt.Sprintf("accepted%v", v.Shape()))
				v.Close()
			}
		}
		v, err := c.Recv()
		if err != nil {
			return err
		}
		x, err := read(v)
		if err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("ok %d %#x", len(x), x[len(x)-1]))
		v.Close()
		fmt.Println("forged", strings.Join(got, " "))
		return c.Close()
	case "byehold":
		// Hold n tensors (tensor i holds 7+i); once stdin says so (the
		// producer closed), report what Recv says and what the views hold;
		// once stdin ends, close them and report how the connection ended.
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		var held []*zerocopy.View
		for i := 0; i < n; i++ {
			v, err := c.Recv()
			if err != nil {
				return fmt.Errorf("tensor %d: %w", i, err)
			}
			held = append(held, v)
		}
		fmt.Println("holding", n)
		in := bufio.NewReader(os.Stdin)
		in.ReadString('\n')
		if _, err := c.Recv(); errors.Is(err, io.EOF) {
			fmt.Println("recv EOF")
		} else {
			fmt.Println("recv", err)
		}
		var got []string
		for _, v := range held {
			x, err := read(v)
			if err != nil {
				return err
			}
			w := x[0]
			for _, y := range x {
				if y != w {
					w = y
				}
			}
			got = append(got, strconv.FormatUint(uint64(w), 10))
		}
		fmt.Println("held", strings.Join(got, " "))
		io.Copy(io.Discard, in)
		for _, v := range held {
			if err := v.Close(); err != nil {
				return err
			}
		}
		fmt.Println("released")
		select {
		case <-c.Done():
			if _, err := c.Recv(); errors.Is(err, io.EOF) {
				fmt.Println("closed EOF")
			} else {
				fmt.Println("closed", err)
			}
		case <-time.After(30 * time.Second):
			fmt.Println("closed never")
		}
		return c.Close()
	case "recycle":
		// Check and close each tensor (value 1000+i in every element),
		// report the imports made and the mappings kept; then, once stdin
		// says so (the producer trimmed or retired), the mappings left.
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			v, err := c.Recv()
			if err != nil {
				return fmt.Errorf("tensor %d: %w", i, err)
			}
			got, err := read(v)
			if err != nil {
				return err
			}
			for j, x := range got {
				if x != 1000+uint32(i) {
					return fmt.Errorf("tensor %d element %d = %d, want %d", i, j, x, 1000+i)
				}
			}
			v.Close()
		}
		fmt.Println("imports", c.Imports(), c.Mapped())
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			// The answer to a retire may still be on its way here: the
			// producer asks once its Trim returned.
			fmt.Println("mapped", c.Mapped())
		}
		return c.Close()
	case "reuse":
		// One tensor at a time from the same stream, each allocated once
		// the previous lease came back: the allocation takes the block the
		// previous one's free gave up, in stream order.
		pool, peer, err := childProducer(sock)
		if err != nil {
			return err
		}
		streams := []*cuda.Stream{pool.Stream()}
		if os.Getenv("IPC_TEST_STREAMS") == "2" {
			ctx, err := cuda.Retain(0)
			if err != nil {
				return err
			}
			s2, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
			if err != nil {
				return err
			}
			streams = append(streams, s2)
		}
		var prev uintptr
		reused := 0
		for i := 0; i < n; i++ {
			s := streams[i%len(streams)]
			v, err := pool.Alloc(s, dlpack.Uint32Type, 1<<14)
			if err != nil {
				return err
			}
			if v.Ptr() == prev {
				reused++
			}
			prev = v.Ptr()
			if err := s.MemsetD32Async(cuda.DevicePtr(v.Ptr()), 100+uint32(i), v.Len()); err != nil {
				return err
			}
			if err := peer.Send(pool, v, nil); err != nil {
				return err
			}
			v.Close()
			for peer.Leases() > 0 {
				time.Sleep(time.Millisecond)
			}
		}
		for _, s := range streams {
			if err := s.Synchronize(); err != nil {
				return err
			}
		}
		fmt.Println("reused", reused)
		return peer.Close()
	case "slowread":
		// Copy each tensor on its own stream, give it back at once, read
		// the copies once the producer is gone (its frees all ran).
		c, err := ipc.Dial(sock)
		if err != nil {
			return err
		}
		ctx, err := cuda.Retain(0)
		if err != nil {
			return err
		}
		defer ctx.Release()
		var copies []cuda.DevicePtr
		for i := 0; i < n; i++ {
			v, err := c.Recv()
			if err != nil {
				return fmt.Errorf("tensor %d: %w", i, err)
			}
			nb := int64(v.Len()) * 4
			dst, err := ctx.MemAlloc(nb)
			if err != nil {
				return err
			}
			if err := ctx.WrapStream(v.Stream()).MemcpyDtoDAsync(dst, cuda.DevicePtr(v.Ptr()), nb); err != nil {
				return err
			}
			copies = append(copies, dst)
			if err := v.Close(); err != nil {
				return err
			}
		}
		if _, err := c.Recv(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("after the last tensor: %v, want io.EOF", err)
		}
		if err := ctx.Synchronize(); err != nil {
			return err
		}
		var got []string
		for _, p := range copies {
			w := make([]uint32, 1<<14)
			if err := ctx.MemcpyDtoH(cuda.SliceBytes(w), p); err != nil {
				return err
			}
			x := w[0]
			for _, y := range w {
				if y != w[0] {
					x = y
				}
			}
			got = append(got, strconv.FormatUint(uint64(x), 10))
			ctx.MemFree(p)
		}
		fmt.Println("read", strings.Join(got, " "))
		return c.Close()
	case "produce":
		pool, peer, err := childProducer(sock)
		if err != nil {
			return err
		}
		s := pool.Stream()
		for i := 0; i < n; i++ {
			v, err := pool.Alloc(s, dlpack.Uint32Type, 1<<16)
			if err != nil {
				return err
			}
			if err := s.MemsetD32Async(cuda.DevicePtr(v.Ptr()), 100+uint32(i), v.Len()); err != nil {
				return err
			}
			if err := peer.Send(pool, v, nil); err != nil {
				return err
			}
			v.Close()
			// One tensor at a time, so that each one's write is late.
			for os.Getenv("IPC_TEST_EXIT") != "1" && peer.Leases() > 0 {
				time.Sleep(time.Millisecond)
			}
		}
		if os.Getenv("IPC_TEST_EXIT") == "1" {
			// Exit with the lease held, once the consumer has the tensor
			// (it closes our stdin then).
			if err := s.Synchronize(); err != nil {
				return err
			}
			io.Copy(io.Discard, os.Stdin)
			return nil
		}
		for peer.Leases() > 0 {
			if _, err := peer.Recv(); err != nil {
				break
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// FuzzDescriptor: UnmarshalBinary of foreign bytes never panics, and what
// it accepts lies inside its allocation and encodes back to the same bytes.
func FuzzDescriptor(f *testing.F) {
	d := ipc.Descriptor{Size: 4096, Offset: 64, DType: dlpack.Float32Type, Shape: []int64{4, 8}, Strides: []int64{8, 1}, Lease: 7}
	b, _ := d.MarshalBinary()
	f.Add(b)
	f.Add(b[:20])
	f.Add(bytes.Repeat([]byte{0xff}, len(b)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d ipc.Descriptor
		if err := d.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ipc.ErrBadDescriptor) {
				t.Fatalf("error %v does not match ErrBadDescriptor", err)
			}
			return
		}
		lo, hi, err := dlpack.ByteSpan(d.DType, d.Shape, d.Strides, false)
		if err != nil || (lo != hi && (d.Offset+lo < 0 || d.Offset+hi > d.Size)) {
			t.Fatalf("accepted a layout outside its allocation: %+v", d)
		}
		back, err := d.MarshalBinary()
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("round trip changed the bytes")
		}
	})
}

// TestTrimFrozenPeer: Trim does not hang on a consumer that is alive but
// stopped. It returns an error that says so within about retireWait, and
// leaves the allocation retired: not freed while the consumer may map it
// (the fake driver counts such frees), freed once the consumer runs again
// and answers.
func TestTrimFrozenPeer(t *testing.T) {
	needCUDA(t)
	pool, base, peer, cmd, lines := recycleSide(t, 16<<20, 1)
	s := pool.Stream()
	sendRecycled(t, pool, peer, s, 4096, 1000)
	waitFor(t, "the lease back", func() bool { return peer.Leases() == 0 })
	expectLine(t, lines, "imports")
	if c, _ := pool.Cached(); c != 1 {
		t.Fatalf("%d cached, want 1", c)
	}
	before := violations(t)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err := pool.Trim()
	took := time.Since(t0)
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("Trim with a stopped peer: %v, want an error saying it did not answer", err)
	}
	if took > 20*time.Second {
		t.Errorf("Trim took %v with a stopped peer", took)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if c, _ := pool.Cached(); c != 0 || usedBytes(t, pool) == base {
		t.Errorf("while the peer is stopped: %d cached, %d bytes used (baseline %d): want the allocation retired, not freed", c, usedBytes(t, pool), base)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool's baseline", func() bool {
		s.Synchronize()
		return usedBytes(t, pool) == base
	})
	if got := askMapped(t, cmd, lines); got != "0" {
		t.Errorf("the consumer keeps %s mappings after answering, want 0", got)
	}
	if got := violations(t) - before; got != 0 {
		t.Errorf("%d frees ran while the consumer mapped the block", got)
	}
	endChild(t, cmd, "consumer")
}
