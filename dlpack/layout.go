package dlpack

import "fmt"

// Layout math shared by DLPack import, CAI and zerocopy views. Strides are in
// elements (DLPack's unit). Every product and sum is overflow-checked because
// shapes and strides often come from foreign input.

// NumElements is the product of shape, or an error naming the dimension
// whose extent is negative or whose product overflows int64.
func NumElements(shape []int64) (int64, error) {
	n := int64(1)
	for i, e := range shape {
		if e < 0 {
			return 0, fmt.Errorf("shape[%d] = %d is negative", i, e)
		}
		var ok bool
		if n, ok = MulInt64(n, e); !ok {
			return 0, fmt.Errorf("shape[%d] = %d: element count overflows int64", i, e)
		}
	}
	return n, nil
}

// CStrides returns the compact row-major (C order) strides of shape, in
// elements. Extents must be non-negative and their product must fit int64
// (checked by NumElements first).
func CStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	FillCStrides(st, shape)
	return st
}

// FillCStrides writes the C-order strides of shape into st (len(st) ==
// len(shape)) without allocating. Extent-0 and extent-1 dimensions count as 1
// so strides stay meaningful for empty tensors, as NumPy and PyTorch do.
func FillCStrides(st, shape []int64) {
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		if shape[i] > 1 {
			acc *= shape[i]
		}
	}
}

// FStrides returns the compact column-major (Fortran order) strides of shape.
func FStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for i := range shape {
		st[i] = acc
		if shape[i] > 1 {
			acc *= shape[i]
		}
	}
	return st
}

// IsCContiguous reports whether shape and strides describe compact
// row-major memory, ignoring the strides of extent-1 dimensions; an empty
// tensor (some extent 0) is contiguous.
func IsCContiguous(shape, strides []int64) bool {
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 0 {
			return true
		}
	}
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 1 {
			continue
		}
		if strides[i] != acc {
			return false
		}
		acc *= shape[i]
	}
	return true
}

// IsFContiguous is IsCContiguous for column-major order.
func IsFContiguous(shape, strides []int64) bool {
	for _, e := range shape {
		if e == 0 {
			return true
		}
	}
	acc := int64(1)
	for i := range shape {
		if shape[i] == 1 {
			continue
		}
		if strides[i] != acc {
			return false
		}
		acc *= shape[i]
	}
	return true
}

// ElementSpan returns [lo, hi): the smallest and one past the largest element
// index (relative to the data pointer, in elements) that shape and strides
// reach. For an empty tensor it returns 0, 0. Negative strides give lo < 0.
// Errors name the dimension whose stride × (extent-1) overflows int64.
func ElementSpan(shape, strides []int64) (lo, hi int64, err error) {
	for _, e := range shape {
		if e == 0 {
			return 0, 0, nil
		}
	}
	var ok bool
	for i, e := range shape {
		if e < 0 {
			return 0, 0, fmt.Errorf("shape[%d] = %d is negative", i, e)
		}
		reach, ok2 := MulInt64(strides[i], e-1)
		if !ok2 {
			return 0, 0, fmt.Errorf("strides[%d] = %d times extent-1 = %d overflows int64", i, strides[i], e-1)
		}
		if reach >= 0 {
			hi, ok = AddInt64(hi, reach)
		} else {
			lo, ok = AddInt64(lo, reach)
		}
		if !ok {
			return 0, 0, fmt.Errorf("strides[%d] = %d: span overflows int64", i, strides[i])
		}
	}
	return lo, hi + 1, nil
}

// ByteSpan returns [lo, hi) in bytes relative to the data pointer for a
// tensor of dtype t: the memory the tensor may touch. Sub-byte types are
// measured packed unless padded. Empty tensors span 0, 0.
func ByteSpan(t DataType, shape, strides []int64, padded bool) (lo, hi int64, err error) {
	elo, ehi, err := ElementSpan(shape, strides)
	if err != nil || ehi == elo {
		return 0, 0, err
	}
	if t.IsSubByte() && !padded {
		bpe := int64(t.BitsPerElement())
		l, ok1 := MulInt64(elo, bpe)
		h, ok2 := MulInt64(ehi, bpe)
		if !ok1 || !ok2 {
			return 0, 0, fmt.Errorf("byte span of %s tensor overflows int64", t)
		}
		return floorDiv(l, 8), (h + 7) / 8, nil
	}
	is := int64(t.ItemSize())
	l, ok1 := MulInt64(elo, is)
	h, ok2 := MulInt64(ehi, is)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("byte span of %s tensor (item size %d) overflows int64", t, is)
	}
	return l, h, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
