package zerocopy

import (
	"fmt"
	"strings"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Order is the memory layout a Want asks for.
type Order uint8

const (
	// AnyOrder accepts any strides (the zero value).
	AnyOrder Order = iota
	// COrder asks for C-contiguous (row-major) elements.
	COrder
	// FOrder asks for Fortran-contiguous (column-major) elements.
	FOrder
)

func (o Order) String() string {
	switch o {
	case AnyOrder:
		return "any order"
	case COrder:
		return "C-contiguous"
	case FOrder:
		return "F-contiguous"
	}
	return fmt.Sprintf("Order(%d)", uint8(o))
}

// Want states what a function needs of a tensor, as nanobind's ndarray
// annotations do, so that one call checks a tensor from outside and one
// error names everything that is wrong with it. A zero field asks for
// nothing: the zero Want accepts every open view.
type Want struct {
	// DType is the element type, unless it is the zero DataType.
	DType dlpack.DataType
	// NDim is the number of dimensions, unless it is 0. Ask for a 0-d
	// tensor with Shape: []int64{}.
	NDim int
	// Shape, unless nil, is the shape; an extent of -1 accepts any extent.
	// It fixes the number of dimensions too (NDim must then be 0 or agree).
	Shape []int64
	// Order is the layout; AnyOrder accepts strided views.
	Order Order
	// Device is the device, unless its Type is 0. An ID below 0 accepts
	// every device of that type.
	Device dlpack.Device
	// Writable refuses read-only views.
	Writable bool
}

// Check returns nil when v meets w, and otherwise a *MismatchError that
// names every mismatch at once. A closed view, or one whose memory is
// released, gives that error instead. A Want that contradicts itself
// (NDim against Shape, an extent below -1, an unknown Order) is a bug in
// the caller, and Check panics.
func (w Want) Check(v *View) error {
	w.mustBeValid()
	if err := v.check(); err != nil {
		return err
	}
	var fields []string
	if w.DType != (dlpack.DataType{}) && v.DType() != w.DType {
		fields = append(fields, "dtype")
	}
	if ndim := w.ndim(); ndim >= 0 && v.NDim() != ndim {
		fields = append(fields, fmt.Sprintf("ndim (%d != %d)", v.NDim(), ndim))
	} else if w.Shape != nil {
		for i, got := range v.Shape() {
			if want := w.Shape[i]; want != -1 && got != want {
				fields = append(fields, fmt.Sprintf("shape[%d] (%d != %d)", i, got, want))
			}
		}
	}
	if w.Order == COrder && !v.IsCContiguous() || w.Order == FOrder && !v.IsFContiguous() {
		fields = append(fields, "order")
	}
	if d := v.Device(); w.Device.Type != 0 && (d.Type != w.Device.Type || w.Device.ID >= 0 && d.ID != w.Device.ID) {
		fields = append(fields, "device")
	}
	if w.Writable && v.ReadOnly() {
		fields = append(fields, "read-only")
	}
	if fields == nil {
		return nil
	}
	return &MismatchError{Want: w, Got: describeView(v), Fields: fields}
}

// ndim is the number of dimensions w asks for, or -1 for any.
func (w Want) ndim() int {
	switch {
	case w.Shape != nil:
		return len(w.Shape)
	case w.NDim > 0:
		return w.NDim
	}
	return -1
}

func (w Want) mustBeValid() {
	if w.Shape != nil && w.NDim != 0 && w.NDim != len(w.Shape) {
		panic(fmt.Sprintf("zerocopy: Want with NDim %d and a %d-d Shape %v", w.NDim, len(w.Shape), w.Shape))
	}
	if w.NDim < 0 {
		panic(fmt.Sprintf("zerocopy: Want with NDim %d", w.NDim))
	}
	for i, n := range w.Shape {
		if n < -1 {
			panic(fmt.Sprintf("zerocopy: Want with Shape[%d] = %d (want an extent, or -1 for any)", i, n))
		}
	}
	if w.Order > FOrder {
		panic(fmt.Sprintf("zerocopy: Want with unknown %v", w.Order))
	}
}

// String describes the tensor w asks for: "float32 [-1 3] C-contiguous
// cuda:0 writable", or "any tensor".
func (w Want) String() string {
	var parts []string
	if w.DType != (dlpack.DataType{}) {
		parts = append(parts, w.DType.String())
	}
	switch {
	case w.Shape != nil:
		parts = append(parts, fmt.Sprint(w.Shape))
	case w.NDim > 0:
		parts = append(parts, fmt.Sprintf("%d-d", w.NDim))
	}
	if w.Order != AnyOrder {
		parts = append(parts, w.Order.String())
	}
	switch {
	case w.Device.Type != 0 && w.Device.ID < 0:
		parts = append(parts, w.Device.Type.String())
	case w.Device.Type != 0:
		parts = append(parts, w.Device.String())
	}
	if w.Writable {
		parts = append(parts, "writable")
	}
	if parts == nil {
		return "any tensor"
	}
	return strings.Join(parts, " ")
}

// Describe says what v is, in the terms of Want.String: "int64 [4 2]
// strided cpu read-only". Mismatch messages (Want.Check, pyfunc) show it.
func (v *View) Describe() string { return describeView(v) }

// describeView says what Check saw, in the terms of Want.String.
func describeView(v *View) string {
	order := "strided"
	switch c, f := v.IsCContiguous(), v.IsFContiguous(); {
	case c && f:
		order = "C/F-contiguous"
	case c:
		order = COrder.String()
	case f:
		order = FOrder.String()
	}
	access := "writable"
	if v.ReadOnly() {
		access = "read-only"
	}
	return fmt.Sprintf("%s %v %s %s %s", v.DType(), v.Shape(), order, v.Device(), access)
}

// A MismatchError is a tensor that does not meet a Want.
type MismatchError struct {
	Want Want
	// Got describes the tensor: "int64 [4 2] strided cpu read-only".
	Got string
	// Fields lists what differs, in Want's order: "dtype", "ndim (3 !=
	// 2)" or "shape[i] (got != want)" for each extent, "order", "device",
	// "read-only".
	Fields []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("zerocopy: want %s; got %s: %s", e.Want, e.Got, strings.Join(e.Fields, ", "))
}
