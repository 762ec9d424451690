package cai

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/google/go-cmp/cmp"
)

const testPtr = uintptr(0x7f0000001000)

// valid returns a small valid CAI dictionary for tests to break.
func valid() Interface {
	return Interface{Kind: CUDA, Shape: []int64{2, 3}, Typestr: "<f4", Data: Data{Ptr: testPtr}, Version: 3}
}

func TestValidateOK(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Interface)
	}{
		{"plain", func(*Interface) {}},
		{"version 2", func(i *Interface) { i.Version = 2 }},
		{"strides", func(i *Interface) { i.Strides = []int64{4, 8} }},
		{"negative strides inside", func(i *Interface) { i.Strides = []int64{-12, 4}; i.Data.Ptr = 12 }},
		{"zero strides", func(i *Interface) { i.Strides = []int64{0, 0} }},
		{"odd stride on extent 1", func(i *Interface) { i.Shape = []int64{1, 3}; i.Strides = []int64{7, 4} }},
		{"odd strides on empty", func(i *Interface) { i.Shape = []int64{0, 3}; i.Strides = []int64{7, 5}; i.Data.Ptr = 0 }},
		{"empty with NULL", func(i *Interface) { i.Shape = []int64{2, 0}; i.Data.Ptr = 0 }},
		{"0-d", func(i *Interface) { i.Shape = []int64{} }},
		{"0-d nil shape", func(i *Interface) { i.Shape = nil }},
		{"64 dims", func(i *Interface) { i.Shape = make([]int64, 64); i.Data.Ptr = 0 }},
		{"stream 1", func(i *Interface) { i.Stream = StreamHandle(1) }},
		{"stream 2", func(i *Interface) { i.Stream = StreamHandle(2) }},
		{"stream handle", func(i *Interface) { i.Stream = StreamHandle(0x55d4c0a1b2c0) }},
		{"read-only", func(i *Interface) { i.Data.ReadOnly = true }},
		{"default descr", func(i *Interface) { i.Descr = Descr{{Typestr: "<f4"}} }},
		{"complex with parts", func(i *Interface) {
			i.Typestr = "<c8"
			i.Descr = Descr{{Name: "real", Typestr: "<f4"}, {Name: "imag", Typestr: "<f4"}}
		}},
		{"record", func(i *Interface) {
			i.Typestr = "|V16"
			i.Descr = Descr{{Name: "ival", Typestr: "<i4"}, {Typestr: "|V4"}, {Name: "dval", Typestr: "<f8"}}
			i.Strides = []int64{48, 16}
		}},
		{"end of address space", func(i *Interface) { i.Shape = []int64{4}; i.Data.Ptr = math.MaxUint64 - 15 }},
		{"host", func(i *Interface) { i.Kind = Host }},
		{"host buffer protocol", func(i *Interface) { i.Kind = Host; i.Data = Data{FromBuffer: true}; i.Offset = 16 }},
		{"host big-endian one byte", func(i *Interface) { i.Kind = Host; i.Typestr = ">u1" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := valid()
			tc.mod(&i)
			if err := i.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

// One case per validation rule: the sentinel and the text that names it.
func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Interface)
		is      error
		wantErr string
	}{
		{"kind", func(i *Interface) { i.Kind = 7 }, ErrKind, "7 is neither CUDA nor Host"},
		{"version 1", func(i *Interface) { i.Version = 1 }, ErrVersion, "version 1 is older than 2"},
		{"version 0", func(i *Interface) { i.Version = 0 }, ErrVersion, "version 0 is older than 2"},
		{"version 4", func(i *Interface) { i.Version = 4 }, ErrVersion, "version 4 is unknown"},
		{"host version 2", func(i *Interface) { i.Kind = Host; i.Version = 2 }, ErrVersion, "__array_interface__ version 2 (only 3 is defined)"},
		{"ndim 65", func(i *Interface) { i.Shape = make([]int64, 65) }, ErrShape, "ndim 65 exceeds 64"},
		{"negative extent", func(i *Interface) { i.Shape = []int64{2, -1} }, ErrShape, "shape[1] = -1 is negative"},
		{"count overflow", func(i *Interface) { i.Shape = []int64{1 << 32, 1 << 32} }, ErrShape, "overflows int64"},
		{"byte size overflow", func(i *Interface) { i.Shape = []int64{1 << 62} }, ErrShape, "elements of 4 bytes overflow int64"},
		{"empty typestr", func(i *Interface) { i.Typestr = "" }, ErrTypestr, "typestr is empty"},
		{"bad typestr", func(i *Interface) { i.Typestr = "<z4" }, ErrTypestr, "unknown kind 'z'"},
		{"big-endian", func(i *Interface) { i.Typestr = ">f4" }, ErrBigEndian, `big-endian data is not supported (typestr ">f4")`},
		{"object", func(i *Interface) { i.Typestr = "|O" }, ErrUnsupported, "Python object pointers"},
		{"string", func(i *Interface) { i.Typestr = "|S4" }, ErrUnsupported, "fixed-length string"},
		{"unicode", func(i *Interface) { i.Typestr = "<U1" }, ErrUnsupported, "fixed-length string"},
		{"datetime", func(i *Interface) { i.Typestr = "<M8[ns]" }, ErrUnsupported, "datetime"},
		{"descr size", func(i *Interface) { i.Descr = Descr{{Name: "a", Typestr: "<f8"}} }, ErrDescr, `fields add up to 8 bytes but typestr "<f4" is 4 bytes`},
		{"descr both", func(i *Interface) { i.Descr = Descr{{Name: "a", Typestr: "<f4", Fields: Descr{{Typestr: "<f4"}}}} }, ErrDescr, `field "a" has both`},
		{"descr neither", func(i *Interface) { i.Descr = Descr{{Name: "a"}} }, ErrDescr, `field "a" has neither`},
		{"descr big-endian", func(i *Interface) { i.Descr = Descr{{Name: "a", Typestr: ">f4"}} }, ErrBigEndian, `field "a": `},
		{"strides length", func(i *Interface) { i.Strides = []int64{4} }, ErrStrides, "1 strides for 2 dimensions"},
		{"strides multiple", func(i *Interface) { i.Strides = []int64{12, 2} }, ErrStrides, `strides[1] = 2 bytes is not a multiple of the item size 4 (typestr "<f4")`},
		{"strides overflow", func(i *Interface) { i.Strides = []int64{math.MaxInt64 - 3, 4} }, ErrStrides, "overflows int64"},
		{"strides below 0", func(i *Interface) { i.Strides = []int64{-12, 4}; i.Data.Ptr = 8 }, ErrStrides, "negative strides reach 12 bytes below data pointer 0x8"},
		{"span past 2^64", func(i *Interface) { i.Data.Ptr = math.MaxUint64 - 8 }, ErrStrides, "overflows the address space"},
		{"NULL data", func(i *Interface) { i.Data.Ptr = 0 }, ErrData, "data pointer is 0 (NULL) for 6 elements"},
		{"CAI without data", func(i *Interface) { i.Data = Data{FromBuffer: true} }, ErrData, "requires a data entry"},
		{"CAI offset", func(i *Interface) { i.Offset = 4 }, ErrData, "offset 4 is not part of __cuda_array_interface__"},
		{"host offset with pointer", func(i *Interface) { i.Kind = Host; i.Offset = 4 }, ErrData, "only allowed when data is None"},
		{"host negative offset", func(i *Interface) { i.Kind = Host; i.Data = Data{FromBuffer: true}; i.Offset = -4 }, ErrData, "offset -4 is negative"},
		{"mask", func(i *Interface) { m := valid(); i.Mask = &m }, ErrUnsupported, "masked arrays (a non-null mask) are not supported"},
		{"stream 0", func(i *Interface) { i.Stream = StreamHandle(0) }, ErrStream, "stream 0 is disallowed"},
		{"host stream", func(i *Interface) { i.Kind = Host; i.Stream = StreamHandle(2) }, ErrStream, "has no stream entry (got 2 (per-thread default stream))"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := valid()
			tc.mod(&i)
			err := i.Validate()
			if err == nil || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v; want %v containing %q", err, tc.is, tc.wantErr)
			}
		})
	}
}

