package cai_test

import (
	"errors"
	"fmt"

	"github.com/dlbridge/dlbridge/cai"
	"github.com/dlbridge/dlbridge/dlpack"
)

// A consumer reads the dictionary a producer printed, checks it, and
// learns the DLPack type and the element strides.
func ExampleDecodeJSON() {
	js := []byte(`{"shape": [3, 2], "typestr": "<f8", "data": [140000000000000, false], "version": 3, "strides": [8, 24], "stream": 1}`)
	iface, err := cai.DecodeJSON(js, cai.CUDA)
	if err == nil {
		err = iface.Validate()
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	dt, _ := iface.DataType()
	strides, _ := iface.ElementStrides()
	fmt.Println(dt, iface.Shape, strides, iface.Stream)
	// Output: float64 [3 2] [1 3] 1 (legacy default stream)
}

// A producer describes memory it exports; MarshalJSON prints what Python's
// json.dumps prints for the same dictionary.
func ExampleNewInterface() {
	iface, err := cai.NewInterface(cai.CUDA, cai.Layout{
		Ptr:    0x7f3a40000000,
		DType:  dlpack.Bfloat16Type,
		Shape:  []int64{2, 3},
		Stream: cai.StreamHandle(cai.PerThreadDefaultStream),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	js, _ := iface.MarshalJSON()
	fmt.Println(string(js))
	// Output: {"shape": [2, 3], "typestr": "<V2", "data": [139888158572544, false], "version": 3, "strides": null, "mask": null, "stream": 2}
}

// Validation errors name what is wrong and can be told apart.
func ExampleInterface_Validate() {
	iface := cai.Interface{Kind: cai.CUDA, Shape: []int64{4, 4}, Typestr: "<f4",
		Data: cai.Data{Ptr: 0x1000}, Version: 3, Strides: []int64{16, 6}}
	err := iface.Validate()
	fmt.Println(err)
	fmt.Println(errors.Is(err, cai.ErrStrides))

	iface.Strides = nil
	iface.Stream = cai.StreamHandle(0)
	fmt.Println(iface.Validate())
	// Output:
	// cai: bad strides: strides[1] = 6 bytes is not a multiple of the item size 4 (typestr "<f4")
	// true
	// cai: bad stream: stream 0 is disallowed by CUDA Array Interface v3 (use None, 1 for the legacy default stream or 2 for the per-thread default stream)
}

// Typestrs map to DLPack data types and back.
func ExampleParseTypestr() {
	for _, s := range []string{"<f4", "|b1", "<V2", "<c16", ">f8", "|V1"} {
		ts, err := cai.ParseTypestr(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		dt, err := ts.DataType()
		if err != nil {
			fmt.Printf("%s: %v\n", s, errors.Unwrap(err) != nil)
			continue
		}
		back, _, _ := cai.TypestrOf(dt)
		fmt.Printf("%s -> %s -> %s\n", s, dt, back)
	}
	// Output:
	// <f4 -> float32 -> <f4
	// |b1 -> bool -> |b1
	// <V2 -> bfloat16 -> <V2
	// <c16 -> complex128 -> <c16
	// >f8: true
	// |V1: true
}

// A record of three float32 fields: its size, its field offsets, and the
// DLPack vector type it maps to.
func ExampleDescr() {
	xyz := cai.Descr{{Name: "x", Typestr: "<f4"}, {Name: "y", Typestr: "<f4"}, {Name: "z", Typestr: "<f4"}}
	size, _ := xyz.ItemSize()
	offs, _ := xyz.Offsets()
	iface := cai.Interface{Typestr: "|V12", Descr: xyz}
	dt, _ := iface.DataType()
	fmt.Println(xyz, size, offs, dt)

	// A C struct { int32 i; double d; } with its padding made explicit.
	d, _ := cai.PackRecord(16, cai.RecordField{Name: "i", Typestr: "<i4"}, cai.RecordField{Name: "d", Typestr: "<f8", Offset: 8})
	fmt.Println(d)
	// Output:
	// [('x', '<f4'), ('y', '<f4'), ('z', '<f4')] 12 [0 4 8] float32x3
	// [('i', '<i4'), ('', '|V4'), ('d', '<f8')]
}
