// Command bindcost measures what one CUDA driver call costs from Go through
// each way of making it, side by side on the same calls in one run:
//
//	C loop          the call in a C loop (the driver's own cost; cgo builds)
//	direct cgo      a cgo call to a C function that makes the call (cgo builds)
//	ours (cgo)      package cuda built with cgo: its C trampolines
//	SyscallN        purego.SyscallN on the dlsym'd pointer
//	ours (purego)   package cuda built with CGO_ENABLED=0
//	RegisterLibFunc purego.RegisterLibFunc (reflection per call)
//
// The ratios printed are the targets: ours (cgo) / direct cgo at most
// 1.5, ours (purego) / SyscallN about 1.
//
// Build both variants; the cgo one runs the other (a sibling named
// bindcost.nocgo or bindcost-purego, or -purego PATH) for its column:
//
//	go build -o bindcost ./bench/bindcost
//	CGO_ENABLED=0 go build -o bindcost.nocgo ./bench/bindcost
//	./bindcost
//
// Without a GPU, point DLBRIDGE_LIBCUDA at the fake driver:
//
//	gcc -shared -fPIC -O2 -o /tmp/fake/libcuda.so.1 testdata/fakecuda/fakecuda.c -lpthread
//	DLBRIDGE_LIBCUDA=/tmp/fake/libcuda.so.1 ./bindcost
//
// bench/results/bindcost-h100 holds its output on the H100.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/ebitengine/purego"
)

var (
	dur     = flag.Duration("dur", 200*time.Millisecond, "minimum time per measurement")
	reps    = flag.Int("reps", 5, "measurements per cell (the minimum is reported)")
	dev     = flag.Int("dev", 0, "device ordinal")
	asJSON  = flag.Bool("json", false, "print the measurements as JSON (used to merge the two builds)")
	puregoB = flag.String("purego", "", "path of the CGO_ENABLED=0 build to run for its column (default: a sibling bindcost.nocgo or bindcost-purego)")
)

// Column names.
const (
	colCLoop   = "C loop"
	colCgo     = "direct cgo"
	colOurs    = "ours"
	colSyscall = "SyscallN"
	colRegFunc = "RegisterLibFunc"
)

// row is one driver call measured through each binding: ns per call, NaN
// where a binding does not apply.
type row struct {
	Name  string
	Cells map[string]float64
}

// env is what every measurement needs: live driver objects made through
// package cuda, and the same entry points resolved for the raw bindings.
type env struct {
	ctx        *cuda.Context
	d          cuda.Device
	s1, s2     *cuda.Stream
	ev         *cuda.Event
	p          cuda.DevicePtr
	pinned     *cuda.HostMem
	lib        uintptr
	sym        map[string]uintptr
	attrs      [11]int32
	slots      [11]uint64
	slotPtrs   [11]uintptr
	devOut     int32
	base, size uint64
}

func main() {
	flag.Parse()
	runtime.LockOSThread() // raw calls rely on the context being current on this thread
	e, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bindcost:", err)
		os.Exit(1)
	}
	rows := measureAll(e)
	if *asJSON {
		// JSON has no NaN: cells that do not apply are left out.
		for _, r := range rows {
			for k, v := range r.Cells {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					delete(r.Cells, k)
				}
			}
		}
		if err := json.NewEncoder(os.Stdout).Encode(rows); err != nil {
			fmt.Fprintln(os.Stderr, "bindcost:", err)
			os.Exit(1)
		}
		return
	}
	var other []row
	if cgoBuild {
		other = runPurego()
	}
	printTable(e, rows, other)
}

