package zerocopy_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dlbridge/dlbridge/cai"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
)

// caiLayout is what a test compares of a view.
type caiLayout struct {
	Ptr      uintptr
	Device   dlpack.Device
	DType    dlpack.DataType
	Shape    []int64
	Strides  []int64
	ReadOnly bool
	Foreign  bool
	Stream   uintptr
}

func caiLayoutOf(v *zerocopy.View) caiLayout {
	return caiLayout{Ptr: v.Ptr(), Device: v.Device(), DType: v.DType(), Shape: v.Shape(), Strides: v.Strides(),
		ReadOnly: v.ReadOnly(), Foreign: v.Foreign(), Stream: v.Stream()}
}

// caiCountingOwner is an owner whose release increments *n.
func caiCountingOwner(n *atomic.Int32) *zerocopy.Owner {
	return zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { n.Add(1) }), "cai test")
}

func caiMust[T any](t testing.TB) func(T, error) T {
	return func(x T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
}

func TestCAIExportDeviceView(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	mustV := caiMust[*zerocopy.View](t)
	base := mustV(tr.View(dlpack.CUDADevice(1), dlpack.Float32Type, 4, 6))
	defer base.Close()
	tv := mustV(base.Transpose(0, 1))
	defer tv.Close()
	sl := mustV(base.Slice(1, 4, 0, -2)) // columns 4, 2: negative stride
	defer sl.Close()
	ro := base.AsReadOnly()
	defer ro.Close()
	empty := mustV(base.Slice(0, 2, 2, 1))
	defer empty.Close()

	p := base.Ptr()
	tests := []struct {
		name   string
		v      *zerocopy.View
		stream uintptr
		want   cai.Interface
	}{
		{"contiguous", base, 0, cai.Interface{Kind: cai.CUDA, Shape: []int64{4, 6}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3}},
		{"pending stream", base, 0xabc000, cai.Interface{Kind: cai.CUDA, Shape: []int64{4, 6}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3,
			Stream: cai.StreamHandle(0xabc000)}},
		{"legacy default stream", base, 1, cai.Interface{Kind: cai.CUDA, Shape: []int64{4, 6}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3,
			Stream: cai.StreamHandle(cai.LegacyDefaultStream)}},
		{"transposed", tv, 0, cai.Interface{Kind: cai.CUDA, Shape: []int64{6, 4}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3,
			Strides: []int64{4, 24}}},
		{"negative step", sl, 0, cai.Interface{Kind: cai.CUDA, Shape: []int64{4, 2}, Typestr: "<f4", Data: cai.Data{Ptr: p + 16}, Version: 3,
			Strides: []int64{24, -8}}},
		{"read-only", ro, 0, cai.Interface{Kind: cai.CUDA, Shape: []int64{4, 6}, Typestr: "<f4", Data: cai.Data{Ptr: p, ReadOnly: true}, Version: 3}},
		{"empty", empty, 0, cai.Interface{Kind: cai.CUDA, Shape: []int64{0, 6}, Typestr: "<f4", Version: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.v.SetStream(tc.stream)
			defer tc.v.SetStream(0)
			got, err := tc.v.CUDAArrayInterface()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCAIExportDTypes(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	tests := []struct {
		dt      dlpack.DataType
		want    string
		wantErr string
	}{
		{dt: dlpack.BoolType, want: "|b1"},
		{dt: dlpack.Int8Type, want: "|i1"},
		{dt: dlpack.Uint16Type, want: "<u2"},
		{dt: dlpack.Int64Type, want: "<i8"},
		{dt: dlpack.Float16Type, want: "<f2"},
		{dt: dlpack.Bfloat16Type, want: "<V2"},
		{dt: dlpack.Float64Type, want: "<f8"},
		{dt: dlpack.Complex64Type, want: "<c8"},
		{dt: dlpack.Complex128Type, want: "<c16"},
		{dt: dlpack.DataType{Code: dlpack.Float8E4M3FN, Bits: 8, Lanes: 1}, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 4}, want: "|V16"},
		{dt: dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}, wantErr: "packs elements below a byte"},
		{dt: dlpack.DataType{Code: dlpack.Float4E2M1FN, Bits: 4, Lanes: 1}, wantErr: "packs elements below a byte"},
		{dt: dlpack.DataType{Code: dlpack.Complex, Bits: 32, Lanes: 1}, wantErr: "complex32 has no NumPy typestr"},
	}
	for _, tc := range tests {
		t.Run(tc.dt.String(), func(t *testing.T) {
			v, err := tr.View(dlpack.CUDADevice(0), tc.dt, 2, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			got, err := v.CUDAArrayInterface()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, cai.ErrUnsupported) {
					t.Fatalf("err = %v, want ErrUnsupported containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Typestr != tc.want {
				t.Errorf("typestr = %q, want %q", got.Typestr, tc.want)
			}
		})
	}
}

func TestCAIExportHost(t *testing.T) {
	data := []int32{1, 2, 3, 4, 5, 6}
	v := caiMust[*zerocopy.View](t)(zerocopy.FromSlice(data, 2, 3))
	defer v.Close()
	got, err := v.ArrayInterface()
	if err != nil {
		t.Fatal(err)
	}
	want := cai.Interface{Kind: cai.Host, Shape: []int64{2, 3}, Typestr: "<i4", Data: cai.Data{Ptr: uintptrOf(data)}, Version: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	js, _ := got.MarshalJSON()
	if !bytes.Contains(js, []byte(`"typestr": "<i4"`)) || bytes.Contains(js, []byte(`"stream"`)) {
		t.Errorf("host JSON %s", js)
	}
	keep(data)
}

func TestCAIExportErrors(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	mustV := caiMust[*zerocopy.View](t)
	dev := mustV(tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 3))
	defer dev.Close()
	rocm := mustV(tr.View(dlpack.Device{Type: dlpack.ROCM}, dlpack.Float32Type, 3))
	defer rocm.Close()
	pinned := mustV(tr.View(dlpack.Device{Type: dlpack.CUDAHost}, dlpack.Float32Type, 3))
	defer pinned.Close()
	data := []float32{1, 2, 3}
	host := mustV(zerocopy.FromSlice(data))
	defer host.Close()
	closed := mustV(tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 3))
	closed.Close()
	busy := mustV(tr.View(dlpack.Device{Type: dlpack.CUDAManaged}, dlpack.Float32Type, 3))
	defer busy.Close()
	busy.SetStream(0x1234)

	tests := []struct {
		name    string
		f       func() (cai.Interface, error)
		wantErr string
	}{
		{"CAI of host memory", host.CUDAArrayInterface, "memory on cpu is not CUDA device memory (use ArrayInterface"},
		{"CAI of pinned memory", pinned.CUDAArrayInterface, "memory on cuda_host:0 is not CUDA device memory"},
		{"CAI of ROCm memory", rocm.CUDAArrayInterface, "memory on rocm:0 is not CUDA device memory"},
		{"array interface of device memory", dev.ArrayInterface, "memory on cuda:0 is not host-accessible (use CUDAArrayInterface"},
		{"array interface with a pending write", busy.ArrayInterface, "pending write on stream 0x1234"},
		{"closed view, CAI", closed.CUDAArrayInterface, "closed view"},
		{"closed view, array interface", closed.ArrayInterface, "closed view"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("= %+v, %v; want error containing %q", got, err, tc.wantErr)
			}
		})
	}
	// Managed memory with no pending write goes both ways.
	busy.SetStream(0)
	if _, err := busy.ArrayInterface(); err != nil {
		t.Error(err)
	}
	if _, err := busy.CUDAArrayInterface(); err != nil {
		t.Error(err)
	}
	keep(data)
}

func TestCAIFromCAI(t *testing.T) {
	const p = uintptr(0x7f0000100000)
	cuda0 := dlpack.CUDADevice(0)
	f32x3 := dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 3}
	tests := []struct {
		name  string
		iface cai.Interface
		dev   dlpack.Device
		want  caiLayout
	}{
		{"contiguous", cai.Interface{Kind: cai.CUDA, Shape: []int64{2, 3}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Float32Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}, Foreign: true}},
		{"strided read-only with stream", cai.Interface{Kind: cai.CUDA, Shape: []int64{3, 2}, Typestr: "<f8", Data: cai.Data{Ptr: p, ReadOnly: true},
			Version: 3, Strides: []int64{8, 24}, Stream: cai.StreamHandle(0x5000)}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Float64Type, Shape: []int64{3, 2}, Strides: []int64{1, 3}, ReadOnly: true, Foreign: true, Stream: 0x5000}},
		{"per-thread default stream", cai.Interface{Kind: cai.CUDA, Shape: []int64{4}, Typestr: "<i4", Data: cai.Data{Ptr: p}, Version: 3,
			Stream: cai.StreamHandle(cai.PerThreadDefaultStream)}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Int32Type, Shape: []int64{4}, Strides: []int64{1}, Foreign: true, Stream: 2}},
		{"PyTorch version 2 bfloat16", cai.Interface{Kind: cai.CUDA, Shape: []int64{4}, Typestr: "<V2", Data: cai.Data{Ptr: p}, Version: 2}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Bfloat16Type, Shape: []int64{4}, Strides: []int64{1}, Foreign: true}},
		{"negative stride", cai.Interface{Kind: cai.CUDA, Shape: []int64{3}, Typestr: "<i2", Data: cai.Data{Ptr: p + 4}, Version: 3, Strides: []int64{-2}}, cuda0,
			caiLayout{Ptr: p + 4, Device: cuda0, DType: dlpack.Int16Type, Shape: []int64{3}, Strides: []int64{-1}, Foreign: true}},
		{"broadcast", cai.Interface{Kind: cai.CUDA, Shape: []int64{5, 3}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3, Strides: []int64{0, 4}}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Float32Type, Shape: []int64{5, 3}, Strides: []int64{0, 1}, Foreign: true}},
		{"xyz record", cai.Interface{Kind: cai.CUDA, Shape: []int64{10}, Typestr: "|V12", Data: cai.Data{Ptr: p}, Version: 3,
			Descr: cai.Descr{{Name: "x", Typestr: "<f4"}, {Name: "y", Typestr: "<f4"}, {Name: "z", Typestr: "<f4"}}}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: f32x3, Shape: []int64{10}, Strides: []int64{1}, Foreign: true}},
		{"empty", cai.Interface{Kind: cai.CUDA, Shape: []int64{0, 4}, Typestr: "<f4", Version: 3}, cuda0,
			caiLayout{Device: cuda0, DType: dlpack.Float32Type, Shape: []int64{0, 4}, Strides: []int64{4, 1}, Foreign: true}},
		{"0-d", cai.Interface{Kind: cai.CUDA, Shape: []int64{}, Typestr: "<c8", Data: cai.Data{Ptr: p}, Version: 3}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Complex64Type, Shape: []int64{}, Strides: []int64{}, Foreign: true}},
		{"managed", cai.Interface{Kind: cai.CUDA, Shape: []int64{2}, Typestr: "|b1", Data: cai.Data{Ptr: p}, Version: 3}, dlpack.Device{Type: dlpack.CUDAManaged},
			caiLayout{Ptr: p, Device: dlpack.Device{Type: dlpack.CUDAManaged}, DType: dlpack.BoolType, Shape: []int64{2}, Strides: []int64{1}, Foreign: true}},
		{"pinned", cai.Interface{Kind: cai.CUDA, Shape: []int64{2}, Typestr: "|u1", Data: cai.Data{Ptr: p}, Version: 3}, dlpack.Device{Type: dlpack.CUDAHost},
			caiLayout{Ptr: p, Device: dlpack.Device{Type: dlpack.CUDAHost}, DType: dlpack.Uint8Type, Shape: []int64{2}, Strides: []int64{1}, Foreign: true}},
		{"host", cai.Interface{Kind: cai.Host, Shape: []int64{2}, Typestr: "<u8", Data: cai.Data{Ptr: p}, Version: 3, Descr: cai.Descr{{Typestr: "<u8"}}}, dlpack.CPUDevice,
			caiLayout{Ptr: p, Device: dlpack.CPUDevice, DType: dlpack.Uint64Type, Shape: []int64{2}, Strides: []int64{1}, Foreign: true}},
		{"odd stride on extent 1", cai.Interface{Kind: cai.CUDA, Shape: []int64{1, 3}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3, Strides: []int64{7, 4}}, cuda0,
			caiLayout{Ptr: p, Device: cuda0, DType: dlpack.Float32Type, Shape: []int64{1, 3}, Strides: []int64{3, 1}, Foreign: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var released atomic.Int32
			v, err := zerocopy.FromCAI(tc.iface, tc.dev, caiCountingOwner(&released))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, caiLayoutOf(v), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if released.Load() != 0 {
				t.Error("owner released while the view is open")
			}
			v.Close()
			if released.Load() != 1 {
				t.Errorf("owner released %d times after Close, want 1", released.Load())
			}
		})
	}
}

