package zerocopy_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// must(t)(v, err) fails the test on err and closes v when the test ends.
func must(t testing.TB) func(*zerocopy.View, error) *zerocopy.View {
	return func(v *zerocopy.View, err error) *zerocopy.View {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		return v
	}
}

// TestCopyLayouts copies between many pairs of layouts, overlapping ones
// included, and checks dst ends up holding what src held before the copy.
func TestCopyLayouts(t *testing.T) {
	tests := []struct {
		name string
		mk   func(t *testing.T) (dst, src *zerocopy.View)
	}{
		{"C to C", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 3, 4)
			b, _ := iotaView(t, 3, 4)
			return must(t)(b.Slice(0, 0, 3, 1)), must(t)(a.Slice(0, zerocopy.Omit, zerocopy.Omit, -1))
		}},
		{"transposed to C", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 4, 3)
			b, _ := iotaView(t, 3, 4)
			return b, must(t)(a.T())
		}},
		{"C to transposed", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 3, 4)
			b, _ := iotaView(t, 4, 3)
			return must(t)(b.T()), a
		}},
		{"F to F", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 5, 3, 2)
			b, _ := iotaView(t, 5, 3, 2)
			return must(t)(b.Permute(2, 1, 0)), must(t)(a.Permute(2, 1, 0))
		}},
		{"reversed to stepped", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 3, 4)
			b, _ := iotaView(t, 3, 8)
			r := must(t)(a.Slice(0, zerocopy.Omit, zerocopy.Omit, -1))
			return must(t)(b.Slice(1, 1, 8, 2)), must(t)(r.Slice(1, zerocopy.Omit, zerocopy.Omit, -1))
		}},
		{"broadcast src", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 4)
			b, _ := iotaView(t, 3, 4)
			return b, must(t)(a.Broadcast(3, 4))
		}},
		{"3-d permuted both", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 2, 3, 4)
			b, _ := iotaView(t, 3, 2, 4)
			return must(t)(b.Permute(1, 0, 2)), must(t)(a.Permute(0, 1, 2))
		}},
		{"4-d with ones", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 2, 1, 3, 1)
			b, _ := iotaView(t, 1, 3, 2, 1)
			return must(t)(b.Permute(2, 0, 1, 3)), a
		}},
		{"0-d", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 2)
			b, _ := iotaView(t, 2)
			return must(t)(b.Select(0, 0)), must(t)(a.Select(0, 1))
		}},
		{"big transpose", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 70, 45)
			b, _ := iotaView(t, 45, 70)
			return b, must(t)(a.T())
		}},
		{"big 3-d permute", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 3, 40, 33)
			b, _ := iotaView(t, 33, 3, 40)
			return b, must(t)(a.Permute(2, 0, 1))
		}},
		{"big reversed transpose", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 37, 65)
			b, _ := iotaView(t, 65, 37)
			r := must(t)(a.Slice(1, zerocopy.Omit, zerocopy.Omit, -1))
			return must(t)(b.Slice(0, zerocopy.Omit, zerocopy.Omit, -1)), must(t)(r.T())
		}},
		{"overlap shift right", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 10)
			return must(t)(a.Slice(0, 1, zerocopy.Omit, 1)), must(t)(a.Slice(0, zerocopy.Omit, -1, 1))
		}},
		{"overlap shift left", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 10)
			return must(t)(a.Slice(0, zerocopy.Omit, -1, 1)), must(t)(a.Slice(0, 1, zerocopy.Omit, 1))
		}},
		{"overlap reverse in place", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 9)
			return a, must(t)(a.Slice(0, zerocopy.Omit, zerocopy.Omit, -1))
		}},
		{"overlap transpose in place", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 5, 5)
			return a, must(t)(a.T())
		}},
		{"overlap strided shift", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 4, 6)
			return must(t)(a.Slice(1, 1, zerocopy.Omit, 2)), must(t)(a.Slice(1, 0, 5, 2))
		}},
		{"same view", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 3, 3)
			return a, a
		}},
		{"empty", func(t *testing.T) (dst, src *zerocopy.View) {
			a, _ := iotaView(t, 0, 3)
			b, _ := iotaView(t, 0, 3)
			return a, b
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst, src := tc.mk(t)
			want := elems(t, src)
			if err := zerocopy.Copy(dst, src); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, elems(t, dst)); diff != "" {
				t.Errorf("dst after Copy (-src before +dst after):\n%s", diff)
			}
		})
	}
}

