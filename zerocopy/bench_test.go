package zerocopy_test

import (
	"testing"

	"github.com/dlbridge/dlbridge/zerocopy"
)

func BenchmarkSlice(b *testing.B) {
	v, _ := iotaView(b, 64, 64)
	b.ReportAllocs()
	for b.Loop() {
		s, err := v.Slice(1, 8, -8, 2)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

func BenchmarkFromSlice(b *testing.B) {
	data := make([]float32, 4096)
	b.ReportAllocs()
	for b.Loop() {
		v, err := zerocopy.FromSlice(data, 64, 64)
		if err != nil {
			b.Fatal(err)
		}
		v.Close()
	}
}

// BenchmarkCopyStrided copies a transposed 1024×1024 float32 matrix into a
// contiguous one (4 MiB each way).
func BenchmarkCopyStrided(b *testing.B) {
	src, _ := iotaView(b, 1024, 1024)
	t, _ := src.T()
	defer t.Close()
	dst, _ := iotaView(b, 1024, 1024)
	b.SetBytes(4 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Copy(dst, t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyContiguous is the memmove fast path, 4 MiB.
func BenchmarkCopyContiguous(b *testing.B) {
	src, _ := iotaView(b, 1024, 1024)
	dst, _ := iotaView(b, 1024, 1024)
	b.SetBytes(4 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Copy(dst, src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyRows copies every other column block: rows of 256 contiguous
// elements at a stride, the row-memmove path.
func BenchmarkCopyRows(b *testing.B) {
	src, _ := iotaView(b, 1024, 512)
	s, _ := src.Slice(1, 0, 256, 1)
	defer s.Close()
	dst, _ := iotaView(b, 1024, 256)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if err := zerocopy.Copy(dst, s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAt(b *testing.B) {
	v, _ := iotaView(b, 64, 64)
	b.ReportAllocs()
	var sum float32
	for b.Loop() {
		x, _ := zerocopy.At[float32](v, 3, 5)
		sum += x
	}
	_ = sum
}
