package zerocopy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/google/go-cmp/cmp"
)

// specView wraps s over memory nothing reads (Check looks at the layout
// only); Ptr is made up unless s sets one.
func specView(t *testing.T, s zerocopy.Spec) *zerocopy.View {
	t.Helper()
	if s.Ptr == 0 {
		s.Ptr = 0x10000
	}
	v, err := zerocopy.Wrap(s, zerocopy.NewOwner(nil, "want test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func dts(ds ...dlpack.DataType) []dlpack.DataType { return ds }

func TestWantCheck(t *testing.T) {
	f32, f64, i64 := dlpack.Float32Type, dlpack.Float64Type, dlpack.Int64Type
	cpu, cuda0, cuda1 := dlpack.CPUDevice, dlpack.CUDADevice(0), dlpack.CUDADevice(1)
	c42 := zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{4, 2}} // C-contiguous
	f42 := zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{4, 2}, Strides: []int64{1, 4}}
	strided := zerocopy.Spec{Device: cpu, DType: i64, Shape: []int64{4, 2}, Strides: []int64{4, 2}, ReadOnly: true}
	on := func(s zerocopy.Spec, d dlpack.Device) zerocopy.Spec { s.Device = d; return s }
	ro := func(s zerocopy.Spec) zerocopy.Spec { s.ReadOnly = true; return s }
	square := zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{3, 3}}
	tests := []struct {
		name   string
		want   zerocopy.Want
		view   zerocopy.Spec
		got    string   // MismatchError.Got; "" for a match
		fields []string // MismatchError.Fields
	}{
		{"zero Want takes anything", zerocopy.Want{}, strided, "", nil},
		{"all met", zerocopy.Want{DTypes: dts(f32), Shape: zerocopy.Extents(-1, 2), Order: zerocopy.COrder, Device: cpu, Writable: true}, c42, "", nil},
		{"a dtype of the set", zerocopy.Want{DTypes: dts(f64, i64, f32)}, c42, "", nil},
		{"any CUDA device", zerocopy.Want{Device: zerocopy.AnyCUDA}, on(c42, cuda1), "", nil},
		{"cuda takes managed memory", zerocopy.Want{Device: cuda1}, on(c42, dlpack.Device{Type: dlpack.CUDAManaged, ID: 1}), "", nil},
		{"cpu takes pinned memory", zerocopy.Want{Device: cpu}, on(c42, dlpack.Device{Type: dlpack.CUDAHost}), "", nil},
		{"cpu takes managed memory", zerocopy.Want{Device: cpu}, on(c42, dlpack.Device{Type: dlpack.CUDAManaged, ID: 1}), "", nil},
		{"cpu of any ID", zerocopy.Want{Device: dlpack.Device{Type: dlpack.CPU, ID: -1}}, c42, "", nil},
		{"F order met", zerocopy.Want{Order: zerocopy.FOrder}, f42, "", nil},
		{"1-d is both orders", zerocopy.Want{Order: zerocopy.FOrder}, zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{5}}, "", nil},
		{"0-d asked with an empty Shape", zerocopy.Want{Shape: []zerocopy.Dim{}}, zerocopy.Spec{Device: cpu, DType: f32}, "", nil},
		{"a name binds across dimensions", zerocopy.Want{Shape: []zerocopy.Dim{zerocopy.Named("N"), zerocopy.Named("N")}}, square, "", nil},
		{"every mismatch at once",
			zerocopy.Want{DTypes: dts(f32), Shape: zerocopy.Extents(-1, 3), Order: zerocopy.COrder, Device: cuda0, Writable: true}, strided,
			"int64 [4, 2] strided cpu read-only", []string{"dtype", "shape[1] (2 != 3)", "order", "device", "read-only"}},
		{"dtype", zerocopy.Want{DTypes: dts(i64)}, c42, "float32 [4, 2] C cpu writable", []string{"dtype"}},
		{"dtype outside the set", zerocopy.Want{DTypes: dts(i64, f64)}, c42, "float32 [4, 2] C cpu writable", []string{"dtype"}},
		{"ndim", zerocopy.Want{Shape: zerocopy.Extents(-1, -1, -1)}, c42, "float32 [4, 2] C cpu writable", []string{"ndim (2 != 3)"}},
		{"shape fixes ndim", zerocopy.Want{Shape: zerocopy.Extents(4)}, c42, "float32 [4, 2] C cpu writable", []string{"ndim (2 != 1)"}},
		{"every extent", zerocopy.Want{Shape: zerocopy.Extents(3, 3)}, c42, "float32 [4, 2] C cpu writable", []string{"shape[0] (4 != 3)", "shape[1] (2 != 3)"}},
		{"a name takes one extent", zerocopy.Want{Shape: []zerocopy.Dim{zerocopy.Named("N"), zerocopy.Named("N")}}, c42, "float32 [4, 2] C cpu writable", []string{"shape[1] (2 != N=4 from x)"}},
		{"C order", zerocopy.Want{Order: zerocopy.COrder}, f42, "float32 [4, 2] F cpu writable", []string{"order"}},
		{"F order", zerocopy.Want{Order: zerocopy.FOrder}, c42, "float32 [4, 2] C cpu writable", []string{"order"}},
		{"device type", zerocopy.Want{Device: zerocopy.AnyCUDA}, c42, "float32 [4, 2] C cpu writable", []string{"device"}},
		{"cpu refuses device memory", zerocopy.Want{Device: cpu}, on(c42, cuda0), "float32 [4, 2] C cuda:0 writable", []string{"device"}},
		{"device ordinal", zerocopy.Want{Device: cuda0}, on(c42, cuda1), "float32 [4, 2] C cuda:1 writable", []string{"device"}},
		{"managed memory of another device", zerocopy.Want{Device: cuda0}, on(c42, dlpack.Device{Type: dlpack.CUDAManaged, ID: 1}), "float32 [4, 2] C cuda_managed:1 writable", []string{"device"}},
		{"writable", zerocopy.Want{Writable: true}, ro(c42), "float32 [4, 2] C cpu read-only", []string{"read-only"}},
		{"0-d against 1-d", zerocopy.Want{Shape: []zerocopy.Dim{}}, zerocopy.Spec{Device: cpu, DType: f32, Shape: []int64{1}}, "float32 [1] C/F cpu writable", []string{"ndim (1 != 0)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.want.CheckArg("f", "x", specView(t, tc.view))
			if tc.got == "" {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			var me *zerocopy.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("Check: %v, want a *MismatchError", err)
			}
			want := &zerocopy.MismatchError{Func: "f", Arg: "x", Want: tc.want, Got: tc.got, Fields: tc.fields}
			if diff := cmp.Diff(want, me); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if msg, want := err.Error(), "f: argument x: want "+tc.want.String()+"; got "+tc.got+": "+strings.Join(tc.fields, ", "); msg != want {
				t.Errorf("message\n got %q\nwant %q", msg, want)
			}
		})
	}
}

