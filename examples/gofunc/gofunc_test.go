package gofunc

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func TestScaleHost(t *testing.T) {
	xs, outs := []float32{1, 2, 3}, make([]float32, 3)
	x, err := zerocopy.FromSlice(xs, 3)
	if err != nil {
		t.Fatal(err)
	}
	out, err := zerocopy.FromSlice(outs, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := Scale(nil, out, x, 2); err != nil {
		t.Fatal(err)
	}
	if outs[0] != 2 || outs[1] != 4 || outs[2] != 6 {
		t.Errorf("Scale: got %v, want [2 4 6]", outs)
	}
}

// needDriver skips without a CUDA driver (the real one, or the fake of
// testdata/fakecuda, which knows this package's kernels).
func needDriver(tb testing.TB) *cuda.Context {
	tb.Helper()
	if !cuda.Available() {
		tb.Skipf("no CUDA driver: %v", cuda.Init())
	}
	ctx, err := zerocopy.DeviceContext(0)
	if err != nil {
		tb.Fatal(err)
	}
	return ctx
}

// axpyOn is one goroutine's tensors and stream: y = 0, x = 1.
func axpyOn(tb testing.TB, ctx *cuda.Context, n int64) (s *cuda.Stream, y, x *zerocopy.View) {
	tb.Helper()
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Destroy() })
	if y, err = zerocopy.AllocCUDA(0, dlpack.Float32Type, n); err != nil {
		tb.Fatal(err)
	}
	if x, err = zerocopy.AllocCUDA(0, dlpack.Float32Type, n); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { y.Close(); x.Close() })
	if err := zerocopy.Fill(y, zerocopy.Float(0), s); err != nil {
		tb.Fatal(err)
	}
	if err := zerocopy.Fill(x, zerocopy.Float(1), s); err != nil {
		tb.Fatal(err)
	}
	return s, y, x
}

func TestAxpy(t *testing.T) {
	ctx := needDriver(t)
	s, y, x := axpyOn(t, ctx, 1000)
	for i := 0; i < 3; i++ {
		if err := Axpy(s, y, x, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4000)
	if err := ctx.MemcpyDtoH(raw, cuda.DevicePtr(y.Ptr())); err != nil {
		t.Fatal(err)
	}
	got := unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), 1000)
	for i, v := range got {
		if v != 6 {
			t.Fatalf("y[%d] = %v after three y += 2*x, want 6", i, v)
		}
	}
}

// BenchmarkAxpyGoroutines launches Axpy from 1 and from 8 goroutines,
// each on its own stream and tensors, with no Python in the way: how far
// the driver lets launches into one context scale (ns/op is per launch,
// all goroutines together).
func BenchmarkAxpyGoroutines(b *testing.B) {
	ctx := needDriver(b)
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			type work struct {
				s    *cuda.Stream
				y, x *zerocopy.View
			}
			ws := make([]work, g)
			for i := range ws {
				ws[i].s, ws[i].y, ws[i].x = axpyOn(b, ctx, 1024)
			}
			if err := ctx.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range ws {
				w := ws[i]
				n := b.N / g
				if i < b.N%g {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < n; j++ {
						if err := Axpy(w.s, w.y, w.x, 1); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := ctx.Synchronize(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
