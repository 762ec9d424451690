package pybridge

import (
	"runtime"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// at turns the address of host memory that a live Owner keeps allocated
// (C heap, a foreign allocation, or a Go slice the owner references) into a
// pointer. Going through a pointer to the integer keeps vet's unsafeptr
// check quiet about a conversion that is sound here: the memory cannot be
// freed or moved while the owner holds it.
func at(addr uintptr, off int64) unsafe.Pointer {
	a := addr + uintptr(off)
	return *(*unsafe.Pointer)(unsafe.Pointer(&a))
}

// forEach calls f with the byte offset, relative to the data pointer, of
// every element of a tensor with these extents and element strides, in C
// (row-major) order. A 0-d tensor has one element at offset 0; an empty
// tensor has none.
func forEach(shape, strides []int64, item int64, f func(off int64)) {
	nd := len(shape)
	for _, e := range shape {
		if e == 0 {
			return
		}
	}
	if nd == 0 {
		f(0)
		return
	}
	var idxBuf, bsBuf [8]int64
	idx, bs := idxBuf[:0], bsBuf[:0]
	for i := 0; i < nd; i++ {
		idx = append(idx, 0)
		bs = append(bs, strides[i]*item)
	}
	inner, is := shape[nd-1], bs[nd-1]
	off := int64(0)
	for {
		o := off
		for k := int64(0); k < inner; k++ {
			f(o)
			o += is
		}
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			off += bs[d]
			if idx[d] < shape[d] {
				break
			}
			off -= bs[d] * shape[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func needHost(v *zerocopy.View, op string) error {
	if !v.Device().Type.HostAccessible() {
		return Errorf(BufferError, "dlbridge: %s: tensor on %s is not host-accessible", op, v.Device())
	}
	return nil
}

func needWritable(v *zerocopy.View, op string) error {
	if v.ReadOnly() {
		return Errorf(ValueError, "dlbridge: %s: tensor is read-only (the producer exported it with READ_ONLY)", op)
	}
	return nil
}

// hostFill writes s into every element of a host-accessible view.
func hostFill(v *zerocopy.View, s Scalar) error {
	if err := needHost(v, "fill_"); err != nil {
		return err
	}
	if err := needWritable(v, "fill_"); err != nil {
		return err
	}
	c, err := codecOf(v.DType())
	if err != nil {
		return err
	}
	var elem [16]byte
	e := elem[:c.size]
	c.encode(e, s)
	base := v.Ptr()
	if v.IsCContiguous() {
		n := v.Len() * c.size
		if n == 0 {
			return nil
		}
		buf := unsafe.Slice((*byte)(at(base, 0)), n)
		copy(buf, e)
		for filled := c.size; filled < n; filled *= 2 {
			copy(buf[filled:], buf[:filled])
		}
		return nil
	}
	forEach(v.Shape(), v.Strides(), c.size, func(off int64) {
		copy(unsafe.Slice((*byte)(at(base, off)), c.size), e)
	})
	return nil
}

// hostSum adds every element of a host-accessible view: integers exactly
// (wrapping like NumPy on overflow), floats in float64, complex in complex128.
func hostSum(v *zerocopy.View) (Scalar, error) {
	if err := needHost(v, "sum"); err != nil {
		return Scalar{}, err
	}
	c, err := codecOf(v.DType())
	if err != nil {
		return Scalar{}, err
	}
	base := v.Ptr()
	var si int64
	var su uint64
	var sz complex128
	kind := c.kind()
	if kind == FloatScalar && c.dtype.Code == dlpack.Float && c.size == 4 && v.IsCContiguous() {
		// The common case deserves a loop without a call per element.
		xs := unsafe.Slice((*float32)(at(base, 0)), v.Len())
		var acc float64
		for _, x := range xs {
			acc += float64(x)
		}
		return Float(acc), nil
	}
	forEach(v.Shape(), v.Strides(), c.size, func(off int64) {
		i, u, z := c.load(at(base, off))
		si += i
		su += u
		sz += z
	})
	switch kind {
	case IntScalar:
		return Int(si), nil
	case UintScalar:
		return Uint(su), nil
	case ComplexScalar:
		return Complex(real(sz), imag(sz)), nil
	}
	return Float(real(sz)), nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// hostCopy copies src into dst element by element (same shape; dtypes may
// differ: values are converted as C casts do). Overlapping memory is staged
// through a temporary so the result is as if src were read first.
func hostCopy(dst, src *zerocopy.View) error {
	if err := needHost(dst, "copy_"); err != nil {
		return err
	}
	if err := needHost(src, "copy_"); err != nil {
		return err
	}
	if err := needWritable(dst, "copy_"); err != nil {
		return err
	}
	if !sameShape(dst.Shape(), src.Shape()) {
		return Errorf(ValueError, "dlbridge: copy_: shapes differ: destination %v, source %v", dst.Shape(), src.Shape())
	}
	dc, err := codecOf(dst.DType())
	if err != nil && dst.DType() != src.DType() {
		return err
	}
	sc, err2 := codecOf(src.DType())
	if err2 != nil && dst.DType() != src.DType() {
		return err2
	}
	item := int64(dst.DType().ItemSize())
	if dst.DType() == src.DType() && dst.IsCContiguous() && src.IsCContiguous() {
		n := dst.Len() * item
		if n > 0 {
			// copy is memmove: overlap is fine.
			copy(unsafe.Slice((*byte)(at(dst.Ptr(), 0)), n), unsafe.Slice((*byte)(at(src.Ptr(), 0)), n))
		}
		return nil
	}
	// Stage src contiguously when it overlaps dst.
	srcPtr, srcStrides := src.Ptr(), src.Strides()
	slo, shi := src.ByteSpan()
	dlo, dhi := dst.ByteSpan()
	if int64(src.Ptr())+slo < int64(dst.Ptr())+dhi && int64(dst.Ptr())+dlo < int64(src.Ptr())+shi {
		tmp := make([]byte, src.Len()*int64(src.DType().ItemSize())+1)
		sitem := int64(src.DType().ItemSize())
		k := int64(0)
		forEach(src.Shape(), srcStrides, sitem, func(off int64) {
			copy(tmp[k:k+sitem], unsafe.Slice((*byte)(at(srcPtr, off)), sitem))
			k += sitem
		})
		srcPtr = uintptr(unsafe.Pointer(&tmp[0]))
		srcStrides = dlpack.CStrides(src.Shape())
		defer runtime.KeepAlive(tmp) // srcPtr points into tmp until the copy below is done
	}
	dOffs := offsets(dst.Shape(), dst.Strides(), item)
	i := 0
	if dst.DType() == src.DType() {
		forEach(src.Shape(), srcStrides, item, func(off int64) {
			copy(unsafe.Slice((*byte)(at(dst.Ptr(), dOffs[i])), item), unsafe.Slice((*byte)(at(srcPtr, off)), item))
			i++
		})
		return nil
	}
	var elem [16]byte
	e := elem[:dc.size]
	forEach(src.Shape(), srcStrides, sc.size, func(off int64) {
		si, su, sz := sc.load(at(srcPtr, off))
		var s Scalar
		switch sc.kind() {
		case IntScalar:
			s = Int(si)
		case UintScalar:
			s = Uint(su)
		case ComplexScalar:
			s = Complex(real(sz), imag(sz))
		default:
			s = Float(real(sz))
		}
		dc.encode(e, s)
		copy(unsafe.Slice((*byte)(at(dst.Ptr(), dOffs[i])), dc.size), e)
		i++
	})
	return nil
}

// offsets lists the byte offsets forEach visits.
func offsets(shape, strides []int64, item int64) []int64 {
	n, _ := dlpack.NumElements(shape)
	out := make([]int64, 0, n)
	forEach(shape, strides, item, func(off int64) { out = append(out, off) })
	return out
}