// A Signature checks a function's tensors together: named dimensions bind
// across arguments, the error is about the first argument that fails and
// names every mismatch of it, with the extents earlier arguments set.
func TestSignatureCheck(t *testing.T) {
	cpu, f32, f64 := dlpack.CPUDevice, dlpack.Float32Type, dlpack.Float64Type
	mat := func(dt dlpack.DataType, r, c int64) zerocopy.Spec {
		return zerocopy.Spec{Device: cpu, DType: dt, Shape: []int64{r, c}}
	}
	parse := func(s string) *zerocopy.Want {
		w, err := zerocopy.ParseWant(s)
		if err != nil {
			t.Fatal(err)
		}
		return &w
	}
	// matmul(x: float32 [N, K], w: float32 [K, M], alpha, out: float32 [N, M] writable)
	sig, err := zerocopy.NewSignature("lib.matmul", []string{"x", "w", "alpha", "out"},
		[]*zerocopy.Want{parse("float32 [N, K]"), parse("float32 [K, M]"), nil, parse("float32 [N, M] writable")})
	if err != nil {
		t.Fatal(err)
	}
	ro := func(s zerocopy.Spec) zerocopy.Spec { s.ReadOnly = true; return s }
	tests := []struct {
		name    string
		x, w, o zerocopy.Spec
		err     string // "" for a match
	}{
		{"met", mat(f32, 2, 3), mat(f32, 3, 5), mat(f32, 2, 5), ""},
		{"K from x", mat(f32, 2, 3), mat(f32, 4, 5), mat(f32, 2, 5),
			"lib.matmul: argument w: want float32 [K, M] (K=3 from x); got float32 [4, 5] C cpu writable: shape[0] (4 != K=3 from x)"},
		{"N from x and M from w", mat(f32, 2, 3), mat(f32, 3, 5), mat(f32, 2, 6),
			"lib.matmul: argument out: want float32 [N, M] writable (N=2 from x, M=5 from w); got float32 [2, 6] C cpu writable: shape[1] (6 != M=5 from w)"},
		{"every mismatch of the argument", mat(f32, 2, 3), mat(f32, 3, 5), ro(mat(f64, 4, 6)),
			"lib.matmul: argument out: want float32 [N, M] writable (N=2 from x, M=5 from w); got float64 [4, 6] C cpu read-only: dtype, shape[0] (4 != N=2 from x), shape[1] (6 != M=5 from w), read-only"},
		{"the first failing argument", mat(f64, 2, 3), mat(f64, 3, 5), mat(f64, 2, 5),
			"lib.matmul: argument x: want float32 [N, K]; got float64 [2, 3] C cpu writable: dtype"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := []*zerocopy.View{specView(t, tc.x), specView(t, tc.w), nil, specView(t, tc.o)}
			err := sig.Check(vs)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Fatalf("Check:\n got %v\nwant %s", err, tc.err)
			}
		})
	}
	if err := sig.Check([]*zerocopy.View{specView(t, mat(f32, 2, 3)), nil, nil, nil}); err == nil || err.Error() != "lib.matmul: missing tensor argument w" {
		t.Errorf("a missing tensor: %v", err)
	}
	v, _ := zerocopy.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	v.Close()
	if err := sig.Check([]*zerocopy.View{v, nil, nil, nil}); !errors.Is(err, zerocopy.ErrClosed) || !strings.HasPrefix(err.Error(), "lib.matmul: argument x: ") {
		t.Errorf("a closed tensor: %v", err)
	}
}

