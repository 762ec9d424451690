package nccl

import (
	"slices"
	"strings"
	"testing"
)

// Which ranks an operation's error names as not having come, from the
// facts Missing gathers. With a rank gone, a live rank that had not yet
// issued the operation is late, not the cause: a slow survivor asked
// before it reached the operation must not be named (nor rebuilt around).
func TestMissingOf(t *testing.T) {
	all := []int{0, 1, 2, 3}
	for _, tc := range []struct {
		name   string
		dead   map[int]string
		got    map[int]uint64
		want   []int
		detail []string
	}{
		{"gone, another late", map[int]string{3: "exited"}, map[int]uint64{0: 0, 1: 1, 2: 1},
			[]int{3}, []string{"rank 3: exited", "rank 0: alive, issued 0 operations (late, not the cause)"}},
		{"none gone, one behind", nil, map[int]uint64{0: 1, 1: 1, 2: 1, 3: 0},
			[]int{3}, []string{"rank 3: alive, issued 0 operations"}},
		{"gone, another silent", map[int]string{3: "exited"}, map[int]uint64{0: 1, 1: 1},
			[]int{2, 3}, []string{"rank 2: no answer from its process", "rank 3: exited"}},
		{"rank 0 not asked", map[int]string{3: "exited"}, nil,
			[]int{3}, []string{"rank 3: exited"}},
		{"left the communicator", nil, map[int]uint64{0: 1, 1: 1, 2: noComm, 3: 1},
			nil, []string{"every rank is alive and issued operation 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranks, detail := missingOf(1, all, tc.dead, tc.got, 1)
			if !slices.Equal(ranks, tc.want) {
				t.Errorf("ranks %v, want %v (detail %q)", ranks, tc.want, detail)
			}
			for _, d := range tc.detail {
				if !strings.Contains(detail, d) {
					t.Errorf("detail %q lacks %q", detail, d)
				}
			}
		})
	}
}
