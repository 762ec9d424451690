package pybridge_test

import (
	"fmt"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
)

func ExampleTable() {
	type session struct{ name string }
	var sessions pybridge.Table[*session]
	h := sessions.Add(&session{name: "a"}) // give h to C
	s, _ := sessions.Get(h)                // C hands h back
	fmt.Println(s.name)
	sessions.Delete(h)
	_, err := sessions.Get(h)
	fmt.Println(pybridge.CodeOf(err))
	// Output:
	// a
	// ValueError
}

func ExampleExport() {
	// A tensor made in Go, registered under a handle as libdlbridge does.
	v, _ := pybridge.Arange(4, dlpack.Float32Type, dlpack.CPUDevice)
	h := pybridge.NewTensor(v)
	defer pybridge.CloseTensor(h)

	t, _ := pybridge.Borrow(h)
	defer t.Return()
	// What __dlpack__(max_version=(1, 3)) asks for:
	p, _ := pybridge.Export(t, pybridge.ExportRequest{Versioned: true})
	// A consumer takes p; here we take it back ourselves.
	w, _ := pybridge.Import(p, true, false)
	defer w.Close()
	fmt.Println(w.Ptr() == v.Ptr(), w.Shape())
	// Output: true [4]
}
