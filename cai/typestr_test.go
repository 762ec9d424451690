package cai

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/google/go-cmp/cmp"
)

// Every typestr the mapping knows, both ways: typestr -> DataType, and
// DataType -> typestr for the canonical spelling.
func TestTypestrDataTypeBothWays(t *testing.T) {
	tests := []struct {
		typestr   string
		dt        dlpack.DataType
		canonical bool // TypestrOf(dt) gives typestr back
	}{
		{"|b1", dlpack.BoolType, true},
		{"|i1", dlpack.Int8Type, true},
		{"<i2", dlpack.Int16Type, true},
		{"<i4", dlpack.Int32Type, true},
		{"<i8", dlpack.Int64Type, true},
		{"|u1", dlpack.Uint8Type, true},
		{"<u2", dlpack.Uint16Type, true},
		{"<u4", dlpack.Uint32Type, true},
		{"<u8", dlpack.Uint64Type, true},
		{"<f2", dlpack.Float16Type, true},
		{"<f4", dlpack.Float32Type, true},
		{"<f8", dlpack.Float64Type, true},
		{"<c8", dlpack.Complex64Type, true},
		{"<c16", dlpack.Complex128Type, true},
		{"<V2", dlpack.Bfloat16Type, true},
		// Other spellings of the same types.
		{"<b1", dlpack.BoolType, false},
		{"=b1", dlpack.BoolType, false},
		{"b1", dlpack.BoolType, false},
		{">b1", dlpack.BoolType, false}, // byte order is irrelevant for one byte
		{"<i1", dlpack.Int8Type, false},
		{">i1", dlpack.Int8Type, false},
		{"<u1", dlpack.Uint8Type, false},
		{"=i4", dlpack.Int32Type, false},
		{"i8", dlpack.Int64Type, false},
		{"=f4", dlpack.Float32Type, false},
		{"f8", dlpack.Float64Type, false},
		{"=f2", dlpack.Float16Type, false},
		{"=c8", dlpack.Complex64Type, false},
		{"<f04", dlpack.Float32Type, false},
	}
	for _, tc := range tests {
		t.Run(tc.typestr, func(t *testing.T) {
			ts, err := ParseTypestr(tc.typestr)
			if err != nil {
				t.Fatalf("ParseTypestr: %v", err)
			}
			got, err := ts.DataType()
			if err != nil {
				t.Fatalf("DataType: %v", err)
			}
			if diff := cmp.Diff(tc.dt, got); diff != "" {
				t.Errorf("DataType (-want +got):\n%s", diff)
			}
			if !tc.canonical {
				return
			}
			back, descr, err := TypestrOf(tc.dt)
			if err != nil {
				t.Fatalf("TypestrOf(%s): %v", tc.dt, err)
			}
			if back != tc.typestr || descr != nil {
				t.Errorf("TypestrOf(%s) = %q, %v; want %q, nil", tc.dt, back, descr, tc.typestr)
			}
		})
	}
}

func TestTypestrOfConventions(t *testing.T) {
	tests := []struct {
		dt      dlpack.DataType
		padded  bool
		want    string
		descr   Descr
		wantErr string
	}{
		{dt: dlpack.DataType{Code: dlpack.Float8E4M3FN, Bits: 8, Lanes: 1}, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Float8E5M2, Bits: 8, Lanes: 1}, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Float8E8M0FNU, Bits: 8, Lanes: 1}, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Float4E2M1FN, Bits: 4, Lanes: 1}, padded: true, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Float6E2M3FN, Bits: 6, Lanes: 1}, padded: true, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}, padded: true, want: "|u1"},
		{dt: dlpack.DataType{Code: dlpack.Float, Bits: 32, Lanes: 3}, want: "|V12",
			descr: Descr{{Name: "f0", Typestr: "<f4"}, {Name: "f1", Typestr: "<f4"}, {Name: "f2", Typestr: "<f4"}}},
		{dt: dlpack.DataType{Code: dlpack.Bfloat, Bits: 16, Lanes: 2}, want: "|V4",
			descr: Descr{{Name: "f0", Typestr: "<V2"}, {Name: "f1", Typestr: "<V2"}}},
		{dt: dlpack.DataType{Code: dlpack.Float4E2M1FN, Bits: 4, Lanes: 1}, wantErr: "packs elements below a byte"},
		{dt: dlpack.DataType{Code: dlpack.Int, Bits: 4, Lanes: 1}, wantErr: "packs elements below a byte"},
		{dt: dlpack.DataType{Code: dlpack.Int, Bits: 1, Lanes: 1}, wantErr: "packs elements below a byte"},
		{dt: dlpack.DataType{Code: dlpack.Int, Bits: 128, Lanes: 1}, wantErr: "int128 has no NumPy typestr"},
		{dt: dlpack.DataType{Code: dlpack.Float, Bits: 128, Lanes: 1}, wantErr: "float128 has no NumPy typestr"},
		{dt: dlpack.DataType{Code: dlpack.Complex, Bits: 32, Lanes: 1}, wantErr: "complex32 has no NumPy typestr"},
		{dt: dlpack.DataType{Code: dlpack.OpaqueHandle, Bits: 64, Lanes: 1}, wantErr: "handle64 has no NumPy typestr"},
		{dt: dlpack.DataType{Code: 99, Bits: 8, Lanes: 1}, wantErr: "not a DLDataTypeCode"},
	}
	for _, tc := range tests {
		t.Run(tc.dt.String(), func(t *testing.T) {
			f := TypestrOf
			if tc.padded {
				f = PaddedTypestrOf
			}
			got, descr, err := f(tc.dt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrUnsupported) {
					t.Fatalf("err = %v, want ErrUnsupported containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("typestr = %q, want %q", got, tc.want)
			}
			if diff := cmp.Diff(tc.descr, descr); diff != "" {
				t.Errorf("descr (-want +got):\n%s", diff)
			}
			if tc.descr != nil {
				// Vector types come back through Interface.DataType.
				i := Interface{Typestr: got, Descr: descr}
				back, err := i.DataType()
				if err != nil {
					t.Fatal(err)
				}
				if back != tc.dt {
					t.Errorf("round trip = %s, want %s", back, tc.dt)
				}
			}
		})
	}
}

