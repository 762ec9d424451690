package zerocopy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSimplify(t *testing.T) {
	type got struct {
		Shape, DS, SS []int64
		DOff, SOff    int64
	}
	tests := []struct {
		name          string
		shape, ds, ss []int64
		once          bool
		want          got
	}{
		{"C both sides: one run", []int64{2, 3, 4}, []int64{12, 4, 1}, []int64{12, 4, 1}, true,
			got{[]int64{24}, []int64{1}, []int64{1}, 0, 0}},
		{"extent-1 dims dropped", []int64{1, 3, 1, 4}, []int64{99, 4, 7, 1}, []int64{5, 4, 3, 1}, true,
			got{[]int64{12}, []int64{1}, []int64{1}, 0, 0}},
		{"transpose: two dims, ordered by dst", []int64{3, 4}, []int64{1, 3}, []int64{4, 1}, true,
			got{[]int64{4, 3}, []int64{3, 1}, []int64{1, 4}, 0, 0}},
		{"both reversed: flipped", []int64{5}, []int64{-1}, []int64{-2}, true,
			got{[]int64{5}, []int64{1}, []int64{2}, -4, -8}},
		{"column block: rows merge, not columns", []int64{4, 2, 3}, []int64{6, 3, 1}, []int64{20, 10, 1}, true,
			got{[]int64{8, 3}, []int64{3, 1}, []int64{10, 1}, 0, 0}},
		{"broadcast both sides, once", []int64{3, 4}, []int64{0, 1}, []int64{0, 1}, true,
			got{[]int64{4}, []int64{1}, []int64{1}, 0, 0}},
		{"broadcast both sides, every time", []int64{3, 4}, []int64{0, 1}, []int64{0, 1}, false,
			got{[]int64{4, 3}, []int64{1, 0}, []int64{1, 0}, 0, 0}},
		{"nil source", []int64{2, 3}, []int64{3, 1}, nil, true,
			got{[]int64{6}, []int64{1}, []int64{0}, 0, 0}},
		{"one element", []int64{1, 1}, []int64{4, 1}, []int64{1, 1}, true,
			got{[]int64{}, []int64{}, []int64{}, 0, 0}},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			var p pair
			if !p.simplify(c.shape, c.ds, c.ss, 1, 1, c.once) {
				t.Fatal("reported empty")
			}
			g := got{p.shape[:p.nd], p.ds[:p.nd], p.ss[:p.nd], p.doff, p.soff}
			if diff := cmp.Diff(c.want, g); diff != "" {
				t.Errorf("simplify(%v, %v, %v) (-want +got):\n%s", c.shape, c.ds, c.ss, diff)
			}
		})
	}
	var p pair
	if p.simplify([]int64{3, 0}, []int64{1, 1}, []int64{1, 1}, 1, 1, true) {
		t.Error("an empty shape was not reported")
	}
}

// The odometer visits every index in row-major order with both offsets.
func TestOdometer(t *testing.T) {
	shape, ds, ss := []int64{2, 3}, []int64{3, 1}, []int64{1, 2}
	var idx [2]int64
	o := odometer{shape: shape, ds: ds, ss: ss, idx: idx[:], doff: 100}
	var got [][3]int64
	for {
		got = append(got, [3]int64{o.idx[0]*10 + o.idx[1], o.doff, o.soff})
		if !o.next() {
			break
		}
	}
	want := [][3]int64{{0, 100, 0}, {1, 101, 2}, {2, 102, 4}, {10, 103, 1}, {11, 104, 3}, {12, 105, 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("odometer (-want +got):\n%s", diff)
	}
	if o.doff != 100 || o.soff != 0 || idx != [2]int64{} {
		t.Errorf("not back at the start: %+v", o)
	}
	z := odometer{} // 0-d: one index
	if z.next() {
		t.Error("a 0-d odometer has more than one index")
	}
}
