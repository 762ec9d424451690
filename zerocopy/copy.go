package zerocopy

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Copy copies the elements of src into dst, which must have the same dtype
// and shape; either side may have any strides (negative and broadcast
// strides included on the source side). Both must be host-accessible (CPU,
// pinned, managed, or registered fake device memory); device memory is
// copied with CopyCUDA. When the two views share bytes the result is as if
// src had been read completely before dst was written (memmove semantics).
// A destination in which several positions share one element (a broadcast,
// stride-0 dim) is refused, as PyTorch refuses it; other self-overlapping
// destinations (hand-made strides) are not detected and get the last write.
func Copy(dst, src *View) error {
	if err := dst.check(); err != nil {
		return fmt.Errorf("zerocopy: Copy: dst: %w", err)
	}
	if err := src.check(); err != nil {
		return fmt.Errorf("zerocopy: Copy: src: %w", err)
	}
	if dst.readOnly {
		return fmt.Errorf("zerocopy: Copy: dst is read-only (%s)", dst.owner.label)
	}
	if dst.dtype != src.dtype {
		return fmt.Errorf("zerocopy: Copy: dst dtype %s != src dtype %s", dst.dtype, src.dtype)
	}
	if !slices.Equal(dst.shape, src.shape) {
		return fmt.Errorf("zerocopy: Copy: dst shape %v != src shape %v", dst.shape, src.shape)
	}
	packed := dst.dtype.IsSubByte() && !dst.padded
	if dst.dtype.IsSubByte() && dst.padded != src.padded {
		return fmt.Errorf("zerocopy: Copy: dst stores %s padded=%t, src padded=%t", dst.dtype, dst.padded, src.padded)
	}
	if err := hostAccessible(dst, "Copy: dst"); err != nil {
		return err
	}
	if err := hostAccessible(src, "Copy: src"); err != nil {
		return err
	}
	for d, e := range dst.shape {
		if e > 1 && dst.strides[d] == 0 {
			return fmt.Errorf("zerocopy: Copy: dst dim %d has stride 0 and extent %d: its positions share one element", d, e)
		}
	}
	n := dst.Len()
	if n == 0 {
		return nil
	}
	if packed {
		// Packed elements have no byte address of their own: only whole
		// contiguous runs can be copied.
		if !dst.IsCContiguous() || !src.IsCContiguous() {
			return fmt.Errorf("zerocopy: Copy: packed %s needs both views C-contiguous (dst strides %v, src strides %v)", dst.dtype, dst.strides, src.strides)
		}
		nb, _ := dst.dtype.StorageBytes(n, false) // checked at construction
		memmove(hostPointer(dst.ptr), hostPointer(src.ptr), nb)
		return nil
	}

	var p copyPlan
	p.build(dst.shape, dst.strides, src.strides)
	is := int64(dst.dtype.ItemSize())
	d, s := hostPointer(dst.ptr), hostPointer(src.ptr)
	if p.nd == 1 && p.ds[0] == 1 && p.ss[0] == 1 {
		memmove(d, s, n*is) // one contiguous run either side; memmove handles overlap
		return nil
	}
	var tmp []uint64
	if overlaps(dst, src) {
		// Gather src into fresh memory first, then scatter from there.
		tmp = make([]uint64, (n*is+7)/8)
		t := unsafe.Pointer(unsafe.SliceData(tmp))
		var g copyPlan
		g.nd = p.nd
		g.shape = p.shape
		g.ss = p.ss
		cstrides(g.ds[:g.nd], g.shape[:g.nd])
		g.run(t, s, is)
		p.ss = g.ds
		s = t
	}
	p.run(d, s, is)
	runtime.KeepAlive(tmp) // s may point into tmp
	return nil
}

// overlaps reports whether the byte spans of two views intersect.
func overlaps(a, b *View) bool {
	alo, ahi := a.ByteSpan()
	blo, bhi := b.ByteSpan()
	a0, a1 := a.ptr+uintptr(alo), a.ptr+uintptr(ahi)
	b0, b1 := b.ptr+uintptr(blo), b.ptr+uintptr(bhi)
	return a0 < b1 && b0 < a1
}

// memmove copies n bytes from s to d; the ranges may overlap.
func memmove(d, s unsafe.Pointer, n int64) {
	// Sound: both ranges lie inside live views' validated spans; Go's copy
	// is memmove.
	copy(unsafe.Slice((*byte)(d), n), unsafe.Slice((*byte)(s), n))
}

func cstrides(st, shape []int64) {
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
}

// copyPlan is a pair of strided layouts over one shape, simplified: extent-1
// dims dropped, dims ordered by decreasing destination stride, and
// neighbours merged where both sides are contiguous across them.
type copyPlan struct {
	nd        int
	shape, ds [dlpack.MaxNDim]int64
	ss        [dlpack.MaxNDim]int64
}

