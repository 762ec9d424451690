package fakecuda

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/ebitengine/purego"
)

// Use makes the fake driver the one the cuda package will load in this
// process, with the given number of devices, unless DLBRIDGE_GPU=1 (the GPU
// machine: the real driver) or DLBRIDGE_LIBCUDA names a driver already. It
// returns the fake's path, or "" when another driver was chosen. The driver
// is loaded once per process, so test packages call Use from init, before
// any test runs.
func Use(devices int) (lib string, err error) {
	if os.Getenv("DLBRIDGE_GPU") == "1" || os.Getenv("DLBRIDGE_LIBCUDA") != "" {
		return "", nil
	}
	if lib, err = Build(); err != nil {
		return "", err
	}
	os.Setenv("DLBRIDGE_LIBCUDA", lib)
	os.Setenv("FAKECUDA_DEVICES", strconv.Itoa(devices))
	return lib, nil
}

var handles sync.Map // library path -> dlopen handle

// Call calls the control function name of the fake driver at lib (call
// counts, injected errors, the order log: see testdata/fakecuda/fakecuda.c)
// with integer and pointer arguments, and returns its result.
func Call(lib, name string, args ...uintptr) (uintptr, error) {
	h, ok := handles.Load(lib)
	if !ok {
		dl, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			return 0, fmt.Errorf("fakecuda: dlopen %s: %w", lib, err)
		}
		h, _ = handles.LoadOrStore(lib, dl)
	}
	fn, err := purego.Dlsym(h.(uintptr), name)
	if err != nil {
		return 0, fmt.Errorf("fakecuda: dlsym %s: %w", name, err)
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return r, nil
}
