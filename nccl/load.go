package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// EnvLibrary names the environment variable that overrides where
// libnccl.so.2 is loaded from (a path). The tests point it at the fake
// NCCL built from testdata/fakenccl.
const EnvLibrary = "DLBRIDGE_LIBNCCL"

// DefaultLibrary is the library name given to the dynamic loader.
const DefaultLibrary = "libnccl.so.2"

// ErrNoLibrary reports that no usable NCCL was found; the error wrapping it
// lists every place that was tried.
var ErrNoLibrary = errors.New("nccl: no NCCL library")

// ErrMissingSymbol reports that the loaded NCCL lacks an entry point a call
// needs (an older NCCL than the call requires).
var ErrMissingSymbol = errors.New("nccl: library lacks entry point")

var (
	libOnce sync.Once
	libErr  error
	libPath string
	fns     [numSyms]uintptr
	version int
)

func load() error {
	libOnce.Do(func() { libErr = open() })
	return libErr
}

// candidates lists where NCCL is looked for, in order: DLBRIDGE_LIBNCCL
// alone when set (a user who names a library means that one); else the
// loader's search path, then the nvidia/nccl/lib folder of every Python
// site-packages we can name (PyTorch's wheels bring NCCL there, and
// nothing puts it on the loader's path).
// The Python folders are looked up only when the loader finds nothing (it
// may start python3).
func candidates(yield func(string) bool) {
	if p := os.Getenv(EnvLibrary); p != "" {
		yield(p)
		return
	}
	if !yield(DefaultLibrary) {
		return
	}
	for _, dir := range sitePackages() {
		if !yield(filepath.Join(dir, "nvidia", "nccl", "lib", DefaultLibrary)) {
			return
		}
	}
}

// sitePackages names Python package folders: those of PYTHONPATH and an
// active virtual environment, then what python3 itself reports (a
// virtual environment's interpreter knows its own), then the usual system
// ones. Duplicates are dropped; folders that do not exist are kept out.
func sitePackages() []string {
	var dirs []string
	dirs = append(dirs, filepath.SplitList(os.Getenv("PYTHONPATH"))...)
	if venv := os.Getenv("VIRTUAL_ENV"); venv != "" {
		m, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
		dirs = append(dirs, m...)
	}
	dirs = append(dirs, pythonSitePackages()...)
	for _, pat := range []string{"/usr/local/lib/python3*/dist-packages", "/usr/lib/python3/dist-packages",
		"/usr/local/lib/python3*/site-packages", "/usr/lib/python3*/site-packages"} {
		m, _ := filepath.Glob(pat)
		dirs = append(dirs, m...)
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		if d == "" || seen[d] {
			continue
		}
		seen[d] = true
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// pythonSitePackages asks python3 (if on PATH) for its site-packages, with
// a deadline: it runs only when NCCL is on neither path above.
func pythonSitePackages() []string {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c",
		"import site; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func open() error {
	var tried []string
	for path := range candidates {
		if filepath.IsAbs(path) {
			if _, err := os.Stat(path); err != nil {
				tried = append(tried, path+" (absent)")
				continue
			}
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", path, err))
			continue
		}
		var found [numSyms]uintptr
		for i, name := range symNames {
			if p, err := purego.Dlsym(h, name); err == nil {
				found[i] = p
			}
		}
		var missing []string
		for _, i := range required {
			if found[i] == 0 {
				missing = append(missing, symNames[i])
			}
		}
		if len(missing) > 0 {
			tried = append(tried, fmt.Sprintf("%s (lacks %s)", path, strings.Join(missing, ", ")))
			continue
		}
		fns = found
		libPath = path
		var v int32
		if r := call(sym_ncclGetVersion, uintptr(unsafe.Pointer(&v))); r != success {
			return fmt.Errorf("%w: ncclGetVersion in %s: %v", ErrNoLibrary, path, r)
		}
		version = int(v)
		return nil
	}
	return fmt.Errorf("%w: looked for %s in: %s", ErrNoLibrary, DefaultLibrary, strings.Join(tried, "; "))
}

// Init loads NCCL if that has not happened yet. Calling it is optional:
// every function does it on first use.
func Init() error { return load() }

// LibraryPath returns the path (or loader name) NCCL was loaded from, ""
// when it could not be loaded.
func LibraryPath() string {
	if load() != nil {
		return ""
	}
	return libPath
}

// Version returns the loaded NCCL's version code (22800 for 2.28.0).
func Version() (int, error) {
	if err := load(); err != nil {
		return 0, err
	}
	return version, nil
}
