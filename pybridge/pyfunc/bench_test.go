package pyfunc

import (
	"testing"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func BenchmarkCallEmpty(b *testing.B) {
	f, err := NewFunc("bench.empty()", func() {})
	if err != nil {
		b.Fatal(err)
	}
	a := &Args{StreamDevice: -1}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := f.Call(a, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallScale16(b *testing.B) {
	f, err := NewFunc("bench.scale(out: float32 [N] C writable, x: float32 [N] C, factor=2.0)",
		func(s *cuda.Stream, out, x *zerocopy.View, factor float32) error {
			o, _ := zerocopy.HostSlice[float32](out)
			in, _ := zerocopy.HostSliceRO[float32](x)
			for i, v := range in {
				o[i] = v * factor
			}
			return nil
		})
	if err != nil {
		b.Fatal(err)
	}
	xs, os := make([]float32, 16), make([]float32, 16)
	x, _ := zerocopy.FromSlice(xs, 16)
	o, _ := zerocopy.FromSlice(os, 16)
	a := &Args{Tensors: []*zerocopy.View{o, x, nil}, Values: []Value{{}, {}, {Kind: FloatKind, Float: 2}}, StreamDevice: -1}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := f.Call(a, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func init() {
	AddInvokers(func(fn any) Invoker {
		f, ok := fn.(func())
		if !ok {
			return nil
		}
		return func(fr *Frame) error { f(); return nil }
	}, func(fn any) Invoker {
		f, ok := fn.(func(*cuda.Stream, *zerocopy.View, *zerocopy.View, float32) error)
		if !ok {
			return nil
		}
		return func(fr *Frame) error { return f(fr.S, fr.V[1], fr.V[2], float32(fr.F[3])) }
	})
}
