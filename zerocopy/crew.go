package zerocopy

import (
	"sync/atomic"
	"time"
)

// crew is a staging ring's host-copy workers: goroutines that keep their
// OS threads between transfers, parked in the kernel on a gate, so that
// one wake starts them all at once.
//
// Goroutines parked the usual way (a channel, a WaitGroup) are restarted
// by the Go scheduler one thread after another, each woken thread waking
// the next; where waking an idle vCPU takes tens of microseconds (the H100
// machine), a piece's workers then started over 0.45 ms, and polling
// instead of parking did not help: a goroutine that yields does not make
// the scheduler wake another thread (bench/results/staged-h100).
type crew struct {
	n    int
	gen  gate   // moves to hand out a job, or to quit
	job  func() // set before gen moves
	quit atomic.Bool
	left atomic.Int32
	fin  gate // set to gen's value when the job's last worker returns
}

// newCrew starts n workers.
func newCrew(n int) *crew {
	c := &crew{n: n}
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
			c.fin.store(seen)
		}
	}
}

// start starts job on every worker and returns; the caller then runs job
// too, because its thread is running already (the first task starts while
// the crew's threads wake), and waits for the work to be done by its own
// means (the pipeline's end). A worker woken late, when nothing is left,
// returns from the job on its own instead of holding up the caller (0.1
// ms at the end of a 64 MiB upload on the H100 machine); the next start
// waits for the last job's workers first. One job at a time: the
// transfer that holds the ring.
func (c *crew) start(job func()) {
	if c.n == 0 {
		return
	}
	g := c.gen.load()
	c.fin.spinUntil(g, taskSpin) // every worker is out of the last job
	c.job = job
	c.left.Store(int32(c.n))
	// One futex call wakes every worker: when the first worker up woke
	// the others instead, so that the caller went on sooner, the crew
	// started half as fast after the vCPUs had idled (BenchmarkWakeCrew,
	// bench/results/staged-h100).
	c.gen.store(g + 1)
}

// close lets the workers end. The crew must be idle.
func (c *crew) close() {
	c.quit.Store(true)
	c.gen.store(c.gen.load() + 1)
}

// spinUntil returns once the counter is v, polling for up to d before it
// sleeps.
func (g *gate) spinUntil(v uint32, d time.Duration) {
	t0 := time.Now()
	for n := 0; g.load() != v; n++ {
		if n%64 == 63 && time.Since(t0) > d {
			// One load per round: with two (check, then wait for a
			// change from a second read), a store of v between them
			// made the waiter wait for v to change, which it never
			// does: TestCrewRunsEachJobOnEveryWorker hung in two of three
			// runs of 20 x 3,000 rounds under the race detector, and
			// a transfer's caller waits on its end the same way.
			for {
				cur := g.load()
				if cur == v {
					return
				}
				g.waitChange(cur)
			}
		}
	}
}

// oneAtATime runs a job on one goroutine at a time, and once more after
// it whenever another asked for it meanwhile: one that finds the job
// running leaves a note (again) that the runner reads after it lets go,
// so no request is lost while the one that made it goes on without
// waiting. The staged pipeline publishes pieces and queues DMAs this way:
// a mutex parked a waiting worker in the Go scheduler, and the caller's
// goroutine, locked to its thread in a call from C (Python), then handed
// its P away and had to win one back.
type oneAtATime struct {
	busy, again atomic.Bool
}

// do runs f now, or leaves it to the goroutine running it.
func (o *oneAtATime) do(f func()) {
	o.again.Store(true)
	for o.again.Load() {
		if o.busy.Load() || !o.busy.CompareAndSwap(false, true) {
			return // the runner will see again
		}
		o.again.Store(false)
		f()
		o.busy.Store(false)
	}
}
