package pyfunc

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/google/go-cmp/cmp"
)

// ParseSchema gives cmd/dlbridge what NewFunc reads, without a Go
// function: the tensor parameters' Wants and the defaults as written.
func TestParseSchema(t *testing.T) {
	got, err := ParseSchema("mylib.mm(x: float32 [N, K] C, w: [K, M] cuda writable, alpha=1.5, name='a,b', n)")
	if err != nil {
		t.Fatal(err)
	}
	x := zerocopy.Want{DTypes: []dlpack.DataType{dlpack.Float32Type}, Shape: []zerocopy.Dim{zerocopy.Named("N"), zerocopy.Named("K")}, Order: zerocopy.COrder}
	w := zerocopy.Want{Shape: []zerocopy.Dim{zerocopy.Named("K"), zerocopy.Named("M")}, Device: zerocopy.AnyCUDA, Writable: true}
	want := Schema{Name: "mylib.mm", Params: []SchemaParam{
		{Name: "x", Tensor: &x}, {Name: "w", Tensor: &w},
		{Name: "alpha", Default: "1.5", HasDefault: true}, {Name: "name", Default: "'a,b'", HasDefault: true}, {Name: "n"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		p    SchemaParam
		kind Kind
		bits int
		err  string
	}{
		{got.Params[2], FloatKind, 32, ""},
		{got.Params[2], IntKind, 64, "want int (int64), got float 1.5"},
		{got.Params[3], StringKind, 0, ""},
		{got.Params[3], BoolKind, 0, `want bool, got str "a,b"`},
		{SchemaParam{Name: "n", Default: "300", HasDefault: true}, IntKind, 8, "300 is out of range for int8"},
		{SchemaParam{Name: "n", Default: "300", HasDefault: true}, UintKind, 16, ""},
		{got.Params[4], IntKind, 64, ""},
	} {
		err := c.p.CheckDefault(c.kind, c.bits)
		if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
			t.Errorf("%s=%s as %v%d: %v, want %q", c.p.Name, c.p.Default, c.kind, c.bits, err, c.err)
		}
	}
	if _, err := ParseSchema("mylib.mm(x: float33)"); err == nil || !strings.Contains(err.Error(), "parameter x: ") {
		t.Errorf("a bad dtype: %v", err)
	}
}

func scaleBody(s *cuda.Stream, out, x *zerocopy.View, factor float32) error {
	o, err := zerocopy.HostSlice[float32](out)
	if err != nil {
		return err
	}
	in, err := zerocopy.HostSliceRO[float32](x)
	if err != nil {
		return err
	}
	for i, v := range in {
		o[i] = v * factor
	}
	return nil
}

func TestNewFuncRefusesMismatches(t *testing.T) {
	for _, c := range []struct {
		schema string
		fn     any
		want   string
	}{
		{"scale(x)", scaleBody, "want a namespace and a name"},
		{"a.b-c(x)", scaleBody, `"b-c" is not an identifier`},
		{"a.f(out, x)", scaleBody, "the schema names 2 parameters"},
		{"a.f(out, x, f, g)", scaleBody, "the schema names 4 parameters"},
		{"a.f(out: float32, x: float32, f: float32)", scaleBody, "gives it tensor constraints"},
		{"a.f(out=1, x, f)", scaleBody, "cannot have a default"},
		{"a.f(out, x, f='a')", scaleBody, "want float32"},
		{"a.f(out, x, f=1e40)", scaleBody, "out of range for float32"},
		{"a.f(out, x, stream)", scaleBody, "reserved"},
		{"a.f(a, b, a)", scaleBody, "named twice"},
		{"a.f(x)", func(x []int) {}, "want *zerocopy.View"},
		{"a.f()", func() chan int { return nil }, "result 1"},
		{"a.f()", func() (error, int) { return nil, 0 }, "returns an error before its last result"},
		{"a.f(x)", 3, "want a Go function"},
		{"a.f(a=1, b)", func(a, b int) {}, "without a default follows one with a default"},
		{"a.f(n=300)", func(n int8) {}, "out of range for int8"},
	} {
		_, err := NewFunc(c.schema, c.fn)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewFunc(%q, %T) = %v; want an error with %q", c.schema, c.fn, err, c.want)
		}
	}
}

