// Package pyfunctest registers the functions dlbridge's Python tests call
// through dlbridge.ops.pytest: every scalar kind both ways, each error
// class and a panic, results that view their arguments, views kept after
// the call, and the stream a CUDA call gets. It is linked into the test
// library only (dlbridge build -o LIB ./examples/gofunc ./pybridge/pyfunc/pyfunctest).
package pyfunctest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func init() {
	pyfunc.Register("pytest.echo(b, i8, u16, i, f32, s, f64=0.5, flag=False, name='go')", Echo)
	pyfunc.Register("pytest.fail(kind)", Fail)
	pyfunc.Register("pytest.matmul_check(x: float32 [N, K], w: float32 [K, M], out: float32 [N, M] writable)", MatmulCheck)
	pyfunc.Register("pytest.first_row(x: [R, K])", FirstRow)
	pyfunc.Register("pytest.swap(a: float32 [N] C cpu writable, b: float32 [N] C cpu writable)", Swap)
	pyfunc.Register("pytest.keep(x: float32 cpu)", Keep)
	pyfunc.Register("pytest.keep_first(x: float32 cpu, y: float32 cpu)", KeepFirst)
	pyfunc.Register("pytest.kept_sum()", KeptSum)
	pyfunc.Register("pytest.drop()", Drop)
	pyfunc.Register("pytest.keep_unretained(x: float32 [N] cpu)", KeepUnretained)
	pyfunc.Register("pytest.unretained_sum(busy: cpu)", UnretainedSum)
	pyfunc.Register("pytest.pair(n)", Pair)
	pyfunc.Register("pytest.stream_of(x: cuda)", StreamOf)
	pyfunc.Register("pytest.fill_async(x: float32 cuda writable, v)", FillAsync)
	pyfunc.Register("pytest.sum(x: float32 | float64)", Sum)
	pyfunc.Register("pytest.count(x)", Count, "The number of elements of x.")
	pyfunc.Register("pytest.slow(x: float32 cpu writable, v, spins)", Slow)
	pyfunc.Register("pytest.full_like(x: float32 cuda, v)", FullLike)
	pyfunc.Register("pytest.nothing()", Nothing)
	pyfunc.Register("pytest.noop2(a, b)", Noop2)
	pyfunc.Register("pytest.noop9(a, b, c, d, e, f, g, h, i)", Noop9)
	pyfunc.Register("pytest.layout(x)", Layout)
	pyfunc.Register("pytest.fill_times(x: float32 cuda writable, v, times)", FillTimes)
	pyfunc.Register("pytest.fill_wait(x: float32 cuda writable, v, times)", FillWait)
}

// Echo returns its arguments, converted to the widest kinds.
func Echo(b bool, i8 int8, u16 uint16, i int, f32 float32, s string, f64 float64, flag bool, name string) (bool, int64, uint64, float64, string, float64, bool, string) {
	return b, int64(i8) + int64(i), uint64(u16), float64(f32), s, f64, flag, name
}

// Fail returns an error of the Python class kind names, or panics.
func Fail(kind string) error {
	switch kind {
	case "type":
		return pyfunc.TypeErrorf("pytest: a type error")
	case "value":
		return pyfunc.ValueErrorf("pytest: a value error")
	case "buffer":
		return pyfunc.BufferErrorf("pytest: a buffer error")
	case "memory":
		return pyfunc.MemoryErrorf("pytest: a memory error")
	case "runtime":
		return pyfunc.RuntimeErrorf("pytest: a runtime error")
	case "plain":
		return errors.New("pytest: a plain error")
	case "panic":
		panic("pytest: a panic")
	case "nilpanic":
		var v *zerocopy.View
		_ = v.Len()
	}
	return nil
}

// MatmulCheck checks shapes only (named dimensions shared by x, w, out).
func MatmulCheck(x, w, out *zerocopy.View) error { return nil }

// Swap exchanges the elements of a and b: two written arguments, which
// must not share memory.
func Swap(a, b *zerocopy.View) error {
	x, err := zerocopy.HostSlice[float32](a)
	if err != nil {
		return err
	}
	y, err := zerocopy.HostSlice[float32](b)
	if err != nil {
		return err
	}
	for i := range x {
		x[i], y[i] = y[i], x[i]
	}
	return nil
}

// FirstRow returns row 0 of x: a view of the argument's memory.
func FirstRow(x *zerocopy.View) (*zerocopy.View, error) { return x.Select(0, 0) }

var kept struct {
	sync.Mutex
	v *zerocopy.View
}

// Keep keeps a reference on x after the call returns.
func Keep(x *zerocopy.View) error {
	r, err := x.Retain()
	if err != nil {
		return err
	}
	kept.Lock()
	defer kept.Unlock()
	if kept.v != nil {
		kept.v.Close()
	}
	kept.v = r
	return nil
}

// KeepFirst keeps a reference on x, and none on y, after the call.
func KeepFirst(x, y *zerocopy.View) error { return Keep(x) }

// KeptSum sums the kept tensor's elements.
func KeptSum() (float64, error) {
	kept.Lock()
	defer kept.Unlock()
	if kept.v == nil {
		return 0, pyfunc.ValueErrorf("pytest: nothing kept")
	}
	return sum32(kept.v)
}

// sum32 sums a host float32 view's elements.
func sum32(v *zerocopy.View) (float64, error) {
	xs, err := zerocopy.HostSliceRO[float32](v)
	if err != nil {
		return 0, err
	}
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return s, nil
}

