package zerocopy_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func dtypeOfSlice[T zerocopy.Elem](t *testing.T, s []T) dlpack.DataType {
	t.Helper()
	v, err := zerocopy.FromSlice(s)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Ptr() != uintptrOf(s) {
		t.Errorf("FromSlice[%T] copied: ptr %#x, slice at %#x", s, v.Ptr(), uintptrOf(s))
	}
	got, err := zerocopy.HostSlice[T](v)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(s) || &got[0] != &s[0] {
		t.Errorf("HostSlice[%T] does not share the slice", s)
	}
	if d := zerocopy.DTypeOf[T](); d != v.DType() {
		t.Errorf("DTypeOf[%T] = %s, view says %s", s, d, v.DType())
	}
	return v.DType()
}

func TestFromSliceDTypes(t *testing.T) {
	got := []string{
		dtypeOfSlice(t, []int8{1}).String(), dtypeOfSlice(t, []int16{1}).String(),
		dtypeOfSlice(t, []int32{1}).String(), dtypeOfSlice(t, []int64{1}).String(),
		dtypeOfSlice(t, []uint8{1}).String(), dtypeOfSlice(t, []uint16{1}).String(),
		dtypeOfSlice(t, []uint32{1}).String(), dtypeOfSlice(t, []uint64{1}).String(),
		dtypeOfSlice(t, []float32{1}).String(), dtypeOfSlice(t, []float64{1}).String(),
		dtypeOfSlice(t, []complex64{1}).String(), dtypeOfSlice(t, []complex128{1}).String(),
		dtypeOfSlice(t, []bool{true}).String(), dtypeOfSlice(t, []zerocopy.Float16{1}).String(),
		dtypeOfSlice(t, []zerocopy.BFloat16{1}).String(),
	}
	want := []string{"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
		"float32", "float64", "complex64", "complex128", "bool", "float16", "bfloat16"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dtypes (-want +got):\n%s", diff)
	}
}

func TestFromSliceShape(t *testing.T) {
	data := make([]int32, 6)
	tests := []struct {
		shape   []int64
		want    []int64 // strides; nil: error
		errWant string
	}{
		{nil, []int64{1}, ""},
		{[]int64{2, 3}, []int64{3, 1}, ""},
		{[]int64{6, 1, 1}, []int64{1, 1, 1}, ""},
		{[]int64{2, 2}, nil, "shape [2, 2] has 4 elements, the slice has 6"},
		{[]int64{-2, -3}, nil, "shape[0] = -2 is negative"},
		{make([]int64, 65), nil, "ndim 65 out of range (0..64)"},
	}
	for _, tc := range tests {
		v, err := zerocopy.FromSlice(data, tc.shape...)
		if tc.want == nil {
			if err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Errorf("FromSlice(shape %v): %v, want %q", tc.shape, err, tc.errWant)
			}
			continue
		}
		if err != nil {
			t.Errorf("FromSlice(shape %v): %v", tc.shape, err)
			continue
		}
		if diff := cmp.Diff(tc.want, v.Strides()); diff != "" {
			t.Errorf("FromSlice(shape %v) strides (-want +got):\n%s", tc.shape, diff)
		}
		if v.Device() != dlpack.CPUDevice || v.ReadOnly() || v.Foreign() {
			t.Errorf("FromSlice: device %s read-only %t foreign %t", v.Device(), v.ReadOnly(), v.Foreign())
		}
		v.Close()
	}
	// 0-d and empty views.
	v, err := zerocopy.FromSlice([]float64{7}, []int64{}...)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := zerocopy.At[float64](v); err != nil || x != 7 {
		t.Errorf("At of 0-d = %v, %v; want 7", x, err)
	}
	v.Close()
	e, err := zerocopy.FromSlice([]float64{}, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := zerocopy.HostSlice[float64](e); err != nil || len(s) != 0 {
		t.Errorf("HostSlice of empty = %v, %v", s, err)
	}
	e.Close()
}

