//go:build cgo

package dlpack

import (
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack/internal/cabi"
)

// TestABILayout proves the Go mirrors have the layout of the C structs:
// every struct size and every field's size and offset, as the C compiler
// laid out cabi's definitions (written from the DLPack 1.3 spec).
func TestABILayout(t *testing.T) {
	var (
		v  DLPackVersion
		d  DLDevice
		dt DLDataType
		tn DLTensor
		m  DLManagedTensor
		mv DLManagedTensorVersioned
	)
	type key struct{ s, f string }
	type so struct{ size, off uintptr }
	goLayout := map[key]so{
		{"DLPackVersion", ""}:      {unsafe.Sizeof(v), 0},
		{"DLPackVersion", "major"}: {unsafe.Sizeof(v.Major), unsafe.Offsetof(v.Major)},
		{"DLPackVersion", "minor"}: {unsafe.Sizeof(v.Minor), unsafe.Offsetof(v.Minor)},

		{"DLDevice", ""}:            {unsafe.Sizeof(d), 0},
		{"DLDevice", "device_type"}: {unsafe.Sizeof(d.Type), unsafe.Offsetof(d.Type)},
		{"DLDevice", "device_id"}:   {unsafe.Sizeof(d.ID), unsafe.Offsetof(d.ID)},

		{"DLDataType", ""}:      {unsafe.Sizeof(dt), 0},
		{"DLDataType", "code"}:  {unsafe.Sizeof(dt.Code), unsafe.Offsetof(dt.Code)},
		{"DLDataType", "bits"}:  {unsafe.Sizeof(dt.Bits), unsafe.Offsetof(dt.Bits)},
		{"DLDataType", "lanes"}: {unsafe.Sizeof(dt.Lanes), unsafe.Offsetof(dt.Lanes)},

		{"DLTensor", ""}:            {unsafe.Sizeof(tn), 0},
		{"DLTensor", "data"}:        {unsafe.Sizeof(tn.Data), unsafe.Offsetof(tn.Data)},
		{"DLTensor", "device"}:      {unsafe.Sizeof(tn.Device), unsafe.Offsetof(tn.Device)},
		{"DLTensor", "ndim"}:        {unsafe.Sizeof(tn.NDim), unsafe.Offsetof(tn.NDim)},
		{"DLTensor", "dtype"}:       {unsafe.Sizeof(tn.DType), unsafe.Offsetof(tn.DType)},
		{"DLTensor", "shape"}:       {unsafe.Sizeof(tn.Shape), unsafe.Offsetof(tn.Shape)},
		{"DLTensor", "strides"}:     {unsafe.Sizeof(tn.Strides), unsafe.Offsetof(tn.Strides)},
		{"DLTensor", "byte_offset"}: {unsafe.Sizeof(tn.ByteOffset), unsafe.Offsetof(tn.ByteOffset)},

		{"DLManagedTensor", ""}:            {unsafe.Sizeof(m), 0},
		{"DLManagedTensor", "dl_tensor"}:   {unsafe.Sizeof(m.DLTensor), unsafe.Offsetof(m.DLTensor)},
		{"DLManagedTensor", "manager_ctx"}: {unsafe.Sizeof(m.ManagerCtx), unsafe.Offsetof(m.ManagerCtx)},
		{"DLManagedTensor", "deleter"}:     {unsafe.Sizeof(m.Deleter), unsafe.Offsetof(m.Deleter)},

		{"DLManagedTensorVersioned", ""}:            {unsafe.Sizeof(mv), 0},
		{"DLManagedTensorVersioned", "version"}:     {unsafe.Sizeof(mv.Version), unsafe.Offsetof(mv.Version)},
		{"DLManagedTensorVersioned", "manager_ctx"}: {unsafe.Sizeof(mv.ManagerCtx), unsafe.Offsetof(mv.ManagerCtx)},
		{"DLManagedTensorVersioned", "deleter"}:     {unsafe.Sizeof(mv.Deleter), unsafe.Offsetof(mv.Deleter)},
		{"DLManagedTensorVersioned", "flags"}:       {unsafe.Sizeof(mv.Flags), unsafe.Offsetof(mv.Flags)},
		{"DLManagedTensorVersioned", "dl_tensor"}:   {unsafe.Sizeof(mv.DLTensor), unsafe.Offsetof(mv.DLTensor)},
	}
	rows := cabi.Layout()
	if len(rows) != len(goLayout) {
		t.Errorf("C has %d layout rows, Go %d", len(rows), len(goLayout))
	}
	for _, r := range rows {
		g, ok := goLayout[key{r.Struct, r.Field}]
		if !ok {
			t.Errorf("C %s.%s has no Go counterpart", r.Struct, r.Field)
			continue
		}
		if g.size != r.Size || g.off != r.Offset {
			t.Errorf("%s.%s: C size %d offset %d, Go size %d offset %d", r.Struct, r.Field, r.Size, r.Offset, g.size, g.off)
		}
	}
	if unsafe.Sizeof(uintptr(0)) == 8 {
		for name, want := range map[string]uintptr{"DLTensor": 48, "DLManagedTensor": 64, "DLManagedTensorVersioned": 80} {
			if got := goLayout[key{name, ""}].size; got != want {
				t.Errorf("sizeof(%s) = %d on a 64-bit platform, want %d", name, got, want)
			}
		}
	}
}
