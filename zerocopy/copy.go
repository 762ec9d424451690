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
	if err := copyArgs("Copy", dst, src); err != nil {
		return err
	}
	if err := hostAccessible(dst, "Copy: dst"); err != nil {
		return err
	}
	if err := hostAccessible(src, "Copy: src"); err != nil {
		return err
	}
	n := dst.Len()
	if n == 0 {
		return nil
	}
	d, s := hostPointer(dst.Ptr()), hostPointer(src.Ptr())
	if dst.lay.dtype.IsSubByte() && !dst.lay.padded {
		// Packed elements have no byte address of their own: whole
		// contiguous runs only (copyArgs checked both are C-contiguous).
		nb, _ := dst.lay.dtype.StorageBytes(n, false) // checked at construction
		memmove(d, s, nb)
		return nil
	}
	var p pair
	p.simplify(dst.lay.shape(), dst.lay.strides(), src.lay.strides(), 1, 1, true)
	is := int64(dst.lay.dtype.ItemSize())
	if p.nd == 0 { // one element
		memmove(d, s, is)
		return nil
	}
	if p.nd == 1 && p.ds[0] == 1 && p.ss[0] == 1 {
		// One contiguous run either side; memmove handles overlap.
		memmove(unsafe.Add(d, p.doff*is), unsafe.Add(s, p.soff*is), p.shape[0]*is)
		return nil
	}
	var tmp []uint64
	if overlaps(dst, src) {
		// Gather src into fresh memory first (compact, in the plan's order
		// of dims), then scatter from there.
		tmp = make([]uint64, (n*is+7)/8)
		t := unsafe.Pointer(unsafe.SliceData(tmp))
		g := p
		dlpack.FillCStrides(g.ds[:g.nd], g.shape[:g.nd])
		g.doff = 0
		p.ss, p.soff = g.ds, 0
		g.run(t, s, is)
		s = t
	}
	p.run(d, s, is)
	runtime.KeepAlive(tmp) // s may point into tmp
	return nil
}

// copyArgs is the argument check shared by every copy (Copy, Copier.Copy,
// CopyCUDA): both views open, dst writable with no dimension whose positions
// share an element, the same dtype, shape and sub-byte storage on both
// sides, and packed sub-byte elements only in C-contiguous views. Errors
// start with "zerocopy: op: ".
func copyArgs(op string, dst, src *View) error {
	if dst == nil || src == nil {
		return fmt.Errorf("zerocopy: %s: nil view (dst %v, src %v)", op, dst != nil, src != nil)
	}
	if err := dst.check(); err != nil {
		return fmt.Errorf("zerocopy: %s: dst: %w", op, err)
	}
	if err := src.check(); err != nil {
		return fmt.Errorf("zerocopy: %s: src: %w", op, err)
	}
	if dst.readOnly {
		return fmt.Errorf("zerocopy: %s: dst is read-only (%v, %s)", op, dst, dst.owner.label)
	}
	dt := dst.lay.dtype
	if dt != src.lay.dtype {
		return fmt.Errorf("zerocopy: %s: dst dtype %s != src dtype %s", op, dt, src.lay.dtype)
	}
	if !slices.Equal(dst.lay.shape(), src.lay.shape()) {
		return fmt.Errorf("zerocopy: %s: dst shape %s != src shape %s", op, FormatShape(dst.lay.shape()), FormatShape(src.lay.shape()))
	}
	if dt.IsSubByte() && dst.lay.padded != src.lay.padded {
		return fmt.Errorf("zerocopy: %s: dst stores %s padded=%t, src padded=%t", op, dt, dst.lay.padded, src.lay.padded)
	}
	if d, ok := dst.lay.sharesElements(); ok {
		return fmt.Errorf("zerocopy: %s: dst dim %d has stride 0 and extent %d: its positions share one element", op, d, dst.lay.shape()[d])
	}
	if dt.IsSubByte() && !dst.lay.padded && (!dst.IsCContiguous() || !src.IsCContiguous()) {
		return fmt.Errorf("zerocopy: %s: packed %s needs both views C-contiguous (dst strides %s, src strides %s)", op, dt, FormatShape(dst.lay.strides()), FormatShape(src.lay.strides()))
	}
	return nil
}

// overlaps reports whether the byte spans of two views intersect.
func overlaps(a, b *View) bool {
	alo, ahi := a.ByteSpan()
	blo, bhi := b.ByteSpan()
	a0, a1 := a.Ptr()+uintptr(alo), a.Ptr()+uintptr(ahi)
	b0, b1 := b.Ptr()+uintptr(blo), b.Ptr()+uintptr(bhi)
	return a0 < b1 && b0 < a1
}

// memmove copies n bytes from s to d; the ranges may overlap.
func memmove(d, s unsafe.Pointer, n int64) {
	// Sound: both ranges lie inside live views' validated spans; Go's copy
	// is memmove.
	copy(unsafe.Slice((*byte)(d), n), unsafe.Slice((*byte)(s), n))
}

// run copies the pair's elements of size is from s to d (no overlap).
func (p *pair) run(d, s unsafe.Pointer, is int64) {
	p.walk(d, s, is, func(dl, sl int64) blockFunc { return blockCopier(d, s, is, dl, sl) })
}

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
	nb, ok := v.lay.dtype.StorageBytes(v.Len(), v.lay.padded)
	if !ok {
		return nil, fmt.Errorf("zerocopy: Clone: %s elements of %s overflow int64 bytes", FormatShape(v.lay.shape()), v.lay.dtype)
	}
	words := make([]uint64, (nb+7)/8) // 8-aligned for every element type
	base := unsafe.Pointer(unsafe.SliceData(words))
	nv := goView(base, v.lay.dtype, v.lay.shape(), v.lay.padded, "clone")
	if err := Copy(nv, v); err != nil {
		nv.Close()
		return nil, fmt.Errorf("zerocopy: Clone: %w", err)
	}
	return nv, nil
}
