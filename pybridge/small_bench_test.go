package pybridge

import (
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// BenchmarkSmallCopy is copy_ and to() of 4 KiB as Python runs them, minus
// the C boundary: with zerocopy's BenchmarkSmallCopyParts it splits the
// fixed cost of a small transfer on the GPU machine:
//
//	DLBRIDGE_GPU=1 pybridge.test -test.run '^$' -test.bench SmallCopy -test.benchtime 20000x
func BenchmarkSmallCopy(b *testing.B) {
	needCUDA(b)
	const n = 1024
	cu := dlpack.CUDADevice(0)
	alloc := func(d dlpack.Device) *Tensor {
		v, err := Allocate(d, dlpack.Float32Type, []int64{n}, true)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { v.Close() })
		return tensorOf(v)
	}
	g, g2, h := alloc(cu), alloc(cu), alloc(dlpack.CPUDevice)
	must := func(b *testing.B, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	to := func(b *testing.B, src *Tensor, d dlpack.Device) {
		v, err := CopyToDevice(src.View, d, CopyOptions{})
		must(b, err)
		must(b, v.Synchronize())
		v.Close()
	}
	for _, c := range []struct {
		name string
		op   func(b *testing.B)
	}{
		{"copy_/h2d", func(b *testing.B) { must(b, CopyInto(g, h, CopyOptions{})) }},
		{"copy_/d2h", func(b *testing.B) { must(b, CopyInto(h, g, CopyOptions{})) }},
		{"copy_/d2d", func(b *testing.B) { must(b, CopyInto(g2, g, CopyOptions{})) }},
		{"to/h2d", func(b *testing.B) { to(b, h, cu) }},
		{"to/d2h", func(b *testing.B) { to(b, g, dlpack.CPUDevice) }},
		{"PlanStream", func(b *testing.B) {
			var p StreamPlan
			must(b, PlanStream(&StreamAsk{Entry: EntryOp, Devices: [2]dlpack.Device{cu}}, &p))
		}},
		{"alloc-free/cuda", func(b *testing.B) {
			s, err := zerocopy.WorkStream(0)
			must(b, err)
			v, err := zerocopy.AllocCUDAAsync(s, dlpack.Float32Type, n)
			must(b, err)
			v.Close()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.op(b)
			for b.Loop() {
				c.op(b)
			}
		})
	}
}
