//go:build linux

package zerocopy

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkWakeWorkers measures how long 12 idle goroutines take to start
// after one goroutine hands them work: through a channel (as the staged
// pipeline's workers got their tasks before crew), and through one futex
// wake of goroutines parked in the futex system call (gate, as crew's
// workers wait). It prints the median and the last start (microseconds)
// over the rounds. The channel's goroutines may all run on the waker's
// thread one after another, so its figure is when each began, not how
// many ran at once; the futex figure is the time to wake 12 threads.
// On the H100 machine: channel 7-10 us, futex 35-60 us, while parked
// pipeline workers took 0.45 ms to all be running
// (bench/results/h100-2026-11-23-session5/run1-1308121).
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
