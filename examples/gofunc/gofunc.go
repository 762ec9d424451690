// Package gofunc is the worked example of Go functions for Python: plain Go
// over zerocopy views, registered with pyfunc and called from Python as
// dlbridge.ops.gofunc.<name> on NumPy, PyTorch, CuPy or dlbridge tensors.
//
// Build a library with dlbridge and this package, then call it:
//
//	go run ./cmd/dlbridge build -o build/libgofunc.so ./examples/gofunc
//
//	import dlbridge, numpy
//	dlbridge.load_library("build/libgofunc.so")
//	x = numpy.arange(4, dtype=numpy.float32); out = numpy.empty_like(x)
//	dlbridge.ops.gofunc.scale(out, x, 2.0)         # out = x * 2, no copies
//
// The CUDA paths launch this package's own PTX (kernels.ptx) on the
// caller's stream.
package gofunc

import (
	_ "embed"
	"fmt"
	"math"
	"sync"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func init() {
	pyfunc.Register("gofunc.scale(out: float32 [N] C writable, x: float32 [N] C, factor=2.0)", Scale)
	pyfunc.Register("gofunc.normalize_rows(x: float32 [R, K] C cpu writable)", NormalizeRows)
	pyfunc.Register("gofunc.axpy(y: float32 [N] C cuda writable, x: float32 [N] C cuda, a=1.0)", Axpy)
	pyfunc.Register("gofunc.noop(x: cuda, y: cuda)", Noop)
}

// Scale writes x * factor into out, elementwise: on the host for host
// memory, with a kernel of this package on the caller's stream for CUDA
// memory.
func Scale(s *cuda.Stream, out, x *zerocopy.View, factor float32) error {
	if out.Device().Type == dlpack.CUDA || x.Device().Type == dlpack.CUDA {
		return launch(s, "gofunc_scale_f32", out, x, factor)
	}
	o, err := zerocopy.HostSlice[float32](out)
	if err != nil {
		return err
	}
	in, err := zerocopy.HostSliceRO[float32](x)
	if err != nil {
		return err
	}
	o = o[:len(in)] // equal lengths (the schema's N): the loop needs no bounds checks
	for i, v := range in {
		o[i] = v * factor
	}
	return nil
}

// NormalizeRows scales each row of x in place to unit length and returns
// the norms the rows had (a new host tensor).
func NormalizeRows(x *zerocopy.View) (*zerocopy.View, error) {
	rows, cols := int(x.Shape()[0]), int(x.Shape()[1])
	xs, err := zerocopy.HostSlice[float32](x)
	if err != nil {
		return nil, err
	}
	norms := make([]float32, rows)
	for r := 0; r < rows; r++ {
		row := xs[r*cols : (r+1)*cols]
		var sum float64
		for _, v := range row {
			sum += float64(v) * float64(v)
		}
		n := math.Sqrt(sum)
		norms[r] = float32(n)
		if n == 0 {
			continue
		}
		for i := range row {
			row[i] = float32(float64(row[i]) / n)
		}
	}
	return zerocopy.FromSlice(norms, int64(rows))
}

// Axpy computes y = a*x + y on the GPU, fused in one kernel launched on
// the caller's stream.
func Axpy(s *cuda.Stream, y, x *zerocopy.View, a float32) error {
	return launch(s, "gofunc_axpy_f32", y, x, a)
}

// Noop takes two CUDA tensors and the caller's stream and does nothing:
// the cost of a call itself.
func Noop(s *cuda.Stream, x, y *zerocopy.View) error { return nil }

//go:embed kernels.ptx
var kernelsPTX []byte

// modules holds this package's kernels per CUDA context, loaded at the
// first call on each device.
var modules sync.Map // *cuda.Context -> *loaded

type loaded struct {
	once sync.Once
	fns  map[string]*cuda.Function
	err  error
}

func kernel(ctx *cuda.Context, name string) (*cuda.Function, error) {
	v, _ := modules.LoadOrStore(ctx, &loaded{})
	l := v.(*loaded)
	l.once.Do(func() {
		m, err := ctx.ModuleLoadData(kernelsPTX)
		if err != nil {
			l.err = err
			return
		}
		l.fns = map[string]*cuda.Function{}
		for _, n := range []string{"gofunc_scale_f32", "gofunc_axpy_f32"} {
			if l.fns[n], err = m.Function(n); err != nil {
				l.err = err
				return
			}
		}
	})
	if l.err != nil {
		return nil, l.err
	}
	return l.fns[name], nil
}

// launch runs kernel name(dst, src, n, f) over two contiguous float32
// tensors of one CUDA device on s.
func launch(s *cuda.Stream, name string, dst, src *zerocopy.View, f float32) error {
	if s == nil || dst.Device() != src.Device() || dst.Device().Type != dlpack.CUDA {
		return pyfunc.ValueErrorf("%s: both tensors must be on one CUDA device (got %v and %v)", name, dst.Device(), src.Device())
	}
	fn, err := kernel(s.Context(), name)
	if err != nil {
		return err
	}
	n := uint64(dst.Len())
	if n == 0 {
		return nil
	}
	const block = 256
	grid := (n + block - 1) / block
	if grid > 65535 {
		grid = 65535 // a grid-stride loop covers the rest
	}
	if err := fn.Launch(s, cuda.Dim3{X: uint32(grid)}, cuda.Dim3{X: block}, 0,
		uint64(dst.Ptr()), uint64(src.Ptr()), n, f); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
