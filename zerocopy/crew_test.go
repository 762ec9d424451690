package zerocopy

import (
	"sync/atomic"
	"testing"
)

// TestCrewRunsEachJobOnEveryWorker: a job started on a crew runs once on
// each of its workers, job after job (the next start waits for the last
// job's workers).
func TestCrewRunsEachJobOnEveryWorker(t *testing.T) {
	const n = 6
	c := newCrew(n)
	defer c.close()
	for round := range 3000 {
		var ran atomic.Int32
		c.start(func() { ran.Add(1) })
		c.fin.spinUntil(c.gen.load(), taskSpin) // the job's workers are done
		if got := int(ran.Load()); got != n {
			t.Fatalf("round %d: the job ran on %d workers, want %d", round, got, n)
		}
	}
}
