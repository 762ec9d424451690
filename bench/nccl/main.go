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
//
// Nothing waits without a deadline: each measurement has -deadline, and
// a rank that passes it prints what it waited on (the operation, the run,
// how many operations it had issued and the communicator's state) and
// exits; the communicator's -timeout bounds each NCCL call and aborts it
// when a peer does not come. Every failure is printed on stdout as a line
// starting with "# go rank", which run.sh keeps.
package main

import (
	"flag"
	"fmt"
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
	minB := flag.Int64("min-bytes", 64<<20, "smallest bandwidth size in bytes")
	maxB := flag.Int64("max-bytes", 1<<30, "largest bandwidth size in bytes")
	timeout := flag.Duration("timeout", time.Minute, "the communicator's timeout (initialization, each operation)")
	flag.DurationVar(&deadline, "deadline", 2*time.Minute, "deadline of one measurement (all its runs)")
	flag.Parse()
	w, err := nccl.FromEnv(&nccl.Config{Timeout: *timeout})
	if err != nil {
		fatal("join: %v", err)
	}
	rank = w.Rank
	c := w.Comm()
	ctx, err := zerocopy.DeviceContext(c.Device())
	if err != nil {
		fatal("%v", err)
	}
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		fatal("%v", err)
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
		fatal("finalize: %v", err)
	}
	w.Close()
}

var (
	rank     = -1
	deadline time.Duration
)

// fatal prints a failure where run.sh keeps it (stdout, "# go rank")
// and exits.
func fatal(format string, args ...any) {
	fmt.Printf("# go rank %d error: %s\n", rank, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// state says where the communicator is, for a failure's line.
func state(c *nccl.Comm) string {
	st := "healthy"
	if err := c.AsyncError(); err != nil {
		st = err.Error()
	}
	return fmt.Sprintf("operations issued on the communicator: %d; its state: %s", c.Issued(), st)
}

// run times iters operations of op over bytes, reps times, with events on s.
func run(c *nccl.Comm, s *cuda.Stream, op string, bytes int64, iters, reps int) {
	n := bytes / 4
	src, err := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, n)
	if err != nil {
		fatal("%v", err)
	}
	dst, err := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, n)
	if err != nil {
		fatal("%v", err)
	}
	peer := (c.Rank() + 1) % c.Size()
	prev := (c.Rank() + c.Size() - 1) % c.Size()
	what := fmt.Sprintf("%s bytes=%d", op, bytes)
	one := func() error {
		if op == "all_reduce" {
			return c.AllReduce(dst, dst, nccl.Sum, s) // in place, as torch.distributed.all_reduce
		}
		return c.SendRecv(s, nccl.P2P{Peer: peer, View: src}, nccl.P2P{Peer: prev, View: dst, Recv: true})
	}
	start, err := s.Context().NewEvent(cuda.EventTiming)
	if err != nil {
		fatal("%v", err)
	}
	end, err := s.Context().NewEvent(cuda.EventTiming)
	if err != nil {
		fatal("%v", err)
	}
	due := time.Now().Add(deadline)
	for i := 0; i < 3; i++ { // warm-up: connections, buffers
		if err := one(); err != nil {
			fatal("%s: warm-up operation %d: %v", what, i+1, err)
		}
	}
	var us []float64
	for r := 0; r < reps; r++ {
		if err := start.Record(s); err != nil {
			fatal("%v", err)
		}
		for i := 0; i < iters; i++ {
			if err := one(); err != nil {
				fatal("%s: run %d of %d, operation %d of %d: %v", what, r+1, reps, i+1, iters, err)
			}
			if time.Now().After(due) {
				fatal("%s: run %d of %d: %d of %d operations issued when the deadline %v passed; %s",
					what, r+1, reps, i+1, iters, deadline, state(c))
			}
		}
		if err := end.Record(s); err != nil {
			fatal("%v", err)
		}
		// The end event, polled with the deadline (a synchronization
		// would wait for ever on a peer that never comes).
		for {
			done, err := end.Query()
			if err != nil {
				fatal("%s: run %d of %d: waiting for the end event: %v", what, r+1, reps, err)
			}
			if done {
				break
			}
			if time.Now().After(due) {
				fatal("%s: run %d of %d: the stream had not run the %d operations issued when the deadline %v passed; %s",
					what, r+1, reps, iters, deadline, state(c))
			}
			time.Sleep(100 * time.Microsecond)
		}
		d, err := cuda.ElapsedTime(start, end)
		if err != nil {
			fatal("%v", err)
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