func setup() (*env, error) {
	ctx, err := cuda.Retain(*dev)
	if err != nil {
		return nil, err
	}
	e := &env{ctx: ctx, d: ctx.Device(), sym: map[string]uintptr{}}
	if e.s1, err = ctx.NewStream(cuda.StreamNonBlocking, 0); err != nil {
		return nil, err
	}
	if e.s2, err = ctx.NewStream(cuda.StreamNonBlocking, 0); err != nil {
		return nil, err
	}
	if e.ev, err = ctx.NewEvent(0); err != nil {
		return nil, err
	}
	if e.p, err = ctx.MemAlloc(1 << 10); err != nil {
		return nil, err
	}
	if e.pinned, err = ctx.MemAllocHost(4, 0); err != nil {
		return nil, err
	}
	// The same library again: dlopen hands back the handle already loaded.
	if e.lib, err = purego.Dlopen(cuda.LibraryPath(), purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		return nil, err
	}
	for _, n := range []string{"cuCtxGetDevice", "cuDeviceGetAttribute", "cuPointerGetAttribute", "cuPointerGetAttributes",
		"cuMemGetAddressRange_v2", "cuEventRecord", "cuStreamWaitEvent", "cuMemcpyHtoDAsync_v2", "cuStreamSynchronize"} {
		if e.sym[n], err = purego.Dlsym(e.lib, n); err != nil {
			return nil, err
		}
	}
	// Raw calls need the context current on this (locked) thread.
	if _, err := ctx.SetCurrent(); err != nil {
		return nil, err
	}
	for i, a := range []cuda.PointerAttribute{
		cuda.PointerAttrContext, cuda.PointerAttrMemoryType, cuda.PointerAttrDevicePointer, cuda.PointerAttrHostPointer,
		cuda.PointerAttrSyncMemops, cuda.PointerAttrBufferID, cuda.PointerAttrIsManaged, cuda.PointerAttrDeviceOrdinal,
		cuda.PointerAttrRangeStart, cuda.PointerAttrRangeSize, cuda.PointerAttrMapped,
	} {
		e.attrs[i] = int32(a)
		e.slotPtrs[i] = uintptr(unsafe.Pointer(&e.slots[i]))
	}
	bindDirect(e)
	return e, nil
}

// measure returns the least ns per call of f over *reps runs of at least
// *dur each. every > 0 calls sync after that many calls (outside no timing:
// it is part of the cost for every binding alike, and keeps queues short).
func measure(f func(), sync func(), every int) float64 {
	n := 1000
	for {
		t := run(f, sync, every, n)
		if t >= *dur/4 || n >= 1<<30 {
			break
		}
		n *= 4
	}
	best := math.Inf(1)
	for r := 0; r < *reps; r++ {
		for {
			t := run(f, sync, every, n)
			if t >= *dur {
				if ns := float64(t.Nanoseconds()) / float64(n); ns < best {
					best = ns
				}
				break
			}
			n *= 2
		}
	}
	return best
}

func run(f func(), sync func(), every, n int) time.Duration {
	start := time.Now()
	for i := 1; i <= n; i++ {
		f()
		if every > 0 && i%every == 0 {
			sync()
		}
	}
	if sync != nil {
		sync()
	}
	return time.Since(start)
}

// cLoop turns a C loop's total into ns per call.
func cLoop(loop func(n int) time.Duration) float64 {
	n := 1 << 16
	for loop(n) < *dur/4 && n < 1<<28 {
		n *= 4
	}
	best := math.Inf(1)
	for r := 0; r < *reps; r++ {
		if ns := float64(loop(n).Nanoseconds()) / float64(n); ns < best {
			best = ns
		}
	}
	return best
}

func check(what string, r int32) {
	if r != 0 {
		fmt.Fprintf(os.Stderr, "bindcost: %s returned CUresult %d\n", what, r)
		os.Exit(1)
	}
}