func TestRegisterRecordsErrorsAndDuplicates(t *testing.T) {
	// The registry put back as it was, so that the test runs again
	// (go test -count) and leaves nothing for the others to see.
	registry.Lock()
	saved, list := registry.errs, snapshot.Load()
	registry.Unlock()
	defer func() {
		registry.Lock()
		registry.errs = saved
		delete(registry.byName, "pyfunctest_ns.ok_once")
		snapshot.Store(list)
		registry.Unlock()
	}()
	if f := Register("pyfunctest_ns.ok_once(n)", func(n int) int { return n }); f == nil {
		t.Fatal("a good registration failed:", Err())
	}
	if Lookup("pyfunctest_ns.ok_once") == nil {
		t.Fatal("Lookup does not find a registered function")
	}
	if Register("pyfunctest_ns.ok_once(n)", func(n int) int { return n }) != nil {
		t.Fatal("a second registration of one name succeeded")
	}
	if Register("bad schema", func() {}) != nil {
		t.Fatal("a bad schema registered")
	}
	err := Err()
	if err == nil || !strings.Contains(err.Error(), "pyfunctest_ns.ok_once is registered twice") || !strings.Contains(err.Error(), `schema "bad schema"`) {
		t.Fatalf("Err() = %v", err)
	}
}

