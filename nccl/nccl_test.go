package nccl_test

import (
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

func TestKilledRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"peer check", nil},
		{"deadline only", []string{"FAKENCCL_NO_PEER_CHECK=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"DLBRIDGE_NCCL_TIMEOUT=3s"}, tc.env...)
			res := spawn(t, "kill", ranks(t, 4), time.Minute, env...)
			for _, r := range res {
				if r.code != 0 {
					t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
				}
			}
			t.Logf("rank 0:\n%s", res[0].output)
		})
	}
}

func TestHungRank(t *testing.T) {
	res := spawn(t, "hang", ranks(t, 3), time.Minute, "DLBRIDGE_NCCL_TIMEOUT=2s")
	for _, r := range res {
		if r.code != 0 {
			t.Errorf("rank %d exited %d:\n%s", r.rank, r.code, r.output)
		}
	}
	t.Logf("rank 0:\n%s", res[0].output)
}
