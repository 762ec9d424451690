//go:build linux

package zerocopy

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkWakeWorkers measures how long 12 idle goroutines take to start
// after one goroutine hands them work: through a channel (as the staged
// pipeline's workers got their tasks before crew), and through one futex
// wake of goroutines parked in the futex system call (gate, as crew's
// workers wait). It prints the median and the last start (microseconds)
// over the rounds. The channel's goroutines may all run on the waker's
// thread one after another, so its figure is when each began, not how
// many ran at once; the futex figure is the time to wake 12 threads.
// bench/results/staged-h100 has its output on the H100.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench WakeWorkers -test.benchtime 1x
func BenchmarkWakeWorkers(b *testing.B) {
	const n, rounds = 12, 50
	report := func(name string, run func() []time.Duration) {
		var med, last []float64
		for range rounds {
			ds := run()
			slices.Sort(ds)
			med = append(med, float64(ds[n/2].Nanoseconds())/1e3)
			last = append(last, float64(ds[n-1].Nanoseconds())/1e3)
			time.Sleep(2 * time.Millisecond) // let the threads go idle
		}
		slices.Sort(med)
		slices.Sort(last)
		fmt.Printf("wake %-8s n=%d: median start %.1f us (p50 over rounds), last start p50 %.1f us, p90 %.1f us\n",
			name, n, med[rounds/2], last[rounds/2], last[rounds*9/10])
	}
	report("channel", func() []time.Duration {
		ch := make(chan time.Time)
		out := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { t0 := <-ch; out[i] = time.Since(t0) })
		}
		time.Sleep(time.Millisecond)
		t0 := time.Now()
		for range n {
			ch <- t0
		}
		wg.Wait()
		return out
	})
	report("futex", func() []time.Duration {
		var g gate
		out := make([]time.Duration, n)
		var t0 time.Time
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { g.waitChange(0); out[i] = time.Since(t0) })
		}
		time.Sleep(time.Millisecond)
		t0 = time.Now()
		g.store(1)
		wg.Wait()
		return out
	})
	for b.Loop() {
	}
}

// BenchmarkWakeCrew measures when each of 7 goroutines parked in a gate
// (a staged transfer's crew with 8 workers) starts after one store, by
// how they are woken: the storer wakes all (all, as crew does), the
// storer wakes one that wakes all (relay), or the storer wakes two and
// each woken one wakes two more (tree). The threads idle 2 ms or 100 ms
// between rounds: the GPU machine's virtual CPUs are slow to wake after
// idling. bench/results/staged-h100 has its figures.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench WakeCrew -test.benchtime 1x
func BenchmarkWakeCrew(b *testing.B) {
	const n = 7
	for _, idle := range []time.Duration{2 * time.Millisecond, 100 * time.Millisecond} {
		for _, how := range []string{"all", "relay", "tree"} {
			rounds := min(50, int(3*time.Second/idle))
			var med, last []float64
			var g gate
			var woken atomic.Uint32
			out := make([]atomic.Int64, n) // ns from t0
			var t0 atomic.Int64            // UnixNano of the store
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					var seen uint32
					for r := 0; r < rounds; r++ {
						seen = g.waitChange(seen)
						switch how {
						case "relay":
							if woken.Swap(seen) != seen {
								g.wake()
							}
						case "tree":
							wakeUpTo(&g, 2)
						}
						out[i].Store(time.Now().UnixNano() - t0.Load())
					}
				})
			}
			for r := range rounds {
				time.Sleep(idle)
				ds := make([]time.Duration, n)
				for i := range out {
					ds[i] = time.Duration(out[i].Load())
				}
				if r > 0 {
					slices.Sort(ds)
					med = append(med, float64(ds[n/2].Nanoseconds())/1e3)
					last = append(last, float64(ds[n-1].Nanoseconds())/1e3)
				}
				t0.Store(time.Now().UnixNano())
				switch how {
				case "all":
					g.store(uint32(r + 1))
				case "relay":
					g.v.Store(uint32(r + 1))
					wakeUpTo(&g, 1)
				case "tree":
					g.v.Store(uint32(r + 1))
					wakeUpTo(&g, 2)
				}
			}
			wg.Wait()
			slices.Sort(med)
			slices.Sort(last)
			k := len(med)
			fmt.Printf("wake crew idle %v %-5s n=%d: median start p50 %.1f us, last start p50 %.1f us, p90 %.1f us\n",
				idle, how, n, med[k/2], last[k/2], last[k*9/10])
		}
	}
	for b.Loop() {
	}
}

// wakeUpTo wakes up to n of g's waiters (gate wakes all of them).
func wakeUpTo(g *gate, n int) {
	if g.waiters.Load() > 0 {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&g.v)), futexWakePrivate, uintptr(n), 0, 0, 0)
	}
}
