package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The paths bandwidth measures, in table order.
var allPaths = []string{"pinned", "pageable", "staged", "registered", "strided"}

var pathHelp = map[string]string{
	"pinned":     "from/to pinned memory (AllocPinned), one driver copy",
	"pageable":   "from/to Go memory, one driver copy (the driver stages it)",
	"staged":     "from/to Go memory through zerocopy's ring of pinned buffers",
	"registered": "from/to a Go buffer kept registered (cuMemHostRegister)",
	"strided":    "a column block (half the columns) of a row-major matrix, to/from pinned memory: 2D copies",
}

var allDirs = []string{"h2d", "d2h"}

// result is one measurement: size bytes along path in direction dir.
type result struct {
	size int64
	path string
	dir  string
	gbps float64
}

type key struct {
	size int64
	path string
	dir  string
}

// defaultSizes is 4 KiB .. 1 GiB in powers of 4, as bench/cuda/memcpy_bw.
func defaultSizes() []int64 {
	var s []int64
	for n := int64(4 << 10); n <= 1<<30; n *= 4 {
		s = append(s, n)
	}
	return s
}

// parseSize reads "4096", "4K", "4KiB", "16M", "1G" (binary units).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mul := int64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mul, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mul, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mul, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mul {
		return 0, fmt.Errorf("bad size %q (want e.g. 4096, 4K, 16MiB, 1G)", s)
	}
	return n * mul, nil
}

func parseList(s string, allowed []string, what string) ([]string, error) {
	if s == "" || s == "all" {
		return slices.Clone(allowed), nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allowed, f) {
			return nil, fmt.Errorf("unknown %s %q (want %s)", what, f, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func bandwidth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bandwidth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizesFlag := fs.String("sizes", "", "comma-separated sizes (default 4K,16K,...,1G)")
	pathsFlag := fs.String("paths", "all", "comma-separated paths: "+strings.Join(allPaths, ", "))
	dirsFlag := fs.String("dirs", "all", "directions: h2d, d2h")
	baselineFlag := fs.String("baseline", "", "file with the output of bench/cuda/memcpy_bw, shown beside")
	svgFlag := fs.String("svg", "", "write an SVG plot of GB/s against size to this file")
	tsvFlag := fs.String("tsv", "", "write the results as a table (size path dir gbps) to this file")
	devFlag := fs.Int("device", 0, "CUDA device ordinal")
	budgetFlag := fs.String("budget", "1G", "bytes to move per timing round (at least 3 copies a round)")
	roundsFlag := fs.Int("rounds", 3, "timing rounds per cell; the best counts")
	chunkFlag := fs.String("chunk", "", "staging chunk size of the staged path (default: zerocopy's)")
	workersFlag := fs.Int("workers", 0, "host copy goroutines of the staged path (default: zerocopy's)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: dlbridge bandwidth [flags]\n\npaths:\n")
		for _, p := range allPaths {
			fmt.Fprintf(stderr, "  %-11s %s\n", p, pathHelp[p])
		}
		fmt.Fprintf(stderr, "\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dlbridge bandwidth: "+format+"\n", a...)
		return 2
	}
	sizes := defaultSizes()
	if *sizesFlag != "" {
		sizes = nil
		for _, f := range strings.Split(*sizesFlag, ",") {
			n, err := parseSize(f)
			if err != nil {
				return fail("%v", err)
			}
			sizes = append(sizes, n)
		}
		slices.Sort(sizes)
		sizes = slices.Compact(sizes)
	}
	paths, err := parseList(*pathsFlag, allPaths, "path")
	if err != nil {
		return fail("%v", err)
	}
	dirs, err := parseList(*dirsFlag, allDirs, "direction")
	if err != nil {
		return fail("%v", err)
	}
	budget, err := parseSize(*budgetFlag)
	if err != nil {
		return fail("-budget: %v", err)
	}
	if *roundsFlag < 1 {
		return fail("-rounds %d: must be >= 1", *roundsFlag)
	}
	opts := zerocopy.CopierOptions{Workers: *workersFlag}
	if *chunkFlag != "" {
		if opts.ChunkBytes, err = parseSize(*chunkFlag); err != nil {
			return fail("-chunk: %v", err)
		}
	}
	var base *baseline
	if *baselineFlag != "" {
		if base, err = readBaseline(*baselineFlag); err != nil {
			return fail("%v", err)
		}
	}
	if err := cuda.Init(); err != nil {
		fmt.Fprintf(stderr, "dlbridge bandwidth: no CUDA driver present: %s\n", noDriverReason(err))
		return 1
	}

	b, err := newBench(*devFlag, sizes[len(sizes)-1], paths, opts)
	if err != nil {
		fmt.Fprintf(stderr, "dlbridge bandwidth: %v\n", err)
		return 1
	}
	defer b.close()
	b.budget, b.rounds = budget, *roundsFlag

	var results []result
	total := 0
	for range sizes {
		for _, p := range paths {
			total += len(dirs)
			_ = p
		}
	}
	done := 0
	prog := newProgress(stderr)
	for _, size := range sizes {
		for _, dir := range dirs {
			for _, path := range paths {
				done++
				prog.show("[%3d/%d] %s %-10s %8s ...", done, total, dir, path, sizeLabel(size))
				g, err := b.measure(size, path, dir)
				if err != nil {
					prog.done()
					fmt.Fprintf(stderr, "dlbridge bandwidth: %s %s %s: %v\n", dir, path, sizeLabel(size), err)
					return 1
				}
				prog.show("[%3d/%d] %s %-10s %8s %7.2f GB/s", done, total, dir, path, sizeLabel(size), g)
				results = append(results, result{size, path, dir, g})
			}
		}
	}
	prog.done()

	title := fmt.Sprintf("dlbridge bandwidth, %s (cuda:%d), CUDA driver %s", b.name, *devFlag, b.driver)
	printTable(stdout, title, b, sizes, paths, dirs, results, base)
	if *tsvFlag != "" {
		if err := writeTSV(*tsvFlag, title, results); err != nil {
			fmt.Fprintf(stderr, "dlbridge bandwidth: %v\n", err)
			return 1
		}
	}
	if *svgFlag != "" {
		f, err := os.Create(*svgFlag)
		if err == nil {
			err = writeSVG(f, title, paths, dirs, results, base)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "dlbridge bandwidth: writing %s: %v\n", *svgFlag, err)
			return 1
		}
		fmt.Fprintf(stdout, "plot written to %s\n", *svgFlag)
	}
	return 0
}