func TestParseTypestr(t *testing.T) {
	tests := []struct {
		in      string
		want    Typestr
		wantErr string
	}{
		{in: "<f4", want: Typestr{Order: '<', Kind: 'f', Size: 4}},
		{in: "f4", want: Typestr{Kind: 'f', Size: 4}},
		{in: "|V12", want: Typestr{Order: '|', Kind: 'V', Size: 12}},
		{in: "|O", want: Typestr{Order: '|', Kind: 'O'}},
		{in: "|O8", want: Typestr{Order: '|', Kind: 'O', Size: 8}},
		{in: "<U5", want: Typestr{Order: '<', Kind: 'U', Size: 5}},
		{in: "<M8[ns]", want: Typestr{Order: '<', Kind: 'M', Size: 8, Unit: "ns"}},
		{in: "<m8[25s]", want: Typestr{Order: '<', Kind: 'm', Size: 8, Unit: "25s"}},
		{in: "<M8", want: Typestr{Order: '<', Kind: 'M', Size: 8}},
		{in: "|t3", want: Typestr{Order: '|', Kind: 't', Size: 3}},
		{in: "=c16", want: Typestr{Order: '=', Kind: 'c', Size: 16}},
		{in: "", wantErr: "missing kind"},
		{in: "<", wantErr: "missing kind"},
		{in: "<<f4", wantErr: "unknown kind '<'"},
		{in: "<q8", wantErr: "unknown kind 'q'"},
		{in: "<f", wantErr: "missing size"},
		{in: "<f0", wantErr: "size 0"},
		{in: "<f4 ", wantErr: `unexpected " "`},
		{in: "<f99999999999", wantErr: "out of range"},
		{in: "<f2147483648", wantErr: "out of range"},
		{in: "<i4[ns]", wantErr: "unexpected"},
		{in: "<M8[ns", wantErr: "unterminated"},
		{in: "<M8[ns]x", wantErr: "unterminated or trailing"},
		{in: "<M8[]", wantErr: "bad datetime unit"},
		{in: "<M8[5]", wantErr: "bad datetime unit"},
		{in: "<M8[n-s]", wantErr: "bad datetime unit"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTypestr(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrTypestr) {
					t.Fatalf("ParseTypestr(%q) = %+v, %v; want ErrTypestr containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if again, err := ParseTypestr(got.String()); err != nil || again != got {
				t.Errorf("String() = %q re-parses to %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestTypestrItemSize(t *testing.T) {
	for in, want := range map[string]int64{
		"<f4": 4, "|V12": 12, "<U5": 20, "|S5": 5, "|O": 8, "|t9": 2, "<M8[ns]": 8, "<c16": 16,
	} {
		ts, err := ParseTypestr(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := ts.ItemSize(); got != want {
			t.Errorf("ItemSize(%q) = %d, want %d", in, got, want)
		}
	}
}

// The typestrs this package refuses, each with the error that says why.
func TestTypestrDataTypeErrors(t *testing.T) {
	tests := []struct {
		in      string
		is      error
		wantErr string
	}{
		{">f4", ErrBigEndian, `big-endian data is not supported (typestr ">f4")`},
		{">i2", ErrBigEndian, "big-endian"},
		{">c8", ErrBigEndian, "big-endian"},
		{">V2", ErrBigEndian, "big-endian"},
		{"|V1", ErrUnsupported, `set Typestr to "|u1"`},
		{"|V2", ErrUnsupported, `only "<V2", PyTorch's bfloat16, is mapped`},
		{"=V2", ErrUnsupported, "opaque 2-byte void"},
		{"|V12", ErrUnsupported, "opaque 12-byte void"},
		{"<f16", ErrUnsupported, "long double"},
		{"<f12", ErrUnsupported, "long double"},
		{"<c32", ErrUnsupported, "complex long double"},
		{"<f1", ErrUnsupported, `kind 'f' has no 1-byte type`},
		{"<i16", ErrUnsupported, `kind 'i' has no 16-byte type`},
		{"<i3", ErrUnsupported, `kind 'i' has no 3-byte type`},
		{"|b2", ErrUnsupported, `kind 'b' has no 2-byte type`},
		{"<c4", ErrUnsupported, `kind 'c' has no 4-byte type`},
		{"|O", ErrUnsupported, "Python object pointers"},
		{"|S3", ErrUnsupported, "fixed-length string"},
		{"<U3", ErrUnsupported, "fixed-length string"},
		{"<M8[ns]", ErrUnsupported, "datetime"},
		{"<m8[s]", ErrUnsupported, "datetime"},
		{"|t8", ErrUnsupported, "bit field"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			ts, err := ParseTypestr(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			dt, err := ts.DataType()
			if err == nil || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("DataType(%q) = %v, %v; want %v containing %q", tc.in, dt, err, tc.is, tc.wantErr)
			}
		})
	}
}