func TestNewSignatureRefusesBadWants(t *testing.T) {
	for _, tc := range []struct {
		want zerocopy.Want
		err  string
	}{
		{zerocopy.Want{Shape: zerocopy.Extents(-2)}, "Shape[0] = -2"},
		{zerocopy.Want{Shape: []zerocopy.Dim{{Name: "N", Size: 3}}}, "named N and of size 3"},
		{zerocopy.Want{Shape: []zerocopy.Dim{zerocopy.Named("1N")}}, `named "1N"`},
		{zerocopy.Want{Order: zerocopy.FOrder + 1}, "unknown Order(3)"},
	} {
		_, err := zerocopy.NewSignature("f", []string{"x"}, []*zerocopy.Want{&tc.want})
		if err == nil || !strings.Contains(err.Error(), "f: argument x: ") || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("NewSignature(%+v): %v, want an error with %q", tc.want, err, tc.err)
		}
	}
	if _, err := zerocopy.NewSignature("f", []string{"x", "y"}, []*zerocopy.Want{nil}); err == nil {
		t.Error("NewSignature with 2 names for 1 Want: no error")
	}
}

// ParseWant reads what String writes, in the notation schemas use.
func TestParseWant(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // Want.String, or the error's text
		bad  bool
	}{
		{in: "", want: "any tensor"},
		{in: "*", want: "any tensor"},
		{in: "float32", want: "float32"},
		{in: "float32 | float64 [N, K] C cuda writable", want: "float32|float64 [N, K] C cuda writable"},
		{in: "f32|int64[*, 3]", want: "float32|int64 [*, 3]"},
		{in: "[]", want: "[]"},
		{in: "F cpu", want: "F cpu"},
		{in: "writable cuda:1 [N]", want: "[N] cuda:1 writable"},
		{in: "float32 complex64", bad: true, want: `unknown word "complex64"`},
		{in: "C F", bad: true, want: "two orders"},
		{in: "cpu cuda", bad: true, want: "two devices"},
		{in: "[N, -2]", bad: true, want: `dimension "-2"`},
		{in: "[N", bad: true, want: "'[' without ']'"},
		{in: "N]", bad: true, want: "']' without '['"},
		{in: "[N] [K]", bad: true, want: "two shapes"},
		{in: "float33", bad: true, want: "neither a dtype nor a constraint"},
	} {
		got, err := zerocopy.ParseWant(c.in)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseWant(%q) = %v, %v; want an error with %q", c.in, got, err, c.want)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("ParseWant(%q) = %q, %v; want %q", c.in, got.String(), err, c.want)
			continue
		}
		again, err := zerocopy.ParseWant(got.String())
		if err != nil || !cmp.Equal(again, got) {
			t.Errorf("ParseWant(%q) does not read back: %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}

func TestWantString(t *testing.T) {
	for want, s := range map[string]zerocopy.Want{
		"any tensor":                       {},
		"float32 [*, 3] C cuda:0 writable": {DTypes: dts(dlpack.Float32Type), Shape: zerocopy.Extents(-1, 3), Order: zerocopy.COrder, Device: dlpack.CUDADevice(0), Writable: true},
		"[N, N] F cuda":                    {Shape: []zerocopy.Dim{zerocopy.Named("N"), zerocopy.Named("N")}, Order: zerocopy.FOrder, Device: zerocopy.AnyCUDA},
		"[] cpu":                           {Shape: []zerocopy.Dim{}, Device: dlpack.CPUDevice},
		"int8|uint8":                       {DTypes: dts(dlpack.Int8Type, dlpack.Uint8Type)},
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", s, got, want)
		}
	}
}

// Messages name function and argument when the check knows them; a plain
// Check says it is zerocopy's.
func TestMismatchErrorMessage(t *testing.T) {
	e := zerocopy.MismatchError{Want: zerocopy.Want{Writable: true}, Got: "float32 [2] C/F cpu read-only", Fields: []string{"read-only"}}
	for _, c := range []struct {
		fn, arg, want string
	}{
		{"", "", "zerocopy: want writable; got float32 [2] C/F cpu read-only: read-only"},
		{"f", "", "f: want writable; got float32 [2] C/F cpu read-only: read-only"},
		{"", "x", "argument x: want writable; got float32 [2] C/F cpu read-only: read-only"},
		{"f", "x", "f: argument x: want writable; got float32 [2] C/F cpu read-only: read-only"},
	} {
		e.Func, e.Arg = c.fn, c.arg
		if got := e.Error(); got != c.want {
			t.Errorf("Func %q Arg %q: %q, want %q", c.fn, c.arg, got, c.want)
		}
	}
	for _, c := range []struct {
		fields []string
		want   bool
	}{
		{[]string{"dtype"}, true}, {[]string{"shape[0] (1 != 2)", "device"}, true},
		{[]string{"ndim (1 != 2)", "order", "read-only"}, false},
	} {
		if got := (&zerocopy.MismatchError{Fields: c.fields}).WrongKind(); got != c.want {
			t.Errorf("WrongKind of %v = %v", c.fields, got)
		}
	}
}

// Overlap finds a written argument that shares memory with another one.
func TestSignatureOverlap(t *testing.T) {
	w := func(s string) *zerocopy.Want {
		x, err := zerocopy.ParseWant(s)
		if err != nil {
			t.Fatal(err)
		}
		return &x
	}
	sig, err := zerocopy.NewSignature("f", []string{"out", "n", "x", "y"}, []*zerocopy.Want{w("float32 writable"), nil, w("float32"), w("float32")})
	if err != nil {
		t.Fatal(err)
	}
	f32 := func(ptr uintptr, n int64) zerocopy.Spec {
		return zerocopy.Spec{Ptr: ptr, Device: dlpack.CPUDevice, DType: dlpack.Float32Type, Shape: []int64{n}}
	}
	for _, c := range []struct {
		name       string
		out, x, y  zerocopy.Spec
		w, o       int
		overlapped bool
	}{
		{"apart", f32(0x1000, 4), f32(0x1010, 4), f32(0x2000, 4), 0, 0, false},
		{"reads overlap each other only", f32(0x1000, 4), f32(0x2000, 4), f32(0x2004, 4), 0, 0, false},
		{"shifted by one element", f32(0x1004, 4), f32(0x1000, 4), f32(0x2000, 4), 0, 2, true},
		{"the same memory", f32(0x1000, 4), f32(0x2000, 4), f32(0x1000, 4), 0, 3, true},
		{"empty", f32(0x1000, 0), f32(0x1000, 4), f32(0x1000, 4), 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs := []*zerocopy.View{specView(t, c.out), nil, specView(t, c.x), specView(t, c.y)}
			w, o, ok := sig.Overlap(vs)
			if ok != c.overlapped || ok && (w != c.w || o != c.o) {
				t.Errorf("Overlap = %d, %d, %v; want %d, %d, %v", w, o, ok, c.w, c.o, c.overlapped)
			}
		})
	}
}

