package cai

import (
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
)

var dlpackFloat32 = dlpack.Float32Type

// benchInterface is a typical export: a strided 3-d float32 array with a
// stream, as CuPy would print it.
func benchInterface() Interface {
	return Interface{Kind: CUDA, Shape: []int64{64, 128, 3}, Typestr: "<f4",
		Data: Data{Ptr: 0x7f3a40000000}, Version: 3, Strides: []int64{1536, 12, 4},
		Descr: Descr{{Typestr: "<f4"}}, Stream: StreamHandle(0x55d4c0a1b2c0)}
}

func BenchmarkEncodeJSON(b *testing.B) {
	i := benchInterface()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = i.AppendJSON(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkMarshalJSON(b *testing.B) {
	i := benchInterface()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := i.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	i := benchInterface()
	js, err := i.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(js)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJSON(js, CUDA); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeValidate(b *testing.B) {
	i := benchInterface()
	js, _ := i.MarshalJSON()
	b.ReportAllocs()
	for b.Loop() {
		i, err := DecodeJSON(js, CUDA)
		if err == nil {
			err = i.Validate()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewInterface(b *testing.B) {
	l := Layout{Ptr: 0x7f3a40000000, DType: dlpackFloat32, Shape: []int64{64, 128, 3}, Strides: []int64{384, 3, 1}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewInterface(CUDA, l); err != nil {
			b.Fatal(err)
		}
	}
}
