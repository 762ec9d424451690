package cuda

//go:generate go run gen_calls.go

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// EnvLibrary names the environment variable that overrides the path of the
// driver library (default "libcuda.so.1", found by the dynamic loader). The
// tests point it at a fake driver built from testdata/fakecuda.
const EnvLibrary = "DLBRIDGE_LIBCUDA"

// DefaultLibrary is the driver library opened when EnvLibrary is unset.
const DefaultLibrary = "libcuda.so.1"

// ErrNoDriver reports that no usable CUDA driver is present: the library
// could not be opened, lacks an essential entry point, or cuInit failed
// (for example with CUDA_ERROR_NO_DEVICE). Every call of this package
// returns an error matching it (errors.Is) on a machine without CUDA.
var ErrNoDriver = errors.New("cuda: no CUDA driver")

// ErrMissingSymbol reports that the loaded driver lacks the entry point a
// call needs (an older driver than the API requires).
var ErrMissingSymbol = errors.New("cuda: driver lacks entry point")

// fns holds the dlsym'd entry points, indexed by the sym_ constants of
// zsyms.go. It is written once inside driverOnce and only read afterwards;
// every public call passes through load (a sync.Once), which orders those
// reads after the writes.
var fns [numSyms]uintptr

var (
	driverOnce sync.Once
	driverErr  error
	driverPath string
)

// required lists the entry points without which the package cannot work at
// all; a library lacking one is treated as no driver. The rest are optional
// and fail individually with ErrMissingSymbol.
var required = [...]int{
	sym_cuInit, sym_cuGetErrorName, sym_cuGetErrorString, sym_cuDriverGetVersion,
	sym_cuDeviceGetCount, sym_cuDeviceGet, sym_cuDevicePrimaryCtxRetain,
	sym_cuDevicePrimaryCtxRelease_v2, sym_cuCtxGetCurrent, sym_cuCtxSetCurrent,
}

// load opens the driver on first use and returns the outcome of that one
// attempt ever after. Importing the package does nothing; the first call
// that needs the driver pays for dlopen, dlsym and cuInit(0).
func load() error {
	driverOnce.Do(func() { driverErr = open() })
	return driverErr
}

func open() error {
	driverPath = os.Getenv(EnvLibrary)
	if driverPath == "" {
		driverPath = DefaultLibrary
	}
	h, err := dlopen(driverPath)
	if err != nil {
		return fmt.Errorf("%w: cannot load %s: %v", ErrNoDriver, driverPath, err)
	}
	var found [numSyms]uintptr
	for i, names := range symNames {
		for _, n := range names {
			if p := dlsym(h, n); p != 0 {
				found[i] = p
				break
			}
		}
	}
	var missing []string
	for _, i := range required {
		if found[i] == 0 {
			missing = append(missing, symNames[i][0])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s lacks %s", ErrNoDriver, driverPath, strings.Join(missing, ", "))
	}
	fns = found
	if r := cuInit(0); r != Success {
		return fmt.Errorf("%w: cuInit(0) in %s: %w", ErrNoDriver, driverPath, newError("cuInit", r, ""))
	}
	return nil
}

// Init loads the driver and runs cuInit(0) if that has not happened yet.
// Calling it is optional: every function does it on first use. It returns
// an error matching ErrNoDriver where no driver can be used.
func Init() error { return load() }

// LibraryPath returns the path the driver was (or was attempted to be)
// loaded from, or "" before the first call that needed the driver.
func LibraryPath() string {
	if err := load(); err != nil && driverPath == "" {
		return ""
	}
	return driverPath
}

// Available reports whether a driver is loaded and at least one device is
// visible.
func Available() bool {
	n, err := DeviceCount()
	return err == nil && n > 0
}

// DriverVersion returns the CUDA version the driver supports, encoded as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := load(); err != nil {
		return 0, err
	}
	var v int32
	if r := cuDriverGetVersion(ptrOf(&v)); r != Success {
		return 0, newError("cuDriverGetVersion", r, "")
	}
	return int(v), nil
}
