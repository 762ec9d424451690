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
	run        int64 // bytes per contiguous run on both sides
	nd         int   // outer dimensions, outermost first
	shape      [dlpack.MaxNDim]int64
	ds, ss     [dlpack.MaxNDim]int64 // outer strides in bytes
	doff, soff int64                 // byte offsets of the first run from each base pointer
	empty      bool                  // nothing to copy
}

// planBytes builds the byte plan for copying elements of size is between
// layouts (shape, ds) and (shape, ss), strides in elements. Dimensions of
// extent 1 are dropped, dimensions where both sides step backwards are
// flipped (the start moves to the other end), dimensions where both strides
// are 0 are copied once (they repeat one element on both sides), the rest
// are ordered by decreasing destination stride and merged where both sides
// are contiguous across them.
func planBytes(shape, ds, ss []int64, is int64) bytePlan {
	var p bytePlan
	p.run = is
	var n int
	for i, e := range shape {
		if e == 0 {
			p.empty = true
			return p
		}
		if e == 1 {
			continue
		}
		d, s := ds[i]*is, ss[i]*is
		if d == 0 && s == 0 {
			continue
		}
		if d < 0 && s < 0 {
			p.doff += (e - 1) * d
			p.soff += (e - 1) * s
			d, s = -d, -s
		}
		// Insertion sort by |dst stride| then |src stride|, largest first.
		j := n
		for j > 0 && less(p.ds[j-1], p.ss[j-1], d, s) {
			p.shape[j], p.ds[j], p.ss[j] = p.shape[j-1], p.ds[j-1], p.ss[j-1]
			j--
		}
		p.shape[j], p.ds[j], p.ss[j] = e, d, s
		n++
	}
	// Fold the innermost dimensions into the run while both sides are
	// contiguous across them.
	for n > 0 && p.ds[n-1] == p.run && p.ss[n-1] == p.run {
		p.run *= p.shape[n-1]
		n--
	}
	// Merge neighbouring outer dimensions where stepping the outer one once
	// equals stepping the inner one through its extent, on both sides.
	if n > 1 {
		k := n - 1
		for i := n - 2; i >= 0; i-- {
			if p.ds[i] == p.shape[k]*p.ds[k] && p.ss[i] == p.shape[k]*p.ss[k] {
				p.shape[k] *= p.shape[i]
				continue
			}
			k--
			p.shape[k], p.ds[k], p.ss[k] = p.shape[i], p.ds[i], p.ss[i]
		}
		m := n - k
		copy(p.shape[:m], p.shape[k:n])
		copy(p.ds[:m], p.ds[k:n])
		copy(p.ss[:m], p.ss[k:n])
		n = m
	}
	p.nd = n
	return p
}

// less orders dimensions by decreasing |dst stride|, then |src stride|.
func less(d0, s0, d1, s1 int64) bool {
	if a, b := abs64(d0), abs64(d1); a != b {
		return a < b
	}
	return abs64(s0) < abs64(s1)
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
	if b.outer == 0 {
		return f(b.doff, b.soff)
	}
	var idx [dlpack.MaxNDim]int64
	doff, soff := b.doff, b.soff
	for {
		if err := f(doff, soff); err != nil {
			return err
		}
		k := b.outer - 1
		for ; k >= 0; k-- {
			idx[k]++
			doff += b.loopDs[k]
			soff += b.loopSs[k]
			if idx[k] < b.loopShape[k] {
				break
			}
			doff -= idx[k] * b.loopDs[k]
			soff -= idx[k] * b.loopSs[k]
			idx[k] = 0
		}
		if k < 0 {
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
