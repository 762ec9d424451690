package ipc_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

// soakTime is how long TestSoakMutatedPeers runs: IPC_SOAK (a duration;
// `make fuzz-long` sets 10m), 3 s in CI.
func soakTime(t *testing.T) time.Duration {
	if v := os.Getenv("IPC_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("IPC_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 3 * time.Second
}

// soakTemplates are valid messages of every kind a peer may send a
// Server: claims of the real offer and of unknown tokens, releases and
// retire answers with real event handles, retires, byes, a pool (with a
// real exported pool's descriptor) and tensors of that pool's allocation.
type soakTemplates struct {
	token  uint64
	poolFD int
	pool   []byte
	tensor []byte
	done   cuda.IPCEventHandle
	key    []byte // pool id and export data
}

// keep are the byte ranges of messages that a mutation leaves alone: the
// process id and descriptor number of event handles (the fake opens
// /proc/PID/fd/FD of whatever they name; a real driver checks its own).
type keep struct{ lo, hi int }

func (s *soakTemplates) pick(r *rand.Rand) (msg []byte, fd int, protect []keep) {
	fd = -1
	switch r.Intn(8) {
	case 0, 1:
		msg = make([]byte, 9)
		msg[0] = 4 // claim
		tok := s.token
		if r.Intn(3) == 0 {
			tok = r.Uint64()
		}
		binary.LittleEndian.PutUint64(msg[1:], tok)
	case 2:
		msg = make([]byte, 74)
		msg[0] = 3 // release
		binary.LittleEndian.PutUint64(msg[1:], uint64(r.Intn(8)))
		msg[9] = 1
		copy(msg[10:], s.done[:])
		protect = []keep{{18, 34}}
	case 3:
		msg = append([]byte{6}, s.key...) // retire
	case 4:
		msg = make([]byte, 146)
		msg[0] = 7 // retired
		copy(msg[1:], s.key)
		msg[81] = 1
		copy(msg[82:], s.done[:])
		protect = []keep{{90, 106}}
	case 5:
		msg = []byte{8} // bye
	case 6:
		msg, fd = append([]byte(nil), s.pool...), s.poolFD
	default:
		msg = append([]byte(nil), s.tensor...)
		protect = []keep{{129, 145}}
	}
	return msg, fd, protect
}

// mutate flips, sets, cuts or extends a few bytes of msg, outside protect.
func mutate(r *rand.Rand, msg []byte, protect []keep) []byte {
	n := 1 + r.Intn(4)
	for i := 0; i < n && len(msg) > 0; i++ {
		switch r.Intn(6) {
		case 0:
			msg = msg[:r.Intn(len(msg))+1]
		case 1:
			msg = append(msg, byte(r.Intn(256)))
		default:
			j := r.Intn(len(msg))
			ok := true
			for _, k := range protect {
				if j >= k.lo && j < k.hi {
					ok = false
				}
			}
			if ok {
				msg[j] ^= byte(1 << r.Intn(8))
				if r.Intn(4) == 0 {
					msg[j] = byte(r.Intn(256))
				}
			}
		}
	}
	if r.Intn(20) == 0 {
		msg[0] = byte(r.Intn(12))
	}
	return msg
}

func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSoakMutatedPeers: for soakTime, hostile peers connect to a Server
// one after another and send mutated valid messages (and claim, so that
// they hold leases they then give back wrongly), while an honest peer
// claims the offer every few milliseconds: each honest claim is served in
// time, nothing panics, and at the end the descriptors, the Go heap, the
// pool's live allocations and its used bytes are back where they started.
func TestSoakMutatedPeers(t *testing.T) {
	needFake(t)
	d := soakTime(t)
	pool, err := ipc.NewPool(0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	sock := sockPath(t)
	srv, err := ipc.Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	v, err := pool.Alloc(nil, dlpack.Uint32Type, 256)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, pool.Stream(), v, 99)
	token, err := srv.Offer(pool, v, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	pool.Stream().Synchronize()
	baseUsed := usedBytes(t, pool)

	// A pool of the hostile peer's own, to send with its messages.
	m := newPeerMem(t, 1<<20, 4096, nil)
	poolFD, data, h, uuid := m.poolFD, m.data, m.ready, m.uuid
	var id [16]byte
	id[0] = 9
	desc := ipc.Descriptor{Pool: id, Device: uuid, Data: data, Size: 4096, DType: dlpack.Uint32Type,
		Shape: []int64{1024}, Strides: []int64{1}, Ready: h, Lease: 1}
	body, err := desc.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	tpl := &soakTemplates{
		token: token, poolFD: poolFD, done: h,
		pool:   append(append([]byte{1}, id[:]...), uuid[:]...),
		tensor: append([]byte{2}, body...),
		key:    append(append([]byte(nil), id[:]...), data[:]...),
	}
	// A plain listener whose connections receive: what hostile peers
	// send there goes through the importer (pools, descriptors).
	recvSock := sockPath(t)
	ln, err := ipc.Listen(recvSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetRecvTimeout(time.Second)
				for {
					v, err := c.Recv()
					if v != nil {
						v.Close()
					}
					if err != nil && !errors.Is(err, ipc.ErrBadDescriptor) {
						return
					}
				}
			}()
		}
	}()
	var reported atomic.Int64
	ipc.SetErrorHandler(func(error) { reported.Add(1) })
	defer ipc.SetErrorHandler(nil)

	baseFDs := openFDs(t)
	baseHeap := heapBytes()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var honest, hostile, slowest atomic.Int64
	var honestErr, stuck atomic.Value
	wg.Add(1)
	go func() { // the honest peer
		defer wg.Done()
		c, err := ipc.Dial(sock)
		if err != nil {
			honestErr.Store(err)
			return
		}
		defer c.Close()
		c.SetTimeout(5 * time.Second)
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			// A claim still unanswered after a second: what every
			// goroutine waits on then, to tell what it waits behind.
			dump := time.AfterFunc(time.Second, func() {
				buf := make([]byte, 1<<22)
				stuck.Store(string(buf[:runtime.Stack(buf, true)]))
			})
			v, err := c.Claim(token)
			dump.Stop()
			if d := time.Since(t0); int64(d) > slowest.Load() {
				slowest.Store(int64(d))
			}
			if err != nil {
				honestErr.Store(err)
				return
			}
			got, err := read(v)
			v.Close()
			if err != nil || got[0] != 99 {
				honestErr.Store(err)
				return
			}
			honest.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(seed int64) { // hostile peers, one connection after another
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			buf := make([]byte, 1<<16)
			oobBuf := make([]byte, 64)
			for {
				select {
				case <-stop:
					return
				default:
				}
				target := sock
				if r.Intn(2) == 0 {
					target = recvSock
				}
				c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: target, Net: "unixpacket"})
				if err != nil {
					continue
				}
				for i := 0; i < 1+r.Intn(12); i++ {
					msg, fd, protect := tpl.pick(r)
					if r.Intn(4) != 0 {
						msg = mutate(r, msg, protect)
					}
					var oob []byte
					if fd >= 0 {
						oob = syscall.UnixRights(fd)
					}
					if _, _, err := c.WriteMsgUnix(msg, oob, nil); err != nil {
						break
					}
					c.SetReadDeadline(time.Now().Add(time.Millisecond))
					for {
						_, oobn, _, _, err := c.ReadMsgUnix(buf, oobBuf)
						if err != nil {
							break
						}
						closeRights(oobBuf[:oobn]) // the server's pool descriptor
					}
				}
				c.Close()
				hostile.Add(1)
			}
		}(int64(w) + time.Now().UnixNano())
	}
	// The resident set after a tenth of the run (the pools, events and
	// caches warmed up) against the end: the fake driver's C memory counts
	// too, which the Go heap does not show.
	time.Sleep(d / 10)
	warmRSS, warmGo := rssBytes(t), goHeld()
	time.Sleep(d - d/10)
	close(stop)
	wg.Wait()
	if err := honestErr.Load(); err != nil {
		t.Fatalf("the honest peer was not served (after %d claims, %d hostile connections): %v", honest.Load(), hostile.Load(), err)
	}
	t.Logf("%v: %d honest claims (the slowest %v), %d hostile connections, %d errors reported",
		d, honest.Load(), time.Duration(slowest.Load()), hostile.Load(), reported.Load())
	if s := time.Duration(slowest.Load()); s > 2*time.Second {
		t.Errorf("an honest claim took %v among the hostile peers", s)
	}
	if s, ok := stuck.Load().(string); ok {
		t.Logf("the goroutines a second into the last claim that took more than one:\n%s", s)
	}
	if honest.Load() == 0 || hostile.Load() == 0 {
		t.Fatalf("%d honest claims, %d hostile connections", honest.Load(), hostile.Load())
	}
	for deadline := time.Now().Add(30 * time.Second); openFDs(t) > baseFDs+4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			ents, _ := os.ReadDir("/proc/self/fd")
			var open []string
			for _, e := range ents {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				open = append(open, l)
			}
			t.Fatalf("%d descriptors open, %d at the start: %v", len(ents), baseFDs, open)
		}
	}
	waitFor(t, "the pool's leases to end", func() bool {
		pool.Stream().Synchronize()
		return pool.Live() == 1 && usedBytes(t, pool) == baseUsed
	})
	if grown := int64(heapBytes()) - int64(baseHeap); grown > 8<<20 {
		t.Errorf("the Go heap grew by %d bytes", grown)
	}
	grown, goGrown := rssBytes(t)-warmRSS, goHeld()-warmGo
	t.Logf("from a tenth of the run to its end: the resident set grew by %d bytes, the memory Go's runtime holds by %d", grown, goGrown)
	if e := os.Getenv("DLBRIDGE_EMULATED"); e != "" {
		// The fake driver starts a thread per interprocess event record,
		// and qemu-user keeps memory of every thread that ended
		// (scripts/qemu-exec.sh): the native runs check the resident set.
		t.Logf("the resident set is not checked under %s", e)
	} else if grown > 64<<20 {
		t.Errorf("the resident set grew by %d bytes from a tenth of the run to its end (the Go runtime's memory by %d of them)", grown, goGrown)
	}
}

// closeRights closes the descriptors an SCM_RIGHTS message brought.
func closeRights(oob []byte) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if fds, err := syscall.ParseUnixRights(&m); err == nil {
			for _, fd := range fds {
				syscall.Close(fd)
			}
		}
	}
}

// goHeld is the memory Go's runtime holds from the OS and has not given
// back (stacks, heap, its own structures): what of the resident set is
// Go's, the rest being C's (the fake driver's).
func goHeld() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.Sys - m.HeapReleased)
}

// rssBytes is the process's resident set (/proc/self/statm).
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		t.Fatal(err)
	}
	return rss * int64(os.Getpagesize())
}
