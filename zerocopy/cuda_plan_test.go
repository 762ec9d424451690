package zerocopy

import (
	"testing"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/google/go-cmp/cmp"
)

// planSummary is the comparable part of a bytePlan.
type planSummary struct {
	Run        int64
	Shape      []int64
	DS, SS     []int64
	DOff, SOff int64
	Empty      bool
}

func summarize(p bytePlan) planSummary {
	return planSummary{p.run, append([]int64{}, p.shape[:p.nd]...), append([]int64{}, p.ds[:p.nd]...),
		append([]int64{}, p.ss[:p.nd]...), p.doff, p.soff, p.empty}
}

func TestPlanBytes(t *testing.T) {
	cases := []struct {
		name           string
		shape, ds, ss  []int64
		is             int64
		want           planSummary
		pitched, blk3d bool
	}{
		{"contiguous", []int64{4, 5}, []int64{5, 1}, []int64{5, 1}, 4,
			planSummary{Run: 80, Shape: []int64{}, DS: []int64{}, SS: []int64{}}, true, false},
		{"column block", []int64{20, 13}, []int64{13, 1}, []int64{30, 1}, 4,
			planSummary{Run: 52, Shape: []int64{20}, DS: []int64{52}, SS: []int64{120}}, true, false},
		{"sub-volume", []int64{4, 4, 6}, []int64{24, 6, 1}, []int64{80, 10, 1}, 2,
			planSummary{Run: 12, Shape: []int64{4, 4}, DS: []int64{48, 12}, SS: []int64{160, 20}}, true, true},
		{"transpose", []int64{3, 2}, []int64{2, 1}, []int64{1, 3}, 4,
			planSummary{Run: 4, Shape: []int64{3, 2}, DS: []int64{8, 4}, SS: []int64{4, 12}}, true, false},
		{"both reversed", []int64{8, 5}, []int64{5, -1}, []int64{5, -1}, 4,
			planSummary{Run: 160, Shape: []int64{}, DS: []int64{}, SS: []int64{}, DOff: -16, SOff: -16}, true, false},
		{"src reversed", []int64{8}, []int64{1}, []int64{-1}, 4,
			planSummary{Run: 4, Shape: []int64{8}, DS: []int64{4}, SS: []int64{-4}}, false, false},
		{"broadcast both", []int64{5, 8}, []int64{0, 1}, []int64{0, 1}, 4,
			planSummary{Run: 32, Shape: []int64{}, DS: []int64{}, SS: []int64{}}, true, false},
		{"broadcast src", []int64{5, 8}, []int64{8, 1}, []int64{0, 1}, 4,
			planSummary{Run: 32, Shape: []int64{5}, DS: []int64{32}, SS: []int64{0}}, false, false},
		{"extent 1 ignored", []int64{1, 6, 1}, []int64{99, 1, 7}, []int64{3, 1, -5}, 8,
			planSummary{Run: 48, Shape: []int64{}, DS: []int64{}, SS: []int64{}}, true, false},
		{"empty", []int64{3, 0}, []int64{0, 1}, []int64{0, 1}, 4, planSummary{Run: 4, Shape: []int64{}, DS: []int64{}, SS: []int64{}, Empty: true}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planBytes(c.shape, c.ds, c.ss, c.is)
			if d := cmp.Diff(c.want, summarize(p)); d != "" {
				t.Fatalf("plan (-want +got):\n%s", d)
			}
			if p.pitched() != c.pitched {
				t.Errorf("pitched %v, want %v", p.pitched(), c.pitched)
			}
			if b, _, ok := p.blocks(); ok && (b.depth > 1) != c.blk3d {
				t.Errorf("3D block %v, want %v (%+v)", b.depth > 1, c.blk3d, b)
			}
		})
	}
}

func TestBlocksEach(t *testing.T) {
	// A 4-d copy whose two inner dims nest (a 3D block), looped over the
	// outer two: offsets in loop order.
	p := planBytes([]int64{2, 3, 4, 5}, []int64{60, 20, 5, 1}, []int64{1000, 200, 10, 1}, 1)
	b, calls, ok := p.blocks()
	if !ok || calls != 2 || b.depth != 3 || b.height != 4 || b.width != 5 {
		t.Fatalf("block %+v, calls %d, ok %v", b, calls, ok)
	}
	var got [][2]int64
	b.each(func(d, s int64) error { got = append(got, [2]int64{d, s}); return nil })
	if d := cmp.Diff([][2]int64{{0, 0}, {60, 1000}}, got); d != "" {
		t.Fatal(d)
	}
}

func TestLikeStrides(t *testing.T) {
	cases := []struct {
		shape, ref []int64
		strides    []int64
		off, n     int64
	}{
		{[]int64{2, 3}, []int64{3, 1}, []int64{3, 1}, 0, 6},
		{[]int64{2, 3}, []int64{1, 2}, []int64{1, 2}, 0, 6},
		{[]int64{2, 3}, []int64{-3, 1}, []int64{-3, 1}, 3, 6},
		{[]int64{5, 8}, []int64{0, 1}, []int64{0, 1}, 0, 8},
		{[]int64{4, 0}, []int64{1, 1}, []int64{1, 1}, 0, 0},
		{[]int64{}, []int64{}, []int64{}, 0, 1},
	}
	for _, c := range cases {
		st, off, n := likeStrides(c.shape, c.ref)
		if d := cmp.Diff(c.strides, st); d != "" || off != c.off || n != c.n {
			t.Errorf("likeStrides(%v, %v) = %v %d %d, want %v %d %d", c.shape, c.ref, st, off, n, c.strides, c.off, c.n)
		}
	}
}

