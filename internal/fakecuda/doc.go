// Package fakecuda builds the fake CUDA driver of testdata/fakecuda for the
// module's tests.
//
// testdata/fakecuda/fakecuda.c is a libcuda.so.1 over host memory (see the
// cuda package's documentation). The tests of several packages (cuda,
// zerocopy, cmd/dlbridge) load it in place of the real driver; Build compiles
// it with gcc once per source content and caches the library in the
// temporary directory, so parallel test binaries share one build:
//
//	lib, err := fakecuda.Build()
//	if err != nil {
//		// errors.Is(err, fakecuda.ErrNoCompiler): no gcc, skip the CUDA tests
//	}
//	os.Setenv(cuda.EnvLibrary, lib) // before the driver is first loaded
//
// The package is internal: it is test support, not part of the module's API.
package fakecuda