// Check reports a closed view as such, not as a mismatch.
func TestWantCheckClosed(t *testing.T) {
	v, err := zerocopy.FromSlice([]float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	err = zerocopy.Want{DTypes: dts(dlpack.Float32Type)}.Check(v)
	var me *zerocopy.MismatchError
	if err == nil || errors.As(err, &me) || !errors.Is(err, zerocopy.ErrClosed) {
		t.Errorf("Check of a closed view: %v", err)
	}
}

// A Want that contradicts itself is a caller's bug: Check panics.
func TestWantCheckPanicsOnBadWant(t *testing.T) {
	v, err := zerocopy.FromSlice([]float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, w := range []zerocopy.Want{
		{Shape: zerocopy.Extents(-2)},
		{Shape: []zerocopy.Dim{{Name: "N", Size: 2}}},
		{Order: zerocopy.FOrder + 1},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Check with %+v did not panic", w)
				}
			}()
			w.Check(v)
		}()
	}
}

// The accepting path of a compiled Signature allocates nothing.
func TestSignatureCheckAllocs(t *testing.T) {
	w, _ := zerocopy.ParseWant("float32 [N] C writable")
	x, _ := zerocopy.ParseWant("float32 [N] C")
	sig, err := zerocopy.NewSignature("f", []string{"out", "x"}, []*zerocopy.Want{&w, &x})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := zerocopy.FromSlice(make([]float32, 16), 16)
	b, _ := zerocopy.FromSlice(make([]float32, 16), 16)
	defer a.Close()
	defer b.Close()
	vs := []*zerocopy.View{a, b}
	if n := testing.AllocsPerRun(100, func() {
		if sig.Check(vs) != nil {
			t.Fatal("refused")
		}
		if _, _, ok := sig.Overlap(vs); ok {
			t.Fatal("overlap")
		}
	}); n != 0 {
		t.Errorf("Check and Overlap: %v allocations", n)
	}
}

