// Command nccl (bench/nccl) measures a Go rank's NCCL operations: all-reduce
// and send/receive bandwidth from 64 MiB to 1 GiB, and the latency of a
// 4 KiB all-reduce, timed with CUDA events on the rank's stream. Start it
// as torchrun starts ranks (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK); torch_bench.py beside it measures torch.distributed the
// same way, so that the two print lines a reader compares as ratios.
//
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 ./ncclbench &
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 ./ncclbench
//
// Rank 0 prints one line per measurement: op, bytes, microseconds per
// operation (median of -reps runs of -iters operations), algorithm and bus
// bandwidth in GB/s (nccl-tests' definitions).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/nccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func main() {
	iters := flag.Int("iters", 20, "operations per timed run (bandwidth)")
	latIters := flag.Int("lat-iters", 1000, "operations per timed run (4 KiB latency)")
	reps := flag.Int("reps", 5, "timed runs per size; the median is printed")
	minB := flag.Int64("min", 64<<20, "smallest bandwidth size in bytes")
	maxB := flag.Int64("max", 1<<30, "largest bandwidth size in bytes")
	flag.Parse()
	w, err := nccl.FromEnv(nil)
	if err != nil {
		log.Fatal(err)
	}
	c := w.Comm()
	ctx, err := zerocopy.DeviceContext(c.Device())
	if err != nil {
		log.Fatal(err)
	}
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		log.Fatal(err)
	}
	if w.Rank == 0 {
		v, _ := nccl.Version()
		fmt.Printf("# go ranks=%d nccl=%d lib=%s NCCL_P2P_DISABLE=%q NCCL_SHM_DISABLE=%q NCCL_NET=%q\n",
			c.Size(), v, nccl.LibraryPath(), os.Getenv("NCCL_P2P_DISABLE"), os.Getenv("NCCL_SHM_DISABLE"), os.Getenv("NCCL_NET"))
	}
	run(c, s, "all_reduce", 4096, *latIters, *reps)
	run(c, s, "send_recv", 4096, *latIters, *reps)
	for b := *minB; b <= *maxB; b *= 2 {
		run(c, s, "all_reduce", b, *iters, *reps)
		run(c, s, "send_recv", b, *iters, *reps)
	}
	if err := c.Finalize(); err != nil {
		log.Fatal(err)
	}
	w.Close()
}

// run times iters operations of op over bytes, reps times, with events on s.
func run(c *nccl.Comm, s *cuda.Stream, op string, bytes int64, iters, reps int) {
	n := bytes / 4
	src, err := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, n)
	if err != nil {
		log.Fatal(err)
	}
	dst, err := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, n)
	if err != nil {
		log.Fatal(err)
	}
	peer := (c.Rank() + 1) % c.Size()
	prev := (c.Rank() + c.Size() - 1) % c.Size()
	one := func() error {
		if op == "all_reduce" {
			return c.AllReduce(dst, dst, nccl.Sum, s) // in place, as torch.distributed.all_reduce
		}
		return c.SendRecv(s, nccl.P2P{Peer: peer, View: src}, nccl.P2P{Peer: prev, View: dst, Recv: true})
	}
	start, _ := s.Context().NewEvent(cuda.EventTiming)
	end, _ := s.Context().NewEvent(cuda.EventTiming)
	for i := 0; i < 3; i++ { // warm-up: connections, buffers
		if err := one(); err != nil {
			log.Fatal(err)
		}
	}
	var us []float64
	for r := 0; r < reps; r++ {
		if err := start.Record(s); err != nil {
			log.Fatal(err)
		}
		for i := 0; i < iters; i++ {
			if err := one(); err != nil {
				log.Fatal(err)
			}
		}
		if err := end.Record(s); err != nil {
			log.Fatal(err)
		}
		if err := end.Synchronize(); err != nil {
			log.Fatal(err)
		}
		d, err := cuda.ElapsedTime(start, end)
		if err != nil {
			log.Fatal(err)
		}
		us = append(us, float64(d)/float64(time.Microsecond)/float64(iters))
	}
	sort.Float64s(us)
	med := us[len(us)/2]
	alg := float64(bytes) / med / 1e3
	bus := alg
	if op == "all_reduce" {
		bus = alg * 2 * float64(c.Size()-1) / float64(c.Size())
	}
	if c.Rank() == 0 {
		fmt.Printf("go %s bytes=%d us=%.2f algbw=%.2f busbw=%.2f\n", op, bytes, med, alg, bus)
	}
	_ = start.Destroy()
	_ = end.Destroy()
	_ = src.Close()
	_ = dst.Close()
}