func measureAll(e *env) []row {
	nan := math.NaN()
	syncRaw := func() { purego.SyscallN(e.sym["cuStreamSynchronize"], e.s1.Handle()) }
	syncOurs := func() { e.s1.Synchronize() }
	// Record/wait pairs are synchronized now and then too: the queues stay
	// short (the driver blocks when one is full; the fake would grow).
	syncRawBoth := func() { syncRaw(); purego.SyscallN(e.sym["cuStreamSynchronize"], e.s2.Handle()) }
	syncOursBoth := func() { e.s1.Synchronize(); e.s2.Synchronize() }

	var regCtxGetDevice func(*int32) int32
	var regDevAttr func(*int32, int32, int32) int32
	var regPtrAttr func(*uint64, int32, uint64) int32
	var regPtrAttrs func(uint32, *int32, *uintptr, uint64) int32
	var regAddrRange func(*uint64, *uint64, uint64) int32
	var regRecord func(uintptr, uintptr) int32
	var regWait func(uintptr, uintptr, uint32) int32
	var regHtoD func(uint64, unsafe.Pointer, uint64, uintptr) int32
	purego.RegisterLibFunc(&regCtxGetDevice, e.lib, "cuCtxGetDevice")
	purego.RegisterLibFunc(&regDevAttr, e.lib, "cuDeviceGetAttribute")
	purego.RegisterLibFunc(&regPtrAttr, e.lib, "cuPointerGetAttribute")
	purego.RegisterLibFunc(&regPtrAttrs, e.lib, "cuPointerGetAttributes")
	purego.RegisterLibFunc(&regAddrRange, e.lib, "cuMemGetAddressRange_v2")
	purego.RegisterLibFunc(&regRecord, e.lib, "cuEventRecord")
	purego.RegisterLibFunc(&regWait, e.lib, "cuStreamWaitEvent")
	purego.RegisterLibFunc(&regHtoD, e.lib, "cuMemcpyHtoDAsync_v2")

	sh1, sh2, eh := e.s1.Handle(), e.s2.Handle(), e.ev.Handle()
	p, pin, pinBytes := e.p, e.pinned.Ptr(), e.pinned.Bytes()
	dh := e.d.Handle()
	var out uint64
	sc := func(name string, args ...uintptr) int32 {
		r, _, _ := purego.SyscallN(e.sym[name], args...)
		return int32(r)
	}
	const warp = 10 // CU_DEVICE_ATTRIBUTE_WARP_SIZE
	const memType = int32(cuda.PointerAttrMemoryType)

	// Each binding once, checked, before timing.
	check("cuCtxGetDevice", regCtxGetDevice(&e.devOut))
	check("cuPointerGetAttributes", regPtrAttrs(11, &e.attrs[0], &e.slotPtrs[0], uint64(p)))

	rows := []row{
		{"cuCtxGetDevice", map[string]float64{
			colRegFunc: measure(func() { regCtxGetDevice(&e.devOut) }, nil, 0),
			colSyscall: measure(func() { sc("cuCtxGetDevice", uintptr(unsafe.Pointer(&e.devOut))) }, nil, 0),
			colOurs:    nan, // not an operation of the package: its contexts need no lookup
			colCgo:     directOr(nan, func() float64 { return measure(directCtxGetDevice, nil, 0) }),
			colCLoop:   directOr(nan, func() float64 { return cLoop(loopCtxGetDevice) }),
		}},
		{"cuDeviceGetAttribute", map[string]float64{
			colRegFunc: measure(func() { regDevAttr(&e.devOut, warp, dh) }, nil, 0),
			colSyscall: measure(func() { sc("cuDeviceGetAttribute", uintptr(unsafe.Pointer(&e.devOut)), warp, uintptr(dh)) }, nil, 0),
			colOurs:    measure(func() { e.d.Attribute(cuda.AttrWarpSize) }, nil, 0),
			colCgo:     directOr(nan, func() float64 { return measure(func() { directDevAttr(dh) }, nil, 0) }),
		}},
		{"cuPointerGetAttribute", map[string]float64{
			colRegFunc: measure(func() { regPtrAttr(&out, memType, uint64(p)) }, nil, 0),
			colSyscall: measure(func() { sc("cuPointerGetAttribute", uintptr(unsafe.Pointer(&out)), uintptr(memType), uintptr(p)) }, nil, 0),
			colOurs:    measure(func() { cuda.PointerGetAttribute(cuda.PointerAttrMemoryType, p) }, nil, 0),
			colCgo:     directOr(nan, func() float64 { return measure(func() { directPtrAttr(uint64(p)) }, nil, 0) }),
			colCLoop:   directOr(nan, func() float64 { return cLoop(func(n int) time.Duration { return loopPtrAttr(uint64(p), n) }) }),
		}},
		{"cuPointerGetAttributes (11)", map[string]float64{
			colRegFunc: measure(func() { regPtrAttrs(11, &e.attrs[0], &e.slotPtrs[0], uint64(p)) }, nil, 0),
			colSyscall: measure(func() {
				sc("cuPointerGetAttributes", 11, uintptr(unsafe.Pointer(&e.attrs[0])), uintptr(unsafe.Pointer(&e.slotPtrs[0])), uintptr(p))
			}, nil, 0),
			colOurs: measure(func() { cuda.PointerGetAttributes(p) }, nil, 0),
			colCgo:  directOr(nan, func() float64 { return measure(func() { directPtrAttrs(e, uint64(p)) }, nil, 0) }),
		}},
		{"cuMemGetAddressRange_v2", map[string]float64{
			colRegFunc: measure(func() { regAddrRange(&e.base, &e.size, uint64(p)) }, nil, 0),
			colSyscall: measure(func() {
				sc("cuMemGetAddressRange_v2", uintptr(unsafe.Pointer(&e.base)), uintptr(unsafe.Pointer(&e.size)), uintptr(p))
			}, nil, 0),
			colOurs: measure(func() { cuda.MemGetAddressRange(p) }, nil, 0),
			colCgo:  directOr(nan, func() float64 { return measure(func() { directAddrRange(uint64(p)) }, nil, 0) }),
		}},
		{"cuEventRecord + cuStreamWaitEvent", map[string]float64{
			colRegFunc: measure(func() { regRecord(eh, sh1); regWait(sh2, eh, 0) }, syncRawBoth, 1024),
			colSyscall: measure(func() { sc("cuEventRecord", eh, sh1); sc("cuStreamWaitEvent", sh2, eh, 0) }, syncRawBoth, 1024),
			colOurs:    measure(func() { e.ev.Record(e.s1); e.s2.WaitEvent(e.ev) }, syncOursBoth, 1024),
			colCgo:     directOr(nan, func() float64 { return measure(func() { directRecordWait(eh, sh1, sh2) }, syncRawBoth, 1024) }),
			colCLoop:   directOr(nan, func() float64 { return cLoop(func(n int) time.Duration { return loopRecordWait(eh, sh1, sh2, n) }) }),
		}},
		{"cuMemcpyHtoDAsync_v2 (4 B pinned)", map[string]float64{
			colRegFunc: measure(func() { regHtoD(uint64(p), pin, 4, sh1) }, syncRaw, 256),
			colSyscall: measure(func() { sc("cuMemcpyHtoDAsync_v2", uintptr(p), uintptr(pin), 4, sh1) }, syncRaw, 256),
			colOurs:    measure(func() { e.s1.MemcpyHtoDAsync(p, pinBytes) }, syncOurs, 256),
			colCgo:     directOr(nan, func() float64 { return measure(func() { directHtoD(uint64(p), pin, sh1) }, syncRaw, 256) }),
		}},
	}
	e.s2.Synchronize()
	return rows
}

