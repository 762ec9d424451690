package dlpack

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The DLPack 1.3 floats as the big producers export them: every fp8 type,
// fp6 and fp4 (packed below a byte), and PyTorch 2.11's
// torch.float4_e2m1fn_x2 (code float4_e2m1fn, bits 4, lanes 2: one byte).
var producerDTypes = []struct {
	name     string
	dt       DataType
	itemSize int
	subByte  bool
}{
	{"float8_e3m4", DataType{Float8E3M4, 8, 1}, 1, false},
	{"float8_e4m3", DataType{Float8E4M3, 8, 1}, 1, false},
	{"float8_e4m3b11fnuz", DataType{Float8E4M3B11FNUZ, 8, 1}, 1, false},
	{"float8_e4m3fn", DataType{Float8E4M3FN, 8, 1}, 1, false},
	{"float8_e4m3fnuz", DataType{Float8E4M3FNUZ, 8, 1}, 1, false},
	{"float8_e5m2", DataType{Float8E5M2, 8, 1}, 1, false},
	{"float8_e5m2fnuz", DataType{Float8E5M2FNUZ, 8, 1}, 1, false},
	{"float8_e8m0fnu", DataType{Float8E8M0FNU, 8, 1}, 1, false},
	{"float6_e2m3fn", DataType{Float6E2M3FN, 6, 1}, 1, true},
	{"float6_e3m2fn", DataType{Float6E3M2FN, 6, 1}, 1, true},
	{"float4_e2m1fn", DataType{Float4E2M1FN, 4, 1}, 1, true},
	{"float4_e2m1fn_x2", DataType{Float4E2M1FN, 4, 2}, 1, false},
	{"int4_x2", DataType{Int, 4, 2}, 1, false},
}

func TestProducerDTypesNamesAndSizes(t *testing.T) {
	for _, c := range producerDTypes {
		t.Run(c.name, func(t *testing.T) {
			if got := c.dt.String(); got != c.name {
				t.Errorf("String() = %q", got)
			}
			for _, s := range []string{c.name, "torch." + c.name} {
				got, err := ParseDataType(s)
				if err != nil || got != c.dt {
					t.Errorf("ParseDataType(%q) = %+v, %v; want %+v", s, got, err, c.dt)
				}
			}
			if err := c.dt.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if c.dt.ItemSize() != c.itemSize || c.dt.IsSubByte() != c.subByte {
				t.Errorf("ItemSize %d, IsSubByte %v; want %d, %v", c.dt.ItemSize(), c.dt.IsSubByte(), c.itemSize, c.subByte)
			}
		})
	}
	for _, bad := range []string{"float4_e2m1fn_x3", "float32_x2", "float4_e2m1fn_x1", "int8_x2"} {
		if dt, err := ParseDataType(bad); err == nil {
			t.Errorf("ParseDataType(%q) = %+v, want an error", bad, dt)
		}
	}
}

// TestProducerDTypesImportExport: a hand-built capsule of each type (a
// float4_e2m1fn_x2 [2,3] tensor is 6 bytes, as PyTorch lays it out) is
// accepted, and exporting the description again gives the same dtype,
// shape and strides.
func TestProducerDTypesImportExport(t *testing.T) {
	for _, c := range producerDTypes {
		t.Run(c.name, func(t *testing.T) {
			s := goodSpec()
			s.dtype = c.dt
			if c.subByte {
				s.shape, s.strides = []int64{2, 4}, []int64{4, 1} // whole bytes of packed elements
			}
			g, p := s.versioned()
			im, err := ImportVersioned(p)
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			defer im.Release()
			_ = g
			if im.DType != c.dt {
				t.Fatalf("imported dtype %+v, want %+v", im.DType, c.dt)
			}
			var rel countRel
			q, err := Export(&im.Desc, &rel)
			if err != nil {
				t.Fatalf("export: %v", err)
			}
			back, err := ImportVersioned(q)
			if err != nil {
				t.Fatalf("re-import: %v", err)
			}
			if diff := cmp.Diff([]any{im.DType, im.Shape, im.Strides}, []any{back.DType, back.Shape, back.Strides}); diff != "" {
				t.Errorf("round trip (-first +second):\n%s", diff)
			}
			back.Release()
			if rel.n != 1 {
				t.Errorf("export's releaser ran %d times, want 1", rel.n)
			}
		})
	}
}

func TestVectorLanesStillRefused(t *testing.T) {
	for _, dt := range []DataType{{Float, 32, 2}, {Float4E2M1FN, 4, 4}, {Int, 8, 2}, {Float6E2M3FN, 6, 2}} {
		s := goodSpec()
		s.dtype = dt
		_, p := s.versioned()
		if _, err := ImportVersioned(p); err == nil {
			t.Errorf("%+v imported; want lanes refused", dt)
		}
	}
}
