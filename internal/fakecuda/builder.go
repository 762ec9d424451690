package fakecuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// ErrNoCompiler is returned (wrapped) by Build when gcc is not on PATH.
var ErrNoCompiler = errors.New("fakecuda: gcc not found on PATH: cannot build the fake CUDA driver of testdata/fakecuda (install gcc, or run on a GPU with DLBRIDGE_GPU=1)")

// Flags are the gcc flags the library is built with (besides -o and the
// source). -ffp-contract=off keeps the fake's float kernels bit-exact with
// the Go reference computations of the tests (no fused multiply-add).
var Flags = []string{"-shared", "-fPIC", "-O2", "-ffp-contract=off"}

// libs are linked after the source, where the linker wants them.
var libs = []string{"-lpthread"}

// Source returns the path of testdata/fakecuda/fakecuda.c, found from this
// file's own location so that it works from any package's test directory.
func Source() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("fakecuda: cannot locate the builder's source file (runtime.Caller failed)")
	}
	src := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fakecuda", "fakecuda.c")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("fakecuda: C source not found: %w", err)
	}
	return src, nil
}

var build = sync.OnceValues(buildLib)

// Build returns the path of the fake driver library (named libcuda.so.1),
// compiling it first unless a build of the same source and flags is cached
// in os.TempDir(). Within a process the work is done once; across processes
// the cache is shared, each build going to a private file that is renamed
// into place, so concurrent builders never see a partial library.
func Build() (string, error) { return build() }

func buildLib() (string, error) {
	src, err := Source()
	if err != nil {
		return "", err
	}
	return BuildC(src, "libcuda.so.1", libs...)
}

// BuildC compiles the C source src into a shared library named lib, with
// Flags and then libs, cached in os.TempDir() under a digest of the
// source, the flags and the compiler ($CC, else gcc): the builder of the
// fake driver and of the other fakes over it (internal/fakenccl).
func BuildC(src, lib string, libs ...string) (string, error) {
	code, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	h := sha256.New()
	h.Write(code)
	// The flags are part of the key: a change of flags must not reuse an
	// old build.
	// So is the compiler: $CC (a cross compiler when the tests run under
	// emulation, e.g. CC=aarch64-linux-gnu-gcc with qemu-user) builds the
	// library for the test's own architecture; gcc otherwise.
	cc := "gcc"
	if f := strings.Fields(os.Getenv("CC")); len(f) > 0 {
		cc = f[0]
	}
	fmt.Fprintf(h, "\x00%s\x00%s\x00%s\x00%s", strings.Join(Flags, " "), strings.Join(libs, " "), cc, lib)
	stem := strings.TrimSuffix(filepath.Base(src), ".c")
	dir := filepath.Join(os.TempDir(), "dlbridge-"+stem+"-"+hex.EncodeToString(h.Sum(nil)[:8]))
	out := filepath.Join(dir, lib)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	gcc, err := exec.LookPath(cc)
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoCompiler, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fakecuda: cache directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "build-*.so")
	if err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	tmp.Close()
	args := append(append(append([]string{}, Flags...), "-o", tmp.Name(), src), libs...)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("fakecuda: gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// rename is atomic: a concurrent builder either sees no library or a
	// complete one, and two builders of the same source agree on its content.
	if err := os.Rename(tmp.Name(), out); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	return out, nil
}
