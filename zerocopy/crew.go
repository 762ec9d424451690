package zerocopy

import "sync/atomic"

// crew is a staging ring's host-copy workers: goroutines that keep their
// OS threads between transfers, parked in the kernel on a gate, so that
// one wake starts them all at once.
//
// Goroutines parked the usual way (a channel, a WaitGroup) are restarted
// by the Go scheduler one thread after another, each woken thread waking
// the next. On the H100 machine, a 16-vCPU virtual machine where waking an
// idle vCPU takes tens of microseconds, the first 8 MiB of a staged upload
// were copied by two workers out of twelve and each piece's workers
// started over 0.45 ms (BenchmarkStagedTimeline, task-taken steps,
// bench/results/h100-2026-11-23-session5); polling instead of parking did
// not help, because a goroutine that yields does not make the scheduler
// wake another thread.
type crew struct {
	n    int
	gen  gate   // moves to hand out a job, or to quit
	job  func() // set before gen moves
	quit atomic.Bool
	left atomic.Int32
	done chan struct{}
}

// newCrew starts n workers.
func newCrew(n int) *crew {
	c := &crew{n: n, done: make(chan struct{}, 1)}
	for range n {
		go c.loop()
	}
	return c
}

func (c *crew) loop() {
	var seen uint32
	for {
		seen = c.gen.waitChange(seen)
		if c.quit.Load() {
			return
		}
		c.job()
		if c.left.Add(-1) == 0 {
			c.done <- struct{}{}
		}
	}
}

// run runs job on every worker at once and returns when all of them have
// returned. One run at a time: the transfer that holds the ring.
func (c *crew) run(job func()) {
	c.job = job
	c.left.Store(int32(c.n))
	c.gen.store(c.gen.load() + 1)
	<-c.done
	c.job = nil
}

// close lets the workers end. The crew must be idle.
func (c *crew) close() {
	c.quit.Store(true)
	c.gen.store(c.gen.load() + 1)
}
