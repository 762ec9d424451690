package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/internal/fakecuda"
	"github.com/google/go-cmp/cmp"
)

// The command is tested in subprocesses (this test binary re-executed with
// DLBRIDGE_CMD_MAIN=1), because the CUDA driver is loaded once per process:
// one run sees no driver, another the fake driver of testdata/fakecuda.
func TestMain(m *testing.M) {
	if os.Getenv("DLBRIDGE_CMD_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// dlbridge runs the command with args and the driver library lib ("" for
// none), and returns its exit status, stdout and stderr.
func dlbridge(t *testing.T, lib string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	if lib == "" {
		lib = filepath.Join(t.TempDir(), "no-such-libcuda.so.1")
	}
	cmd.Env = append(os.Environ(), "DLBRIDGE_CMD_MAIN=1", "DLBRIDGE_LIBCUDA="+lib)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

var fake struct {
	lib string
	err error
}

// fakeDriver builds testdata/fakecuda/fakecuda.c once (internal/fakecuda
// caches it in the temp directory by content hash) or skips the test.
func fakeDriver(t *testing.T) string {
	t.Helper()
	if fake.lib == "" && fake.err == nil {
		fake.lib, fake.err = fakecuda.Build()
	}
	if fake.err != nil {
		t.Skipf("fake CUDA driver unavailable: %v", fake.err)
	}
	return fake.lib
}

func TestNoDriver(t *testing.T) {
	code, out, errs := dlbridge(t, "", "devices")
	if code != 0 || !regexp.MustCompile(`^no CUDA driver present: cannot load .*no-such-libcuda.so.1`).MatchString(out) || strings.Count(out, "\n") != 1 {
		t.Errorf("devices: status %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = dlbridge(t, "", "bandwidth", "-sizes", "4K")
	if code != 1 || !strings.Contains(errs, "no CUDA driver present") {
		t.Errorf("bandwidth: status %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = dlbridge(t, "", "selftest")
	if code != 0 || !strings.Contains(out, "running on fake device memory") || !strings.HasSuffix(out, "\nPASS\n") || strings.Contains(out, "FAIL") {
		t.Errorf("selftest: status %d, stderr %q, stdout:\n%s", code, errs, out)
	}
}

func TestFakeDriverDevices(t *testing.T) {
	lib := fakeDriver(t)
	code, out, errs := dlbridge(t, lib, "devices")
	for _, want := range []string{`driver: CUDA 13.0 \(.*libcuda.so.1\), 1 device\(s\)`, `cuda:0  Fake CUDA Device 0  sm_80  1 GiB`, `pci 0000:`, `GPU-[0-9a-f]{8}-`, `SMs=\d+`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("devices output lacks %s:\n%s", want, out)
		}
	}
	if code != 0 || errs != "" {
		t.Errorf("status %d, stderr %q", code, errs)
	}
}

func TestFakeDriverSelftest(t *testing.T) {
	lib := fakeDriver(t)
	code, out, errs := dlbridge(t, lib, "selftest")
	if code != 0 || !strings.HasSuffix(out, "\nPASS\n") || strings.Count(out, " ok (") != 10 {
		t.Fatalf("status %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if !strings.Contains(out, "launch scale_f32") || !strings.Contains(out, "DLPack") || !strings.Contains(out, "CAI") {
		t.Errorf("steps missing:\n%s", out)
	}
	// -fake runs the fake-memory steps even with a driver.
	code, out, _ = dlbridge(t, lib, "selftest", "-fake")
	if code != 0 || !strings.Contains(out, "fake device memory") || !strings.HasSuffix(out, "PASS\n") {
		t.Fatalf("-fake: status %d:\n%s", code, out)
	}
}

// TestSelftestFailure: an injected driver failure makes a step FAIL, the
// rest skipped, and the status 1.
func TestSelftestFailure(t *testing.T) {
	lib := fakeDriver(t)
	cmd := exec.Command(os.Args[0], "selftest")
	cmd.Env = append(os.Environ(), "DLBRIDGE_CMD_MAIN=1", "DLBRIDGE_LIBCUDA="+lib, "FAKECUDA_INJECT=cuLaunchKernel:719:0")
	out, _ := cmd.Output()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "FAIL\n          cuda: cuLaunchKernel") ||
		!strings.Contains(string(out), "skipped") || !strings.HasSuffix(string(out), "\nFAIL\n") {
		t.Fatalf("status %d:\n%s", cmd.ProcessState.ExitCode(), out)
	}
}

func TestFakeDriverBandwidth(t *testing.T) {
	lib := fakeDriver(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "baseline.tsv")
	os.WriteFile(base, []byte("# memcpy_bw v1 device=\"Fake GPU\" driver=13000 runtime=13000\nsize\tpath\tdir\tgbps\n"+
		"4096\tpinned\th2d\t2.5\n4096\tpinned\td2h\t2.6\n65536\tpinned\th2d\t20\n65536\tpinned\td2h\t21\n65536\tpageable\th2d\t9\n"), 0o644)
	svg, tsv := filepath.Join(dir, "bw.svg"), filepath.Join(dir, "bw.tsv")
	code, out, errs := dlbridge(t, lib, "bandwidth", "-sizes", "4K,64K", "-budget", "256K", "-rounds", "1",
		"-baseline", base, "-svg", svg, "-tsv", tsv)
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, errs)
	}
	// The table: a header and one row per size and direction.
	header := regexp.MustCompile(`(?m)^size\s+dir\s+pinned\s+pageable\s+staged\s+registered\s+strided\s+cuda-pinned\s+cuda-pageable$`)
	if !header.MatchString(out) {
		t.Errorf("no table header:\n%s", out)
	}
	for _, row := range []string{`4 KiB\s+h2d(\s+\d+\.\d\d){5}\s+2\.50\s+-`, `64 KiB\s+d2h(\s+\d+\.\d\d){5}\s+21\.00\s+-`, `64 KiB\s+h2d(\s+\d+\.\d\d){5}\s+20\.00\s+9\.00`} {
		if !regexp.MustCompile(`(?m)^` + row + `$`).MatchString(out) {
			t.Errorf("no row %s:\n%s", row, out)
		}
	}
	if !strings.Contains(out, "targets at 64 KiB:") || !strings.Contains(out, "pinned vs cudaMemcpy pinned") || !strings.Contains(out, "baseline on Fake GPU") {
		t.Errorf("no targets summary:\n%s", out)
	}
	// The progress line on stderr.
	if !strings.Contains(errs, "\rbandwidth [ 20/20] d2h strided") {
		t.Errorf("progress line missing: %q", errs)
	}
	// The TSV reads back as a baseline would.
	f, err := os.Open(tsv)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := parseBaseline(f, tsv)
	if err != nil || len(b.gbps) != 20 {
		t.Fatalf("tsv: %v, %d rows", err, len(b.gbps))
	}
	// The SVG is well-formed XML with a curve per path and direction plus
	// the baseline's.
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if n := checkSVG(t, data); n != 10+3 {
		t.Errorf("%d curves, want 13", n)
	}
}

// checkSVG parses an SVG and returns the number of polylines.
func checkSVG(t *testing.T, data []byte) int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			n++
		}
	}
	return n
}

func TestBadArguments(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: dlbridge"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"bandwidth", "-paths", "warp"}, 2, `unknown path "warp"`},
		{[]string{"bandwidth", "-dirs", "up"}, 2, `unknown direction "up"`},
		{[]string{"bandwidth", "-sizes", "4X"}, 2, `bad size "4X"`},
		{[]string{"bandwidth", "-baseline", "/no/such/file"}, 2, "baseline: open /no/such/file"},
		{[]string{"bandwidth", "-rounds", "0"}, 2, "-rounds 0"},
		{[]string{"devices", "-x"}, 2, "flag provided but not defined"},
	}
	for _, c := range cases {
		var out, errs bytes.Buffer
		code := run(c.args, &out, &errs)
		if code != c.code || !strings.Contains(errs.String(), c.want) {
			t.Errorf("%v: status %d, stderr %q; want %d and %q", c.args, code, errs.String(), c.code, c.want)
		}
	}
	var out bytes.Buffer
	if code := run([]string{"help"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "bandwidth") {
		t.Errorf("help: %d %q", code, out.String())
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{"4096": 4096, "4K": 4096, "4k": 4096, "4KiB": 4096, "16M": 16 << 20, "16MiB": 16 << 20, "1G": 1 << 30, "2GB": 2 << 30, " 64K ": 64 << 10}
	got := map[string]int64{}
	for s := range good {
		n, err := parseSize(s)
		if err != nil {
			t.Errorf("%q: %v", s, err)
		}
		got[s] = n
	}
	if d := cmp.Diff(good, got); d != "" {
		t.Errorf("sizes (-want +got):\n%s", d)
	}
	for _, s := range []string{"", "0", "-4K", "4X", "K", "99999999T", "1.5M"} {
		if n, err := parseSize(s); err == nil {
			t.Errorf("%q: got %d, want an error", s, n)
		}
	}
	if d := cmp.Diff([]int64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}, defaultSizes()); d != "" {
		t.Errorf("default sizes: %s", d)
	}
}

func TestParseBaseline(t *testing.T) {
	good := "# memcpy_bw v1 device=\"NVIDIA H100 80GB HBM3\" driver=13000 runtime=13000\nsize\tpath\tdir\tgbps\n4096\tpinned\th2d\t1.250\n\n1073741824 pageable d2h 13.5\n"
	b, err := parseBaseline(strings.NewReader(good), "b.tsv")
	if err != nil {
		t.Fatal(err)
	}
	want := map[key]float64{{4096, "pinned", "h2d"}: 1.25, {1 << 30, "pageable", "d2h"}: 13.5}
	if d := cmp.Diff(want, b.gbps, cmp.AllowUnexported(key{})); d != "" || b.device != "NVIDIA H100 80GB HBM3" {
		t.Errorf("device %q, diff %s", b.device, d)
	}
	bad := []struct{ in, want string }{
		{"4096 pinned h2d\n", "b.tsv:1: want 4 fields"},
		{"x pinned h2d 1\n", "b.tsv:1: bad size"},
		{"4096 pinned h2d fast\n", "bad GB/s"},
		{"4096 pinned sideways 1\n", "bad direction"},
		{"# nothing\n", "no measurements"},
	}
	for _, c := range bad {
		if _, err := parseBaseline(strings.NewReader(c.in), "b.tsv"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.in, err, c.want)
		}
	}
}

