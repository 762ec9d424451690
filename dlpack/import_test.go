package dlpack

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestImportRejects(t *testing.T) {
	cases := []struct {
		name   string
		mut    func(*tspec)
		field  string
		msg    string // part of the message
		legacy bool   // the case applies to legacy tensors too
	}{
		{"major 0", func(s *tspec) { s.major = 0 }, "version.major", "0.3 is not supported", false},
		{"major 2", func(s *tspec) { s.major, s.ndim = 2, 1000 }, "version.major", "2.3 is not supported", false},
		{"unknown flag", func(s *tspec) { s.flags = 1 << 5 }, "flags", "0x20", false},
		{"ndim -1", func(s *tspec) { s.ndim = -1 }, "dl_tensor.ndim", "-1 is out of range 0..64", true},
		{"ndim 65", func(s *tspec) { s.ndim = 65 }, "dl_tensor.ndim", "65 is out of range", true},
		{"lanes 4", func(s *tspec) { s.dtype.Lanes = 4 }, "dl_tensor.dtype.lanes", "not supported", true},
		{"lanes 0", func(s *tspec) { s.dtype.Lanes = 0 }, "dl_tensor.dtype.lanes", "0 lanes", true},
		{"code 18", func(s *tspec) { s.dtype.Code = 18 }, "dl_tensor.dtype.code", "18 is not a DLDataTypeCode", true},
		{"float bits 8", func(s *tspec) { s.dtype.Bits = 8 }, "dl_tensor.dtype.bits", "8 is not a width float allows", true},
		{"bool bits 1", func(s *tspec) { s.dtype = DataType{Bool, 1, 1} }, "dl_tensor.dtype.bits", "bool", true},
		{"fp4 bits 8", func(s *tspec) { s.dtype = DataType{Float4E2M1FN, 8, 1} }, "dl_tensor.dtype.bits", "float4_e2m1fn", true},
		{"device 0", func(s *tspec) { s.device.Type = 0 }, "dl_tensor.device.device_type", "0 is not a DLDeviceType", true},
		{"device 5", func(s *tspec) { s.device.Type = 5 }, "dl_tensor.device.device_type", "5 is not", true},
		{"device 19", func(s *tspec) { s.device.Type = 19 }, "dl_tensor.device.device_type", "19 is not", true},
		{"device id -1", func(s *tspec) { s.device = Device{CUDA, -1} }, "dl_tensor.device.device_id", "-1 is negative", true},
		{"NULL shape", func(s *tspec) { s.shape = nil }, "dl_tensor.shape", "NULL with ndim = 2", true},
		{"NULL strides 1.2", func(s *tspec) { s.minor, s.strides = 2, nil }, "dl_tensor.strides", "NULL with ndim = 2", false},
		{"NULL strides 1.3", func(s *tspec) { s.strides = nil }, "dl_tensor.strides", "DLPack >= 1.2 requires strides", false},
		{"negative extent", func(s *tspec) { s.shape = []int64{2, -3} }, "dl_tensor.shape[1]", "-3 is negative", true},
		{"element count overflow", func(s *tspec) { s.shape = []int64{1 << 32, 1 << 32} },
			"dl_tensor.shape[1]", "element count overflows", true},
		{"total size overflow", func(s *tspec) { s.shape, s.strides = []int64{1 << 31, 1 << 31}, []int64{0, 0} },
			"dl_tensor.shape", "total size overflows", true},
		{"stride overflow", func(s *tspec) { s.strides = []int64{math.MaxInt64 / 2, 1} },
			"dl_tensor.strides", "overflows int64", true},
		{"byte span overflow", func(s *tspec) { s.strides = []int64{math.MaxInt64 / 4, 1} },
			"dl_tensor.strides", "overflows int64", true},
		{"NULL data", func(s *tspec) { s.data = 0 }, "dl_tensor.data", "NULL for 6 elements", true},
		{"byte_offset wraps", func(s *tspec) { s.offset = math.MaxUint64 }, "dl_tensor.byte_offset", "overflows the address space", true},
		{"span below 0", func(s *tspec) { s.data, s.strides = 4, []int64{-3, 1} }, "dl_tensor.strides", "below data + byte_offset", true},
		{"span past end", func(s *tspec) { s.data = math.MaxUint64 - 8 }, "dl_tensor.strides", "beyond the end of the address space", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := goodSpec()
			c.mut(&s)
			check := func(kind string, im *Imported, err error, calls int) {
				t.Helper()
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("%s: err = %v, want a *FieldError", kind, err)
				}
				if fe.Field != c.field || !strings.Contains(fe.Msg, c.msg) {
					t.Errorf("%s: error %q, want field %q and a message containing %q", kind, err, c.field, c.msg)
				}
				if !strings.HasPrefix(err.Error(), "dlpack: "+c.field+": ") {
					t.Errorf("%s: Error() = %q does not name the field first", kind, err)
				}
				if calls != 1 {
					t.Errorf("%s: deleter ran %d times on a rejected import, want 1", kind, calls)
				}
				if !im.Released() {
					t.Errorf("%s: rejected import is not marked released", kind)
				}
				im.Release() // a no-op now
			}
			g, p := s.versioned()
			im := new(Imported)
			err := im.FromVersioned(p, nil)
			check("versioned", im, err, deleterCalls(p))
			_ = g
			if c.legacy {
				g, p := s.legacy()
				im := new(Imported)
				err := im.FromLegacy(p, nil)
				check("legacy", im, err, deleterCalls(p))
				_ = g
			}
		})
	}
}