// A rejected import releases the owner's reference exactly once.
func TestCAIFromCAIErrors(t *testing.T) {
	const p = uintptr(0x7f0000100000)
	ok := cai.Interface{Kind: cai.CUDA, Shape: []int64{2, 3}, Typestr: "<f4", Data: cai.Data{Ptr: p}, Version: 3}
	with := func(f func(*cai.Interface)) cai.Interface { i := ok; f(&i); return i }
	cuda0 := dlpack.CUDADevice(0)
	tests := []struct {
		name    string
		iface   cai.Interface
		dev     dlpack.Device
		is      error
		wantErr string
	}{
		{"stream 0", with(func(i *cai.Interface) { i.Stream = cai.StreamHandle(0) }), cuda0, cai.ErrStream, "stream 0 is disallowed"},
		{"strides", with(func(i *cai.Interface) { i.Strides = []int64{12, 6} }), cuda0, cai.ErrStrides, "not a multiple of the item size 4"},
		{"NULL", with(func(i *cai.Interface) { i.Data.Ptr = 0 }), cuda0, cai.ErrData, "data pointer is 0 (NULL) for 6 elements"},
		{"big-endian", with(func(i *cai.Interface) { i.Typestr = ">f4" }), cuda0, cai.ErrBigEndian, "big-endian data is not supported"},
		{"mask", with(func(i *cai.Interface) { m := ok; i.Mask = &m }), cuda0, cai.ErrUnsupported, "masked arrays"},
		{"version", with(func(i *cai.Interface) { i.Version = 1 }), cuda0, cai.ErrVersion, "version 1 is older than 2"},
		{"opaque void", with(func(i *cai.Interface) { i.Typestr = "|V1" }), cuda0, cai.ErrUnsupported, "opaque 1-byte"},
		{"mixed record", with(func(i *cai.Interface) {
			i.Typestr = "|V8"
			i.Descr = cai.Descr{{Name: "a", Typestr: "<i4"}, {Name: "b", Typestr: "<f4"}}
		}), cuda0, cai.ErrUnsupported, "has no DLPack data type"},
		{"CAI on a CPU device", ok, dlpack.CPUDevice, nil, "cannot describe memory on cpu"},
		{"CAI on ROCm", ok, dlpack.Device{Type: dlpack.ROCM}, nil, "cannot describe memory on rocm:0"},
		{"host on a CUDA device", with(func(i *cai.Interface) { i.Kind = cai.Host }), cuda0, nil, "not host-accessible"},
		{"host buffer protocol", with(func(i *cai.Interface) { i.Kind = cai.Host; i.Data = cai.Data{FromBuffer: true} }), dlpack.CPUDevice, cai.ErrData,
			"data is None"},
		{"span overflow", with(func(i *cai.Interface) { i.Data.Ptr = ^uintptr(0) - 4 }), cuda0, cai.ErrStrides, "overflows the address space"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var released atomic.Int32
			v, err := zerocopy.FromCAI(tc.iface, tc.dev, caiCountingOwner(&released))
			if err == nil {
				v.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("err = %v, want %v containing %q", err, tc.is, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "zerocopy: FromCAI: ") {
				t.Errorf("err = %v, want the zerocopy: FromCAI: prefix", err)
			}
			if n := released.Load(); n != 1 {
				t.Errorf("owner released %d times, want exactly 1", n)
			}
		})
	}
	// A nil owner is an error, not a panic.
	if _, err := zerocopy.FromCAI(ok, cuda0, nil); err == nil {
		t.Error("FromCAI with a nil owner succeeded")
	}
}

