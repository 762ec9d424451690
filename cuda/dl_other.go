//go:build !linux && !freebsd

package cuda

import (
	"errors"
	"runtime"
)

// dlopen fails on platforms without a CUDA driver this package supports, so
// every call returns ErrNoDriver there.
func dlopen(path string) (uintptr, error) {
	return 0, errors.New("the CUDA driver is not supported on " + runtime.GOOS + "/" + runtime.GOARCH)
}

func dlsym(h uintptr, name string) uintptr { return 0 }
