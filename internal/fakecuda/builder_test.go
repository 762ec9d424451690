package fakecuda

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ebitengine/purego"
)

func TestSource(t *testing.T) {
	src, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(src) != "fakecuda.c" {
		t.Fatalf("Source() = %s", src)
	}
}

// TestBuild builds (or finds cached) the library, checks that a second call
// gives the same path, and that it loads and exports the driver's entry
// points and the fake's controls.
func TestBuild(t *testing.T) {
	lib, err := Build()
	if errors.Is(err, ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(lib) != "libcuda.so.1" {
		t.Errorf("Build() = %s, want a libcuda.so.1", lib)
	}
	if again, err := Build(); again != lib || err != nil {
		t.Errorf("second Build() = %s, %v; want %s, nil", again, err, lib)
	}
	if st, err := os.Stat(lib); err != nil || st.Size() == 0 {
		t.Fatalf("stat %s: %v", lib, err)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatalf("dlopen %s: %v", lib, err)
	}
	defer purego.Dlclose(h)
	for _, sym := range []string{"cuInit", "cuMemAlloc_v2", "fakecuda_inject"} {
		if _, err := purego.Dlsym(h, sym); err != nil {
			t.Errorf("dlsym %s: %v", sym, err)
		}
	}
}

// TestNoCompiler: without gcc on PATH (and nothing cached) the error is
// ErrNoCompiler.
func TestNoCompiler(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir()) // an empty cache
	_, err := buildLib()
	if !errors.Is(err, ErrNoCompiler) {
		t.Fatalf("buildLib() without gcc: %v, want ErrNoCompiler", err)
	}
}
