package dlpack

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fuzzInts decodes n int64s: 8 little-endian bytes each while they last,
// then one signed byte each (small values are the interesting ones), then 1.
func fuzzInts(b []byte, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		switch {
		case len(b) >= 8:
			out[i] = int64(binary.LittleEndian.Uint64(b))
			b = b[8:]
		case len(b) > 0:
			out[i] = int64(int8(b[0]))
			b = b[1:]
		default:
			out[i] = 1
		}
	}
	return out
}

// fuzzData maps the fuzzer's data word to an address the GC will never take
// for one of its own (it scans the header's void* data field): x%3 == 0
// gives NULL, 1 x's low 32 bits, 2 the top of the address space minus x's
// low 16 bits (to probe the overflow checks).
func fuzzData(x uint64) uintptr {
	switch x % 3 {
	case 0:
		return 0
	case 1:
		return uintptr(x & 0xffff_ffff)
	default:
		return ^uintptr(0) - uintptr(x&0xffff)
	}
}

// FuzzImport builds a DLManagedTensor[Versioned] in Go memory from
// arbitrary field contents (shape and strides arrays always hold ndim
// values, so pointers are valid) and imports it: never a panic; either an
// error naming a field or a description that matches the input; the
// deleter runs exactly once either way.
func FuzzImport(f *testing.F) {
	f.Add(false, uint32(1), uint32(3), uint64(0), int32(2), uint8(2), uint8(32), uint16(1), int32(1), int32(0),
		uint64(0x10000), uint64(0), false, false, []byte{2, 3}, []byte{3, 1}, false)
	f.Add(true, uint32(0), uint32(0), uint64(0), int32(3), uint8(0), uint8(8), uint16(1), int32(2), int32(1),
		uint64(0x20002), uint64(16), false, true, []byte{4, 0, 5}, []byte{}, false)
	f.Add(false, uint32(1), uint32(1), uint64(5), int32(1), uint8(17), uint8(4), uint16(1), int32(13), int32(0),
		uint64(2), uint64(0), false, false, []byte{7}, []byte{0xff}, true)
	f.Fuzz(func(t *testing.T, legacy bool, major, minor uint32, flags uint64, ndim int32,
		code, bits uint8, lanes uint16, devType, devID int32, data, offset uint64,
		shapeNull, stridesNull bool, shapeBytes, strideBytes []byte, nullDeleter bool) {
		n := 0
		if ndim > 0 {
			n = int(min(ndim, 2*MaxNDim)) // arrays valid even past the limit
		}
		s := tspec{major: major, minor: minor, flags: Flags(flags), ndim: ndim,
			dtype:  DataType{TypeCode(code), bits, lanes},
			device: Device{DeviceType(devType), devID}, data: fuzzData(data), offset: offset,
			nullDeleter: nullDeleter}
		if !shapeNull {
			s.shape = fuzzInts(shapeBytes, n)
		}
		if !stridesNull {
			s.strides = fuzzInts(strideBytes, n)
		}
		var g *goTensor
		var p unsafe.Pointer
		var im Imported
		var dims [2 * InlineDims]int64
		var err error
		if legacy {
			g, p = s.legacy()
			err = im.FromLegacy(p, dims[:])
		} else {
			g, p = s.versioned()
			err = im.FromVersioned(p, dims[:])
		}
		wantCalls := 1
		if nullDeleter {
			wantCalls = 0
		}
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("error %v is not a FieldError naming a field", err)
			}
			if c := deleterCalls(p); c != wantCalls {
				t.Fatalf("rejected (%v): deleter ran %d times, want %d", err, c, wantCalls)
			}
			return
		}
		if c := deleterCalls(p); c != 0 {
			t.Fatalf("deleter ran %d times before Release", c)
		}
		// Accepted: everything must match the input and be consistent.
		if len(im.Shape) != int(ndim) || len(im.Strides) != int(ndim) {
			t.Fatalf("ndim %d, got %d extents %d strides", ndim, len(im.Shape), len(im.Strides))
		}
		if ndim > 0 {
			if diff := cmp.Diff(s.shape, im.Shape); diff != "" {
				t.Fatalf("shape (-in +out):\n%s", diff)
			}
			wantStrides := s.strides
			if wantStrides == nil {
				wantStrides = CStrides(s.shape)
			}
			if diff := cmp.Diff(wantStrides, im.Strides, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("strides (-in +out):\n%s", diff)
			}
		}
		if im.Data != s.data+uintptr(offset) {
			t.Fatalf("data %#x, want %#x + %d", im.Data, s.data, offset)
		}
		if !legacy && (im.Flags != Flags(flags) || im.Version != (Version{major, minor})) {
			t.Fatalf("flags %v version %v, want %v %d.%d", im.Flags, im.Version, Flags(flags), major, minor)
		}
		// Lanes must be 1, or sub-byte lanes packed into exactly one byte
		// (float4_e2m1fn_x2): the only vector form Import accepts.
		if im.DType.Validate() != nil || (im.DType.Lanes != 1 && !im.DType.PackedLanes()) || !im.Device.Type.Valid() {
			t.Fatalf("accepted dtype %v device %v", im.DType, im.Device)
		}
		numel, nerr := NumElements(im.Shape)
		lo, hi, serr := ByteSpan(im.DType, im.Shape, im.Strides, im.Flags&FlagSubbyteTypePadded != 0)
		if nerr != nil || serr != nil {
			t.Fatalf("accepted a layout the helpers reject: %v %v", nerr, serr)
		}
		if numel > 0 && (s.data == 0 || im.Data+uintptr(lo) > im.Data || im.Data+uintptr(hi) < im.Data) {
			t.Fatalf("accepted span [%d, %d) at %#x", lo, hi, im.Data)
		}
		im.Release()
		im.Release()
		if c := deleterCalls(p); c != wantCalls {
			t.Fatalf("deleter ran %d times, want %d", c, wantCalls)
		}
		_ = g
	})
}
