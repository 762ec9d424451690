package zerocopy

import (
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
)

// This file holds zerocopy's one simplifier (pair.simplify) and its one N-d
// iterator (odometer). Every loop over the elements of a layout runs on
// them: host copies, fills, sums and conversions (through walk), typed host
// access (Each), and the transfer plans that the DMA engines and the
// strided-copy kernel execute (bytePlan, pitchedBlock.each).

// pair is two strided layouts over one shape: the destination (d) and the
// source (s) of a copy, or one layout twice. The unit of the strides and
// offsets is the caller's: elements for copies, bytes for transfer plans,
// sums and conversions. doff and soff are where the walk starts on each
// side, relative to the side's element [0, 0, ...].
type pair struct {
	nd         int
	shape      [dlpack.MaxNDim]int64
	ds, ss     [dlpack.MaxNDim]int64
	doff, soff int64
}

// simplify makes p an equivalent pair with as few dimensions as possible,
// the strides of each side multiplied by its unit (du, su: 1 keeps
// elements, the item size gives bytes); ss nil means a source of stride 0 in every
// dimension (one element repeated, as Fill uses it). It returns false when
// the shape is empty (p is then unusable). Extent-1 dimensions are dropped;
// a dimension in which both sides step backwards is flipped (the walk
// starts at its other end, so runs ascend); the rest are ordered by
// decreasing |dst stride|, then |src stride|, and neighbours are merged
// where stepping the outer once equals stepping the inner through its
// extent, on both sides. A single element leaves nd == 0. With once, a
// dimension of stride 0 on both sides is dropped as well: it repeats the
// same pair of elements, which a copy needs to visit once (a sum needs
// every repetition).
func (p *pair) simplify(shape, ds, ss []int64, du, su int64, once bool) bool {
	p.nd, p.doff, p.soff = 0, 0, 0
	for i, e := range shape {
		if e == 0 {
			return false
		}
		if e == 1 {
			continue
		}
		d, s := ds[i]*du, int64(0) // cannot overflow: the byte spans were checked
		if ss != nil {
			s = ss[i] * su
		}
		if once && d == 0 && s == 0 {
			continue
		}
		if d < 0 && s < 0 {
			p.doff += (e - 1) * d
			p.soff += (e - 1) * s
			d, s = -d, -s
		}
		// Insertion sort, largest first; ties keep their order.
		j := p.nd
		for j > 0 && outer(d, s, p.ds[j-1], p.ss[j-1]) {
			p.shape[j], p.ds[j], p.ss[j] = p.shape[j-1], p.ds[j-1], p.ss[j-1]
			j--
		}
		p.shape[j], p.ds[j], p.ss[j] = e, d, s
		p.nd++
	}
	if p.nd < 2 {
		return true
	}
	// Merge from the inside out: dim i folds into the group k below it.
	k := p.nd - 1
	for i := p.nd - 2; i >= 0; i-- {
		if p.ds[i] == p.shape[k]*p.ds[k] && p.ss[i] == p.shape[k]*p.ss[k] {
			p.shape[k] *= p.shape[i]
			continue
		}
		k--
		p.shape[k], p.ds[k], p.ss[k] = p.shape[i], p.ds[i], p.ss[i]
	}
	// Groups live at k..nd-1: move them down.
	m := p.nd - k
	copy(p.shape[:m], p.shape[k:p.nd])
	copy(p.ds[:m], p.ds[k:p.nd])
	copy(p.ss[:m], p.ss[k:p.nd])
	p.nd = m
	return true
}

