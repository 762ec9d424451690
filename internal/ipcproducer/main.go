package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ipcproducer:", err)
		os.Exit(1)
	}
}

func run() error {
	sock := flag.String("sock", "", "Unix socket path to listen on")
	n := flag.Int("n", 1000, "tensors to send")
	elems := flag.Int64("elems", 4096, "uint32 elements per tensor")
	window := flag.Int("window", 8, "tensors the consumer may hold at once")
	spin := flag.Duration("spin", 0, "how long the writing kernel spins first (a slow producer)")
	limit := flag.Int64("limit", 256<<20, "the pool's limit in bytes")
	bytes := flag.Int64("bytes", 0, "time hand-overs of one tensor of this many bytes instead")
	rounds := flag.Int("rounds", 50, "hand-overs to time with -bytes")
	flag.Parse()
	if *sock == "" {
		return fmt.Errorf("-sock is required")
	}
	if *bytes > 0 && *limit < *bytes {
		*limit = *bytes + (64 << 20)
	}
	pool, err := ipc.NewPool(0, *limit)
	if err != nil {
		return err
	}
	defer pool.Close()
	s := pool.Stream()
	if err := s.Synchronize(); err != nil {
		return err
	}
	_, base, err := pool.Usage()
	if err != nil {
		return err
	}
	ln, err := ipc.Listen(*sock)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("baseline", base)
	peer, err := ln.Accept()
	if err != nil {
		return err
	}
	ctx, err := cuda.Retain(0)
	if err != nil {
		return err
	}
	k, err := ctx.LoadKernels()
	if err != nil {
		return err
	}
	defer k.Unload()
	if *bytes > 0 {
		return handover(pool, peer, k, *bytes, *rounds)
	}
	sent := 0
	for i := 0; i < *n; i++ {
		for peer.Leases() >= *window {
			time.Sleep(50 * time.Microsecond)
		}
		v, err := pool.Alloc(s, dlpack.Uint32Type, *elems)
		if err != nil {
			return err
		}
		if err := k.SpinThenWrite(s, cuda.DevicePtr(v.Ptr()), *elems, uint32(i+1), *spin); err != nil {
			return err
		}
		err = peer.Send(pool, v, nil)
		v.Close()
		if err != nil {
			break // the consumer went away
		}
		sent++
	}
	fmt.Println("sent", sent)
	// Until the consumer gave everything back, closed, or died.
	for deadline := time.Now().Add(60 * time.Second); peer.Leases() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	// The allocations the consumer keeps mapped stay cached until retired.
	if err := pool.Trim(); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	_, used, err := pool.Usage()
	if err != nil {
		return err
	}
	fmt.Println("final", used, pool.Live())
	peer.Close()
	return nil
}

// handover sends one allocation of size bytes rounds times; the consumer
// times each hand-over on its side and closes the tensor, which comes back
// before the next round.
func handover(pool *ipc.Pool, peer *ipc.Conn, k *cuda.Kernels, size int64, rounds int) error {
	s := pool.Stream()
	v, err := pool.Alloc(s, dlpack.Uint32Type, size/4)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := k.SpinThenWrite(s, cuda.DevicePtr(v.Ptr()), size/4, 7, 0); err != nil {
		return err
	}
	for i := 0; i < rounds; i++ {
		if err := peer.Send(pool, v, nil); err != nil {
			return err
		}
		for peer.Leases() > 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	fmt.Println("sent", rounds)
	return s.Synchronize()
}
