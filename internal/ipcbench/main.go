package main

import (
	"bufio"
	"flag"
	"fmt"
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
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

func main() {
	var err error
	if os.Getenv("IPCBENCH_PRODUCER") != "" {
		err = producer(os.Getenv("IPCBENCH_PRODUCER"), os.Getenv("IPCBENCH_SIZES"))
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
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// producer: offers one tensor per size on the server (dir/srv) and, for
// the driver baseline, a raw pool of its own: its fd, then per size the
// export data of an allocation and a recorded interprocess event's handle,
// over dir/raw.
func producer(dir, sizesArg string) error {
	sizes, err := parseSizes(sizesArg)
	if err != nil {
		return err
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	pool, err := ipc.NewPool(0, total+(64<<20))
	if err != nil {
		return err
	}
	srv, err := ipc.Serve(filepath.Join(dir, "srv"))
	if err != nil {
		return err
	}
	ctx, err := cuda.Retain(0)
	if err != nil {
		return err
	}
	raw, err := ctx.NewIPCMemPool(cuda.HandlePOSIXFD, uint64(total+(64<<20)))
	if err != nil {
		return err
	}
	fd, err := raw.ExportFD() // before its pointers: the driver wants the pool shared first
	if err != nil {
		return err
	}
	s := pool.Stream()
	ev, err := ctx.NewEvent(cuda.EventInterprocess)
	if err != nil {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "raw"), Net: "unix"})
	if err != nil {
		return err
	}
	var tokens []string
	var rawMsgs [][]byte
	for _, n := range sizes {
		v, err := pool.Alloc(s, dlpack.Uint8Type, n)
		if err != nil {
			return err
		}
		if err := s.MemsetD8Async(cuda.DevicePtr(v.Ptr()), 1, n); err != nil {
			return err
		}
		tok, err := srv.Offer(pool, v, time.Hour, 0)
		if err != nil {
			return err
		}
		tokens = append(tokens, strconv.FormatUint(tok, 10))
		p, err := s.MemAllocFromPoolAsync(raw, n)
		if err != nil {
			return err
		}
		data, err := cuda.ExportPointer(p)
		if err != nil {
			return err
		}
		rawMsgs = append(rawMsgs, data[:])
	}
	if err := ev.Record(s); err != nil {
		return err
	}
	eh, err := ev.IPCHandle()
	if err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	fmt.Println("tokens", strings.Join(tokens, ","))
	uc, err := ln.AcceptUnix()
	if err != nil {
		return err
	}
	msg := append([]byte{}, eh[:]...)
	for _, m := range rawMsgs {
		msg = append(msg, m...)
	}
	if _, _, err := uc.WriteMsgUnix(msg, syscall.UnixRights(fd), nil); err != nil {
		return err
	}
	// Until the consumer is done.
	var b [1]byte
	uc.Read(b[:])
	return nil
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func consumer() error {
	rounds := flag.Int("rounds", 30, "timed rounds per size")
	sizesArg := flag.String("sizes", "1M,16M,256M,1G,4G", "tensor sizes")
	flag.Parse()
	sizes, err := parseSizes(*sizesArg)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ipcbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "IPCBENCH_PRODUCER="+dir, "IPCBENCH_SIZES="+*sizesArg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("producer: %v", err)
	}
	toks := strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "tokens ")), ",")

	// The driver alone: import the raw pool once, open the event once,
	// then per size ImportPointer + WaitEvent, timed; the free untimed.
	ctx, err := cuda.Retain(0)
	if err != nil {
		return err
	}
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		return err
	}
	rc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir, "raw"), Net: "unix"})
	if err != nil {
		return err
	}
	buf := make([]byte, 64+64*len(sizes))
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := rc.ReadMsgUnix(buf, oob)
	if err != nil || n != len(buf) {
		return fmt.Errorf("raw handles: %d bytes, %v", n, err)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("raw handles: no descriptor (%v)", err)
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
	var eh cuda.IPCEventHandle
	copy(eh[:], buf[:64])
	ev, err := ctx.OpenIPCEvent(eh)
	if err != nil {
		return err
	}
	driver := make([]time.Duration, len(sizes))
	for i := range sizes {
		var data cuda.PoolExportData
		copy(data[:], buf[64+64*i:])
		var ds []time.Duration
		for r := 0; r <= *rounds; r++ {
			t0 := time.Now()
			p, err := rawPool.ImportPointer(data)
			if err != nil {
				return fmt.Errorf("raw import: %w", err)
			}
			if err := s.WaitEvent(ev); err != nil {
				return err
			}
			d := time.Since(t0)
			if err := s.MemFreeAsync(p); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if r > 0 {
				ds = append(ds, d)
			}
		}
		driver[i] = median(ds)
	}

	c, err := ipc.Dial(filepath.Join(dir, "srv"))
	if err != nil {
		return err
	}
	for i, size := range sizes {
		tok, _ := strconv.ParseUint(toks[i], 10, 64)
		var claims, imports []time.Duration
		for r := 0; r <= *rounds; r++ {
			t0 := time.Now()
			v, err := c.Claim(tok)
			if err != nil {
				return err
			}
			d := time.Since(t0)
			imp := c.LastImport()
			if r == 0 {
				// First contact: check the data once (the producer's
				// memset), through the view's stream order.
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
				claims = append(claims, d)
				imports = append(imports, imp)
			}
			v.Close()
			time.Sleep(300 * time.Microsecond) // the release reaches the producer
		}
		im := median(imports)
		fmt.Printf("size %d claim %d import %d driver %d ratio %.2f\n", size, median(claims), im, driver[i], float64(im)/float64(driver[i]))
	}
	var b [1]byte
	rc.Write(b[:])
	c.Close()
	return cmd.Wait()
}
