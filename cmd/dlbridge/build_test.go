package main

import (
	"archive/zip"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// TestBuildGofunc builds examples/gofunc into a library, as its doc says,
// and checks that it exports dlbridge's C ABI and the functions' doc
// comments, and that nothing was left beside it or in the tree.
func TestBuildGofunc(t *testing.T) {
	if testing.Short() {
		t.Skip("links a c-shared library (-short)")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler for cgo")
	}
	lib := filepath.Join(t.TempDir(), "out", "libgofunc.so")
	before := names(t, "../../examples/gofunc")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"build", "-o", lib, "../../examples/gofunc"}, &stdout, &stderr); code != 0 {
		t.Fatalf("status %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "wrote "+lib) || !strings.Contains(stdout.String(), "github.com/dlbridge/dlbridge/examples/gofunc") || stderr.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"dlb_call": false, "dlb_func_count": false, "dlb_func_describe": false, "dlb_abi_version": false}
	for _, s := range syms {
		if _, ok := want[s.Name]; ok && s.Section != elf.SHN_UNDEF {
			want[s.Name] = true
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("%s does not export %s", lib, name)
		}
	}
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("Scale writes x * factor into out")) {
		t.Errorf("the library lacks gofunc.Scale's doc comment")
	}
	entries, _ := os.ReadDir(filepath.Dir(lib))
	if len(entries) != 1 {
		t.Errorf("the output folder holds %d files, want the library alone: %v", len(entries), entries)
	}
	if after := names(t, "../../examples/gofunc"); after != before {
		t.Errorf("examples/gofunc held %s before the build and %s after", before, after)
	}
}

// names lists the entries of dir.
func names(t *testing.T, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range entries {
		s = append(s, e.Name())
	}
	return strings.Join(s, " ")
}

// TestBuildErrors: each mistake is named, before anything is compiled.
func TestBuildErrors(t *testing.T) {
	outside := t.TempDir() // in no Go module
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"build", "./testdata/pkgs/plain"}, 2, "-o LIB.so is required"},
		{[]string{"build", "-o", "x.so"}, 2, "name at least one package"},
		{[]string{"build", "-o", "x.so", "./testdata/pkgs/nosuch"}, 1, "package ./testdata/pkgs/nosuch: no such folder"},
		{[]string{"build", "-o", "x.so", "./testdata/pkgs/plain/plain.go"}, 1, "is not a folder"},
		{[]string{"build", "-o", "x.so", "./testdata/pkgs/nogo"}, 1, "package ./testdata/pkgs/nogo: not a Go package: no Go files"},
		{[]string{"build", "-o", "x.so", "./testdata/pkgs/mainpkg"}, 1, "is a main package, which cannot be imported"},
		{[]string{"build", "-o", "x.so", outside}, 1, "is in no Go module"},
		{[]string{"build", "-go", "no-such-go-command", "-o", "x.so", "./testdata/pkgs/plain"}, 1, `the go command "no-such-go-command" was not found`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: status %d, stderr %q; want status %d and %q", c.args[1:], code, stderr.String(), c.code, c.want)
		}
	}
	if _, err := os.Stat("x.so"); err == nil {
		os.Remove("x.so")
		t.Error("a failed build wrote x.so")
	}
}

// docEntry reports whether the generated main.go src records doc for the
// Go function key.
func docEntry(src, key, doc string) bool {
	return regexp.MustCompile(regexp.QuoteMeta(strconv.Quote(key)+":") + `\s+` + regexp.QuoteMeta(strconv.Quote(doc)+",")).MatchString(src)
}

// prepared runs dlbridge build's steps up to go build, and returns the
// temporary main module's folder and GOWORK.
func prepared(t *testing.T, pkgs ...string) (*builder, string) {
	t.Helper()
	var stderr bytes.Buffer
	b, err := newBuilder(&buildOpts{pkgs: pkgs}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(b.dir) })
	if _, err := b.prepare(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	return b, stderr.String()
}

