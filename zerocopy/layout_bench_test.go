package zerocopy_test

import (
	"testing"

	"github.com/dlbridge/dlbridge/zerocopy"
)

// Benchmarks of the layout algebra and of every user of the one N-d loop
// (host access, fill, sum, conversion), on small and strided views where
// the per-call overhead of planning shows.

func BenchmarkSelectColumn(b *testing.B) {
	v, _ := iotaView(b, 64, 64)
	b.ReportAllocs()
	for b.Loop() {
		c, err := v.Select(1, 5)
		if err != nil {
			b.Fatal(err)
		}
		c.Close() // a no-op where derived views borrow their parent's reference
	}
}

func BenchmarkHostEachStrided(b *testing.B) {
	v, _ := iotaView(b, 256, 256)
	t, _ := v.T()
	defer t.Close()
	b.SetBytes(256 * 256 * 4)
	b.ReportAllocs()
	for b.Loop() {
		var s float32
		if err := zerocopy.Each(t, func(_ []int64, x float32) bool { s += x; return true }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFillStrided(b *testing.B) {
	v, _ := iotaView(b, 1024, 512)
	s, _ := v.Slice(1, 0, 256, 1)
	defer s.Close()
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Fill(s, zerocopy.Float(2), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFillSmall(b *testing.B) {
	v, _ := iotaView(b, 4, 4)
	t, _ := v.T()
	defer t.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Fill(t, zerocopy.Float(2), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSumStrided(b *testing.B) {
	v, _ := iotaView(b, 1024, 1024)
	t, _ := v.T()
	defer t.Close()
	b.SetBytes(4 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := zerocopy.Sum(t, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSumSmall(b *testing.B) {
	v, _ := iotaView(b, 4, 4)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := zerocopy.Sum(v, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopySmall(b *testing.B) {
	src, _ := iotaView(b, 4, 4)
	t, _ := src.T()
	defer t.Close()
	dst, _ := iotaView(b, 4, 4)
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Copy(dst, t); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkConvertStrided(b *testing.B) {
	src, _ := iotaView(b, 512, 512)
	t, _ := src.T()
	defer t.Close()
	dst, err := zerocopy.FromSlice(make([]float64, 512*512), 512, 512)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()
	b.SetBytes(512 * 512 * 4)
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Convert(dst, t, nil); err != nil {
			b.Fatal(err)
		}
	}
}