func (p *copyPlan) build(shape, ds, ss []int64) {
	p.nd = 0
	for i, e := range shape {
		if e == 1 {
			continue
		}
		// Insertion sort by |dst stride|, largest first; ties keep order.
		j := p.nd
		for j > 0 && abs64(p.ds[j-1]) < abs64(ds[i]) {
			p.shape[j], p.ds[j], p.ss[j] = p.shape[j-1], p.ds[j-1], p.ss[j-1]
			j--
		}
		p.shape[j], p.ds[j], p.ss[j] = e, ds[i], ss[i]
		p.nd++
	}
	if p.nd == 0 { // a single element
		p.shape[0], p.ds[0], p.ss[0], p.nd = 1, 1, 1, 1
		return
	}
	// Merge from the inside out: dim i folds into the group k below it when
	// stepping i once equals stepping the whole group, on both sides.
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
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// tile is the side of the square blocks in which a copy walks two
// dimensions when their inner strides disagree (a transpose): both views
// then stay within a few cache lines per block.
const tile = 32

// run copies the plan's elements of size is from s to d (no overlap).
func (p *copyPlan) run(d, s unsafe.Pointer, is int64) {
	p.walk(d, s, is, func(dl, sl int64) blockFunc { return blockCopier(d, s, is, dl, sl) })
}

// walk visits the plan's elements of size is, at d on the destination side
// and s on the source side, in blocks: pick gets the innermost strides of
// each side (dl, sl) and returns the function that handles one block. It is
// zerocopy's one N-d loop: copies, fills, sums and conversions run on it.
func (p *copyPlan) walk(d, s unsafe.Pointer, is int64, pick func(dl, sl int64) blockFunc) {
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
	if k >= 0 {
		nk, dk, sk = p.shape[k], p.ds[k], p.ss[k]
		tk, tl = tile, tile
	}
	blk := pick(dl, sl)
	var idx [dlpack.MaxNDim]int64
	var doff, soff int64 // in elements
	for {
		for a := int64(0); a < nk; a += tk {
			na := min(tk, nk-a)
			for b := int64(0); b < nl; b += tl {
				// Sound: block starts are elements of both views, and every
				// offset stays inside their validated spans.
				blk(unsafe.Add(d, (doff+a*dk+b*dl)*is), unsafe.Add(s, (soff+a*sk+b*sl)*is),
					is, na, min(tl, nl-b), dk, sk, dl, sl)
			}
		}
		j := last - 1
		for ; j >= 0; j-- {
			if j == k {
				continue
			}
			idx[j]++
			doff += p.ds[j]
			soff += p.ss[j]
			if idx[j] < p.shape[j] {
				break
			}
			doff -= idx[j] * p.ds[j]
			soff -= idx[j] * p.ss[j]
			idx[j] = 0
		}
		if j < 0 {
			return
		}
	}
}

// blockFunc copies na rows of nb elements of size is; rows step by dk and
// sk elements, elements within a row by dl and sl.
type blockFunc func(d, s unsafe.Pointer, is, na, nb, dk, sk, dl, sl int64)

// blockCopier picks the widest load and store the item size and the
// alignment of both base pointers allow (checkptr insists on alignment).
func blockCopier(d, s unsafe.Pointer, is, dl, sl int64) blockFunc {
	if dl == 1 && sl == 1 {
		return rowsBlock
	}
	or := uintptr(d) | uintptr(s)
	align := or & -or // the lowest set bit
	if or == 0 {
		align = 16
	}
	switch {
	case is == 1:
		return stridedBlock[uint8]
	case is == 2 && align >= 2:
		return stridedBlock[uint16]
	case is == 4 && align >= 4:
		return stridedBlock[uint32]
	case is == 8 && align >= 8:
		return stridedBlock[uint64]
	case is == 8 && align >= 4:
		return stridedBlock[[2]uint32]
	case is == 16 && align >= 8:
		return stridedBlock[[2]uint64]
	}
	return bytesBlock
}

// rowsBlock copies rows that are contiguous on both sides.
func rowsBlock(d, s unsafe.Pointer, is, na, nb, dk, sk, _, _ int64) {
	for a := range na {
		memmove(unsafe.Add(d, a*dk*is), unsafe.Add(s, a*sk*is), nb*is)
	}
}

// bytesBlock copies elements of any size or alignment one by one.
func bytesBlock(d, s unsafe.Pointer, is, na, nb, dk, sk, dl, sl int64) {
	for a := range na {
		for b := range nb {
			memmove(unsafe.Add(d, (a*dk+b*dl)*is), unsafe.Add(s, (a*sk+b*sl)*is), is)
		}
	}
}

// stridedBlock is a blockFunc for elements of type E.
func stridedBlock[E any](d, s unsafe.Pointer, is, na, nb, dk, sk, dl, sl int64) {
	dk, sk, dl, sl = dk*is, sk*is, dl*is, sl*is // is == unsafe.Sizeof(E)
	for a := range na {
		dr, sr := a*dk, a*sk
		for b := range nb {
			// Sound: the caller keeps the block inside both spans; no
			// address past the last element is ever formed.
			*(*E)(unsafe.Add(d, dr+b*dl)) = *(*E)(unsafe.Add(s, sr+b*sl))
		}
	}
}

// Clone copies v into fresh Go memory: a C-contiguous, writable CPU view
// with v's dtype and shape. v must be host-accessible (see Copy).
func Clone(v *View) (*View, error) {
	if err := v.check(); err != nil {
		return nil, fmt.Errorf("zerocopy: Clone: %w", err)
	}
	if err := hostAccessible(v, "Clone"); err != nil {
		return nil, err
	}
	nb, ok := v.dtype.StorageBytes(v.Len(), v.padded)
	if !ok {
		return nil, fmt.Errorf("zerocopy: Clone: %v elements of %s overflow int64 bytes", v.shape, v.dtype)
	}
	words := make([]uint64, (nb+7)/8) // 8-aligned for every element type
	base := unsafe.Pointer(unsafe.SliceData(words))
	nv := allocView(len(v.shape))
	copy(nv.shape, v.shape)
	dlpack.FillCStrides(nv.strides, nv.shape)
	nv.ptr, nv.device, nv.dtype, nv.padded = uintptr(base), dlpack.CPUDevice, v.dtype, v.padded
	nv.owner = newGoOwner(base, "clone")
	trackLeak(nv)
	if err := Copy(nv, v); err != nil {
		nv.Close()
		return nil, fmt.Errorf("zerocopy: Clone: %w", err)
	}
	return nv, nil
}