func directOr(nan float64, f func() float64) float64 {
	if !cgoBuild {
		return nan
	}
	return f()
}

// runPurego runs the CGO_ENABLED=0 build for its measurements.
func runPurego() []row {
	path := *puregoB
	if path == "" {
		self, _ := os.Executable()
		for _, n := range []string{"bindcost.nocgo", "bindcost-purego"} {
			if c := filepath.Join(filepath.Dir(self), n); fileExists(c) {
				path = c
				break
			}
		}
	}
	if path == "" {
		return nil
	}
	args := []string{"-json", "-dur", dur.String(), "-reps", fmt.Sprint(*reps), "-dev", fmt.Sprint(*dev)}
	out, err := exec.Command(path, args...).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bindcost: running %s: %v\n", path, err)
		return nil
	}
	var rows []row
	if err := json.Unmarshal(out, &rows); err != nil {
		fmt.Fprintf(os.Stderr, "bindcost: reading %s: %v\n", path, err)
		return nil
	}
	return rows
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func printTable(e *env, rows, purego []row) {
	name, _ := e.d.Name()
	ver, _ := cuda.DriverVersion()
	build := "purego (CGO_ENABLED=0)"
	if cgoBuild {
		build = "cgo"
	}
	fmt.Printf("binding cost per driver call, ns (least of %d runs of >= %v); device %d %q, CUDA driver %d.%d, %s\n",
		*reps, *dur, *dev, name, ver/1000, ver%1000/10, cuda.LibraryPath())
	fmt.Printf("this binary: %s build, %s/%s, %s\n", build, runtime.GOOS, runtime.GOARCH, runtime.Version())
	pur := map[string]map[string]float64{}
	for _, r := range purego {
		pur[r.Name] = r.Cells
	}
	w := tabwriter.NewWriter(os.Stdout, 4, 0, 2, ' ', tabwriter.AlignRight)
	var head []string
	if cgoBuild {
		head = []string{"call", colCLoop, colCgo, "ours (cgo)", "ours/cgo", colSyscall, "ours (purego)", "ours/SyscallN", colRegFunc, "RegFunc/SyscallN"}
	} else {
		head = []string{"call", colSyscall, "ours (purego)", "ours/SyscallN", colRegFunc, "RegFunc/SyscallN"}
	}
	fmt.Fprintln(w, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		c := r.Cells
		var cells []string
		if cgoBuild {
			// The purego columns come from the CGO_ENABLED=0 build when it
			// ran (its SyscallN is the one "ours" there is measured against);
			// otherwise from this binary's own purego calls.
			p := map[string]float64{colSyscall: cell(c, colSyscall), colRegFunc: cell(c, colRegFunc)}
			if x, ok := pur[r.Name]; ok {
				p = x
			}
			cells = []string{r.Name, ns(cell(c, colCLoop)), ns(cell(c, colCgo)), ns(cell(c, colOurs)), ratio(cell(c, colOurs), cell(c, colCgo)),
				ns(cell(p, colSyscall)), ns(cell(p, colOurs)), ratio(cell(p, colOurs), cell(p, colSyscall)),
				ns(cell(p, colRegFunc)), ratio(cell(p, colRegFunc), cell(p, colSyscall))}
		} else {
			cells = []string{r.Name, ns(cell(c, colSyscall)), ns(cell(c, colOurs)), ratio(cell(c, colOurs), cell(c, colSyscall)),
				ns(cell(c, colRegFunc)), ratio(cell(c, colRegFunc), cell(c, colSyscall))}
		}
		fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
	}
	w.Flush()
	if cgoBuild && purego == nil {
		fmt.Println("(no CGO_ENABLED=0 build next to this binary, see -purego: the SyscallN and RegisterLibFunc columns are this cgo binary's)")
	} else if cgoBuild {
		fmt.Println("(SyscallN, ours (purego) and RegisterLibFunc: measured by the CGO_ENABLED=0 build in the same run)")
	}
	fmt.Println("targets: ours (cgo) <= 1.5x direct cgo; ours (purego) ~ SyscallN; no hot call through RegisterLibFunc.")
}

// cell reads one measurement; a missing one does not apply.
func cell(m map[string]float64, k string) float64 {
	if v, ok := m[k]; ok {
		return v
	}
	return math.NaN()
}

func ns(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}