func TestPlotHelpers(t *testing.T) {
	steps := map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.1: 2, 3: 5, 7: 10, 42: 50}
	for in, want := range steps {
		if got := niceStep(in); got != want {
			t.Errorf("niceStep(%g) = %g, want %g", in, got, want)
		}
	}
	labels := map[int64]string{4096: "4K", 1 << 20: "1M", 1 << 30: "1G", 100: "100", 3 << 30: "3G"}
	for in, want := range labels {
		if got := shortSize(in); got != want {
			t.Errorf("shortSize(%d) = %q, want %q", in, got, want)
		}
	}
	if got := humanBytes(80 << 30); got != "80 GiB" {
		t.Errorf("humanBytes: %q", got)
	}
	if got := humanBytes(1536); got != "1.5 KiB" {
		t.Errorf("humanBytes: %q", got)
	}
	var buf bytes.Buffer
	rs := []result{{4096, "pinned", "h2d", 1}, {1 << 20, "pinned", "h2d", 20}, {4096, "staged", "d2h", 0.5}}
	if err := writeSVG(&buf, `a <title> & "quotes"`, []string{"pinned", "staged"}, []string{"h2d", "d2h"}, rs, nil); err != nil {
		t.Fatal(err)
	}
	if n := checkSVG(t, buf.Bytes()); n != 2 {
		t.Errorf("%d curves, want 2", n)
	}
}
