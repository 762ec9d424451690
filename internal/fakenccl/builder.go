package fakenccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/dlbridge/dlbridge/internal/fakecuda"
)

// Source returns the path of testdata/fakenccl/fakenccl.c.
func Source() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("fakenccl: cannot locate the builder's source file (runtime.Caller failed)")
	}
	src := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fakenccl", "fakenccl.c")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("fakenccl: C source not found: %w", err)
	}
	return src, nil
}

var build = sync.OnceValues(func() (string, error) {
	src, err := Source()
	if err != nil {
		return "", err
	}
	return fakecuda.BuildC(src, "libnccl.so.2", "-lpthread", "-ldl")
})

// Build returns the path of the fake NCCL (named libnccl.so.2), compiled
// with fakecuda's flags and cache.
func Build() (string, error) { return build() }

// Use makes the fake driver (with the given number of devices) and the
// fake NCCL the libraries this process and its children load, unless
// DLBRIDGE_GPU=1 (the GPU machine: the real ones) or DLBRIDGE_LIBNCCL
// names a library already. It returns the fake NCCL's path, or "".
// Call it from init, before anything loads a library.
func Use(devices int) (string, error) {
	if os.Getenv("DLBRIDGE_GPU") == "1" || os.Getenv("DLBRIDGE_LIBNCCL") != "" {
		return "", nil
	}
	if _, err := fakecuda.Use(devices); err != nil {
		return "", err
	}
	lib, err := Build()
	if err != nil {
		return "", err
	}
	os.Setenv("DLBRIDGE_LIBNCCL", lib)
	return lib, nil
}
