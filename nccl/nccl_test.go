package nccl_test

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestEveryOperationFourProcesses(t *testing.T) {
	res := spawn(t, "ops", ranks(t, 4), 2*time.Minute, "DLBRIDGE_NCCL_TIMEOUT=60s")
	for _, r := range res {
		if r.code != 0 || !strings.Contains(r.output, "ok") {
			t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
		}
	}
}

// TestLeavingRankIsNoFailure: a rank that closes its World after a split
// it took part in does not fail a rank whose Split has yet to return.
func TestLeavingRankIsNoFailure(t *testing.T) {
	if os.Getenv("DLBRIDGE_GPU") == "1" {
		t.Skip("FAKENCCL_SPLIT_DELAY_MS is the fake's")
	}
	res := spawn(t, "leave", ranks(t, 4), time.Minute, "DLBRIDGE_NCCL_TIMEOUT=20s",
		"FAKENCCL_SPLIT_DELAY_MS=500", "FAKENCCL_SPLIT_DELAY_RANK=0")
	for _, r := range res {
		if r.code != 0 || !strings.Contains(r.output, "ok") {
			t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
		}
	}
}

// opTimeout is the deadline of the failure tests: short against the fake,
// and on a GPU long enough for NCCL's own initialization (a second or
// more: contexts, topology, connections), which the deadline also bounds.
func opTimeout(fake time.Duration) string {
	if os.Getenv("DLBRIDGE_GPU") == "1" {
		return "20s"
	}
	return fake.String()
}

// A rank that exits makes the others' next operation fail well before
// the deadline: the control plane sees its connection close and aborts
// the communicator, since NCCL itself may never notice (over NVLink and
// shared memory, as the fake by default); over the network transport
// (FAKENCCL_PEER_CHECK=1: the fake reports a closed connection as NCCL's
// proxy does) NCCL's error or the control plane, whichever comes first.
func TestKilledRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"nvlink", nil},
		{"network", []string{"FAKENCCL_PEER_CHECK=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"DLBRIDGE_NCCL_TIMEOUT=" + opTimeout(20*time.Second)}, tc.env...)
			res := spawn(t, "kill", ranks(t, 4), 2*time.Minute, env...)
			for _, r := range res {
				if r.code != 0 {
					t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
				}
			}
			t.Logf("rank 0:\n%s", res[0].output)
		})
	}
}

// A rank that exits after a split fails its half's survivors at once on
// the split communicator too (the World learned the split's members at
// Split), and leaves the other half's operations alone.
func TestKilledRankAfterSplit(t *testing.T) {
	res := spawn(t, "splitkill", ranks(t, 4), 2*time.Minute, "DLBRIDGE_NCCL_TIMEOUT="+opTimeout(20*time.Second))
	for _, r := range res {
		if r.code != 0 {
			t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
		}
	}
	if len(res) == 4 && !strings.Contains(res[1].output, "expected failure") {
		t.Errorf("rank 1 (the dead rank's half) did not report its failure:\n%s", res[1].output)
	}
	t.Logf("rank 1:\n%s", res[1].output)
}

// Operations issued back to back, with the watchdog following them from
// its goroutine, never overlap a call of NCCL (the fake fails the
// communicator when two calls overlap, which NCCL does not survive), and
// each waits for the previous one to leave ncclInProgress.
func TestBackToBack(t *testing.T) {
	res := spawn(t, "burst", ranks(t, 2), 2*time.Minute, "DLBRIDGE_NCCL_TIMEOUT=60s")
	for _, r := range res {
		if r.code != 0 || !strings.Contains(r.output, "ok") {
			t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
		}
	}
}

func TestHungRank(t *testing.T) {
	res := spawn(t, "hang", ranks(t, 3), 2*time.Minute, "DLBRIDGE_NCCL_TIMEOUT="+opTimeout(2*time.Second))
	for _, r := range res {
		if r.code != 0 {
			t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
		}
	}
	t.Logf("rank 0:\n%s", res[0].output)
}