func TestFromBytes(t *testing.T) {
	int4 := dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}
	tests := []struct {
		n       int
		dt      dlpack.DataType
		shape   []int64
		want    []int64 // shape; nil: error
		errWant string
	}{
		{16, dlpack.Float32Type, nil, []int64{4}, ""},
		{16, dlpack.Float64Type, []int64{2, 1}, []int64{2, 1}, ""},
		{6, int4, nil, []int64{12}, ""},
		{6, int4, []int64{3, 4}, []int64{3, 4}, ""},
		{10, dlpack.Float32Type, nil, nil, "10 bytes is not a whole number of float32 elements"},
		{16, dlpack.Float32Type, []int64{3}, nil, "shape [3] of float32 needs 12 bytes, have 16"},
		{16, dlpack.DataType{Code: 99, Bits: 8, Lanes: 1}, nil, nil, "dtype.code 99"},
	}
	for _, tc := range tests {
		v, err := zerocopy.FromBytes(make([]byte, tc.n), tc.dt, tc.shape...)
		if tc.want == nil {
			if err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Errorf("FromBytes(%d, %s, %v): %v, want %q", tc.n, tc.dt, tc.shape, err, tc.errWant)
			}
			continue
		}
		if err != nil {
			t.Errorf("FromBytes(%d, %s, %v): %v", tc.n, tc.dt, tc.shape, err)
			continue
		}
		if diff := cmp.Diff(tc.want, v.Shape()); diff != "" {
			t.Errorf("FromBytes(%d, %s) shape (-want +got):\n%s", tc.n, tc.dt, diff)
		}
		v.Close()
	}
}

// cudaView labels Go memory as cuda:0, as a real device allocation would
// be, to check host access refuses it.
func cudaView(t *testing.T, data []float32, shape ...int64) *zerocopy.View {
	t.Helper()
	v, err := zerocopy.Wrap(zerocopy.Spec{Ptr: uintptrOf(data), Device: dlpack.CUDADevice(0),
		DType: dlpack.Float32Type, Shape: shape}, zerocopy.NewOwner(nil, "labelled cuda"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close(); keep(data) })
	return v
}