// views of Go memory for the call tests.
func f32(t *testing.T, xs ...float32) *zerocopy.View {
	t.Helper()
	v, err := zerocopy.FromSlice(xs, int64(len(xs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func TestCallChecksAndRuns(t *testing.T) {
	f, err := NewFunc("t.scale(out: float32 [N] C writable, x: float32 [N] C, factor=2.0)", scaleBody)
	if err != nil {
		t.Fatal(err)
	}
	out, x := f32(t, 0, 0, 0), f32(t, 1, 2, 3)
	args := func(vals ...Value) *Args {
		a := &Args{Tensors: []*zerocopy.View{out, x, nil}, Values: make([]Value, 3), StreamDevice: -1}
		if len(vals) > 0 {
			a.Values[2] = vals[0]
		}
		return a
	}
	if _, err := f.Call(args(), 0); err != nil {
		t.Fatal(err)
	}
	got, _ := zerocopy.HostSliceRO[float32](out)
	if diff := cmp.Diff([]float32{2, 4, 6}, got); diff != "" {
		t.Fatal(diff)
	}
	if _, err := f.Call(args(Value{Kind: IntKind, Int: 10}), 0); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{10, 20, 30}, got); diff != "" {
		t.Fatal(diff)
	}
	_, err = f.Call(args(Value{Kind: StringKind, Str: "x"}), 0)
	if ClassOf(err) != TypeError || err.Error() != `t.scale: argument factor: want float32 (a float or an int), got str "x"` {
		t.Fatalf("a string factor: %v (%v)", err, ClassOf(err))
	}
	short := f32(t, 1, 2)
	_, err = f.Call(&Args{Tensors: []*zerocopy.View{out, short, nil}, Values: make([]Value, 3), StreamDevice: -1}, 0)
	want := "t.scale: argument x: want float32 [N] C (N=3 from out); got float32 [2] C/F cpu writable: shape[0] (2 != N=3 from out)"
	if ClassOf(err) != ValueError || err.Error() != want {
		t.Fatalf("a short x:\n got %v (%v)\nwant %s", err, ClassOf(err), want)
	}
	i64, _ := zerocopy.FromSlice([]int64{1, 2, 3}, 3)
	defer i64.Close()
	_, err = f.Call(&Args{Tensors: []*zerocopy.View{out, i64, nil}, Values: make([]Value, 3), StreamDevice: -1}, 0)
	if ClassOf(err) != TypeError || err.Error() != "t.scale: argument x: want float32 [N] C (N=3 from out); got int64 [3] C/F cpu writable: dtype" {
		t.Fatalf("an int64 x: %v", err)
	}
}

func TestErrorsPanicsAndResults(t *testing.T) {
	boom := errors.New("boom")
	f, err := NewFunc("t.f(kind)", func(kind string) (int64, string, bool, error) {
		switch kind {
		case "error":
			return 0, "", false, boom
		case "value":
			return 0, "", false, ValueErrorf("bad value")
		case "panic":
			panic("oh no")
		}
		return 42, "ok", true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	call := func(kind string) (Outcome, error) {
		return f.Call(&Args{Tensors: make([]*zerocopy.View, 1), Values: []Value{{Kind: StringKind, Str: kind}}, StreamDevice: -1}, 0)
	}
	out, err := call("")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Value{{Kind: IntKind, Int: 42}, {Kind: StringKind, Str: "ok"}, {Kind: BoolKind, Bool: true}}, out.Values); diff != "" {
		t.Fatal(diff)
	}
	if _, err := call("error"); !errors.Is(err, boom) || ClassOf(err) != Unclassified || err.Error() != "t.f: boom" {
		t.Fatalf("error: %v", err)
	}
	if _, err := call("value"); ClassOf(err) != ValueError {
		t.Fatalf("value error: %v", err)
	}
	_, err = call("panic")
	if ClassOf(err) != RuntimeError || !strings.Contains(err.Error(), "t.f: Go panic: oh no (at ") {
		t.Fatalf("panic: %v", err)
	}
}

// The invoker and reflection paths give the same results and errors.
func TestInvokerAndReflectionAgree(t *testing.T) {
	body := func(b bool, i8 int8, u uint32, f float64, s string) (bool, int64, uint64, float64, string) {
		return !b, int64(i8) * 2, uint64(u) + 1, f / 2, s + "!"
	}
	slow, err := NewFunc("t.echo(b, i8, u, f, s='x')", body)
	if err != nil {
		t.Fatal(err)
	}
	fast, _ := NewFunc("t.echo(b, i8, u, f, s='x')", body)
	inv := Invoker(func(fr *Frame) error {
		r0, r1, r2, r3, r4 := body(fr.B[0], int8(fr.I[1]), uint32(fr.U[2]), fr.F[3], fr.Str[4])
		fr.RB[0], fr.RI[1], fr.RU[2], fr.RF[3], fr.RStr[4] = r0, r1, r2, r3, r4
		return nil
	})
	fast.invoker.Store(&inv)
	if slow.Fast() || !fast.Fast() {
		t.Fatal("Fast() does not tell the paths apart")
	}
	for _, vals := range [][]Value{
		{{Kind: BoolKind, Bool: true}, {Kind: IntKind, Int: -128}, {Kind: IntKind, Int: 7}, {Kind: FloatKind, Float: 3}, {}},
		{{Kind: BoolKind}, {Kind: IntKind, Int: 127}, {Kind: UintKind, Uint: 1 << 32}, {Kind: IntKind, Int: 1}, {Kind: StringKind, Str: "go"}},
		{{Kind: BoolKind}, {Kind: IntKind, Int: 128}, {Kind: IntKind, Int: 0}, {Kind: FloatKind}, {}},
		{{Kind: IntKind, Int: 1}, {Kind: IntKind}, {Kind: IntKind}, {Kind: FloatKind}, {}},
	} {
		a := &Args{Tensors: make([]*zerocopy.View, 5), Values: vals, StreamDevice: -1}
		o1, e1 := slow.Call(a, 0)
		o2, e2 := fast.Call(a, 0)
		if diff := cmp.Diff(o1.Values, o2.Values); diff != "" || (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
			t.Errorf("%v: reflection %v, %v; invoker %v, %v", vals, o1.Values, e1, o2.Values, e2)
		}
	}
}

func TestDescribe(t *testing.T) {
	f, err := NewFunc("t.scale(out: float32 [N] C writable, x: float32 [N] C, factor=2.0)", scaleBody, "Scales.")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Describe(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"t.scale"`, `"index":3`, `"doc":"Scales."`, `"stream":true`,
		`"spec":"float32 [N] C writable","writable":true`, `"default":2,"has_default":true,"default_src":"2.0"`, `"go_type":"float32"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Describe lacks %s:\n%s", want, b)
		}
	}
}

func FuzzParseSchema(f *testing.F) {
	for _, s := range []string{"a.b(x: float32 [N, K] C cuda writable, y=1.0, s='a,b')", "a.b()", "a.b(x: [", "a.b(x: f32|f64 [*])"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, params, err := parseSchema(s)
		if err != nil {
			return
		}
		if checkName(name) != nil {
			t.Fatalf("parseSchema(%q) accepted the name %q", s, name)
		}
		for _, p := range params {
			if p.Tensor != nil {
				if w, err := zerocopy.ParseWant(p.Tensor.String()); err != nil || w.String() != p.Tensor.String() {
					t.Fatalf("parseSchema(%q): the spec %q does not parse again: %v, %v", s, p.Tensor.String(), w, err)
				}
			}
		}
	})
}

// Arguments that share memory with a written one are read from a copy, as
// NumPy's ufuncs make overlapping arguments right; two written arguments
// that share memory are refused before the body runs.
func TestCallOverlappingArguments(t *testing.T) {
	scale, err := NewFunc("t.scale(out: float32 [N] C writable, x: float32 [N] C, factor=2.0)", scaleBody)
	if err != nil {
		t.Fatal(err)
	}
	reverse, err := NewFunc("t.reverse(out: float32 [N] writable, x: float32 [N])", func(out, x *zerocopy.View) error {
		o, _ := zerocopy.HostSlice[float32](out)
		in, _ := zerocopy.HostSliceRO[float32](x)
		for i := range o {
			o[i] = in[len(in)-1-i]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// out = x, elementwise, with x F-contiguous (read through its C
	// transpose): x a transposed view of out makes this a transpose in place.
	assignF, err := NewFunc("t.assign_f(out: float32 [N, N] C writable, x: float32 [N, N] F)", func(out, x *zerocopy.View) error {
		if !x.IsFContiguous() {
			return ValueErrorf("x is not F-contiguous")
		}
		xt, _ := x.T()
		o, _ := zerocopy.HostSlice[float32](out)
		in, _ := zerocopy.HostSliceRO[float32](xt)
		n := int(out.Shape()[0])
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				o[i*n+j] = in[j*n+i]
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	both, err := NewFunc("t.both(a: float32 writable, b: float32 writable)", func(a, b *zerocopy.View) { ran = true })
	if err != nil {
		t.Fatal(err)
	}
	slice := func(v *zerocopy.View, start, stop int64) *zerocopy.View {
		s, err := v.Slice(0, start, stop, 1)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name string
		f    *Func
		args func(m *zerocopy.View) []*zerocopy.View // over m, float32 0..8
		want []float32                               // m after the call
		err  string
	}{
		{"written one element ahead of what is read", scale,
			func(m *zerocopy.View) []*zerocopy.View { return []*zerocopy.View{slice(m, 1, 9), slice(m, 0, 8), nil} },
			[]float32{0, 0, 2, 4, 6, 8, 10, 12, 14}, ""},
		{"written one element behind what is read", scale,
			func(m *zerocopy.View) []*zerocopy.View { return []*zerocopy.View{slice(m, 0, 8), slice(m, 1, 9), nil} },
			[]float32{2, 4, 6, 8, 10, 12, 14, 16, 8}, ""},
		{"the same memory, read in another order", reverse,
			func(m *zerocopy.View) []*zerocopy.View { return []*zerocopy.View{m, m} },
			[]float32{8, 7, 6, 5, 4, 3, 2, 1, 0}, ""},
		{"a transpose in place keeps the order the schema asks for", assignF,
			func(m *zerocopy.View) []*zerocopy.View {
				sq, _ := m.Reshape(3, 3)
				tr, _ := sq.T()
				return []*zerocopy.View{sq, tr}
			},
			[]float32{0, 3, 6, 1, 4, 7, 2, 5, 8}, ""},
		{"two written arguments", both,
			func(m *zerocopy.View) []*zerocopy.View { return []*zerocopy.View{slice(m, 0, 5), slice(m, 4, 9)} },
			[]float32{0, 1, 2, 3, 4, 5, 6, 7, 8}, "t.both: arguments a and b share memory and both are written: pass tensors that do not overlap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := f32(t, 0, 1, 2, 3, 4, 5, 6, 7, 8)
			tensors := c.args(m)
			orig := append([]*zerocopy.View(nil), tensors...)
			ran = false
			_, err := c.f.Call(&Args{Tensors: tensors, Values: make([]Value, len(tensors)), StreamDevice: -1}, 0)
			if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err || ClassOf(err) != ValueError || ran) {
				t.Fatalf("Call: %v (%v, body ran: %v); want %q", err, ClassOf(err), ran, c.err)
			}
			got, _ := zerocopy.HostSliceRO[float32](m)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("memory after the call (-want +got):\n%s", diff)
			}
			for i := range orig {
				if tensors[i] != orig[i] {
					t.Errorf("argument %d is not the caller's view after the call", i)
				}
			}
		})
	}
}

// A result that views the copy an overlapping argument was read from
// outlives the call, as a view of the caller's argument would.
func TestCallResultOfACopiedArgument(t *testing.T) {
	f, err := NewFunc("t.fill_and_view(out: float32 [N] writable, x: float32 [N])", func(out, x *zerocopy.View) (*zerocopy.View, error) {
		o, _ := zerocopy.HostSlice[float32](out)
		for i := range o {
			o[i] = -1
		}
		return x.Slice(0, 0, 2, 1) // borrows x's reference
	})
	if err != nil {
		t.Fatal(err)
	}
	m := f32(t, 1, 2, 3, 4)
	out, err := f.Call(&Args{Tensors: []*zerocopy.View{m, m}, Values: make([]Value, 2), StreamDevice: -1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := out.Tensors[0]
	defer r.Close()
	got, err := zerocopy.HostSliceRO[float32](r)
	if err != nil {
		t.Fatalf("the result after the call: %v", err)
	}
	if diff := cmp.Diff([]float32{1, 2}, got); diff != "" {
		t.Errorf("the result reads what x held before the body wrote (-want +got):\n%s", diff)
	}
}