func TestImportNULLPointer(t *testing.T) {
	var im Imported
	for _, err := range []error{im.FromVersioned(nil, nil), im.FromLegacy(nil, nil)} {
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.Contains(fe.Field, "*") {
			t.Errorf("NULL tensor: err = %v, want a FieldError naming the pointer", err)
		}
	}
	im.Release() // nothing to release
}

func TestImportAccepts(t *testing.T) {
	type want struct {
		Data    uintptr
		Device  Device
		DType   DataType
		Shape   []int64
		Strides []int64
		Flags   Flags
		Version Version
	}
	cases := []struct {
		name   string
		mut    func(*tspec)
		want   want
		legacy bool // also valid as a legacy tensor (flags and version aside)
	}{
		{"2-d", func(*tspec) {}, want{0x10000, CPUDevice, Float32Type, []int64{2, 3}, []int64{3, 1}, 0, Version{1, 3}}, true},
		{"0-d NULL shape and strides", func(s *tspec) { s.ndim, s.shape, s.strides = 0, nil, nil },
			want{0x10000, CPUDevice, Float32Type, []int64{}, []int64{}, 0, Version{1, 3}}, true},
		{"zero-size NULL data", func(s *tspec) { s.shape, s.data = []int64{0, 3}, 0 },
			want{0, CPUDevice, Float32Type, []int64{0, 3}, []int64{3, 1}, 0, Version{1, 3}}, true},
		{"zero-size huge strides", func(s *tspec) { s.shape, s.strides = []int64{0, 3}, []int64{math.MaxInt64, math.MinInt64} },
			want{0x10000, CPUDevice, Float32Type, []int64{0, 3}, []int64{math.MaxInt64, math.MinInt64}, 0, Version{1, 3}}, true},
		{"byte_offset", func(s *tspec) { s.offset = 256 },
			want{0x10100, CPUDevice, Float32Type, []int64{2, 3}, []int64{3, 1}, 0, Version{1, 3}}, true},
		{"negative strides", func(s *tspec) { s.strides, s.offset = []int64{-3, -1}, 20 },
			want{0x10014, CPUDevice, Float32Type, []int64{2, 3}, []int64{-3, -1}, 0, Version{1, 3}}, true},
		{"broadcast stride 0", func(s *tspec) { s.strides = []int64{0, 1} },
			want{0x10000, CPUDevice, Float32Type, []int64{2, 3}, []int64{0, 1}, 0, Version{1, 3}}, true},
		{"NULL strides 1.1", func(s *tspec) { s.minor, s.strides = 1, nil },
			want{0x10000, CPUDevice, Float32Type, []int64{2, 3}, []int64{3, 1}, 0, Version{1, 1}}, true},
		{"NULL strides 1.0 with extent 0", func(s *tspec) { s.minor, s.strides, s.shape = 0, nil, []int64{4, 0} },
			want{0x10000, CPUDevice, Float32Type, []int64{4, 0}, []int64{1, 1}, 0, Version{1, 0}}, true},
		{"minor 9", func(s *tspec) { s.minor = 9 },
			want{0x10000, CPUDevice, Float32Type, []int64{2, 3}, []int64{3, 1}, 0, Version{1, 9}}, false},
		{"flags", func(s *tspec) { s.flags = FlagReadOnly | FlagIsCopied },
			want{0x10000, CPUDevice, Float32Type, []int64{2, 3}, []int64{3, 1}, FlagReadOnly | FlagIsCopied, Version{1, 3}}, false},
		{"cuda bfloat16", func(s *tspec) { s.device, s.dtype = CUDADevice(3), Bfloat16Type },
			want{0x10000, CUDADevice(3), Bfloat16Type, []int64{2, 3}, []int64{3, 1}, 0, Version{1, 3}}, true},
		{"packed fp4", func(s *tspec) { s.dtype = DataType{Float4E2M1FN, 4, 1} },
			want{0x10000, CPUDevice, DataType{Float4E2M1FN, 4, 1}, []int64{2, 3}, []int64{3, 1}, 0, Version{1, 3}}, true},
		{"padded fp4", func(s *tspec) { s.dtype, s.flags = DataType{Float4E2M1FN, 4, 1}, FlagSubbyteTypePadded },
			want{0x10000, CPUDevice, DataType{Float4E2M1FN, 4, 1}, []int64{2, 3}, []int64{3, 1}, FlagSubbyteTypePadded, Version{1, 3}}, false},
		{"64-d", func(s *tspec) {
			s.ndim, s.shape, s.strides = 64, make([]int64, 64), make([]int64, 64)
			for i := range s.shape {
				s.shape[i], s.strides[i] = 1, 1
			}
		}, want{0x10000, CPUDevice, Float32Type, ones(64), ones(64), 0, Version{1, 3}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := goodSpec()
			c.mut(&s)
			g, p := s.versioned()
			var dims [2 * InlineDims]int64
			var im Imported
			if err := im.FromVersioned(p, dims[:]); err != nil {
				t.Fatal(err)
			}
			got := want{im.Data, im.Device, im.DType, im.Shape, im.Strides, im.Flags, im.Version}
			if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("versioned (-want +got):\n%s", diff)
			}
			if len(c.want.Shape) <= InlineDims && len(c.want.Shape) > 0 && &im.Shape[0] != &dims[0] {
				t.Errorf("shape not stored in the caller's dims")
			}
			if n := deleterCalls(p); n != 0 {
				t.Fatalf("deleter ran %d times before Release", n)
			}
			im.Release()
			im.Release()
			if n := deleterCalls(p); n != 1 {
				t.Errorf("deleter ran %d times, want 1", n)
			}
			_ = g
			if !c.legacy {
				return
			}
			g, p = s.legacy()
			if err := im.FromLegacy(p, nil); err != nil {
				t.Fatal(err)
			}
			c.want.Version, c.want.Flags = Version{}, 0
			got = want{im.Data, im.Device, im.DType, im.Shape, im.Strides, im.Flags, im.Version}
			if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("legacy (-want +got):\n%s", diff)
			}
			if !im.Legacy {
				t.Errorf("Legacy = false")
			}
			im.Release()
			if n := deleterCalls(p); n != 1 {
				t.Errorf("legacy deleter ran %d times, want 1", n)
			}
			_ = g
		})
	}
}