// Drop closes the kept tensor.
func Drop() {
	kept.Lock()
	defer kept.Unlock()
	if kept.v != nil {
		kept.v.Close()
		kept.v = nil
	}
}

// unretained is a view derived from an argument and kept past the call
// without Retain: the misuse the rule of zerocopy.View forbids, which must
// fail loudly when used, also after the call's views are reused.
var unretained struct {
	sync.Mutex
	v *zerocopy.View
}

// KeepUnretained keeps x[1:] after the call without a reference of its own.
func KeepUnretained(x *zerocopy.View) error {
	s, err := x.Slice(0, 1, x.Len(), 1)
	if err != nil {
		return err
	}
	unretained.Lock()
	defer unretained.Unlock()
	unretained.v = s
	return nil
}

// UnretainedSum sums the elements of the view KeepUnretained kept; busy,
// unused, makes the call take a view of its own (the allocation of the
// kept view's parent, used again).
func UnretainedSum(busy *zerocopy.View) (float64, error) {
	unretained.Lock()
	defer unretained.Unlock()
	return sum32(unretained.v)
}

// Pair returns two new host tensors: 0..n-1 as float32 and as int64.
func Pair(n int) (*zerocopy.View, *zerocopy.View, error) {
	if n < 0 {
		return nil, nil, pyfunc.ValueErrorf("pytest: n=%d is negative", n)
	}
	a, b := make([]float32, n), make([]int64, n)
	for i := range a {
		a[i], b[i] = float32(i), int64(i)
	}
	va, err := zerocopy.FromSlice(a, int64(n))
	if err != nil {
		return nil, nil, err
	}
	vb, err := zerocopy.FromSlice(b, int64(n))
	if err != nil {
		va.Close()
		return nil, nil, err
	}
	return va, vb, nil
}

// StreamOf returns the handle of the stream the call got, and the stream
// of the write pending on x as the body saw it.
func StreamOf(s *cuda.Stream, x *zerocopy.View) (uint64, uint64) {
	return uint64(s.Handle()), uint64(x.Stream())
}

// FillAsync fills x with v on the caller's stream, leaving the write
// pending there.
func FillAsync(s *cuda.Stream, x *zerocopy.View, v float32) error {
	return zerocopy.Fill(x, zerocopy.Float(float64(v)), s)
}

// Sum adds x's elements on the host.
func Sum(x *zerocopy.View) (float64, error) {
	var s float64
	var err error
	switch x.DType() {
	case dlpack.Float32Type:
		err = zerocopy.Each(x, func(_ []int64, v float32) bool { s += float64(v); return true })
	default:
		err = zerocopy.Each(x, func(_ []int64, v float64) bool { s += v; return true })
	}
	return s, err
}

// Layout is what Go sees of x: "dtype shape strides readonly", and the
// address of its first element.
func Layout(x *zerocopy.View) (string, uint64) {
	return fmt.Sprintf("%s %v %v %v", x.DType(), x.Shape(), x.Strides(), x.ReadOnly()), uint64(x.Ptr())
}

// Count is the number of elements of x.
func Count(x *zerocopy.View) int64 { return x.Len() }

// Slow writes v into every element of x, spinning spins times between
// elements: a body that runs long enough for other threads to overlap.
func Slow(x *zerocopy.View, v float32, spins int) error {
	xs, err := zerocopy.HostSlice[float32](x)
	if err != nil {
		return err
	}
	acc := 0
	for i := range xs {
		for j := 0; j < spins; j++ {
			acc += j
		}
		xs[i] = v
	}
	if acc < 0 {
		return fmt.Errorf("unreachable")
	}
	return nil
}

// FullLike returns a new CUDA tensor of x's shape filled with v, allocated
// and filled on the caller's stream (the result is pending there).
func FullLike(s *cuda.Stream, x *zerocopy.View, v float32) (*zerocopy.View, error) {
	out, err := zerocopy.AllocCUDAAsync(s, x.DType(), x.Shape()...)
	if err != nil {
		return nil, err
	}
	if err := zerocopy.Fill(out, zerocopy.Float(float64(v)), s); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// Nothing does nothing: the fixed cost of a call.
func Nothing() {}

// Noop2 and Noop9 take two and nine tensors of any device with the
// caller's stream and do nothing: the cost of a call by the number of its
// tensors, as bench_gofunc.py sets it beside the empty functions of tvm-ffi
// and nanobind (bench/peers), whose tensor arguments constrain nothing either.
func Noop2(s *cuda.Stream, a, b *zerocopy.View) {}

// Noop9 is Noop2 with nine tensors.
func Noop9(s *cuda.Stream, a, b, c, d, e, f, g, h, i *zerocopy.View) {}

// FillWait is FillTimes and a wait for the fills: a GPU function whose
// caller needs the result on the host when it returns.
func FillWait(s *cuda.Stream, x *zerocopy.View, v float32, times int) error {
	if err := FillTimes(s, x, v, times); err != nil {
		return err
	}
	return s.Synchronize()
}

// FillTimes fills x with v times times on the caller's stream: a GPU
// function whose body is several kernel launches.
func FillTimes(s *cuda.Stream, x *zerocopy.View, v float32, times int) error {
	for i := 0; i < times; i++ {
		if err := zerocopy.Fill(x, zerocopy.Float(float64(v)), s); err != nil {
			return err
		}
	}
	return nil
}
