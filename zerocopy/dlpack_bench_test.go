package zerocopy_test

import (
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/ebitengine/purego"
)

// BenchmarkImportVersioned takes over a float32[2,3] DLManagedTensorVersioned
// as a zerocopy.View and closes it. The producer's deleter is NULL: its cost
// is the producer's, and the loop re-imports the same tensor.
func BenchmarkImportVersioned(b *testing.B) {
	pr := newDLPProducer(0x7f0000000100, []int64{2, 3}, []int64{3, 1}, 0)
	pr.ver.Deleter = 0
	p := pr.versioned()
	b.ReportAllocs()
	for b.Loop() {
		v, err := zerocopy.FromDLPackVersioned(p)
		if err != nil {
			b.Fatal(err)
		}
		v.Close()
	}
}

// benchView is a float32[2,3] view over Go memory (the data pointer is
// pinned on every export, the worst case).
func benchView(b *testing.B) *zerocopy.View {
	v, err := zerocopy.FromSlice(make([]float32, 6), 2, 3)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return v
}

// BenchmarkExportRelease exports a view with ToDLPack and releases it the
// way a Go consumer does (dlpack.DeleteVersioned: our own deleter is
// recognised and the release runs in Go).
func BenchmarkExportRelease(b *testing.B) {
	v := benchView(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := v.ToDLPack()
		if err != nil {
			b.Fatal(err)
		}
		dlpack.DeleteVersioned(p)
	}
}

// BenchmarkExportReleaseViaC is BenchmarkExportRelease with the release
// through the real C function pointer of the deleter, called with
// purego.SyscallN as a C consumer would call it.
func BenchmarkExportReleaseViaC(b *testing.B) {
	v := benchView(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := v.ToDLPack()
		if err != nil {
			b.Fatal(err)
		}
		purego.SyscallN((*dlpack.DLManagedTensorVersioned)(p).Deleter, uintptr(p))
	}
}

// BenchmarkDLPackRoundTrip exports a view, imports the tensor as a new view
// (the consumer side in Go) and closes it, which runs the export's deleter.
func BenchmarkDLPackRoundTrip(b *testing.B) {
	v := benchView(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := v.ToDLPack()
		if err != nil {
			b.Fatal(err)
		}
		w, err := zerocopy.FromDLPackVersioned(p)
		if err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
}

// allocFloor has the size and pointer layout class of the allocation an
// import makes (View, Owner, handle and dims for up to 4 dimensions: 256
// bytes), for reading BenchmarkImportVersioned against.
type allocFloor struct {
	p [4]*int
	b [224]byte
}

var allocFloorSink *allocFloor

// BenchmarkImportAllocFloor is the cost of the one allocation an import
// makes, alone: the floor under BenchmarkImportVersioned on this machine.
func BenchmarkImportAllocFloor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		allocFloorSink = new(allocFloor)
	}
}