// outer reports whether a dimension with strides (d0, s0) goes outside one
// with (d1, s1): larger |dst stride|, then larger |src stride|.
func outer(d0, s0, d1, s1 int64) bool {
	if a, b := abs64(d0), abs64(d1); a != b {
		return a > b
	}
	return abs64(s0) > abs64(s1)
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// odometer counts through the index space of shape in row-major order,
// keeping the offsets of two strided layouts over it (ds and ss, any unit).
// The caller handles the dimensions inside shape itself (a row, a tile, a
// DMA block); the odometer steps the ones outside. idx is the current
// index, zero at the start, as long as shape (the caller's buffer, so that
// nothing is allocated here).
type odometer struct {
	shape, ds, ss, idx []int64
	doff, soff         int64
}

// odometerSmall is how many dims an odometer's caller keeps its index for on
// the stack: after simplification few remain, and zeroing a 64-dim index on
// every small copy costs more than the copy.
const odometerSmall = 8

// indexBuffer returns small[:n] zeroed, or for more dims a new buffer.
func indexBuffer(small []int64, n int) []int64 {
	if n <= len(small) {
		return small[:n]
	}
	return make([]int64, n)
}

// next steps to the following index and reports false after the last one
// (when it is back at the start). A 0-d shape has one index.
func (o *odometer) next() bool {
	for j := len(o.shape) - 1; j >= 0; j-- {
		o.idx[j]++
		o.doff += o.ds[j]
		o.soff += o.ss[j]
		if o.idx[j] < o.shape[j] {
			return true
		}
		o.doff -= o.idx[j] * o.ds[j]
		o.soff -= o.idx[j] * o.ss[j]
		o.idx[j] = 0
	}
	return false
}

// blockFunc handles na rows of nb elements of size is; rows step by dk and
// sk units, elements within a row by dl and sl (d and s are the block's
// first elements).
type blockFunc func(d, s unsafe.Pointer, is, na, nb, dk, sk, dl, sl int64)

// tile is the side of the square blocks in which a walk covers two
// dimensions when their inner strides disagree (a transpose): both views
// then stay within a few cache lines per block.
const tile = 32

// walk visits the elements of a simplified pair, of size is in the pair's
// unit (1 when the strides are in bytes), at d on the destination side and
// s on the source side, in blocks: pick gets the innermost strides of each
// side (dl, sl) and returns the function that handles one block. It may
// reorder p's outer dimensions (the set of elements stays the same).
func (p *pair) walk(d, s unsafe.Pointer, is int64, pick func(dl, sl int64) blockFunc) {
	if p.nd == 0 { // a single element
		p.nd, p.shape[0], p.ds[0], p.ss[0] = 1, 1, 1, 1
	}
	d, s = unsafe.Add(d, p.doff*is), unsafe.Add(s, p.soff*is)
	last := p.nd - 1
	nl, dl, sl := p.shape[last], p.ds[last], p.ss[last]
	// k is the dim walked in blocks together with last: the one where src
	// is densest, when that is denser than last (dst is densest at last).
	k := -1
	if dl != 1 || sl != 1 {
		best := abs64(sl)
		for i := 0; i < last; i++ {
			if a := abs64(p.ss[i]); a < best && p.shape[i] > 1 {
				best, k = a, i
			}
		}
	}
	nk, dk, sk := int64(1), int64(0), int64(0)
	tk, tl := int64(1), nl
	n := last // outer dims the odometer steps
	if k >= 0 {
		// Move k next to last so that the odometer steps the dims before it.
		n--
		p.shape[k], p.shape[n] = p.shape[n], p.shape[k]
		p.ds[k], p.ds[n] = p.ds[n], p.ds[k]
		p.ss[k], p.ss[n] = p.ss[n], p.ss[k]
		nk, dk, sk = p.shape[n], p.ds[n], p.ss[n]
		tk, tl = tile, tile
	}
	blk := pick(dl, sl)
	var small [odometerSmall]int64
	o := odometer{shape: p.shape[:n], ds: p.ds[:n], ss: p.ss[:n], idx: indexBuffer(small[:], n)}
	for {
		for a := int64(0); a < nk; a += tk {
			na := min(tk, nk-a)
			for b := int64(0); b < nl; b += tl {
				// Sound: block starts are elements of both views, and every
				// offset stays inside their validated spans.
				blk(unsafe.Add(d, (o.doff+a*dk+b*dl)*is), unsafe.Add(s, (o.soff+a*sk+b*sl)*is),
					is, na, min(tl, nl-b), dk, sk, dl, sl)
			}
		}
		if !o.next() {
			return
		}
	}
}