// The whole path with fake device memory: allocate, view, slice, export
// to CAI, through JSON (what the Python bridge carries), import back with
// a reference of our own, and release from other goroutines. The data
// pointer is identical at every step and the memory is freed once.
func TestCAIRoundTripZeroCopy(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	mustV := caiMust[*zerocopy.View](t)
	base := mustV(tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 8, 6))
	sl := mustV(base.Slice(0, 1, 7, 2)) // rows 1, 3, 5: strided
	tv := mustV(sl.Transpose(0, 1))
	tv.SetStream(0x7000)

	iface, err := tv.CUDAArrayInterface()
	if err != nil {
		t.Fatal(err)
	}
	js, err := iface.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := cai.DecodeJSON(js, cai.CUDA)
	if err != nil {
		t.Fatal(err)
	}
	if err := tv.Owner().Retain(); err != nil { // the importer's own reference
		t.Fatal(err)
	}
	imp, err := zerocopy.FromCAI(got, dlpack.CUDADevice(0), tv.Owner())
	if err != nil {
		t.Fatal(err)
	}
	want := caiLayoutOf(tv)
	want.Foreign = true
	if diff := cmp.Diff(want, caiLayoutOf(imp)); diff != "" {
		t.Errorf("imported view (-want +got):\n%s", diff)
	}
	if imp.Ptr() != base.Ptr()+6*4 {
		t.Errorf("pointer moved: %#x, want %#x", imp.Ptr(), base.Ptr()+24)
	}
	// And back out again: the same dictionary.
	again, err := imp.CUDAArrayInterface()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(iface, again); diff != "" {
		t.Errorf("re-export (-first +second):\n%s", diff)
	}

	var wg sync.WaitGroup
	for _, v := range []*zerocopy.View{base, sl, tv, imp} {
		wg.Add(1)
		go func() { defer wg.Done(); v.Close() }()
	}
	wg.Wait()
	if s := tr.Stats(); s.Live != 0 || s.Frees != 1 || s.DoubleFrees != 0 || s.FreeCalls != 1 {
		t.Errorf("stats %+v: want the memory freed exactly once", s)
	}
}

