package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/format"
	"go/parser"
	"go/token"
	"go/version"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
)

// The packages every library dlbridge build makes links: dlbridge's whole
// C ABI, and the registry whose docs the generated main fills in.
const (
	dlbridgeModule = "github.com/dlbridge/dlbridge"
	capiPkg        = dlbridgeModule + "/pybridge/capi"
	pyfuncPkg      = dlbridgeModule + "/pybridge/pyfunc"
)

const buildUsage = `usage: dlbridge build -o LIB.so [-tags T] [-ldflags F] [-go GO] [-v] [-work] PKG...

build links one c-shared library with dlbridge's C ABI and the Go packages
named, as xcaddy builds Caddy with plugins: the functions those packages
register with pyfunc.Register appear in Python as dlbridge.ops.<ns>.<name>
once the library is loaded (dlbridge.load_library or DLBRIDGE_LIB). One Go
runtime per process: link every Go package a program needs into one library.

A PKG is a local folder (./mylib, ../x/ops, /abs/path), built against the
module it belongs to (its go.mod's requirements choose the dlbridge
version), or a package path with an optional version
(example.com/mylib/ops@v1.2.0), fetched as go get fetches it. The
generated main package (in a temporary directory, never in your tree)
imports them all and records their exported functions' doc comments, which
Python's help() shows.

flags:
`

// buildOpts are dlbridge build's flags.
type buildOpts struct {
	out     string
	tags    string
	ldflags string
	goBin   string
	verbose bool
	work    bool
	pkgs    []string
}

func build(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o buildOpts
	fs.StringVar(&o.out, "o", "", "the library to write (required), e.g. build/libmylib.so")
	fs.StringVar(&o.tags, "tags", "", "build tags, as go build -tags takes them")
	fs.StringVar(&o.ldflags, "ldflags", "", "linker flags, as go build -ldflags takes them (\"-s -w\" for a smaller library)")
	fs.StringVar(&o.goBin, "go", "", "the go command (default $GO, else go on PATH)")
	fs.BoolVar(&o.verbose, "v", false, "print the generated files and the go commands run")
	fs.BoolVar(&o.work, "work", false, "keep the temporary directory and print its name")
	fs.Usage = func() {
		fmt.Fprint(stderr, buildUsage)
		fs.PrintDefaults()
	}
	// Flags may come before or after the packages.
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		o.pkgs = append(o.pkgs, rest[0])
		rest = rest[1:]
	}
	if o.out == "" || len(o.pkgs) == 0 {
		if o.out == "" {
			fmt.Fprintln(stderr, "dlbridge build: -o LIB.so is required")
		} else {
			fmt.Fprintln(stderr, "dlbridge build: name at least one package (a folder such as ./mylib, or a package path)")
		}
		fs.Usage()
		return 2
	}
	if err := runBuild(&o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "dlbridge build: %v\n", err)
		return 1
	}
	return 0
}

// goPackage is what go list says of a package (the fields build reads).
type goPackage struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Deps       []string
	Module     *struct {
		Path      string
		Dir       string
		GoMod     string
		GoVersion string
	}
	Error *struct{ Err string }
}

// builder is one dlbridge build: the go command, the temporary module and
// the packages.
type builder struct {
	o     *buildOpts
	goBin string
	dir   string // the temporary main module
	// workFile is the GOWORK of go build: the generated go.work, or "off"
	// where no package is a local folder.
	workFile string
	stderr   io.Writer
	env      []string
}

// The module path of the generated main package.
const mainModule = "dlbridge.build/lib"

// runBuild does the work of dlbridge build.
func runBuild(o *buildOpts, stdout, stderr io.Writer) error {
	b, err := newBuilder(o, stderr)
	if err != nil {
		return err
	}
	if o.work {
		fmt.Fprintf(stderr, "WORK=%s\n", b.dir)
	} else {
		defer os.RemoveAll(b.dir)
	}
	pkgs, err := b.prepare()
	if err != nil {
		return err
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := b.compile(out); err != nil {
		return err
	}
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i] = p.ImportPath
	}
	fmt.Fprintf(stdout, "dlbridge build: wrote %s (dlbridge's C ABI + %s)\n", o.out, strings.Join(names, ", "))
	return nil
}

