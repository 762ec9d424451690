package zerocopy_test

import (
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// BenchmarkSmallCopyParts splits the fixed cost of a 4 KiB copy: the same
// transfer as plain driver calls on the work stream ("raw/..."), through
// the engine ("engine/..."), and the engine's extra driver calls alone, so
// that a gap between the two is found on the GPU machine:
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench SmallCopyParts -test.benchtime 20000x
func BenchmarkSmallCopyParts(b *testing.B) {
	needCUDA(b)
	const n = 4096
	s, err := zerocopy.WorkStream(0)
	if err != nil {
		b.Fatal(err)
	}
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, n)
	d = mustView(b, d, err)
	d2, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, n)
	d2 = mustView(b, d2, err)
	buf := pattern(int(n), 1)
	h := goView(b, buf, dlpack.Uint8Type)
	dp, dp2 := cuda.DevicePtr(d.Ptr()), cuda.DevicePtr(d2.Ptr())
	sync := func(b *testing.B, v *zerocopy.View) {
		if err := v.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	must := func(b *testing.B, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		op   func(b *testing.B)
	}{
		{"raw/h2d", func(b *testing.B) { must(b, s.MemcpyHtoDAsync(dp, buf)); must(b, s.Synchronize()) }},
		{"raw/d2h", func(b *testing.B) { must(b, s.MemcpyDtoHAsync(buf, dp)); must(b, s.Synchronize()) }},
		{"raw/d2d", func(b *testing.B) { must(b, s.MemcpyDtoDAsync(dp2, dp, n)); must(b, s.Synchronize()) }},
		{"engine/h2d", func(b *testing.B) { must(b, zerocopy.CopyCUDA(d, h, s)); sync(b, d) }},
		{"engine/d2h", func(b *testing.B) { must(b, zerocopy.CopyCUDA(h, d, s)); sync(b, h) }},
		{"engine/d2d", func(b *testing.B) { must(b, zerocopy.Convert(d2, d, s)); sync(b, d2) }},
		{"part/stream-sync-idle", func(b *testing.B) { must(b, s.Synchronize()) }},
		{"part/legacy-query", func(b *testing.B) {
			_, err := s.Context().LegacyStream().Query()
			must(b, err)
		}},
		{"part/pointer-attributes-host", func(b *testing.B) {
			_, err := cuda.PointerGetAttributes(cuda.DevicePtr(uintptr(unsafe.Pointer(&buf[0]))))
			must(b, err)
		}},
		{"part/pointer-attributes-device", func(b *testing.B) {
			_, err := cuda.PointerGetAttributes(dp)
			must(b, err)
		}},
		{"part/current-context", func(b *testing.B) {
			_, err := cuda.CurrentContext()
			must(b, err)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.op(b) // warm-up
			for b.Loop() {
				c.op(b)
			}
		})
	}
}