func TestPieces(t *testing.T) {
	// 1-d: cut by bytes.
	ps := pieces([]int64{10}, []int64{1}, []int64{1}, 4, 16)
	var got [][3]int64
	for _, p := range ps {
		got = append(got, [3]int64{p.shape[0], p.hoff, p.doff})
	}
	if d := cmp.Diff([][3]int64{{4, 0, 0}, {4, 4, 4}, {2, 8, 8}}, got); d != "" {
		t.Fatalf("1-d pieces: %s", d)
	}
	// 2-d, a row bigger than a chunk: rows one by one, then cut inside.
	ps = pieces([]int64{2, 6}, []int64{6, 1}, []int64{10, 1}, 1, 4)
	var total int64
	for _, p := range ps {
		n := int64(1)
		for _, e := range p.shape {
			n *= e
		}
		if n > 4 {
			t.Fatalf("piece %+v exceeds the chunk", p)
		}
		total += n
	}
	if total != 12 || len(ps) != 4 {
		t.Fatalf("%d pieces covering %d elements: %+v", len(ps), total, ps)
	}
	if ps[2].hoff != 6 || ps[2].doff != 10 {
		t.Errorf("third piece %+v: want host offset 6, device offset 10", ps[2])
	}
}

func TestRampCutsTheFirstAndLastPiecesIntoQuarters(t *testing.T) {
	// A transposed 2-d upload (host column-major, device row-major) of 96
	// rows of 64 KiB in 2 MiB buffers: pieces of 32 rows, the first and
	// the last cut into 4 of 8 rows.
	const rows, cols, chunk = 96, 16 << 10, 2 << 20 // float32: a row is 64 KiB
	hs, ds := []int64{1, rows}, []int64{cols, 1}
	ps := ramp(pieces([]int64{rows, cols}, hs, ds, 4, chunk), hs, ds, 4, chunk)
	if len(ps) != 4+1+4 {
		t.Fatalf("%d pieces, want 9: %+v", len(ps), ps)
	}
	// Every element is in exactly one piece, at the right offsets.
	seen := make(map[[2]int64]bool)
	for _, p := range ps {
		for r := range p.shape[0] {
			hoff, doff := p.hoff+r*hs[0], p.doff+r*ds[0]
			if hoff%hs[0] != 0 || doff != (hoff/hs[0])*ds[0] {
				t.Fatalf("piece %+v row %d: host offset %d and device offset %d disagree", p, r, hoff, doff)
			}
			for c := int64(0); c < p.shape[1]; c += p.shape[1] - 1 {
				k := [2]int64{hoff / hs[0], c}
				if seen[k] {
					t.Fatalf("element %v twice", k)
				}
				seen[k] = true
			}
		}
	}
	if len(seen) != rows*2 {
		t.Fatalf("%d of %d row ends covered", len(seen), rows*2)
	}
	for i, p := range ps {
		row, n := int64(8*i), int64(8)
		if i == 4 {
			n = 32
		} else if i > 4 {
			row = int64(64 + 8*(i-5))
		}
		if p.shape[0] != n || p.doff != row*ds[0] {
			t.Errorf("ramp piece %d = %+v, want %d rows at row %d", i, p, n, row)
		}
	}
	// One piece, or pieces too small to quarter: unchanged.
	one := pieces([]int64{100}, []int64{1}, []int64{1}, 4, chunk)
	if got := ramp(one, []int64{1}, []int64{1}, 4, chunk); len(got) != 1 {
		t.Errorf("a one-piece transfer was cut: %+v", got)
	}
}

// TestPlaceStagesAnUploadsQuartersInOneBuffer: an upload of 8 MiB through
// four 1 MiB buffers is 4 quarters, 6 whole pieces and 4 quarters. The
// first quarters share one use of a buffer, so the next three pieces take
// the other buffers without waiting for a DMA, and so do the last
// quarters; an upload's buffers are given when a use is published (take),
// none before. A download gives every piece a buffer of its own, in turn,
// each later use waiting for the buffer's previous one.
func TestPlaceStagesAnUploadsQuartersInOneBuffer(t *testing.T) {
	const size, chunk = 8 << 20, 1 << 20
	s := []int64{1}
	ps := ramp(pieces([]int64{size}, s, s, 1, chunk), s, s, 1, chunk)
	p := &pipeline{x: &xfer{is: 1}, r: &ring{bufs: make([]*cuda.HostMem, 4), size: chunk}, ps: ps, h2d: true}
	p.dev.strides = s
	p.place()
	// Where each piece goes: buffer, offset, the previous use's last
	// piece, whether it opens a use, and the use's pieces.
	type where struct {
		b          int
		off        int64
		prev       int
		first      bool
		start, end int
	}
	got := func() []where {
		var w []where
		for _, sl := range p.at {
			w = append(w, where{sl.b, sl.off, sl.prev, sl.first, sl.start, sl.end})
		}
		return w
	}
	q := int64(chunk / 4)
	var want []where
	for i := range 4 {
		want = append(want, where{-1, int64(i) * q, -1, i == 0, 0, 3})
	}
	for i := 4; i < 10; i++ {
		want = append(want, where{-1, 0, -1, true, i, i})
	}
	for i := range 4 {
		want = append(want, where{-1, int64(i) * q, -1, i == 0, 10, 13})
	}
	if diff := cmp.Diff(want, got(), cmp.AllowUnexported(where{})); diff != "" {
		t.Errorf("upload slots (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{-1, -1, -1, -1}, p.held); diff != "" {
		t.Errorf("buffers held before any publication (-want +got):\n%s", diff)
	}

	p.h2d = false
	p.place()
	for i, w := range got() {
		want := where{i % 4, 0, i - 4, true, i, i}
		if i < 4 {
			want.prev = -1
		}
		if w != want {
			t.Errorf("download piece %d: slot %+v, want %+v", i, w, want)
		}
	}
}