// copyTyped transposes a 5×3 matrix of T, offsetBytes into a byte buffer,
// into a fresh 3×5 one through Copy and checks every element with At.
func copyTyped[T zerocopy.Elem](t *testing.T, vals func(i int) T, offsetBytes int) {
	t.Helper()
	dt := zerocopy.DTypeOf[T]()
	is := dt.ItemSize()
	buf := make([]byte, 15*is+offsetBytes)
	sv, err := zerocopy.FromBytes(buf[offsetBytes:], dt, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Close()
	for i := 0; i < 15; i++ {
		if err := zerocopy.Set(sv, vals(i), int64(i/3), int64(i%3)); err != nil {
			t.Fatal(err)
		}
	}
	src := must(t)(sv.T())
	dst, err := zerocopy.FromSlice(make([]T, 15), 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := zerocopy.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 3; i++ {
		for j := int64(0); j < 5; j++ {
			got, err := zerocopy.At[T](dst, i, j)
			if err != nil {
				t.Fatal(err)
			}
			if want := vals(int(j*3 + i)); got != want {
				t.Errorf("%s dst[%d,%d] = %v, want %v", dt, i, j, got, want)
			}
		}
	}
}

func TestCopyDTypes(t *testing.T) {
	copyTyped(t, func(i int) uint8 { return uint8(i + 1) }, 0)
	copyTyped(t, func(i int) int16 { return int16(-i * 300) }, 0)
	copyTyped(t, func(i int) zerocopy.BFloat16 { return zerocopy.BFloat16From(float32(i)) }, 0)
	copyTyped(t, func(i int) int32 { return int32(i << 20) }, 0)
	copyTyped(t, func(i int) float64 { return float64(i) / 7 }, 0)
	copyTyped(t, func(i int) complex64 { return complex(float32(i), -float32(i)) }, 0)
	copyTyped(t, func(i int) complex64 { return complex(float32(i), 1) }, 4) // 4-aligned 8-byte items
	copyTyped(t, func(i int) complex128 { return complex(float64(i), 2) }, 0)
	copyTyped(t, func(i int) bool { return i%3 == 0 }, 0)
}

func TestCopyOddItemSize(t *testing.T) {
	// int8x3: 3-byte elements take the byte-wise path.
	dt := dlpack.DataType{Code: dlpack.Int, Bits: 8, Lanes: 3}
	src := make([]byte, 2*4*3)
	for i := range src {
		src[i] = byte(i)
	}
	sv := must(t)(zerocopy.FromBytes(src, dt, 2, 4))
	dst := make([]byte, len(src))
	dv := must(t)(zerocopy.FromBytes(dst, dt, 4, 2))
	if err := zerocopy.Copy(must(t)(dv.T()), sv); err != nil {
		t.Fatal(err)
	}
	// dst is 4×2 of triples: dst[j][i] = src[i][j].
	for i := 0; i < 2; i++ {
		for j := 0; j < 4; j++ {
			s, d := src[(i*4+j)*3:][:3], dst[(j*2+i)*3:][:3]
			if !cmp.Equal(s, d) {
				t.Errorf("element [%d,%d]: dst %v, src %v", i, j, d, s)
			}
		}
	}
}

func TestCopySubByte(t *testing.T) {
	int4 := dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}
	src := []byte{0x21, 0x43, 0x65}
	dst := make([]byte, 3)
	sv := must(t)(zerocopy.FromBytes(src, int4, 2, 3))
	dv := must(t)(zerocopy.FromBytes(dst, int4, 2, 3))
	if err := zerocopy.Copy(dv, sv); err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(src, dst) {
		t.Errorf("packed copy: %x, want %x", dst, src)
	}
	tr := must(t)(sv.T())
	dt := must(t)(zerocopy.FromBytes(make([]byte, 3), int4, 3, 2))
	if err := zerocopy.Copy(dt, tr); err == nil || !strings.Contains(err.Error(), "needs both views C-contiguous") {
		t.Errorf("copy of transposed packed int4: %v", err)
	}
	c, err := zerocopy.Clone(sv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if lo, hi := c.ByteSpan(); hi-lo != 3 {
		t.Errorf("Clone of packed int4[2 3] spans %d bytes, want 3", hi-lo)
	}
}

func TestCopyErrors(t *testing.T) {
	a, _ := iotaView(t, 2, 3)
	b, _ := iotaView(t, 3, 2)
	c, _ := iotaView(t, 2, 3)
	f16 := must(t)(zerocopy.FromSlice(make([]zerocopy.Float16, 6), 2, 3))
	ro := c.AsReadOnly()
	row, _ := iotaView(t, 3)
	bc := must(t)(row.Broadcast(2, 3))
	dev := cudaView(t, make([]float32, 6), 2, 3)
	closed, _ := iotaView(t, 2, 3)
	closed.Close()
	int4 := dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}
	packed := must(t)(zerocopy.FromBytes(make([]byte, 3), int4, 6))
	pbuf := make([]byte, 6)
	defer keep(pbuf)
	padded := must(t)(zerocopy.Wrap(zerocopy.Spec{Ptr: uintptrOf(pbuf), Device: dlpack.CPUDevice, DType: int4,
		Shape: []int64{6}, Padded: true}, zerocopy.NewOwner(nil, "padded")))

	tests := []struct {
		name     string
		dst, src *zerocopy.View
		want     string
	}{
		{"dtype", a, f16, "copy: dst dtype float32 != src dtype float16"},
		{"shape", a, b, "copy: dst shape [2, 3] != src shape [3, 2]"},
		{"read-only", ro, a, "copy: dst is read-only"},
		{"broadcast dst", bc, a, "dst dim 0 has stride 0 and extent 2"},
		{"device dst", dev, a, "dst: memory on cuda:0 is not host-accessible (copy it with CopyCUDA)"},
		{"device src", a, dev, "src: memory on cuda:0 is not host-accessible"},
		{"closed src", a, closed, "src: zerocopy: use of a closed view"},
		{"closed dst", closed, a, "dst: zerocopy: use of a closed view"},
		{"padding", padded, packed, "dst stores int4 padded=true, src padded=false"},
	}
	for _, tc := range tests {
		err := zerocopy.Copy(tc.dst, tc.src)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want)) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := zerocopy.Clone(dev); err == nil || !strings.Contains(err.Error(), "not host-accessible") {
		t.Errorf("Clone of device memory: %v", err)
	}
}

func TestClone(t *testing.T) {
	v, data := iotaView(t, 3, 4)
	s := must(t)(v.Slice(1, zerocopy.Omit, zerocopy.Omit, -2))
	ro := s.AsReadOnly()
	c, err := zerocopy.Clone(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.IsCContiguous() || c.ReadOnly() || c.Device() != dlpack.CPUDevice {
		t.Errorf("clone: C=%t read-only=%t device=%s", c.IsCContiguous(), c.ReadOnly(), c.Device())
	}
	if diff := cmp.Diff(elems(t, s), elems(t, c)); diff != "" {
		t.Errorf("clone elements (-src +clone):\n%s", diff)
	}
	cs, err := zerocopy.HostSlice[float32](c)
	if err != nil {
		t.Fatal(err)
	}
	cs[0] = -5
	if data[3] == -5 {
		t.Errorf("clone shares memory with its source")
	}
	e, err := zerocopy.Clone(must(t)(v.Slice(0, 1, 1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{0, 4}, e.Shape()); diff != "" {
		t.Errorf("clone of empty: shape (-want +got):\n%s", diff)
	}
	e.Close()
}