// bench holds the buffers of a bandwidth run, allocated once at the
// largest size; each measurement uses a prefix of them.
type bench struct {
	name, driver string
	dev          *zerocopy.View // device memory, 2x the largest size for strided
	pinned       *zerocopy.View
	pageable     *zerocopy.View // Go memory
	registered   *zerocopy.View // Go memory, registered
	regTime      time.Duration
	stream       *cuda.Stream
	ctx          *cuda.Context
	copier       *zerocopy.Copier
	budget       int64
	rounds       int
}

func newBench(ord int, max int64, paths []string, opts zerocopy.CopierOptions) (b *bench, err error) {
	b = &bench{budget: 1 << 30, rounds: 3}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	d, err := cuda.GetDevice(ord)
	if err != nil {
		return nil, err
	}
	if b.name, err = d.Name(); err != nil {
		return nil, err
	}
	if v, err := cuda.DriverVersion(); err == nil {
		b.driver = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	if b.ctx, err = d.PrimaryContext(); err != nil {
		return nil, err
	}
	if b.stream, err = b.ctx.NewStream(cuda.StreamNonBlocking, 0); err != nil {
		return nil, err
	}
	b.copier = zerocopy.NewCopier(opts)
	devBytes := max
	if slices.Contains(paths, "strided") {
		devBytes = 2 * max
	}
	if b.dev, err = zerocopy.AllocCUDA(ord, dlpack.Uint8Type, devBytes); err != nil {
		return nil, err
	}
	if b.pinned, err = zerocopy.AllocPinned(dlpack.Uint8Type, max); err != nil {
		return nil, err
	}
	if slices.Contains(paths, "pageable") || slices.Contains(paths, "staged") {
		if b.pageable, err = zerocopy.FromBytes(touched(max), dlpack.Uint8Type); err != nil {
			return nil, err
		}
	}
	if slices.Contains(paths, "registered") {
		if b.registered, err = zerocopy.FromBytes(touched(max), dlpack.Uint8Type); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := zerocopy.RegisterHost(b.registered); err != nil {
			return nil, err
		}
		b.regTime = time.Since(t0)
	}
	return b, nil
}

// touched returns n bytes of Go memory with every page written, so that
// no first-touch page fault lands inside a timing.
func touched(n int64) []byte {
	buf := make([]byte, n)
	for i := int64(0); i < n; i += 4096 {
		buf[i] = byte(i >> 12)
	}
	return buf
}

func (b *bench) close() {
	if b.copier != nil {
		b.copier.Close()
	}
	for _, v := range []*zerocopy.View{b.dev, b.pinned, b.pageable, b.registered} {
		if v != nil {
			v.Close()
		}
	}
	if b.stream != nil {
		b.stream.Synchronize()
		b.stream.Destroy()
	}
	if b.ctx != nil {
		b.ctx.Release()
	}
}

// stridedWidth is the row width in bytes of the column block the strided
// path copies (the matrix rows are twice as wide).
func stridedWidth(size int64) int64 { return min(size, 32<<10) }

// operands returns the views of one measurement: host and device sides.
func (b *bench) operands(size int64, path string) (host, dev *zerocopy.View, forced zerocopy.TransferPath, err error) {
	// The operands are views derived from b's buffers: they borrow the
	// buffers' references and need no Close.
	pre := func(v *zerocopy.View, n int64) (*zerocopy.View, error) { return v.Slice(0, 0, n, 1) }
	switch path {
	case "pinned":
		host, err = pre(b.pinned, size)
		forced = zerocopy.PathDirect
	case "pageable":
		host, err = pre(b.pageable, size)
		forced = zerocopy.PathDirect
	case "staged":
		host, err = pre(b.pageable, size)
		forced = zerocopy.PathStaged
	case "registered":
		host, err = pre(b.registered, size)
		forced = zerocopy.PathRegistered
	case "strided":
		w := stridedWidth(size)
		rows := size / w
		var m, hp *zerocopy.View
		if m, err = pre(b.dev, 2*w*rows); err != nil {
			return
		}
		if m, err = m.Reshape(rows, 2*w); err != nil {
			return
		}
		if dev, err = m.Slice(1, w/2, w/2+w, 1); err != nil {
			return
		}
		if hp, err = pre(b.pinned, rows*w); err != nil {
			return
		}
		host, err = hp.Reshape(rows, w)
		return host, dev, zerocopy.PathAuto, err
	default:
		return nil, nil, 0, fmt.Errorf("unknown path %q", path)
	}
	if err != nil {
		return
	}
	dev, err = pre(b.dev, size)
	return
}

// measure returns the best rate in GB/s (1e9 bytes/s) of copying size
// bytes along path in direction dir, each copy waited for.
func (b *bench) measure(size int64, path, dir string) (float64, error) {
	host, dev, forced, err := b.operands(size, path)
	if err != nil {
		return 0, err
	}
	dst, src := dev, host
	if dir == "d2h" {
		dst, src = host, dev
	}
	bytes := host.Len() * int64(host.DType().ItemSize())
	one := func() error {
		if _, err := b.copier.CopyVia(dst, src, b.stream, forced); err != nil {
			return err
		}
		return dst.Synchronize()
	}
	if err := one(); err != nil { // warm-up: staging buffers, first use
		return 0, err
	}
	reps := b.budget / bytes
	reps = max(3, min(reps, 2000))
	best := time.Duration(1<<63 - 1)
	for range b.rounds {
		t0 := time.Now()
		for range reps {
			if err := one(); err != nil {
				return 0, err
			}
		}
		if d := time.Since(t0) / time.Duration(reps); d < best {
			best = d
		}
	}
	return float64(bytes) / best.Seconds() / 1e9, nil
}

// sizeLabel writes sizes the way the table shows them: "4 KiB", "1 GiB".
func sizeLabel(n int64) string { return humanBytes(n) }

// progress is the line on stderr that says what runs.
type progress struct {
	w    io.Writer
	last int
}

func newProgress(w io.Writer) *progress { return &progress{w: w} }

func (p *progress) show(format string, a ...any) {
	s := "bandwidth " + fmt.Sprintf(format, a...)
	pad := ""
	if n := p.last - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", s, pad)
	p.last = len(s)
}

func (p *progress) done() {
	if p.last > 0 {
		fmt.Fprintln(p.w)
		p.last = 0
	}
}

// baseline is the output of bench/cuda/memcpy_bw: GB/s by size, path
// (pinned, pageable) and direction.
type baseline struct {
	device string
	gbps   map[key]float64
}

func readBaseline(name string) (*baseline, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	defer f.Close()
	return parseBaseline(f, name)
}

// parseBaseline reads "size path dir gbps" rows (tab or space separated;
// '#' lines are comments, one of which may say device="...").
func parseBaseline(r io.Reader, name string) (*baseline, error) {
	b := &baseline{gbps: map[key]float64{}}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, "#") {
			if i := strings.Index(t, `device="`); i >= 0 {
				rest := t[i+len(`device="`):]
				if j := strings.IndexByte(rest, '"'); j >= 0 {
					b.device = rest[:j]
				}
			}
			continue
		}
		f := strings.Fields(t)
		if len(f) == 4 && f[0] == "size" {
			continue // header
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("%s:%d: want 4 fields (size path dir gbps), have %d: %q", name, line, len(f), t)
		}
		size, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || size <= 0 {
			return nil, fmt.Errorf("%s:%d: bad size %q", name, line, f[0])
		}
		g, err := strconv.ParseFloat(f[3], 64)
		if err != nil || g < 0 {
			return nil, fmt.Errorf("%s:%d: bad GB/s %q", name, line, f[3])
		}
		if f[2] != "h2d" && f[2] != "d2h" {
			return nil, fmt.Errorf("%s:%d: bad direction %q (want h2d or d2h)", name, line, f[2])
		}
		b.gbps[key{size, f[1], f[2]}] = g
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b.gbps) == 0 {
		return nil, fmt.Errorf("%s: no measurements", name)
	}
	return b, nil
}

