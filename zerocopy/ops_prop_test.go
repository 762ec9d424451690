package zerocopy_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/zerocopy"
)

// randomView derives a view with a random layout (permuted, sliced with
// random steps either way, sometimes broadcast) from fresh iota memory.
func randomView(t *testing.T, r *rand.Rand) *zerocopy.View {
	t.Helper()
	nd := 1 + r.IntN(4)
	shape := make([]int64, nd)
	for i := range shape {
		shape[i] = 1 + r.Int64N(5)
	}
	v, _ := iotaView(t, shape...)
	perm := r.Perm(nd)
	v = must(t)(v.Permute(perm...))
	for d := 0; d < nd; d++ {
		if r.IntN(2) == 0 {
			continue
		}
		e := v.Shape()[d]
		step := 1 + r.Int64N(3)
		if r.IntN(2) == 0 {
			step = -step
		}
		start, stop := r.Int64N(e+2)-1, r.Int64N(e+2)-1
		if r.IntN(3) == 0 {
			start = zerocopy.Omit
		}
		v = must(t)(v.Slice(d, start, stop, step))
	}
	if r.IntN(4) == 0 {
		target := append([]int64{1 + r.Int64N(3)}, v.Shape()...)
		v = must(t)(v.Broadcast(target...))
	}
	return v
}

// factor splits n into up to 4 random extents whose product is n.
func factor(r *rand.Rand, n int64) []int64 {
	if n == 0 {
		return []int64{0, 1 + r.Int64N(3)}
	}
	var out []int64
	for len(out) < 3 && n > 1 {
		var divs []int64
		for d := int64(1); d <= n; d++ {
			if n%d == 0 {
				divs = append(divs, d)
			}
		}
		d := divs[r.IntN(len(divs))]
		out = append(out, d)
		n /= d
	}
	return append(out, n)
}

// TestReshapeProperty: whenever Reshape succeeds, the elements in
// row-major order are unchanged; C-contiguous views always reshape; a
// failure says a copy is needed, and then Clone+Reshape works.
func TestReshapeProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 400; i++ {
		v := randomView(t, r)
		to := factor(r, v.Len())
		if r.IntN(3) == 0 {
			to[r.IntN(len(to))] = -1
			if v.Len() == 0 {
				to = []int64{v.Len()}
			}
		}
		before := elems(t, v)
		s, err := v.Reshape(to...)
		if err != nil {
			if v.IsCContiguous() {
				t.Fatalf("C-contiguous %v (strides %v) did not reshape to %v: %v", v.Shape(), v.Strides(), to, err)
			}
			if !strings.Contains(err.Error(), "without a copy") {
				t.Fatalf("reshape %v -> %v: unexpected error %v", v.Shape(), to, err)
			}
			c := must(t)(zerocopy.Clone(v))
			s = must(t)(c.Reshape(to...))
		} else {
			t.Cleanup(func() { s.Close() })
			if s.Ptr() != v.Ptr() {
				t.Fatalf("reshape moved the pointer")
			}
		}
		if diff := cmp.Diff(before, elems(t, s)); diff != "" {
			t.Fatalf("reshape of %v (strides %v) to %v changed the elements (-before +after):\n%s",
				v.Shape(), v.Strides(), to, diff)
		}
	}
}

// TestCopyProperty copies random layouts into random layouts of the same
// shape and compares element by element.
func TestCopyProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		src := randomView(t, r)
		shape := src.Shape()
		// A destination with the same shape but its own random order.
		perm := r.Perm(len(shape))
		pshape := make([]int64, len(shape))
		inv := make([]int, len(shape))
		for k, p := range perm {
			pshape[k] = shape[p]
			inv[p] = k
		}
		buf, _ := iotaView(t, pshape...)
		dst := must(t)(buf.Permute(inv...))
		if r.IntN(2) == 0 && len(shape) > 0 && shape[0] > 1 {
			// Reverse one dim of dst too.
			dst = must(t)(dst.Slice(0, zerocopy.Omit, zerocopy.Omit, -1))
		}
		want := elems(t, src)
		if err := zerocopy.Copy(dst, src); err != nil {
			t.Fatalf("Copy(%v strides %v <- strides %v): %v", shape, dst.Strides(), src.Strides(), err)
		}
		if diff := cmp.Diff(want, elems(t, dst)); diff != "" {
			t.Fatalf("Copy(%v strides %v <- strides %v) (-src +dst):\n%s", shape, dst.Strides(), src.Strides(), diff)
		}
	}
}