func ones(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func TestImportNullDeleter(t *testing.T) {
	s := goodSpec()
	s.nullDeleter = true
	g, p := s.versioned()
	im, err := ImportVersioned(p)
	if err != nil {
		t.Fatal(err)
	}
	im.Release()
	if !im.Released() {
		t.Error("not released")
	}
	s.major = 7 // rejected with a NULL deleter: nothing to call, still an error
	g, p = s.versioned()
	if _, err := ImportVersioned(p); err == nil {
		t.Error("major 7 accepted")
	}
	_ = g
}

func TestImportReleaseRace(t *testing.T) {
	// Many goroutines race to release one import: the deleter runs once.
	for range 20 {
		g, p := goodSpec().versioned()
		im, err := ImportVersioned(p)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(im.Release)
		}
		wg.Wait()
		if n := deleterCalls(p); n != 1 {
			t.Fatalf("deleter ran %d times, want 1", n)
		}
		_ = g
	}
}

func TestImportDimsTooShort(t *testing.T) {
	s := goodSpec()
	g, p := s.versioned()
	var im Imported
	dims := make([]int64, 3) // needs 4: a new slice is made
	if err := im.FromVersioned(p, dims); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{2, 3}, im.Shape); diff != "" {
		t.Error(diff)
	}
	if unsafe.SliceData(im.Shape) == unsafe.SliceData(dims) {
		t.Error("short dims were used")
	}
	im.Release()
	_ = g
}

func TestPeekNDim(t *testing.T) {
	s := goodSpec()
	s.ndim, s.shape, s.strides = 3, []int64{1, 2, 3}, []int64{6, 3, 1}
	g, p := s.versioned()
	g2, q := s.legacy()
	if n := PeekNDim(p, false); n != 3 {
		t.Errorf("versioned: %d", n)
	}
	if n := PeekNDim(q, true); n != 3 {
		t.Errorf("legacy: %d", n)
	}
	g.ver.Version.Major = 9 // unknown layout: ndim is not read
	if n := PeekNDim(p, false); n != 0 {
		t.Errorf("unknown major: %d", n)
	}
	if PeekNDim(nil, false) != 0 || PeekNDim(nil, true) != 0 {
		t.Error("NULL")
	}
	_ = g2
}

// The Handle alone, as an importer that embeds it uses it.
func TestHandleTake(t *testing.T) {
	g, p := goodSpec().versioned()
	var h Handle
	var dims [4]int64
	d, v, err := h.TakeVersioned(p, dims[:])
	if err != nil {
		t.Fatal(err)
	}
	if v != CurrentVersion || unsafe.SliceData(d.Shape) != &dims[0] || h.Tensor() != uintptr(p) {
		t.Errorf("desc %+v version %v", d, v)
	}
	if h.Released() {
		t.Error("released before Release")
	}
	h.Release()
	h.Release()
	if deleterCalls(p) != 1 || !h.Released() {
		t.Errorf("deleter ran %d times", deleterCalls(p))
	}
	_ = g
}