func newBuilder(o *buildOpts, stderr io.Writer) (*builder, error) {
	goBin := o.goBin
	if goBin == "" {
		goBin = os.Getenv("GO")
	}
	if goBin == "" {
		goBin = "go"
	}
	path, err := exec.LookPath(goBin)
	if err != nil {
		return nil, fmt.Errorf("the go command %q was not found: install Go 1.25 or later, or name it with -go", goBin)
	}
	dir, err := os.MkdirTemp("", "dlbridge-build-")
	if err != nil {
		return nil, err
	}
	return &builder{o: o, goBin: path, dir: dir, stderr: stderr, env: goEnv()}, nil
}

// goEnv is the environment of the go commands: the caller's, with cgo on,
// no -mod flag (the workspace decides) and no workspace of the caller's
// (each command names its own GOWORK).
func goEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "CGO_ENABLED="), strings.HasPrefix(kv, "GOWORK="):
			continue
		case strings.HasPrefix(kv, "GOFLAGS="):
			var keep []string
			for _, f := range strings.Fields(strings.TrimPrefix(kv, "GOFLAGS=")) {
				if !strings.HasPrefix(f, "-mod=") {
					keep = append(keep, f)
				}
			}
			kv = "GOFLAGS=" + strings.Join(keep, " ")
		}
		env = append(env, kv)
	}
	return append(env, "CGO_ENABLED=1")
}

// goCmd runs the go command with args in dir (GOWORK=work, "" to leave it
// unset), and returns its stdout; stderr is in the error.
func (b *builder) goCmd(dir, work string, args ...string) ([]byte, error) {
	cmd := exec.Command(b.goBin, args...)
	cmd.Dir = dir
	cmd.Env = b.env
	if work != "" {
		cmd.Env = append(append([]string(nil), b.env...), "GOWORK="+work)
	}
	if b.o.verbose {
		fmt.Fprintf(b.stderr, "cd %s && %sgo %s\n", dir, envPrefix(work), strings.Join(quoteArgs(args), " "))
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.Bytes(), fmt.Errorf("go %s (in %s) failed:\n%s", args[0], dir, msg)
	}
	if b.o.verbose && errb.Len() > 0 {
		b.stderr.Write(errb.Bytes())
	}
	return out.Bytes(), nil
}

func envPrefix(work string) string {
	if work == "" {
		return ""
	}
	return "GOWORK=" + work + " "
}

func quoteArgs(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return q
}

// isLocal reports whether a PKG argument names a folder (as the go command
// tells them: ., .., and paths starting with ./, ../ or /).
func isLocal(arg string) bool {
	return arg == "." || arg == ".." || filepath.IsAbs(arg) ||
		strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../")
}

func (b *builder) listFlags() []string {
	args := []string{"list", "-e", "-json=ImportPath,Name,Dir,GoFiles,CgoFiles,Deps,Module,Error"}
	if b.o.tags != "" {
		args = append(args, "-tags", b.o.tags)
	}
	return args
}

