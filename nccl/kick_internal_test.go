package nccl

import (
	"testing"
	"time"
)

// kick, which aborts a communicator under a blocking call from another
// goroutine, spares a call that has only just been registered (it may not
// have reached NCCL yet, and an abort would free the communicator under
// it): it waits for the call to return. A call still in progress after
// kickAfter is aborted under.
func TestKickSparesAStartingCall(t *testing.T) {
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := InitRank(id, 1, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.abort()
	h := c.h
	// A call registered and ended 50 ms later, as a quick call returns.
	done := c.enter("all_reduce", 1, &h)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done()
	}()
	start := time.Now()
	c.kick()
	if took := time.Since(start); c.aborted.Load() || took < 40*time.Millisecond {
		t.Fatalf("kick aborted=%v after %v: it must wait for a call younger than %v to return, not abort under it",
			c.aborted.Load(), took, kickAfter)
	}
	// A call that stays in NCCL: aborted under, once kickAfter passed.
	done = c.enter("init", 0, &h)
	defer done()
	start = time.Now()
	c.kick()
	if took := time.Since(start); !c.aborted.Load() || took < kickAfter-10*time.Millisecond {
		t.Fatalf("kick aborted=%v after %v: want an abort under a call in progress for %v", c.aborted.Load(), took, kickAfter)
	}
}
