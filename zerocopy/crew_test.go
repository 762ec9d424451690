package zerocopy

import (
	"sync/atomic"
	"testing"
)

// TestCrewSeats: each job runs on exactly the k workers it asks for,
// however k changes from job to job, and a worker left without a seat
// (woken for a job that was full) takes none in a later job under the
// wrong gen: the next start would then wait for a fin that never comes.
func TestCrewSeats(t *testing.T) {
	const n = 6
	c := newCrew(n)
	defer c.close()
	for round := range 3000 {
		k := 1 + (round*7+round/5)%n
		if round%11 == 0 {
			k = n + 3 // more than the crew: all of it
		}
		var ran atomic.Int32
		c.start(func() { ran.Add(1) }, k)
		c.fin.spinUntil(c.gen.load(), taskSpin) // the job's workers are done
		if got, want := int(ran.Load()), min(k, n); got != want {
			t.Fatalf("round %d: the job ran on %d workers, want %d", round, got, want)
		}
	}
}
