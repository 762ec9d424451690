package zerocopy_test

import (
	"fmt"

	"github.com/dlbridge/dlbridge/zerocopy"
)

// A Go slice becomes a 2×3 view without a copy; the view keeps the slice
// alive until it is closed.
func ExampleFromSlice() {
	data := []float32{0, 1, 2, 3, 4, 5}
	m, err := zerocopy.FromSlice(data, 2, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	fmt.Println(m.Shape(), m.Strides(), m.DType(), m.Device())
	x, _ := zerocopy.At[float32](m, 1, -1)
	fmt.Println(x)
	// Output:
	// [2 3] [3 1] float32 cpu
	// 5
}

// Slice follows Python: Slice(dim, start, stop, step), negative steps
// included; Omit leaves a bound out, as in m[:, ::-1].
func ExampleView_Slice() {
	m, _ := zerocopy.FromSlice([]int32{0, 1, 2, 3, 4, 5}, 2, 3)
	defer m.Close()
	r, err := m.Slice(1, zerocopy.Omit, zerocopy.Omit, -1) // borrows m's reference: no Close
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Shape(), r.Strides())
	var got []int32
	zerocopy.Each(r, func(idx []int64, x int32) bool {
		got = append(got, x)
		return true
	})
	fmt.Println(got)
	_, err = m.Slice(1, 0, 3, 0)
	fmt.Println(err)
	// Output:
	// [2 3] [3 -1]
	// [2 1 0 5 4 3]
	// zerocopy: Slice: step 0 for dim 1: the step must be nonzero
}

// HostSlice gives the elements of a contiguous view as a []T sharing its
// memory; the dtype must match T exactly.
func ExampleHostSlice() {
	m, _ := zerocopy.FromSlice(make([]float64, 6), 2, 3)
	defer m.Close()
	row, _ := m.Select(0, 1) // valid while m is open
	s, err := zerocopy.HostSlice[float64](row)
	if err != nil {
		fmt.Println(err)
		return
	}
	s[2] = 7
	fmt.Println(zerocopy.At[float64](m, 1, 2))
	_, err = zerocopy.HostSlice[float32](row)
	fmt.Println(err)
	// Output:
	// 7 <nil>
	// zerocopy: HostSlice[float32]: view dtype is float64
}

// Copy moves elements between any two layouts of the same dtype and shape:
// here a transposed view into a contiguous one.
func ExampleCopy() {
	src, _ := zerocopy.FromSlice([]int16{1, 2, 3, 4, 5, 6}, 2, 3)
	defer src.Close()
	t, _ := src.T()
	out := make([]int16, 6)
	dst, _ := zerocopy.FromSlice(out, 3, 2)
	defer dst.Close()
	if err := zerocopy.Copy(dst, t); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	fmt.Println(zerocopy.Copy(src, t))
	// Output:
	// [1 4 2 5 3 6]
	// zerocopy: Copy: dst shape [2, 3] != src shape [3, 2]
}

// A derived view borrows the reference of the view it came from; Retain
// gives it one of its own when it must outlive that view.
func ExampleView_Retain() {
	m, _ := zerocopy.FromSlice([]int32{0, 1, 2, 3, 4, 5}, 2, 3)
	col, _ := m.Select(1, 2) // no Close: valid while m is open
	kept, err := col.Retain()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer kept.Close()
	m.Close()
	_, err = zerocopy.At[int32](col, 0)
	fmt.Println(err)
	fmt.Println(zerocopy.At[int32](kept, 1))
	// Output:
	// zerocopy: At: zerocopy: use of a closed view
	// 5 <nil>
}