// Every valid dictionary of testdata/cai that maps to a DLPack type
// imports and exports back to an equivalent dictionary.
func TestCAICorpusImportExport(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/cai/*/*.json")
	if len(paths) == 0 {
		t.Fatal("no corpus")
	}
	imported := 0
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			kind, dev := cai.CUDA, dlpack.CUDADevice(0)
			if strings.HasPrefix(name, "host") {
				kind, dev = cai.Host, dlpack.CPUDevice
			}
			iface, err := cai.DecodeJSON(b, kind)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := iface.DataType(); err != nil || iface.Data.FromBuffer {
				t.Skipf("not importable: %v", err)
			}
			var released atomic.Int32
			v, err := zerocopy.FromCAI(iface, dev, caiCountingOwner(&released))
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			imported++
			var back cai.Interface
			if kind == cai.Host {
				back, err = v.ArrayInterface()
			} else {
				back, err = v.CUDAArrayInterface()
			}
			if err != nil {
				t.Fatal(err)
			}
			if back.Data != iface.Data || !cmp.Equal(back.Shape, iface.Shape) || back.Stream != iface.Stream {
				t.Errorf("exported %+v, imported %+v", back, iface)
			}
			es1, _ := iface.ElementStrides()
			es2, _ := back.ElementStrides()
			if es1 == nil {
				es1 = dlpack.CStrides(iface.Shape)
			}
			if es2 == nil {
				es2 = dlpack.CStrides(back.Shape)
			}
			if !dlpack.IsCContiguous(iface.Shape, es1) && !cmp.Equal(es1, es2) {
				t.Errorf("strides %v became %v", es1, es2)
			}
		})
	}
	if imported < 20 {
		t.Errorf("only %d corpus entries imported", imported)
	}
}

func ExampleFromCAI() {
	// A dictionary as CuPy prints it (the pointer is made up: nothing here
	// dereferences it).
	js := []byte(`{"shape": [3, 2], "typestr": "<f4", "descr": [["", "<f4"]], "stream": 1, "version": 3, "strides": [4, 12], "data": [139637976727552, false]}`)
	iface, err := cai.DecodeJSON(js, cai.CUDA)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The owner would hold a reference on the exporting Python object.
	owner := zerocopy.NewOwner(zerocopy.ReleaseFunc(func() { fmt.Println("released") }), "cupy array")
	v, err := zerocopy.FromCAI(iface, dlpack.CUDADevice(0), owner)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v.DType(), v.Shape(), v.Strides(), v.Stream(), v.Foreign(), v.Ptr() == uintptr(139637976727552))
	v.Close()
	// Output:
	// float32 [3 2] [1 3] 1 true true
	// released
}

func ExampleView_CUDAArrayInterface() {
	tr := fakemem.New(fakemem.Options{})
	v, err := tr.View(dlpack.CUDADevice(0), dlpack.Bfloat16Type, 2, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	t, _ := v.Transpose(0, 1)
	defer t.Close()
	t.SetStream(cai.PerThreadDefaultStream)
	iface, err := t.CUDAArrayInterface()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(iface.Shape, iface.Typestr, iface.Strides, iface.Stream, iface.Data.Ptr == v.Ptr())
	// Output: [3 2] <V2 [2 6] 2 (per-thread default stream) true
}

func BenchmarkInterfaceFromView(b *testing.B) {
	tr := fakemem.New(fakemem.Options{})
	v, err := tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 64, 128, 3)
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	t, _ := v.Transpose(0, 2)
	defer t.Close()
	for _, bc := range []struct {
		name string
		v    *zerocopy.View
	}{{"contiguous", v}, {"strided", t}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.v.CUDAArrayInterface(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkViewFromInterface(b *testing.B) {
	iface := cai.Interface{Kind: cai.CUDA, Shape: []int64{64, 128, 3}, Typestr: "<f4", Data: cai.Data{Ptr: 0x7f0000100000},
		Version: 3, Strides: []int64{1536, 12, 4}, Stream: cai.StreamHandle(0x5000)}
	owner := zerocopy.NewOwner(nil, "bench")
	defer owner.Release()
	b.ReportAllocs()
	for b.Loop() {
		owner.Retain()
		v, err := zerocopy.FromCAI(iface, dlpack.CUDADevice(0), owner)
		if err != nil {
			b.Fatal(err)
		}
		v.Close()
	}
}

// BenchmarkViewFromJSON is the consumer's whole path: decode, validate,
// wrap.
func BenchmarkViewFromJSON(b *testing.B) {
	js := []byte(`{"shape": [64, 128, 3], "typestr": "<f4", "data": [139637976727552, false], "version": 3, "strides": [1536, 12, 4], "mask": null, "stream": 1}`)
	owner := zerocopy.NewOwner(nil, "bench")
	defer owner.Release()
	b.ReportAllocs()
	for b.Loop() {
		iface, err := cai.DecodeJSON(js, cai.CUDA)
		if err != nil {
			b.Fatal(err)
		}
		owner.Retain()
		v, err := zerocopy.FromCAI(iface, dlpack.CUDADevice(0), owner)
		if err != nil {
			b.Fatal(err)
		}
		v.Close()
	}
}