// local describes the package in folder arg, and the workspace folders it
// needs: its module's root (and those of the caller's go.work, where the
// folder is in one).
func (b *builder) local(arg string) (*goPackage, []string, error) {
	dir, err := filepath.Abs(arg)
	if err != nil {
		return nil, nil, err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("package %s: no such folder", arg)
	}
	if !st.IsDir() {
		return nil, nil, fmt.Errorf("package %s: %s is not a folder (name the folder of a Go package)", arg, dir)
	}
	cmd := exec.Command(b.goBin, "env", "GOMOD", "GOWORK")
	cmd.Dir, cmd.Env = dir, b.env
	env, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("package %s: go env in %s failed: %v", arg, dir, err)
	}
	lines := strings.Split(string(env), "\n")
	gomod := strings.TrimSpace(lines[0])
	if gomod == "" || gomod == os.DevNull {
		return nil, nil, fmt.Errorf("package %s: %s is in no Go module (no go.mod in it or above it): run `go mod init` in your module's root", arg, dir)
	}
	var uses []string
	if len(lines) > 1 {
		if work := strings.TrimSpace(lines[1]); work != "" && work != "off" {
			// The caller's workspace: its other modules may stand in for
			// requirements, as they do when the caller builds.
			out, err := b.goCmd(dir, work, "work", "edit", "-json", work)
			if err == nil {
				var w struct{ Use []struct{ DiskPath string } }
				if json.Unmarshal(out, &w) == nil {
					for _, u := range w.Use {
						p := u.DiskPath
						if !filepath.IsAbs(p) {
							p = filepath.Join(filepath.Dir(work), p)
						}
						uses = append(uses, filepath.Clean(p))
					}
				}
			}
		}
	}
	out, err := b.goCmd(dir, "", append(b.listFlags(), ".")...)
	if err != nil {
		return nil, nil, fmt.Errorf("package %s: %v", arg, err)
	}
	var p goPackage
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, nil, fmt.Errorf("package %s: go list: %v", arg, err)
	}
	if err := checkPackage(arg, &p); err != nil {
		return nil, nil, err
	}
	if p.Module == nil || p.Module.Dir == "" {
		return nil, nil, fmt.Errorf("package %s: go list names no module for %s", arg, dir)
	}
	return &p, append([]string{p.Module.Dir}, uses...), nil
}

// checkPackage refuses what cannot be linked, and warns of a package that
// registers nothing.
func checkPackage(arg string, p *goPackage) error {
	if p.Error != nil {
		msg := strings.TrimSpace(p.Error.Err)
		if strings.Contains(msg, "no Go files") || strings.Contains(msg, "build constraints exclude all Go files") {
			return fmt.Errorf("package %s: not a Go package: %s", arg, msg)
		}
		return fmt.Errorf("package %s: %s", arg, msg)
	}
	if p.Name == "main" {
		return fmt.Errorf("package %s (%s) is a main package, which cannot be imported: name a library package (package %s registers with pyfunc.Register in an init function)", arg, p.ImportPath, filepath.Base(p.ImportPath))
	}
	return nil
}

// registers reports whether p imports pyfunc (a package that does not can
// register no function).
func registers(p *goPackage) bool {
	if p.ImportPath == pyfuncPkg {
		return true
	}
	for _, d := range p.Deps {
		if d == pyfuncPkg {
			return true
		}
	}
	return false
}

