package dlpack

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// importBox is what an importer embeds: the handle and inline dims in one
// allocation (zerocopy adds its View and Owner to the same struct).
type importBox struct {
	im   Imported
	dims [2 * InlineDims]int64
}

// BenchmarkImportVersioned imports a float32[2,3] DLManagedTensorVersioned
// with a NULL deleter (the deleter's own cost is the producer's) into a
// freshly allocated handle with inline dims, and releases it.
func BenchmarkImportVersioned(b *testing.B) {
	s := goodSpec()
	s.nullDeleter = true
	g, p := s.versioned()
	defer func() { _ = g }()
	b.ReportAllocs()
	for b.Loop() {
		box := new(importBox)
		if err := box.im.FromVersioned(p, box.dims[:]); err != nil {
			b.Fatal(err)
		}
		box.im.Release()
	}
}

// BenchmarkExportRelease exports a float32[2,3] Desc and releases it the
// way a Go consumer does: DeleteVersioned, which sees our own deleter and
// runs the Go release directly.
func BenchmarkExportRelease(b *testing.B) {
	buf := make([]float32, 6)
	d := Desc{Data: uintptr(unsafe.Pointer(&buf[0])), Device: CPUDevice, DType: Float32Type,
		Shape: []int64{2, 3}, Strides: []int64{3, 1}}
	var r countRel
	b.ReportAllocs()
	for b.Loop() {
		p, err := Export(&d, &r)
		if err != nil {
			b.Fatal(err)
		}
		DeleteVersioned(p)
	}
}

// BenchmarkExportReleaseViaC is BenchmarkExportRelease with the release
// going through the real C function pointer of the shared deleter, called
// with purego.SyscallN, as a C consumer would call it.
func BenchmarkExportReleaseViaC(b *testing.B) {
	buf := make([]float32, 6)
	d := Desc{Data: uintptr(unsafe.Pointer(&buf[0])), Device: CPUDevice, DType: Float32Type,
		Shape: []int64{2, 3}, Strides: []int64{3, 1}}
	var r countRel
	fn := DeleterPtr()
	b.ReportAllocs()
	for b.Loop() {
		p, err := Export(&d, &r)
		if err != nil {
			b.Fatal(err)
		}
		purego.SyscallN(fn, uintptr(p))
	}
}
