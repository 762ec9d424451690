package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

func main() {
	var err error
	if dir := os.Getenv("IPCBENCH_PRODUCER"); dir != "" {
		err = producer(dir, os.Getenv("IPCBENCH_MAX"), os.Getenv("IPCBENCH_FILL"), os.Getenv("IPCBENCH_IDLE"))
	} else {
		err = consumer()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ipcbench:", err)
		os.Exit(1)
	}
}

func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		mul := int64(1)
		switch {
		case strings.HasSuffix(f, "G"):
			mul, f = 1<<30, strings.TrimSuffix(f, "G")
		case strings.HasSuffix(f, "M"):
			mul, f = 1<<20, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "K"):
			mul, f = 1<<10, strings.TrimSuffix(f, "K")
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("size %q: want a positive number with an optional K, M or G", f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// The control socket (dir/ctl, SOCK_STREAM) between the two processes.
// The consumer asks, the producer answers:
//
//	'D' size  the dlbridge hand-over: allocate a fresh tensor of size bytes
//	          from the ipc.Pool, queue its write, then take the time and
//	          Send it over the ipc.Conn; answer the time taken just before
//	          Send and how long Send took (8 bytes each, nanoseconds of
//	          the wall clock). The consumer is already waiting in Recv.
//	'R' size  the driver alone: allocate a fresh block of size bytes from
//	          the raw pool, queue its write, record the event; answer the
//	          pointer's export data (64 bytes).
//	'F'       the consumer freed its import (and synchronized): close the
//	          dlbridge round's view (once its lease came back) and trim
//	          the pool (the consumer unmaps the allocation, it is freed),
//	          free the raw round's block, synchronize, answer one byte.
//	'K'       the consumer closed the dlbridge round's tensor: close the
//	          view (once its lease came back) and keep the allocation
//	          cached, the consumer keeping it mapped, so that the next 'D'
//	          of the same size takes it again; answer one byte.
//
// At the start the producer sends the raw pool's fd (SCM_RIGHTS) and the
// handle of the interprocess event it records for the driver-alone rounds.
const (
	askDlbridge = 'D'
	askRaw      = 'R'
	askFree     = 'F'
	askKeep     = 'K'
)

// producer serves the consumer's asks on dir/ctl and sends tensors over an
// ipc.Conn on dir/dlb. Its pools hold at most max bytes each. fill is how
// a fresh tensor gets its bytes: "device" queues a memset and sends at
// once; "host" copies them from host memory first (cuMemcpyHtoD, which
// returns once the copy is done), as a server filling a tensor with a
// request's data does. idle is how long the producer waits between the
// fill and the Send (a time.ParseDuration string; empty: none).
func producer(dir, maxArg, fill, idleArg string) error {
	max, err := strconv.ParseInt(maxArg, 10, 64)
	if err != nil {
		return err
	}
	var idle time.Duration
	if idleArg != "" {
		if idle, err = time.ParseDuration(idleArg); err != nil {
			return err
		}
	}
	limit := max + (64 << 20)
	pool, err := ipc.NewPool(0, limit)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, err := cuda.Retain(0)
	if err != nil {
		return err
	}
	raw, err := ctx.NewIPCMemPool(cuda.HandlePOSIXFD, uint64(limit))
	if err != nil {
		return err
	}
	if err := raw.SetReleaseThreshold(uint64(limit)); err != nil {
		return err
	}
	fd, err := raw.ExportFD() // before its pointers: the driver wants the pool shared first
	if err != nil {
		return err
	}
	ev, err := ctx.NewEvent(cuda.EventInterprocess)
	if err != nil {
		return err
	}
	eh, err := ev.IPCHandle()
	if err != nil {
		return err
	}
	s := pool.Stream()
	var src []byte
	if fill == "host" {
		src = make([]byte, max)
		for i := range src {
			src[i] = 1
		}
	}
	write := func(p cuda.DevicePtr, size int64) error {
		if src != nil {
			return ctx.MemcpyHtoD(p, src[:size])
		}
		return s.MemsetD8Async(p, 1, size)
	}
	ln, err := ipc.Listen(filepath.Join(dir, "dlb"))
	if err != nil {
		return err
	}
	defer ln.Close()
	cl, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "ctl"), Net: "unix"})
	if err != nil {
		return err
	}
	fmt.Println("listening")
	uc, err := cl.AcceptUnix()
	if err != nil {
		return err
	}
	if _, _, err := uc.WriteMsgUnix(eh[:], syscall.UnixRights(fd), nil); err != nil {
		return err
	}
	peer, err := ln.Accept()
	if err != nil {
		return err
	}
	defer peer.Close()
	r := bufio.NewReader(uc)
	var held interface{ Close() error } // the dlbridge round's view, until 'F'
	var rawPtr cuda.DevicePtr
	for {
		op, err := r.ReadByte()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var size int64
		if op == askDlbridge || op == askRaw {
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			size = int64(binary.LittleEndian.Uint64(b[:]))
		}
		switch op {
		case askDlbridge:
			v, err := pool.Alloc(s, dlpack.Uint8Type, size)
			if err != nil {
				return err
			}
			if err := write(cuda.DevicePtr(v.Ptr()), size); err != nil {
				return err
			}
			if idle > 0 {
				time.Sleep(idle)
			}
			t0 := time.Now()
			if err := peer.Send(pool, v, nil); err != nil {
				return err
			}
			sent := time.Since(t0)
			held = v
			var b [16]byte
			binary.LittleEndian.PutUint64(b[:], uint64(t0.UnixNano()))
			binary.LittleEndian.PutUint64(b[8:], uint64(sent))
			if _, err := uc.Write(b[:]); err != nil {
				return err
			}
		case askRaw:
			p, err := s.MemAllocFromPoolAsync(raw, size)
			if err != nil {
				return err
			}
			if err := write(p, size); err != nil {
				return err
			}
			if err := ev.Record(s); err != nil {
				return err
			}
			data, err := cuda.ExportPointer(p)
			if err != nil {
				return err
			}
			rawPtr = p
			if _, err := uc.Write(data[:]); err != nil {
				return err
			}
		case askKeep:
			if held != nil {
				held.Close()
				held = nil
				for peer.Leases() > 0 {
					time.Sleep(10 * time.Microsecond)
				}
			}
			if _, err := uc.Write([]byte{1}); err != nil {
				return err
			}
		case askFree:
			if held != nil {
				held.Close()
				held = nil
				for peer.Leases() > 0 {
					time.Sleep(10 * time.Microsecond)
				}
			}
			if err := pool.Trim(); err != nil {
				return err
			}
			if rawPtr != 0 {
				if err := s.MemFreeAsync(rawPtr); err != nil {
					return err
				}
				rawPtr = 0
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if _, err := uc.Write([]byte{1}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown ask %q", op)
		}
	}
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// consumer starts the producer and, per size and round, times the two
// ways to take over a fresh allocation of a pool already imported, with
// its ready event already open:
//
//   - dlbridge: from just before the producer's Send (the pointer's
//     export, the ready event's record, the descriptor on the socket) to
//     the consumer's Recv returning a view ready to use (the descriptor
//     read and decoded, the pointer imported, the import stream's wait for
//     the ready event queued);
//   - the driver alone: cuMemPoolImportPointer of the fresh pointer and
//     cuStreamWaitEvent on the opened event, timed around the two calls.
//
// Both rounds alternate, each on a fresh allocation whose earlier import
// was freed and synchronized on both sides, so both map the memory anew.
// The first round of each size is not timed.
//
// Then, per size, the steady state: the dlbridge hand-over timed the same
// way, of a tensor of the same size sent again after the consumer closed
// the previous one (its lease back), so that the producer's pool takes the
// cached allocation again and the consumer's mapping of it is reused (the
// first of these rounds, which maps it, is not timed).
func consumer() error {
	rounds := flag.Int("rounds", 30, "timed rounds per size")
	sizesArg := flag.String("sizes", "1M,64M,1G,4G", "tensor sizes (K, M, G suffixes)")
	fill := flag.String("fill", "device", `how the producer fills a tensor before sending it: "device" (a memset queued on its stream; Send follows at once) or "host" (a copy from host memory, done before Send)`)
	idle := flag.Duration("idle", 0, "how long the producer waits between the fill and the Send: the consumer sits idle in Recv that long (a host fill of a large tensor makes it wait too)")
	flag.Parse()
	if *fill != "device" && *fill != "host" {
		return fmt.Errorf("-fill %q: want device or host", *fill)
	}
	sizes, err := parseSizes(*sizesArg)
	if err != nil {
		return err
	}
	var max int64
	for _, n := range sizes {
		if n > max {
			max = n
		}
	}
	dir, err := os.MkdirTemp("", "ipcbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "IPCBENCH_PRODUCER="+dir, "IPCBENCH_MAX="+strconv.FormatInt(max, 10), "IPCBENCH_FILL="+*fill, "IPCBENCH_IDLE="+idle.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "listening\n" {
		return fmt.Errorf("producer: %q, %v", line, err)
	}

	ctx, err := cuda.Retain(0)
	if err != nil {
		return err
	}
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		return err
	}
	ctl, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir, "ctl"), Net: "unix"})
	if err != nil {
		return err
	}
	var eh cuda.IPCEventHandle
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := ctl.ReadMsgUnix(eh[:], oob)
	if err != nil || n != len(eh) {
		return fmt.Errorf("raw pool: %d bytes, %v", n, err)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("raw pool: no descriptor (%v)", err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil {
		return err
	}
	rawPool, err := ctx.ImportMemPoolFD(fds[0])
	syscall.Close(fds[0])
	if err != nil {
		return err
	}
	ev, err := ctx.OpenIPCEvent(eh)
	if err != nil {
		return err
	}
	c, err := ipc.Dial(filepath.Join(dir, "dlb"))
	if err != nil {
		return err
	}
	defer c.Close()
	request := func(op byte, size int64) error {
		b := []byte{op}
		if op == askDlbridge || op == askRaw {
			b = binary.LittleEndian.AppendUint64(b, uint64(size))
		}
		_, err := ctl.Write(b)
		return err
	}
	ask := func(op byte, size int64, reply []byte) error {
		if err := request(op, size); err != nil {
			return err
		}
		_, err := io.ReadFull(ctl, reply)
		return err
	}
	var one [1]byte
	// handOver asks the producer for a tensor of size bytes and receives
	// it (Recv waits before the producer sends, as a consumer serving
	// requests does); it returns the view, the hand-over time (from just
	// before the producer's Send to Recv returning, on the wall clock) and
	// the producer's part of it (Send returning).
	handOver := func(size int64) (v *zerocopy.View, hand, sent time.Duration, err error) {
		if err := request(askDlbridge, size); err != nil {
			return nil, 0, 0, err
		}
		v, err = c.Recv()
		t1 := time.Now().UnixNano()
		if err != nil {
			return nil, 0, 0, err
		}
		var t0b [16]byte
		if _, err := io.ReadFull(ctl, t0b[:]); err != nil {
			v.Close()
			return nil, 0, 0, err
		}
		return v, time.Duration(t1 - int64(binary.LittleEndian.Uint64(t0b[:8]))), time.Duration(binary.LittleEndian.Uint64(t0b[8:])), nil
	}
	// giveBack closes v and waits for its import stream, so that the
	// release (and, unless the allocation is kept mapped, the unmap) ran.
	giveBack := func(v *zerocopy.View) error {
		is := ctx.WrapStream(v.Stream())
		v.Close()
		return is.Synchronize()
	}
	fmt.Printf("# producer idle between fill and send: %v\n", *idle)
	fmt.Printf("# hand-over after first contact (producer fill: %s), medians in ns: dlbridge of a fresh allocation (send, import: its shares), driver alone, ratio = dlbridge / driver; recycled: dlbridge of the same size again (cached allocation, mapping kept), rratio = recycled / driver\n", *fill)
	fmt.Printf("%-12s %12s %12s %12s %12s %8s %12s %8s\n", "size", "dlbridge", "send", "import", "driver", "ratio", "recycled", "rratio")
	for _, size := range sizes {
		var hand, send, imp, drv []time.Duration
		for r := 0; r <= *rounds; r++ {
			v, d, sd, err := handOver(size)
			if err != nil {
				return err
			}
			if r == 0 {
				// First contact of this size: check the data once (the
				// producer's memset), through the view's stream order.
				var b [1]byte
				if err := v.Synchronize(); err != nil {
					return err
				}
				if err := ctx.MemcpyDtoH(b[:], cuda.DevicePtr(v.Ptr()+uintptr(size-1))); err != nil {
					return err
				}
				if b[0] != 1 {
					return fmt.Errorf("size %d: last byte %d, want 1", size, b[0])
				}
			} else {
				hand = append(hand, d)
				send = append(send, sd)
				imp = append(imp, c.LastImport())
			}
			if err := giveBack(v); err != nil {
				return err
			}
			if err := ask(askFree, 0, one[:]); err != nil {
				return err
			}
			// the driver alone
			var data cuda.PoolExportData
			if err := ask(askRaw, size, data[:]); err != nil {
				return err
			}
			t0 := time.Now()
			p, err := rawPool.ImportPointer(data)
			if err != nil {
				return fmt.Errorf("raw import: %w", err)
			}
			if err := s.WaitEvent(ev); err != nil {
				return err
			}
			dd := time.Since(t0)
			if r > 0 {
				drv = append(drv, dd)
			}
			if err := s.MemFreeAsync(p); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if err := ask(askFree, 0, one[:]); err != nil {
				return err
			}
		}
		// The steady state: the same size again, the allocation cached by
		// the producer and kept mapped here.
		var rec []time.Duration
		imports := 0
		for r := 0; r <= *rounds; r++ {
			v, d, _, err := handOver(size)
			if err != nil {
				return err
			}
			if r == 0 {
				imports = c.Imports()
			} else {
				if c.Imports() != imports {
					v.Close()
					return fmt.Errorf("size %d: the recycled round %d mapped a new allocation", size, r)
				}
				rec = append(rec, d)
			}
			if err := giveBack(v); err != nil {
				return err
			}
			if err := ask(askKeep, 0, one[:]); err != nil {
				return err
			}
		}
		if err := ask(askFree, 0, one[:]); err != nil { // trimmed: the next size starts fresh
			return err
		}
		h, sd, i, dr, rc := median(hand), median(send), median(imp), median(drv), median(rec)
		fmt.Printf("%-12d %12d %12d %12d %12d %8.2f %12d %8.2f\n", size, h, sd, i, dr, float64(h)/float64(dr), rc, float64(rc)/float64(dr))
	}
	ctl.CloseWrite()
	return cmd.Wait()
}