// prepare writes the temporary main module (go.mod, go.work, main.go) and
// returns the packages it links.
func (b *builder) prepare() ([]*goPackage, error) {
	var (
		pkgs   []*goPackage
		uses   []string
		remote []string
		goVer  string
	)
	seenUse := map[string]bool{}
	for _, arg := range b.o.pkgs {
		if !isLocal(arg) {
			if st, err := os.Stat(arg); err == nil && st.IsDir() && !strings.Contains(strings.SplitN(arg, "/", 2)[0], ".") {
				fmt.Fprintf(b.stderr, "dlbridge build: note: %s is taken as a package path; for the folder, write ./%s\n", arg, arg)
			}
			remote = append(remote, arg)
			continue
		}
		p, dirs, err := b.local(arg)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
		if v := p.Module.GoVersion; v != "" && (goVer == "" || version.Compare("go"+v, "go"+goVer) > 0) {
			goVer = v
		}
		for _, d := range dirs {
			if !seenUse[d] {
				seenUse[d] = true
				uses = append(uses, d)
			}
		}
	}
	if goVer == "" {
		out, err := b.goCmd(b.dir, "off", "env", "GOVERSION")
		if err != nil {
			return nil, err
		}
		goVer = strings.TrimPrefix(version.Lang(strings.TrimSpace(string(out))), "go")
		if goVer == "" {
			goVer = "1.25"
		}
	}
	gomod := fmt.Sprintf("// Generated by dlbridge build.\nmodule %s\n\ngo %s\n", mainModule, goVer)
	if err := b.write("go.mod", gomod); err != nil {
		return nil, err
	}
	if len(remote) > 0 {
		// Outside the workspace, as go get would in a module of its own; the
		// module path of each package comes with it.
		if _, err := b.goCmd(b.dir, "off", append([]string{"get"}, remote...)...); err != nil {
			return nil, err
		}
		// dlbridge at the version the packages require (or, when no local
		// package brings it and none of them does, this command's own).
		ver := ""
		if out, err := b.goCmd(b.dir, "off", "list", "-m", "-f", "{{.Version}}", dlbridgeModule); err == nil {
			ver = strings.TrimSpace(string(out))
		}
		if ver == "" && len(uses) == 0 {
			ver = "latest"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path == dlbridgeModule && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				ver = bi.Main.Version
			}
		}
		if ver != "" {
			if _, err := b.goCmd(b.dir, "off", "get", capiPkg+"@"+ver); err != nil {
				return nil, err
			}
		}
	}
	work := "off"
	if len(uses) > 0 {
		// A workspace of the main module and the local packages' modules:
		// their requirements (and replacements) resolve every dependency,
		// dlbridge included, as they do when the author builds.
		var w strings.Builder
		fmt.Fprintf(&w, "// Generated by dlbridge build.\ngo %s\n\nuse (\n\t.\n", goVer)
		for _, u := range uses {
			fmt.Fprintf(&w, "\t%s\n", strconv.Quote(u))
		}
		w.WriteString(")\n")
		if err := b.write("go.work", w.String()); err != nil {
			return nil, err
		}
		work = filepath.Join(b.dir, "go.work")
	}
	for _, arg := range remote {
		path, _, _ := strings.Cut(arg, "@")
		out, err := b.goCmd(b.dir, work, append(b.listFlags(), path)...)
		if err != nil {
			return nil, fmt.Errorf("package %s: %v", arg, err)
		}
		var p goPackage
		if err := json.Unmarshal(out, &p); err != nil {
			return nil, fmt.Errorf("package %s: go list: %v", arg, err)
		}
		if err := checkPackage(arg, &p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, &p)
	}
	docs := map[string]string{}
	for _, p := range pkgs {
		if !registers(p) {
			fmt.Fprintf(b.stderr, "dlbridge build: warning: package %s does not import %s: it registers no function for Python\n", p.ImportPath, pyfuncPkg)
		}
		if err := goDocs(p, docs); err != nil {
			return nil, fmt.Errorf("package %s: reading its doc comments: %v", p.ImportPath, err)
		}
	}
	src, err := mainSource(pkgs, docs)
	if err != nil {
		return nil, err
	}
	if err := b.write("main.go", string(src)); err != nil {
		return nil, err
	}
	b.workFile = work
	if err := b.profile(); err != nil {
		return nil, err
	}
	inv, err := b.invokersSource(pkgs)
	if err != nil {
		return nil, err
	}
	if inv != nil {
		if err := b.write("invokers.go", string(inv)); err != nil {
			return nil, err
		}
	}
	return pkgs, nil
}

func (b *builder) write(name, text string) error {
	if b.o.verbose {
		fmt.Fprintf(b.stderr, "# %s\n%s\n", filepath.Join(b.dir, name), strings.TrimRight(text, "\n"))
	}
	return os.WriteFile(filepath.Join(b.dir, name), []byte(text), 0o644)
}

// pgoProfile is where the dlbridge module keeps the profile that guides
// the compiler in builds of the library (scripts/pgo-profile.sh).
const pgoProfile = "pybridge/cmd/libdlbridge/default.pgo"