func TestInterfaceDataType(t *testing.T) {
	f4 := func(n string) Field { return Field{Name: n, Typestr: "<f4"} }
	tests := []struct {
		name    string
		i       Interface
		want    dlpack.DataType
		wantErr string
	}{
		{"plain", Interface{Typestr: "<f4"}, dlpack.Float32Type, ""},
		{"default descr", Interface{Typestr: "<f8", Descr: Descr{{Typestr: "<f8"}}}, dlpack.Float64Type, ""},
		{"descr describes a plain type", Interface{Typestr: "<c8", Descr: Descr{f4("real"), f4("imag")}}, dlpack.Complex64Type, ""},
		{"bfloat16", Interface{Typestr: "<V2"}, dlpack.Bfloat16Type, ""},
		{"bfloat16 default descr", Interface{Typestr: "<V2", Descr: Descr{{Typestr: "<V2"}}}, dlpack.Bfloat16Type, ""},
		{"xyz", Interface{Typestr: "|V12", Descr: Descr{f4("x"), f4("y"), f4("z")}},
			dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 3}, ""},
		{"subarray", Interface{Typestr: "|V16", Descr: Descr{{Name: "v", Typestr: "<i4", Shape: []int64{2, 2}}}},
			dlpack.DataType{Code: dlpack.Int, Bits: 32, Lanes: 4}, ""},
		{"nested", Interface{Typestr: "|V12", Descr: Descr{f4("x"), {Name: "yz", Fields: Descr{f4("y"), f4("z")}}}},
			dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 3}, ""},
		{"mixed", Interface{Typestr: "|V8", Descr: Descr{f4("x"), {Name: "i", Typestr: "<i4"}}}, dlpack.DataType{}, "has no DLPack data type"},
		{"padding", Interface{Typestr: "|V12", Descr: Descr{f4("x"), {Typestr: "|V4"}, f4("y")}}, dlpack.DataType{}, "has no DLPack data type"},
		{"opaque fields", Interface{Typestr: "|V2", Descr: Descr{{Name: "a", Typestr: "|V1"}, {Name: "b", Typestr: "|V1"}}}, dlpack.DataType{}, "opaque 1-byte"},
		{"short record", Interface{Typestr: "|V16", Descr: Descr{f4("x"), f4("y")}}, dlpack.DataType{}, "do not fill 16 bytes"},
		{"opaque", Interface{Typestr: "|V8"}, dlpack.DataType{}, "opaque 8-byte void"},
		{"big-endian record", Interface{Typestr: ">V8", Descr: Descr{f4("x"), f4("y")}}, dlpack.DataType{}, "big-endian"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.i.DataType()
			if tc.wantErr != "" || tc.want == (dlpack.DataType{}) {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DataType() = %v, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("DataType() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestElementStrides(t *testing.T) {
	tests := []struct {
		name    string
		shape   []int64
		typestr string
		strides []int64
		want    []int64
		wantErr string
	}{
		{"nil", []int64{2, 3}, "<f4", nil, nil, ""},
		{"transposed", []int64{3, 2}, "<f8", []int64{8, 24}, []int64{1, 3}, ""},
		{"negative", []int64{3}, "<i2", []int64{-2}, []int64{-1}, ""},
		{"broadcast", []int64{4, 3}, "<f4", []int64{0, 4}, []int64{0, 1}, ""},
		{"record", []int64{5}, "|V12", []int64{24}, []int64{2}, ""},
		{"odd stride on extent 1", []int64{1, 3}, "<f4", []int64{7, 4}, []int64{3, 1}, ""},
		{"odd strides on empty", []int64{0, 3}, "<f4", []int64{7, 5}, []int64{3, 1}, ""},
		{"not a multiple", []int64{2, 3}, "<f4", []int64{12, 6}, nil, "strides[1] = 6 bytes is not a multiple of the item size 4"},
		{"length", []int64{2, 3}, "<f4", []int64{12}, nil, "1 strides for 2 dimensions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := Interface{Shape: tc.shape, Typestr: tc.typestr, Strides: tc.strides}
			got, err := i.ElementStrides()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrStrides) {
					t.Fatalf("ElementStrides() = %v, %v; want ErrStrides containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewInterface(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		l       Layout
		want    Interface
		wantErr string
	}{
		{"contiguous", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float32Type, Shape: []int64{2, 3}},
			Interface{Kind: CUDA, Shape: []int64{2, 3}, Typestr: "<f4", Data: Data{Ptr: testPtr}, Version: 3}, ""},
		{"explicit C strides are dropped", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float32Type, Shape: []int64{2, 3}, Strides: []int64{3, 1}},
			Interface{Kind: CUDA, Shape: []int64{2, 3}, Typestr: "<f4", Data: Data{Ptr: testPtr}, Version: 3}, ""},
		{"extent-1 stride ignored", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float32Type, Shape: []int64{1, 3}, Strides: []int64{99, 1}},
			Interface{Kind: CUDA, Shape: []int64{1, 3}, Typestr: "<f4", Data: Data{Ptr: testPtr}, Version: 3}, ""},
		{"transposed", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float64Type, Shape: []int64{3, 2}, Strides: []int64{1, 3}, ReadOnly: true, Stream: StreamHandle(2)},
			Interface{Kind: CUDA, Shape: []int64{3, 2}, Typestr: "<f8", Data: Data{Ptr: testPtr, ReadOnly: true}, Version: 3,
				Strides: []int64{8, 24}, Stream: StreamHandle(2)}, ""},
		{"empty gets NULL", CUDA, Layout{Ptr: testPtr, DType: dlpack.Int64Type, Shape: []int64{0}},
			Interface{Kind: CUDA, Shape: []int64{0}, Typestr: "<i8", Version: 3}, ""},
		{"bfloat16", CUDA, Layout{Ptr: testPtr, DType: dlpack.Bfloat16Type, Shape: []int64{4}},
			Interface{Kind: CUDA, Shape: []int64{4}, Typestr: "<V2", Data: Data{Ptr: testPtr}, Version: 3}, ""},
		{"vector", Host, Layout{Ptr: testPtr, DType: dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 3}, Shape: []int64{4}},
			Interface{Kind: Host, Shape: []int64{4}, Typestr: "|V12", Data: Data{Ptr: testPtr}, Version: 3,
				Descr: Descr{{Name: "f0", Typestr: "<f4"}, {Name: "f1", Typestr: "<f4"}, {Name: "f2", Typestr: "<f4"}}}, ""},
		{"padded fp4", CUDA, Layout{Ptr: testPtr, DType: dlpack.DataType{Code: dlpack.Float4E2M1FN, Bits: 4, Lanes: 1}, Shape: []int64{4}, Padded: true},
			Interface{Kind: CUDA, Shape: []int64{4}, Typestr: "|u1", Data: Data{Ptr: testPtr}, Version: 3}, ""},
		{"packed fp4", CUDA, Layout{Ptr: testPtr, DType: dlpack.DataType{Code: dlpack.Float4E2M1FN, Bits: 4, Lanes: 1}, Shape: []int64{4}},
			Interface{}, "packs elements below a byte"},
		{"host stream", Host, Layout{Ptr: testPtr, DType: dlpack.Float32Type, Shape: []int64{4}, Stream: StreamHandle(1)},
			Interface{}, "has no stream entry"},
		{"NULL", CUDA, Layout{DType: dlpack.Float32Type, Shape: []int64{4}}, Interface{}, "data pointer is 0 (NULL)"},
		{"ndim", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float32Type, Shape: make([]int64, 65)}, Interface{}, "ndim 65 exceeds 64"},
		{"strides length", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float32Type, Shape: []int64{2}, Strides: []int64{1, 1}}, Interface{}, "2 strides for 1 dimensions"},
		{"strides overflow", CUDA, Layout{Ptr: testPtr, DType: dlpack.Float64Type, Shape: []int64{2, 2}, Strides: []int64{1 << 61, 1}}, Interface{}, "overflows int64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewInterface(tc.kind, tc.l)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewInterface() = %+v, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestStreamString(t *testing.T) {
	for s, want := range map[Stream]string{
		{}:                    "None",
		StreamHandle(1):       "1 (legacy default stream)",
		StreamHandle(2):       "2 (per-thread default stream)",
		StreamHandle(0xbeef0): "782064",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", s, got, want)
		}
	}
	if !(Stream{}).IsNone() || StreamHandle(1).IsNone() {
		t.Error("IsNone is wrong")
	}
	if CUDA.String() != "__cuda_array_interface__" || Host.String() != "__array_interface__" || Kind(9).String() != "Kind(9)" {
		t.Error("Kind.String is wrong")
	}
}
