package zerocopy

import (
	"fmt"

	"github.com/dlbridge/dlbridge/dlpack"
)

// A byte plan describes a copy between two strided layouts of one shape as
// contiguous runs of bytes: `run` bytes at a time, repeated over the outer
// dimensions. It is what the DMA engines understand: a plan with no outer
// dimension is one linear copy, one outer dimension is a 2D pitched copy
// (rows `run` bytes wide, `pitch` bytes apart on each side), two outer
// dimensions whose strides nest are a 3D copy, and anything else is a loop
// of those.
type bytePlan struct {
	pair        // the outer dimensions, strides and offsets in bytes
	run   int64 // bytes per contiguous run on both sides
	empty bool  // nothing to copy
}

// planBytes builds the byte plan for copying elements of size is between
// layouts (shape, ds) and (shape, ss), strides in elements (ss nil: a
// source that stays on one element). The layouts are simplified
// (pair.simplify), then an innermost dimension contiguous on both sides
// becomes the run.
func planBytes(shape, ds, ss []int64, is int64) bytePlan {
	var p bytePlan
	p.run = is
	if !p.simplify(shape, ds, ss, is, is, true) {
		p.empty = true
		return p
	}
	if n := p.nd - 1; n >= 0 && p.ds[n] == is && p.ss[n] == is {
		p.run *= p.shape[n]
		p.nd--
	}
	return p
}

// bytes is the number of bytes the plan moves.
func (p *bytePlan) bytes() int64 {
	if p.empty {
		return 0
	}
	n := p.run
	for i := 0; i < p.nd; i++ {
		n *= p.shape[i]
	}
	return n
}

// pitched reports whether every outer stride is a positive pitch no smaller
// than the run on both sides: the condition for 2D/3D DMA copies.
func (p *bytePlan) pitched() bool {
	for i := 0; i < p.nd; i++ {
		if p.ds[i] < p.run || p.ss[i] < p.run {
			return false
		}
	}
	return true
}

// maxPitch is the largest row pitch a 2D/3D copy accepts (the CUDA limit on
// current devices is 2^31-1 bytes for device memory; stay below it).
const maxPitch = 1<<31 - 1

// pitchedBlock is one 2D or 3D DMA copy: depth slices of height rows of
// width bytes, at byte offsets doff/soff from the bases.
type pitchedBlock struct {
	doff, soff                int64
	width, height, depth      int64
	dpitch, spitch            int64
	dheight, sheight          int64 // rows per slice on each side (3D only)
	outer                     int   // number of loop dimensions outside the block
	loopShape, loopDs, loopSs []int64
}

// blocks splits a pitched plan into the fewest 2D/3D copies: the two
// innermost outer dimensions form a 3D copy when the slice stride is a
// multiple of the row pitch on both sides; otherwise the innermost one forms
// 2D copies. It returns the block template and how many copies the loop
// issues; ok is false when the plan is not pitched.
func (p *bytePlan) blocks() (b pitchedBlock, calls int64, ok bool) {
	if !p.pitched() {
		return b, 0, false
	}
	b.width, b.height, b.depth = p.run, 1, 1
	b.dpitch, b.spitch = p.run, p.run
	inner := 0 // outer dims absorbed by the block
	if p.nd >= 1 {
		i := p.nd - 1
		if p.ds[i] > maxPitch || p.ss[i] > maxPitch {
			return b, 0, false
		}
		b.height, b.dpitch, b.spitch = p.shape[i], p.ds[i], p.ss[i]
		inner = 1
	}
	if p.nd >= 2 {
		i := p.nd - 2
		if p.ds[i]%b.dpitch == 0 && p.ss[i]%b.spitch == 0 &&
			p.ds[i]/b.dpitch >= b.height && p.ss[i]/b.spitch >= b.height {
			b.depth = p.shape[i]
			b.dheight, b.sheight = p.ds[i]/b.dpitch, p.ss[i]/b.spitch
			inner = 2
		}
	}
	b.outer = p.nd - inner
	b.loopShape, b.loopDs, b.loopSs = p.shape[:b.outer], p.ds[:b.outer], p.ss[:b.outer]
	calls = 1
	for _, e := range b.loopShape {
		calls *= e
	}
	b.doff, b.soff = p.doff, p.soff
	return b, calls, true
}

// each calls f with the byte offsets of every block copy of the loop.
func (b *pitchedBlock) each(f func(doff, soff int64) error) error {
	var small [odometerSmall]int64
	o := odometer{shape: b.loopShape, ds: b.loopDs, ss: b.loopSs, idx: indexBuffer(small[:], len(b.loopShape)), doff: b.doff, soff: b.soff}
	for {
		if err := f(o.doff, o.soff); err != nil {
			return err
		}
		if !o.next() {
			return nil
		}
	}
}

func (p bytePlan) String() string {
	return fmt.Sprintf("run=%d shape=%v ds=%v ss=%v off=(%d,%d)", p.run, p.shape[:p.nd], p.ds[:p.nd], p.ss[:p.nd], p.doff, p.soff)
}

// likeStrides returns compact strides (in elements) for shape that follow
// the order and signs of ref: the dimension with the largest |stride| in ref
// is outermost, a negative stride in ref is negative here too, and a zero
// stride in ref (a broadcast) stays zero, so a compact buffer "like" ref
// holds each distinct element of ref once. off is the element offset of
// index [0,...] from the buffer's start, n the buffer's length in elements.
// Copies between ref and such a buffer merge into ref's own runs.
func likeStrides(shape, ref []int64) (strides []int64, off, n int64) {
	nd := len(shape)
	order := make([]int, 0, nd)
	for i := range nd {
		order = append(order, i)
	}
	// Stable insertion sort: largest |ref stride| first, ties keep order.
	for i := 1; i < nd; i++ {
		for j := i; j > 0 && abs64(ref[order[j-1]]) < abs64(ref[order[j]]); j-- {
			order[j-1], order[j] = order[j], order[j-1]
		}
	}
	strides = make([]int64, nd)
	n = 1
	for k := nd - 1; k >= 0; k-- {
		d := order[k]
		e := shape[d]
		if e == 0 {
			return dlpack.CStrides(shape), 0, 0
		}
		if ref[d] == 0 && e > 1 {
			continue // broadcast: stride 0, one element for the whole dim
		}
		s := n
		if ref[d] < 0 {
			s = -n
			off += (e - 1) * n
		}
		strides[d] = s
		n *= e
	}
	return strides, off, n
}