// profile copies the profile of the dlbridge module the library is built
// with into the main package, where go build's -pgo=auto finds it: the
// bridge's call path, which every library shares, is built as in
// dlbridge's own library (GOFLAGS=-pgo=off builds without it). A module
// without one, an older dlbridge, builds without it too.
func (b *builder) profile() error {
	out, err := b.goCmd(b.dir, b.workFile, "list", "-m", "-f", "{{.Dir}}", dlbridgeModule)
	if err != nil {
		return nil // dlbridge's module is found by go build, or it says why
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(pgoProfile)))
	if err != nil {
		return nil
	}
	return os.WriteFile(filepath.Join(b.dir, "default.pgo"), data, 0o644)
}

// compileFlags are the go command's flags that decide how packages are
// compiled for the library: go list -export (the type check of the
// invokers and schemas) and go build use the same, so that go build's
// compiles are all in the cache.
func (b *builder) compileFlags() []string {
	args := []string{"-buildmode=c-shared", "-trimpath"}
	if b.o.tags != "" {
		args = append(args, "-tags", b.o.tags)
	}
	return args
}

// compile runs go build -buildmode=c-shared on the main module into out.
func (b *builder) compile(out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	header := strings.TrimSuffix(out, filepath.Ext(out)) + ".h"
	_, headerErr := os.Stat(header)
	args := append([]string{"build"}, b.compileFlags()...)
	if b.o.ldflags != "" {
		args = append(args, "-ldflags", b.o.ldflags)
	}
	args = append(args, "-o", out, ".")
	if _, err := b.goCmd(b.dir, b.workFile, args...); err != nil {
		return err
	}
	// go build writes the cgo header beside the library; dlbridge's C ABI
	// has its own (pybridge/capi/capi.h), so a header that was not there
	// before goes.
	if errors.Is(headerErr, os.ErrNotExist) {
		os.Remove(header)
	}
	return nil
}

// goDocs adds the doc comments of p's exported functions (and methods) to
// docs, keyed by the names runtime.FuncForPC gives them
// ("example.com/mylib.Scale", "example.com/mylib.(*T).M").
func goDocs(p *goPackage, docs map[string]string) error {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range append(append([]string(nil), p.GoFiles...), p.CgoFiles...) {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil
	}
	dp, err := doc.NewFromFiles(fset, files, p.ImportPath)
	if err != nil {
		return err
	}
	add := func(key, text string) {
		if text = strings.TrimSpace(text); text != "" {
			docs[key] = text
		}
	}
	funcs := dp.Funcs
	for _, t := range dp.Types {
		funcs = append(funcs, t.Funcs...)
		for _, m := range t.Methods {
			recv := t.Name
			if strings.HasPrefix(m.Recv, "*") {
				recv = "(*" + t.Name + ")"
			}
			add(p.ImportPath+"."+recv+"."+m.Name, m.Doc)
			add(p.ImportPath+"."+recv+"."+m.Name+"-fm", m.Doc) // a method value
		}
	}
	for _, f := range funcs {
		add(p.ImportPath+"."+f.Name, f.Doc)
	}
	return nil
}

// mainSource is the generated main package: dlbridge's C ABI, the
// packages, and their doc comments for help().
func mainSource(pkgs []*goPackage, docs map[string]string) ([]byte, error) {
	var w bytes.Buffer
	w.WriteString("// Code generated by dlbridge build. DO NOT EDIT.\n\n")
	w.WriteString("// Command lib is a c-shared library: dlbridge's C ABI and the Go packages\n// below, whose registered functions Python calls as dlbridge.ops.<ns>.<name>.\npackage main\n\nimport (\n")
	fmt.Fprintf(&w, "\t_ %q\n\t%q\n", capiPkg, pyfuncPkg)
	seen := map[string]bool{capiPkg: true, pyfuncPkg: true}
	for _, p := range pkgs {
		if !seen[p.ImportPath] {
			seen[p.ImportPath] = true
			fmt.Fprintf(&w, "\t_ %q\n", p.ImportPath)
		}
	}
	w.WriteString(")\n\nfunc init() {\n\tpyfunc.SetGoDocs(map[string]string{\n")
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&w, "\t\t%q: %q,\n", k, docs[k])
	}
	w.WriteString("\t})\n}\n\nfunc main() {}\n")
	return format.Source(w.Bytes())
}