// A function states what it needs once; the error names every mismatch.
func ExampleWant_Check() {
	need, _ := zerocopy.ParseWant("float32 [*, 3] C writable")

	ok, _ := zerocopy.FromSlice(make([]float32, 6), 2, 3)
	defer ok.Close()
	fmt.Println(need.Check(ok))

	bad, _ := zerocopy.FromSlice(make([]int64, 8), 2, 4)
	defer bad.Close()
	t, _ := bad.T() // [4, 2], F-contiguous; borrows bad's reference
	fmt.Println(need.CheckArg("mylib.rows", "x", t.AsReadOnly()))
	// Output:
	// <nil>
	// mylib.rows: argument x: want float32 [*, 3] C writable; got int64 [4, 2] F cpu read-only: dtype, shape[1] (2 != 3), order, read-only
}

// A Signature checks a function's tensors together.
func ExampleSignature_Check() {
	x, _ := zerocopy.ParseWant("float32 [N, K]")
	w, _ := zerocopy.ParseWant("float32 [K, M]")
	sig, _ := zerocopy.NewSignature("mylib.matmul", []string{"x", "w"}, []*zerocopy.Want{&x, &w})

	a, _ := zerocopy.FromSlice(make([]float32, 6), 2, 3)
	defer a.Close()
	b, _ := zerocopy.FromSlice(make([]float32, 8), 4, 2)
	defer b.Close()
	fmt.Println(sig.Check([]*zerocopy.View{a, b}))
	// Output:
	// mylib.matmul: argument w: want float32 [K, M] (K=3 from x); got float32 [4, 2] C cpu writable: shape[0] (4 != K=3 from x)
}

// Whatever ParseWant accepts, String writes in a form it reads back the
// same, and a Signature compiles it.
func FuzzParseWant(f *testing.F) {
	for _, s := range []string{"float32 | float64 [N, K] C cuda writable", "", "[]", "int8 [*, 3] F cpu", "cuda:1 [N, N]", "any tensor", "[N, -2]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := zerocopy.ParseWant(s)
		if err != nil {
			return
		}
		again, err := zerocopy.ParseWant(w.String())
		if err != nil || again.String() != w.String() {
			t.Fatalf("ParseWant(%q).String() = %q reads back as %q, %v", s, w.String(), again.String(), err)
		}
		if _, err := zerocopy.NewSignature("f", []string{"x"}, []*zerocopy.Want{&w}); err != nil {
			t.Fatalf("ParseWant(%q) = %q does not compile: %v", s, w.String(), err)
		}
	})
}