func (b *baseline) get(size int64, path, dir string) (float64, bool) {
	if b == nil {
		return 0, false
	}
	g, ok := b.gbps[key{size, path, dir}]
	return g, ok
}

func printTable(w io.Writer, title string, b *bench, sizes []int64, paths, dirs []string, rs []result, base *baseline) {
	got := map[key]float64{}
	for _, r := range rs {
		got[key{r.size, r.path, r.dir}] = r.gbps
	}
	fmt.Fprintf(w, "%s\nGB/s (1e9 bytes/s), best of %d rounds", title, b.rounds)
	if base != nil {
		fmt.Fprintf(w, "; cuda-* columns: cudaMemcpy baseline")
		if base.device != "" {
			fmt.Fprintf(w, " on %s", base.device)
		}
	}
	fmt.Fprintln(w)
	cols := slices.Clone(paths)
	if base != nil {
		cols = append(cols, "cuda-pinned", "cuda-pageable")
	}
	fmt.Fprintf(w, "%-9s %-4s", "size", "dir")
	for _, c := range cols {
		fmt.Fprintf(w, " %13s", c)
	}
	fmt.Fprintln(w)
	for _, s := range sizes {
		for _, d := range dirs {
			fmt.Fprintf(w, "%-9s %-4s", sizeLabel(s), d)
			for _, c := range cols {
				g, ok := got[key{s, c, d}]
				if bp, found := strings.CutPrefix(c, "cuda-"); found {
					g, ok = base.get(s, bp, d)
				}
				if ok {
					fmt.Fprintf(w, " %13.2f", g)
				} else {
					fmt.Fprintf(w, " %13s", "-")
				}
			}
			fmt.Fprintln(w)
		}
	}
	if b.regTime > 0 {
		fmt.Fprintf(w, "registering the %s Go buffer of the registered path took %v (once)\n", sizeLabel(b.registered.Len()), b.regTime.Round(time.Microsecond))
	}

	// The project's targets, at the largest size measured.
	top := sizes[len(sizes)-1]
	type target struct {
		what      string
		num, den  string // paths; den "cuda-pinned" is the baseline
		dir, need string
		frac      float64
	}
	targets := []target{
		{"pinned vs cudaMemcpy pinned", "pinned", "cuda-pinned", "", "95%", 0.95},
		{"staged (one-shot Go memory) vs pinned", "staged", "pinned", "", "60%", 0.60},
		{"registered (repeated Go buffer) vs pinned", "registered", "pinned", "", "90%", 0.90},
		{"strided d2h vs contiguous pinned d2h", "strided", "pinned", "d2h", "80%", 0.80},
	}
	fmt.Fprintf(w, "targets at %s:\n", sizeLabel(top))
	for _, t := range targets {
		for _, d := range dirs {
			if t.dir != "" && d != t.dir {
				continue
			}
			num, ok1 := got[key{top, t.num, d}]
			var den float64
			var ok2 bool
			if bp, found := strings.CutPrefix(t.den, "cuda-"); found {
				den, ok2 = base.get(top, bp, d)
			} else {
				den, ok2 = got[key{top, t.den, d}]
			}
			if !ok1 || !ok2 || den == 0 {
				continue
			}
			verdict := "ok"
			if num/den < t.frac {
				verdict = "BELOW TARGET"
			}
			fmt.Fprintf(w, "  %-44s %s %5.1f%%  (target >= %s) %s\n", t.what, d, 100*num/den, t.need, verdict)
		}
	}
}

func writeTSV(name, title string, rs []result) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	fmt.Fprintf(bw, "# %s\nsize\tpath\tdir\tgbps\n", title)
	for _, r := range rs {
		fmt.Fprintf(bw, "%d\t%s\t%s\t%.3f\n", r.size, r.path, r.dir, r.gbps)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
