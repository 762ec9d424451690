package nccl

import (
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
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

// Rank 0 takes the frames only it sends (a rank gone, a rebuild answer)
// from no other rank: a rank that sends them cannot have rank 0 believe a
// live rank gone, nor stop rank 0's reader of its connection by filling
// the answers nobody reads there (its end is still noticed).
func TestRankZeroIgnoresFramesOnlyItSends(t *testing.T) {
	w := &World{Rank: 0, Size: 3, dead: map[int]string{}, left: map[int]bool{}, changed: make(chan struct{}),
		conns: map[int]net.Conn{}, asks: map[int]uint32{}, answers: make(chan []byte, 4),
		queries: map[uint32]chan []byte{}, subs: map[*Comm][]int{}}
	ours, theirs := net.Pipe()
	w.conns[1] = ours
	go w.serve(1, ours)
	sent := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 4*cap(w.answers) && err == nil; i++ {
			err = writeFrame(theirs, msgAnswer, make([]byte, 16))
		}
		if err == nil {
			err = writeFrame(theirs, msgDead, binary.LittleEndian.AppendUint32(nil, 2))
		}
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0 stopped reading the rank's connection (rebuild answers it never reads)")
	}
	theirs.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(w.Dead(), []int{1}) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := w.Dead(); !slices.Equal(got, []int{1}) {
		t.Fatalf("dead ranks %v, want [1] (the rank whose connection closed; not rank 2, which it named)", got)
	}
}
