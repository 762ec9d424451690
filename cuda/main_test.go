package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/internal/fakecuda"
	"github.com/ebitengine/purego"
)

// The tests run against the fake driver of testdata/fakecuda, built with
// gcc by internal/fakecuda (cached by content hash in the temp directory),
// so the real binding code (purego, or cgo trampolines) runs in CI. With DLBRIDGE_GPU=1 they run against the real libcuda.so.1 instead,
// plus the GPU-only tests; fake-only tests (error injection, call counts)
// skip there.

var (
	gpuMode    = os.Getenv("DLBRIDGE_GPU") == "1"
	noDriverBy string // why no driver is available to the tests ("" if one is)
	fakePath   string // the fake library, when the tests use it
)

// envSubprocess marks a re-executed test binary (TestNoDriver).
const envSubprocess = "DLBRIDGE_TEST_SUBPROCESS"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(envSubprocess) != "" || gpuMode {
		return m.Run()
	}
	lib, err := fakecuda.Build()
	if errors.Is(err, fakecuda.ErrNoCompiler) {
		noDriverBy = err.Error()
		fmt.Fprintln(os.Stderr, "cuda tests:", noDriverBy)
		return m.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake driver: %v\n", err)
		return 1
	}
	fakePath = lib
	os.Setenv(EnvLibrary, fakePath)
	if os.Getenv("FAKECUDA_DEVICES") == "" {
		os.Setenv("FAKECUDA_DEVICES", "2")
	}
	return m.Run()
}

// needDriver skips a test when no driver (fake or real) is available.
func needDriver(t testing.TB) {
	t.Helper()
	if noDriverBy != "" {
		t.Skip(noDriverBy)
	}
	if err := Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
}

// needFake skips a test that uses the fake's controls.
func needFake(t testing.TB) *fakeLib {
	t.Helper()
	needDriver(t)
	if gpuMode {
		t.Skip("uses the fake driver's controls (DLBRIDGE_GPU=1 runs the real driver)")
	}
	return theFake(t)
}

// needGPU skips a test unless DLBRIDGE_GPU=1.
func needGPU(t testing.TB) {
	t.Helper()
	if !gpuMode {
		t.Skip("needs a GPU: set DLBRIDGE_GPU=1 on a machine with the CUDA driver")
	}
	needDriver(t)
}

func retain(t testing.TB, ordinal int) *Context {
	t.Helper()
	c, err := Retain(ordinal)
	if err != nil {
		t.Fatalf("Retain(%d): %v", ordinal, err)
	}
	t.Cleanup(func() {
		if err := c.Release(); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
	return c
}

func need2(t testing.TB) {
	t.Helper()
	n, err := DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Skipf("needs 2 devices, have %d", n)
	}
}

// must fails the test on err.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantCode checks that err is an *Error with the given code.
func wantCode(t testing.TB, err error, code Result) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", code.Name())
	}
	if !errors.Is(err, code) {
		t.Fatalf("got %v, want %v", err, code.Name())
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v is not a *cuda.Error", err)
	}
	if e.Name == "" || e.Message == "" || e.Op == "" {
		t.Fatalf("incomplete error %#v", e)
	}
}

// fakeLib calls the fake driver's test controls through purego, which works
// in both builds.
type fakeLib struct {
	h                                          uintptr
	inject, clear, calls, reset, live, strict  uintptr
	pending, refs, offsets2d, offsets3d, setCu uintptr
	capturing                                  uintptr
}

var fakeOnce = struct {
	lib *fakeLib
	err error
	ok  bool
}{}

func theFake(t testing.TB) *fakeLib {
	t.Helper()
	if !fakeOnce.ok {
		fakeOnce.ok = true
		h, err := purego.Dlopen(fakePath, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			fakeOnce.err = err
		} else {
			f := &fakeLib{h: h}
			for name, p := range map[string]*uintptr{
				"fakecuda_inject": &f.inject, "fakecuda_clear_injections": &f.clear,
				"fakecuda_calls": &f.calls, "fakecuda_reset_calls": &f.reset,
				"fakecuda_live_allocations": &f.live, "fakecuda_set_strict_ctx": &f.strict,
				"fakecuda_pending": &f.pending, "fakecuda_primary_refs": &f.refs,
				"fakecuda_offsets_memcpy2d": &f.offsets2d, "fakecuda_offsets_memcpy3d": &f.offsets3d,
				"cuCtxSetCurrent": &f.setCu, "fakecuda_set_capturing": &f.capturing,
			} {
				if *p, err = purego.Dlsym(h, name); err != nil {
					fakeOnce.err = err
				}
			}
			fakeOnce.lib = f
		}
	}
	if fakeOnce.err != nil {
		t.Fatalf("opening the fake's controls: %v", fakeOnce.err)
	}
	return fakeOnce.lib
}

func cstr(s string) *byte { b := append([]byte(s), 0); return &b[0] }

// Inject makes the call of fn after `after` successful ones fail with code.
func (f *fakeLib) Inject(t testing.TB, fn string, code Result, after int) {
	t.Helper()
	p := cstr(fn)
	purego.SyscallN(f.inject, uintptr(unsafe.Pointer(p)), uintptr(code), uintptr(after))
	runtime.KeepAlive(p)
	t.Cleanup(f.Clear)
}

// Clear removes pending injections.
func (f *fakeLib) Clear() { purego.SyscallN(f.clear) }

// Calls reports how often fn was called since the last ResetCalls.
func (f *fakeLib) Calls(fn string) int {
	p := cstr(fn)
	r, _, _ := purego.SyscallN(f.calls, uintptr(unsafe.Pointer(p)))
	runtime.KeepAlive(p)
	return int(r)
}

// ResetCalls zeroes the call counters.
func (f *fakeLib) ResetCalls() { purego.SyscallN(f.reset) }

// Live counts live allocations of a kind (0 all, 1 device, 2 pinned host,
// 3 registered, 4 managed).
func (f *fakeLib) Live(kind int) int {
	r, _, _ := purego.SyscallN(f.live, uintptr(kind))
	return int(int32(r))
}

// Strict turns the strict context mode on or off.
func (f *fakeLib) Strict(t testing.TB, on bool) {
	v := uintptr(0)
	if on {
		v = 1
	}
	purego.SyscallN(f.strict, v)
	if on {
		t.Cleanup(func() { purego.SyscallN(f.strict, 0) })
	}
}

// Pending counts operations queued on a stream.
func (f *fakeLib) Pending(s *Stream) int {
	r, _, _ := purego.SyscallN(f.pending, s.Handle())
	return int(int32(r))
}

// Refs reports the primary context reference count of a device.
func (f *fakeLib) Refs(dev int) int {
	r, _, _ := purego.SyscallN(f.refs, uintptr(dev))
	return int(int32(r))
}

// SetCapturing marks s as being captured into a graph, or not.
func (f *fakeLib) SetCapturing(s *Stream, on bool) {
	v := uintptr(0)
	if on {
		v = 1
	}
	purego.SyscallN(f.capturing, s.Handle(), v)
}

// ClearCurrent unsets the current context of the calling OS thread.
func (f *fakeLib) ClearCurrent() { purego.SyscallN(f.setCu, 0) }

// callOffsets calls a fakecuda_offsets_* function: it fills out with field
// offsets (the last one the struct's size) and returns how many there are.
func callOffsets(fn uintptr, out []uintptr) int {
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&out[0])), uintptr(len(out)))
	return int(int32(r))
}