// TestBuildWarnsPlainPackage: a package that does not import pyfunc is
// linked, with a warning.
func TestBuildWarnsPlainPackage(t *testing.T) {
	b, warn := prepared(t, "./testdata/pkgs/plain")
	if !strings.Contains(warn, "warning: package github.com/dlbridge/dlbridge/cmd/dlbridge/testdata/pkgs/plain does not import github.com/dlbridge/dlbridge/pybridge/pyfunc") {
		t.Errorf("no warning: %q", warn)
	}
	src, err := os.ReadFile(filepath.Join(b.dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`_ "github.com/dlbridge/dlbridge/cmd/dlbridge/testdata/pkgs/plain"`,
		`_ "github.com/dlbridge/dlbridge/pybridge/capi"`,
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("main.go lacks %s:\n%s", want, src)
		}
	}
	if !docEntry(string(src), "github.com/dlbridge/dlbridge/cmd/dlbridge/testdata/pkgs/plain.Twice", "Twice returns 2*x.") {
		t.Errorf("main.go lacks the doc of Twice:\n%s", src)
	}
}

// TestBuildAuthorModule: a package in a module of its own, outside this
// repository, that requires dlbridge (a replace directive points at this
// checkout): the generated workspace resolves dlbridge from the author's
// requirements, offline.
func TestBuildAuthorModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := "module example.com/author\n\ngo 1.25.0\n\nrequire github.com/dlbridge/dlbridge v0.0.0\n\nreplace github.com/dlbridge/dlbridge => " + root + "\n"
	src := `// Package ops is a Go author's package.
package ops

import (
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func init() { pyfunc.Register("author.total(x: float64 [N], scale=1.0)", Total) }

// Total returns the sum of x, times scale.
func Total(x *zerocopy.View, scale float64) (float64, error) { return 0, nil }
`
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": mod, "go.sum": string(sum), "ops/ops.go": src} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = dir
	tidy.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	t.Setenv("GOPROXY", "off")
	b, warn := prepared(t, filepath.Join(dir, "ops"))
	if warn != "" {
		t.Errorf("stderr: %s", warn)
	}
	main, _ := os.ReadFile(filepath.Join(b.dir, "main.go"))
	if !docEntry(string(main), "example.com/author/ops.Total", "Total returns the sum of x, times scale.") {
		t.Errorf("main.go lacks the doc of Total:\n%s", main)
	}
	// Everything the library links resolves: capi from the checkout the
	// author's go.mod names.
	out, err := b.goCmd(b.dir, b.workFile, "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Dir}}{{end}}", ".")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "github.com/dlbridge/dlbridge/pybridge/capi "+root+"\n") ||
		!strings.Contains(string(out), "example.com/author/ops "+dir+"\n") {
		t.Errorf("go list -deps:\n%s", out)
	}
}

// TestBuildModulePath: a package named by module path and version is
// fetched as go get fetches it (here from a file proxy), beside a local
// folder.
func TestBuildModulePath(t *testing.T) {
	proxy := t.TempDir()
	const path, ver = "example.com/remoteplain", "v1.0.0"
	gomod := "module " + path + "\n\ngo 1.25.0\n"
	src := "// Package remoteplain is published.\npackage remoteplain\n\n// Half returns x/2.\nfunc Half(x float64) float64 { return x / 2 }\n"
	d := filepath.Join(proxy, path, "@v")
	os.MkdirAll(d, 0o755)
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for name, text := range map[string]string{"go.mod": gomod, "half.go": src} {
		w, _ := zw.Create(path + "@" + ver + "/" + name)
		w.Write([]byte(text))
	}
	zw.Close()
	for name, data := range map[string][]byte{
		"list": []byte(ver + "\n"), ver + ".info": []byte(`{"Version":"` + ver + `","Time":"2026-01-01T00:00:00Z"}`),
		ver + ".mod": []byte(gomod), ver + ".zip": zb.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The module cache of this build serves the checkout's requirements
	// (the workspace reads their go.mod files); a fresh one takes the rest.
	cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(strings.TrimSpace(string(cache)), "cache", "download")))
	t.Setenv("GOMODCACHE", t.TempDir())
	t.Setenv("GOFLAGS", "-modcacherw")
	t.Setenv("GOSUMDB", "off")
	b, warn := prepared(t, "./testdata/pkgs/plain", path+"@"+ver)
	if !strings.Contains(warn, "warning: package "+path+" does not import") {
		t.Errorf("no warning for %s: %q", path, warn)
	}
	main, _ := os.ReadFile(filepath.Join(b.dir, "main.go"))
	if !strings.Contains(string(main), `_ "`+path+`"`) || !docEntry(string(main), path+".Half", "Half returns x/2.") {
		t.Errorf("main.go:\n%s", main)
	}
	mod, _ := os.ReadFile(filepath.Join(b.dir, "go.mod"))
	if !strings.Contains(string(mod), "require "+path+" "+ver) {
		t.Errorf("go.mod:\n%s", mod)
	}
}