func TestHostAccessErrors(t *testing.T) {
	v, _ := iotaView(t, 2, 3)
	tr, _ := v.T()
	defer tr.Close()
	closed, _ := iotaView(t, 2)
	closed.Close()
	buf := make([]byte, 24)
	mis, err := zerocopy.FromBytes(buf[4:20], dlpack.Float64Type)
	if err != nil {
		t.Fatal(err)
	}
	defer mis.Close()
	dev := cudaView(t, make([]float32, 6), 2, 3)

	tests := []struct {
		name string
		err  error
		want string
	}{
		{"dtype", second(zerocopy.HostSlice[float64](v)), "HostSlice[float64]: view dtype is float32"},
		{"dtype At", second(zerocopy.At[int32](v, 0, 0)), "At[int32]: view dtype is float32"},
		{"strided", second(zerocopy.HostSlice[float32](tr)), "shape [3, 2] and strides [1, 3] is not C-contiguous"},
		{"closed", second(zerocopy.HostSlice[float32](closed)), "use of a closed view"},
		{"misaligned", second(zerocopy.HostSlice[float64](mis)), "is not aligned for float64 (8 bytes)"},
		{"device", second(zerocopy.HostSlice[float32](dev)), "memory on cuda:0 is not host-accessible"},
		{"device At", second(zerocopy.At[float32](dev, 0, 0)), "memory on cuda:0 is not host-accessible"},
		{"device Set", zerocopy.Set[float32](dev, 1, 0, 0), "memory on cuda:0 is not host-accessible"},
		{"index count", second(zerocopy.At[float32](v, 1)), "1 indices for a 2-d view"},
		{"index range", second(zerocopy.At[float32](v, 0, 3)), "index 3 out of range for dim 1 with extent 3"},
		{"index negative", zerocopy.Set[float32](v, 1, -3, 0), "index -3 out of range for dim 0 with extent 2"},
		{"each dtype", zerocopy.Each(v, func([]int64, int8) bool { return true }), "Each[int8]: view dtype is float32"},
	}
	for _, tc := range tests {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestAtSetStrided(t *testing.T) {
	v, data := iotaView(t, 3, 4)
	s, err := v.Slice(1, zerocopy.Omit, zerocopy.Omit, -2) // columns 3, 1
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tests := []struct {
		idx  []int64
		want float32
	}{
		{[]int64{0, 0}, 3}, {[]int64{0, 1}, 1}, {[]int64{2, 0}, 11}, {[]int64{-1, -1}, 9}, {[]int64{-3, -2}, 3},
	}
	for _, tc := range tests {
		got, err := zerocopy.At[float32](s, tc.idx...)
		if err != nil || got != tc.want {
			t.Errorf("At%v = %v, %v; want %v", tc.idx, got, err, tc.want)
		}
	}
	if err := zerocopy.Set[float32](s, -1, 1, -1); err != nil {
		t.Fatal(err)
	}
	if data[5] != -1 {
		t.Errorf("Set[1,-1] of reversed columns wrote %v, want data[5] = -1", data)
	}
	var idxs [][]int64
	var vals []float32
	err = zerocopy.Each(s, func(idx []int64, x float32) bool {
		idxs = append(idxs, append([]int64(nil), idx...))
		vals = append(vals, x)
		return len(vals) < 5
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]int64{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}}, idxs); diff != "" {
		t.Errorf("Each indices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float32{3, 1, 7, -1, 11}, vals); diff != "" {
		t.Errorf("Each values (-want +got):\n%s", diff)
	}
}

func TestHostSliceShares(t *testing.T) {
	v, data := iotaView(t, 2, 3)
	row, _ := v.Select(0, 1)
	defer row.Close()
	s, err := zerocopy.HostSlice[float32](row)
	if err != nil {
		t.Fatal(err)
	}
	s[0] = 100
	if data[3] != 100 {
		t.Errorf("write through HostSlice of row 1 not seen in data: %v", data)
	}
	if len(s) != 3 || cap(s) != 3 {
		t.Errorf("HostSlice len %d cap %d, want 3 3", len(s), cap(s))
	}
}

func TestRegisterHostBacked(t *testing.T) {
	data := make([]float32, 6)
	dev := cudaView(t, data, 2, 3)
	un, err := zerocopy.RegisterHostBacked(uintrange(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.Set[float32](dev, 5, 1, 2); err != nil {
		t.Fatalf("Set on registered fake device memory: %v", err)
	}
	if data[5] != 5 {
		t.Errorf("Set did not write the registered memory")
	}
	if _, err := zerocopy.RegisterHostBacked(uintptrOf(data)+4, 4); err == nil {
		t.Errorf("overlapping registration accepted")
	}
	// A view reaching past the registered range is refused.
	big, err := zerocopy.Wrap(zerocopy.Spec{Ptr: uintptrOf(data), Device: dlpack.CUDADevice(0),
		DType: dlpack.Float32Type, Shape: []int64{7}}, zerocopy.NewOwner(nil, "too big"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zerocopy.HostSliceRO[float32](big); err == nil {
		t.Errorf("view past the registered range accepted")
	}
	big.Close()
	un()
	un()
	if err := zerocopy.Set[float32](dev, 5, 1, 2); err == nil {
		t.Errorf("Set after unregistering succeeded")
	}
	for _, bad := range [][2]int64{{0, 8}, {64, 0}, {64, -1}} {
		if _, err := zerocopy.RegisterHostBacked(uintptr(bad[0]), bad[1]); err == nil {
			t.Errorf("RegisterHostBacked(%#x, %d) accepted", bad[0], bad[1])
		}
	}
	keep(data)
}

func uintrange(s []float32) (uintptr, int64) { return uintptrOf(s), int64(4 * len(s)) }

func TestFloat16(t *testing.T) {
	// Every float16 survives the trip through float32.
	for h := 0; h < 1<<16; h++ {
		f := zerocopy.Float16(h).Float32()
		back := zerocopy.Float16From(f)
		if f != f {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != zerocopy.Float16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, uint16(back))
		}
	}
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02},
		{1 + 1.0/2048 + 1.0/65536, 0x3c01}, {5.960464477539063e-08, 0x0001}, {2.98e-08, 0x0000},
		{2.99e-08, 0x0001}, {6.097555e-05, 0x03ff}, {6.1035156e-05, 0x0400}, {1e-10, 0}, {float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, tc := range tests {
		if got := zerocopy.Float16From(tc.in); uint16(got) != tc.want {
			t.Errorf("Float16From(%v) = %#04x, want %#04x", tc.in, uint16(got), tc.want)
		}
	}
}

func TestBFloat16(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {math.Float32frombits(0x3f808000), 0x3f80}, {math.Float32frombits(0x3f818000), 0x3f82},
		{math.Float32frombits(0x3f808001), 0x3f81}, {math.MaxFloat32, 0x7f80}, {float32(math.Inf(1)), 0x7f80},
	}
	for _, tc := range tests {
		if got := zerocopy.BFloat16From(tc.in); uint16(got) != tc.want {
			t.Errorf("BFloat16From(%v) = %#04x, want %#04x", tc.in, uint16(got), tc.want)
		}
		if back := zerocopy.BFloat16(tc.want).Float32(); zerocopy.BFloat16From(back) != zerocopy.BFloat16(tc.want) {
			t.Errorf("BFloat16 %#04x does not round-trip", tc.want)
		}
	}
	if n := zerocopy.BFloat16From(float32(math.NaN())); n.Float32() == n.Float32() {
		t.Errorf("NaN became %#04x", uint16(n))
	}
}
