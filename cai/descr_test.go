package cai

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDescrLayout(t *testing.T) {
	tests := []struct {
		name    string
		d       Descr
		size    int64
		offsets []int64
		str     string
	}{
		{"xyz", Descr{{Name: "x", Typestr: "<f4"}, {Name: "y", Typestr: "<f4"}, {Name: "z", Typestr: "<f4"}},
			12, []int64{0, 4, 8}, "[('x', '<f4'), ('y', '<f4'), ('z', '<f4')]"},
		{"padded", Descr{{Name: "ival", Typestr: "<i4"}, {Typestr: "|V4"}, {Name: "dval", Typestr: "<f8"}},
			16, []int64{0, 4, 8}, "[('ival', '<i4'), ('', '|V4'), ('dval', '<f8')]"},
		{"nested", Descr{{Name: "ival", Typestr: "<i4"}, {Name: "sub", Fields: Descr{{Name: "sval", Typestr: "<u2"}, {Name: "bval", Typestr: "|u1"}, {Name: "cval", Typestr: "|u1"}}}},
			8, []int64{0, 4}, "[('ival', '<i4'), ('sub', [('sval', '<u2'), ('bval', '|u1'), ('cval', '|u1')])]"},
		{"subarray", Descr{{Name: "ival", Typestr: "<i4"}, {Name: "data", Typestr: "<f8", Shape: []int64{16, 4}}},
			516, []int64{0, 4}, "[('ival', '<i4'), ('data', '<f8', (16, 4))]"},
		{"one-dim subarray", Descr{{Name: "v", Typestr: "<f4", Shape: []int64{3}}},
			12, []int64{0}, "[('v', '<f4', (3,))]"},
		{"titled", Descr{{Title: "Full name", Name: "x", Typestr: "<f4"}},
			4, []int64{0}, "[(('Full name', 'x'), '<f4')]"},
		{"zero-length subarray", Descr{{Name: "n", Typestr: "<i8"}, {Name: "b", Typestr: "|u1", Shape: []int64{0}}},
			8, []int64{0, 8}, "[('n', '<i8'), ('b', '|u1', (0,))]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			size, err := tc.d.ItemSize()
			if err != nil {
				t.Fatal(err)
			}
			if size != tc.size {
				t.Errorf("ItemSize = %d, want %d", size, tc.size)
			}
			offs, err := tc.d.Offsets()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.offsets, offs); diff != "" {
				t.Errorf("Offsets (-want +got):\n%s", diff)
			}
			if got := tc.d.String(); got != tc.str {
				t.Errorf("String = %s, want %s", got, tc.str)
			}
		})
	}
}

func TestDescrErrors(t *testing.T) {
	deep := Descr{{Name: "leaf", Typestr: "<f4"}}
	for k := 0; k < 40; k++ {
		deep = Descr{{Name: "n", Fields: deep}}
	}
	tests := []struct {
		name    string
		d       Descr
		wantErr string
	}{
		{"empty", Descr{}, "empty field list"},
		{"duplicate", Descr{{Name: "a", Typestr: "<f4"}, {Name: "a", Typestr: "<f4"}}, `field name "a" appears twice`},
		{"both", Descr{{Name: "a", Typestr: "<f4", Fields: Descr{{Typestr: "<f4"}}}}, "has both"},
		{"neither", Descr{{Name: "a"}}, "has neither"},
		{"bad typestr", Descr{{Name: "a", Typestr: "f"}}, `field "a": cai: bad typestr "f"`},
		{"object", Descr{{Name: "a", Typestr: "|O"}}, "Python object pointers"},
		{"negative subarray", Descr{{Name: "a", Typestr: "<f4", Shape: []int64{-1}}}, "shape[0] = -1 is negative"},
		{"overflow", Descr{{Name: "a", Typestr: "<f8", Shape: []int64{1 << 62}}}, "overflow int64"},
		{"sum overflow", Descr{{Name: "a", Typestr: "|u1", Shape: []int64{1 << 62}}, {Name: "b", Typestr: "|u1", Shape: []int64{1 << 62}}}, "record size overflows int64"},
		{"deep", deep, "nested deeper than 32"},
		{"nested empty", Descr{{Name: "a", Fields: Descr{}}}, `field "a": cai: bad descr: empty field list`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.d.ItemSize()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ItemSize() error = %v, want %q", err, tc.wantErr)
			}
			if _, err := tc.d.Offsets(); err == nil {
				t.Error("Offsets succeeded")
			}
		})
	}
}

func TestPackRecord(t *testing.T) {
	// struct { int32 ival; double dval; } as a C compiler lays it out.
	got, err := PackRecord(16, RecordField{Name: "dval", Typestr: "<f8", Offset: 8}, RecordField{Name: "ival", Typestr: "<i4", Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	want := Descr{{Name: "ival", Typestr: "<i4"}, {Typestr: "|V4"}, {Name: "dval", Typestr: "<f8"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Leading gap and tail padding; a subarray field.
	got, err = PackRecord(24, RecordField{Name: "v", Typestr: "<f4", Offset: 4, Shape: []int64{3}})
	if err != nil {
		t.Fatal(err)
	}
	want = Descr{{Typestr: "|V4"}, {Name: "v", Typestr: "<f4", Shape: []int64{3}}, {Typestr: "|V8"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if offs, _ := got.Offsets(); !cmp.Equal(offs, []int64{0, 4, 16}) {
		t.Errorf("Offsets = %v", offs)
	}
	for _, tc := range []struct {
		name    string
		size    int64
		fields  []RecordField
		wantErr string
	}{
		{"overlap", 8, []RecordField{{Name: "a", Typestr: "<i4"}, {Name: "b", Typestr: "<i4", Offset: 2}}, `field "b" at offset 2 overlaps`},
		{"past the end", 6, []RecordField{{Name: "a", Typestr: "<f8"}}, "reaches past the item size 6"},
		{"bad type", 8, []RecordField{{Name: "a", Typestr: "<x8"}}, "bad typestr"},
		{"duplicate", 8, []RecordField{{Name: "a", Typestr: "<i4"}, {Name: "a", Typestr: "<i4", Offset: 4}}, "appears twice"},
		{"empty", 0, nil, "empty field list"},
	} {
		if _, err := PackRecord(tc.size, tc.fields...); err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrDescr) {
			t.Errorf("%s: PackRecord error = %v, want ErrDescr containing %q", tc.name, err, tc.wantErr)
		}
	}
}
