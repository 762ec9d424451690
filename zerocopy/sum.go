package zerocopy

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// Sum adds the elements of v, as NumPy does: signed integers and bool in
// int64 (wrapping on overflow; bool counts the true elements), unsigned
// integers in uint64, floats in float64 (a FloatValue), complex numbers in
// complex128. A device view is copied to pinned host memory first, on
// stream s (nil: its device's work stream), after its pending write; a host
// view is read after its pending write.
func Sum(v *View, s *cuda.Stream) (Value, error) {
	if err := v.check(); err != nil {
		return Value{}, fmt.Errorf("zerocopy: Sum: %w", err)
	}
	c, err := codecOf("Sum", v.lay.dtype)
	if err != nil {
		return Value{}, err
	}
	if !onHost(v) {
		h, err := hostStaging(v.lay.dtype, v.lay.shape())
		if err != nil {
			return Value{}, fmt.Errorf("zerocopy: Sum: %w", err)
		}
		defer h.Close()
		if err := CopyCUDA(h, v, s); err != nil {
			return Value{}, fmt.Errorf("zerocopy: Sum: %w", err)
		}
		v = h
	} else if p := v.owner.pend.Load(); p != nil {
		if err := p.wait(v.device); err != nil {
			return Value{}, fmt.Errorf("zerocopy: Sum: %w", err)
		}
	}
	return sumHost(v, c), nil
}

// hostStaging is a C-contiguous CPU view for data coming from or going to a
// device: from the pinned pool (a copy into it is complete when the copy
// returns, and runs at the full bus rate), or Go memory when the pool is
// full or there is no driver to pin with.
func hostStaging(dt dlpack.DataType, shape []int64) (*View, error) {
	v, err := AllocPinnedPooled(dlpack.CPU, dt, shape...)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, ErrPinnedPoolFull) && !errors.Is(err, cuda.ErrNoDriver) {
		return nil, err
	}
	nb, err := allocBytes("host staging", dt, shape)
	if err != nil {
		return nil, err
	}
	return FromBytes(make([]byte, nb), dt, shape...)
}

// sumHost adds the elements of a host view, walking it in byte strides.
func sumHost(v *View, c elemCodec) Value {
	if v.Len() == 0 {
		return Value{Kind: c.kind}
	}
	is := int64(v.lay.dtype.ItemSize())
	var p pair
	p.simplify(v.lay.shape(), v.lay.strides(), v.lay.strides(), is, is, false)
	base := hostPointer(v.Ptr())
	var (
		i int64
		u uint64
		f float64
		z complex128
	)
	var pick func(dl, sl int64) blockFunc
	switch {
	case v.lay.dtype == dlpack.Float32Type:
		pick = sumAs[float32](&f)
	case v.lay.dtype == dlpack.Float64Type:
		pick = sumAs[float64](&f)
	case v.lay.dtype == dlpack.Int8Type:
		pick = sumAs[int8](&i)
	case v.lay.dtype == dlpack.Int16Type:
		pick = sumAs[int16](&i)
	case v.lay.dtype == dlpack.Int32Type:
		pick = sumAs[int32](&i)
	case v.lay.dtype == dlpack.Int64Type:
		pick = sumAs[int64](&i)
	case v.lay.dtype == dlpack.Uint8Type:
		pick = sumAs[uint8](&u)
	case v.lay.dtype == dlpack.Uint16Type:
		pick = sumAs[uint16](&u)
	case v.lay.dtype == dlpack.Uint32Type:
		pick = sumAs[uint32](&u)
	case v.lay.dtype == dlpack.Uint64Type:
		pick = sumAs[uint64](&u)
	case v.lay.dtype == dlpack.Complex64Type:
		pick = sumComplex[complex64](&z)
	case v.lay.dtype == dlpack.Complex128Type:
		pick = sumComplex[complex128](&z)
	default: // bool, float16, bfloat16: through the codec
		pick = func(_, _ int64) blockFunc {
			return func(_, s unsafe.Pointer, _, na, nb, _, sk, _, sl int64) {
				for a := range na {
					for b := range nb {
						x := c.load(unsafe.Add(s, a*sk+b*sl))
						i += x.I
						f += real(x.C)
					}
				}
			}
		}
	}
	p.walk(base, base, 1, pick)
	switch c.kind {
	case IntValue:
		return Int(i)
	case UintValue:
		return Uint(u)
	case ComplexValue:
		return Complex(z)
	}
	return Float(f)
}

type realNumber interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64
}

// sumAs adds elements of type T into *acc, a block at a time (strides in
// bytes).
func sumAs[T realNumber, A int64 | uint64 | float64](acc *A) func(dl, sl int64) blockFunc {
	return func(_, _ int64) blockFunc {
		return func(_, s unsafe.Pointer, _, na, nb, _, sk, _, sl int64) {
			var t A
			for a := range na {
				r := unsafe.Add(s, a*sk)
				for b := range nb {
					// Sound: every offset is an element of the live view.
					t += A(*(*T)(unsafe.Add(r, b*sl)))
				}
			}
			*acc += t
		}
	}
}

// sumComplex is sumAs for complex elements.
func sumComplex[T complex64 | complex128](acc *complex128) func(dl, sl int64) blockFunc {
	return func(_, _ int64) blockFunc {
		return func(_, s unsafe.Pointer, _, na, nb, _, sk, _, sl int64) {
			var t complex128
			for a := range na {
				r := unsafe.Add(s, a*sk)
				for b := range nb {
					// Sound: every offset is an element of the live view.
					t += complex128(*(*T)(unsafe.Add(r, b*sl)))
				}
			}
			*acc += t
		}
	}
}
