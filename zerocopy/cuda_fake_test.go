package zerocopy_test

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/internal/fakecuda"
)

// The CUDA tests of this package run against the fake driver of
// testdata/fakecuda (built with gcc by internal/fakecuda, cached by content
// hash in the temp directory) unless DLBRIDGE_GPU=1 (the GPU machine: the
// real driver) or DLBRIDGE_LIBCUDA names a driver already. The driver is loaded once per
// process, so the choice is made in init, before any test runs.
var (
	fakeLib string // path of the fake driver in use, "" for a real one
	fakeErr error  // why the fake could not be built
)

// Two fake devices, so that wrong-device and peer cases can be tested.
const fakeDevices = 2

func init() { fakeLib, fakeErr = fakecuda.Use(fakeDevices) }

// needCUDA skips t when no driver (fake or real) is usable.
func needCUDA(t testing.TB) {
	t.Helper()
	if fakeErr != nil {
		t.Skipf("no fake CUDA driver: %v", fakeErr)
	}
	if !cuda.Available() {
		t.Skipf("no CUDA driver: %v", cuda.Init())
	}
}

// needFake skips t unless the fake driver is in use (for tests that use its
// controls: call counts, injected errors, live allocation counts).
func needFake(t testing.TB) {
	t.Helper()
	needCUDA(t)
	if fakeLib == "" {
		t.Skip("needs the fake driver")
	}
}

// fakeCall calls a control function of the fake driver.
// keep holds the strings passed to the fake until the call returns.
var fakeKeep []*byte

func fakeCall(t testing.TB, name string, args ...uintptr) uintptr {
	t.Helper()
	r, err := fakecuda.Call(fakeLib, name, args...)
	runtime.KeepAlive(fakeKeep)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// cstr returns a NUL-terminated copy of s for the fake's controls.
func cstr(s string) *byte {
	b := append([]byte(s), 0)
	fakeKeep = append(fakeKeep[:0], &b[0])
	return &b[0]
}

func fakeInject(t testing.TB, fn string, code cuda.Result, after int) {
	p := cstr(fn)
	fakeCall(t, "fakecuda_inject", uintptr(unsafe.Pointer(p)), uintptr(code), uintptr(after))
	t.Cleanup(func() { fakeCall(t, "fakecuda_clear_injections") })
}

func fakeCalls(t testing.TB, fn string) int {
	p := cstr(fn)
	return int(fakeCall(t, "fakecuda_calls", uintptr(unsafe.Pointer(p))))
}

// Kinds for fakeLive.
const (
	fakeDevice     = 1
	fakePinned     = 2
	fakeRegistered = 3
	fakeManaged    = 4
)

func fakeLive(t testing.TB, kind int) int {
	return int(int32(fakeCall(t, "fakecuda_live_allocations", uintptr(kind))))
}