// TestInvokersForRegisteredSignatures: build writes a direct call for each
// signature the packages register that the generated main package can
// name (a named type exported from its package, a func literal, a method
// value), leaves the others to reflection, and the result compiles.
func TestInvokersForRegisteredSignatures(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks and links a c-shared library (-short)")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler for cgo")
	}
	lib := filepath.Join(t.TempDir(), "libsigs.so")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"build", "-work", "-o", lib, "./testdata/pkgs/sigs"}, &stdout, &stderr); code != 0 {
		t.Fatalf("status %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	m := regexp.MustCompile(`WORK=(\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no WORK= line: %s", stderr.String())
	}
	defer os.RemoveAll(m[1])
	src, err := os.ReadFile(filepath.Join(m[1], "invokers.go"))
	if err != nil {
		t.Fatal(err)
	}
	// Aliases are numbered in the order packages come: compare without them.
	text := regexp.MustCompile(`\bp[0-9]+\.`).ReplaceAllString(string(src), "P.")
	for _, want := range []string{
		"fn.(func(*P.View, P.Mode, bool) (int64, error))",
		"f(fr.V[0], P.Mode(fr.I[1]), bool(fr.B[2]))",
		"fn.(func(string, uint8) (bool, float64, error))",
		"r0, r1, err := f(string(fr.Str[0]), uint8(fr.U[1]))",
		"fn.(func(int) int)",
		"fn.(func(*P.Stream, *P.View) (*P.View, error))",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("invokers.go lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "level") {
		t.Errorf("invokers.go names the unexported type level:\n%s", text)
	}
	// The library is built with dlbridge's profile (go build's -pgo=auto
	// finds it beside the main package).
	want, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(pgoProfile)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(m[1], "default.pgo")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the main package's default.pgo (%d bytes, %v) is not dlbridge's %s (%d bytes)", len(got), err, pgoProfile, len(want))
	}
}

// TestBuildChecksSchemas: a schema that does not match its function fails
// the build before anything is linked, at the Register call's position,
// with the message Python would raise when it loads the library; one
// build reports every mistake.
func TestBuildChecksSchemas(t *testing.T) {
	var stderr bytes.Buffer
	b, err := newBuilder(&buildOpts{pkgs: []string{"./testdata/pkgs/badschema"}}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(b.dir)
	_, err = b.prepare()
	if err == nil {
		t.Fatalf("prepare accepted the package\n%s", stderr.String())
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"a schema does not match its function (Python would raise ImportError when it loads the library):",
		"testdata/pkgs/badschema/badschema.go:14:2: pyfunc.Register: mylib.add: the schema names 2 parameters, func(*zerocopy.View, *zerocopy.View, *zerocopy.View) error takes more",
		`testdata/pkgs/badschema/badschema.go:15:2: pyfunc.Register: mylib.scale: parameter "factor" is a float32 in Go, but the schema gives it tensor constraints`,
		`testdata/pkgs/badschema/badschema.go:16:2: pyfunc.Register: mylib.mode: parameter "m": default 300: 300 is out of range for badschema.Mode`,
		"testdata/pkgs/badschema/badschema.go:17:2: pyfunc.Register: mylib.sum: parameter 1 of func([]float32) float32 is a []float32: want *zerocopy.View, *cuda.Stream, bool, an int or uint type, float32, float64 or string",
		"testdata/pkgs/badschema/badschema.go:19:2: pyfunc.Register: mylib.ok is registered twice",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
	// The same mistake, as pyfunc reports it at init in the library.
	_, nerr := pyfunc.NewFunc("mylib.add(x: float32 [N], y: float32 [N])", func(out, x, y *zerocopy.View) error { return nil })
	if nerr == nil || !strings.HasSuffix(got[1], "pyfunc.Register: "+nerr.Error()) {
		t.Errorf("build says %q, pyfunc says %v", got[1], nerr)
	}
}

// TestBuildAcceptsMatchingSchemas: schemas that match their functions
// pass the check, named types, func literals, method values and a stream
// parameter included.
func TestBuildAcceptsMatchingSchemas(t *testing.T) {
	if _, warn := prepared(t, "./testdata/pkgs/sigs"); warn != "" {
		t.Errorf("stderr: %s", warn)
	}
}
