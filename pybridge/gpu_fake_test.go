package pybridge

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/internal/fakecuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The CUDA paths of this package run against the fake driver of
// testdata/fakecuda (two devices) unless DLBRIDGE_GPU=1 (the real driver)
// or DLBRIDGE_LIBCUDA names a driver already. The driver is loaded once per
// process, so the choice is made in init.
var (
	fakeLib string
	fakeErr error
)

func init() { fakeLib, fakeErr = fakecuda.Use(2) }

func needCUDA(t testing.TB) {
	t.Helper()
	if fakeErr != nil {
		t.Skipf("no fake CUDA driver: %v", fakeErr)
	}
	if !CUDAAvailable() {
		t.Skipf("no CUDA driver: %v", cuda.Init())
	}
}

func needFake(t testing.TB) {
	t.Helper()
	needCUDA(t)
	if fakeLib == "" {
		t.Skip("needs the fake driver's controls")
	}
}

func fakeCall(t testing.TB, name string, args ...uintptr) uintptr {
	t.Helper()
	r, err := fakecuda.Call(fakeLib, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var orderBuf = make([]uint64, 3*256) // heap memory: it stays put while the fake writes it

// orderLog is the fake's log of event records ("r S") and stream waits
// ("w S<-R": S waits for a record made on R) since the last reset.
func orderLog(t testing.TB, names map[uintptr]string) []string {
	t.Helper()
	// Sound: orderBuf is a package-level Go slice (it does not move), and
	// the fake writes at most len/3 entries of 3 words before returning.
	n := int(int32(fakeCall(t, "fakecuda_order_log", uintptr(unsafe.Pointer(&orderBuf[0])), uintptr(len(orderBuf)/3))))
	name := func(h uint64) string {
		if s, ok := names[uintptr(h)]; ok {
			return s
		}
		return fmt.Sprintf("%#x", h)
	}
	var out []string
	for i := 0; i < n && i < len(orderBuf)/3; i++ {
		switch orderBuf[3*i] {
		case 'r':
			out = append(out, "r "+name(orderBuf[3*i+1]))
		case 'w':
			out = append(out, "w "+name(orderBuf[3*i+1])+"<-"+name(orderBuf[3*i+2]))
		}
	}
	return out
}

func resetLog(t testing.TB) { fakeCall(t, "fakecuda_reset_calls") }

func workStream(t testing.TB, dev int) *cuda.Stream {
	t.Helper()
	s, err := zerocopy.WorkStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newStream(t testing.TB, dev int) *cuda.Stream {
	t.Helper()
	c, err := cuda.Retain(dev)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy(); c.Release() })
	return s
}

// readOn copies a contiguous float32 CUDA view to the host on stream s with
// the driver itself, as a consumer that knows nothing of dlbridge would.
func readOn(t testing.TB, s *cuda.Stream, v *zerocopy.View) []float32 {
	t.Helper()
	out := make([]float32, v.Len())
	if err := s.MemcpyDtoHAsync(cuda.SliceBytes(out), cuda.DevicePtr(v.Ptr())); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGPUOpsOnFakeDevice(t *testing.T) {
	needCUDA(t)
	cuda0 := dlpack.CUDADevice(0)
	src, err := Arange(12, dlpack.Float32Type, cuda0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Device() != cuda0 {
		t.Fatalf("arange on %v", src.Device())
	}
	ts := tensorOf(src)
	if s, err := Sum(ts); err != nil || real(s.C) != 66 {
		t.Fatalf("Sum = %v, %v; want 66", s, err)
	}
	for _, x := range []float64{0, 2} {
		if err := Fill(ts, zerocopy.Float(x)); err != nil {
			t.Fatal(err)
		}
		if ts.View.Stream() != 0 {
			t.Fatalf("fill_ returned with a write pending on %#x", ts.View.Stream())
		}
	}
	if s, _ := Sum(ts); real(s.C) != 24 {
		t.Fatalf("sum after fill = %v", s)
	}
	odd, _ := src.Slice(0, 1, zerocopy.Omit, 2)
	defer odd.Close()
	if err := Fill(tensorOf(odd), zerocopy.Float(-1)); err != nil {
		t.Fatal(err)
	}
	host, err := CopyToDevice(src, dlpack.CPUDevice, CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	want := []float64{2, -1, 2, -1, 2, -1, 2, -1, 2, -1, 2, -1}
	if diff := cmp.Diff(want, values(t, host)); diff != "" {
		t.Fatalf("after strided fill (-want +got):\n%s", diff)
	}
	if host.Device() != dlpack.CPUDevice || !IsPinned(tensorOf(host)) {
		t.Fatalf("GPU -> new host array: %v, pinned %v; want pinned cpu memory", host.Device(), IsPinned(tensorOf(host)))
	}
	// Strided, converting copy device -> device.
	dst := mustAlloc(t, cuda0, dlpack.Float64Type, 6)
	if err := CopyInto(tensorOf(dst), tensorOf(odd), CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float64{-1, -1, -1, -1, -1, -1}, values(t, dst)); diff != "" {
		t.Fatalf("strided device copy (-want +got):\n%s", diff)
	}
	// Host -> device, then cuda:0 -> cuda:1.
	h, _ := Arange(6, dlpack.Float64Type, dlpack.CPUDevice)
	defer h.Close()
	if err := CopyInto(tensorOf(dst), tensorOf(h), CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, _ := Sum(tensorOf(dst)); real(s.C) != 15 {
		t.Fatalf("sum after H2D = %v", s)
	}
	if CUDADeviceCount() > 1 {
		d1, err := CopyToDevice(dst, dlpack.CUDADevice(1), CopyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer d1.Close()
		if d1.Device() != dlpack.CUDADevice(1) || !cmp.Equal(values(t, d1), []float64{0, 1, 2, 3, 4, 5}) {
			t.Fatalf("to cuda:1: %v %v", d1.Device(), values(t, d1))
		}
	}
	ch, err := Allocate(dlpack.Device{Type: dlpack.CUDAHost}, dlpack.Int32Type, []int64{3}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if s, _ := Sum(tensorOf(ch)); s.I != 0 || !IsPinned(tensorOf(ch)) {
		t.Fatalf("cuda_host zeros: sum %v pinned %v", s, IsPinned(tensorOf(ch)))
	}
}

// TestNonBlockingCopy: copy_ returns with the write complete unless
// non_blocking; then the tensor carries it, and an export orders after it.
func TestNonBlockingCopy(t *testing.T) {
	needFake(t)
	w := workStream(t, 0)
	side := newStream(t, 0)
	names := map[uintptr]string{w.Handle(): "work", side.Handle(): "side", 1: "legacy"}
	dst := mustAlloc(t, dlpack.CUDADevice(0), dlpack.Float32Type, 1024)
	src, _ := Arange(1024, dlpack.Float32Type, dlpack.CUDADevice(0))
	defer src.Close()
	c := newStream(t, 0)
	names[c.Handle()] = "c"
	if err := dst.Synchronize(); err != nil { // nothing pending from the allocation
		t.Fatal(err)
	}
	resetLog(t)
	if err := CopyInto(tensorOf(dst), tensorOf(src), CopyOptions{Stream: StreamArg{Given: true, Handle: side.Handle(), Device: -1}, NonBlocking: true}); err != nil {
		t.Fatal(err)
	}
	if dst.Stream() != side.Handle() {
		t.Fatalf("non_blocking copy: pending %#x, want the stream it ran on", dst.Stream())
	}
	// The work stream is ordered after it at once (C exchange API consumers
	// wait for the work stream only); an export to the work stream needs no
	// more, one to another stream a wait on the same event.
	for _, to := range []*cuda.Stream{w, c} {
		p, err := Export(tensorOf(dst), ExportRequest{Versioned: true, HasStream: true, Stream: int64(to.Handle())})
		if err != nil {
			t.Fatal(err)
		}
		dlpack.DeleteVersioned(p)
	}
	// "r side" twice: the copy marks its use of both tensors' pool memory,
	// whose frees wait for it; "r c": the export marks the consumer's use.
	if diff := cmp.Diff([]string{"r side", "r side", "r side", "w work<-side", "r c", "w c<-side"}, orderLog(t, names)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	p, err := Export(tensorOf(dst), ExportRequest{Versioned: true, HasStream: true, Stream: -1})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Import(p, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if got := readOn(t, w, v); got[1023] != 1023 {
		t.Fatalf("read %v", got[1020:])
	}
	if err := CopyInto(tensorOf(dst), tensorOf(src), CopyOptions{Stream: StreamArg{Given: true, Handle: side.Handle(), Device: -1}}); err != nil {
		t.Fatal(err)
	}
	if dst.Stream() != 0 {
		t.Fatal("a blocking copy_ left a write pending")
	}
}

// TestExportOrdersPendingWrites: an export to a consumer stream makes it
// wait for the pending write: one event for the write, one wait per
// consumer stream, nothing for the pending stream itself or stream -1.
func TestExportOrdersPendingWrites(t *testing.T) {
	needFake(t)
	w := workStream(t, 0)
	c1, c2 := newStream(t, 0), newStream(t, 0)
	names := map[uintptr]string{w.Handle(): "work", c1.Handle(): "c1", c2.Handle(): "c2", 1: "legacy", 2: "per-thread"}
	v := mustAlloc(t, dlpack.CUDADevice(0), dlpack.Float32Type, 4)
	tv := tensorOf(v)
	if err := DebugSpinWrite(tv, 0x3f800000, time.Millisecond); err != nil { // pending on the work stream
		t.Fatal(err)
	}
	resetLog(t)
	cases := []struct {
		req  ExportRequest
		log  []string
		code Code
	}{
		{ExportRequest{Versioned: true, HasStream: true, Stream: int64(w.Handle())}, nil, OK}, // same stream
		{ExportRequest{Versioned: true, HasStream: true, Stream: -1}, nil, OK},                // no sync asked
		// "r cN": the export marks the consumer's use of the pool memory
		// (its free waits for that), then the consumer waits for the write.
		{ExportRequest{Versioned: true, HasStream: true, Stream: int64(c1.Handle())}, []string{"r c1", "r work", "w c1<-work"}, OK},
		{ExportRequest{Versioned: true, HasStream: true, Stream: int64(c2.Handle())}, []string{"r c2", "w c2<-work"}, OK},
		// The default streams outlive every tensor: the free orders after
		// them itself, so an export to them records nothing for it.
		{ExportRequest{Versioned: true}, []string{"w legacy<-work"}, OK}, // None: the legacy default stream
		{ExportRequest{Versioned: true, HasStream: true, Stream: 2}, []string{"w per-thread<-work"}, OK},
		{ExportRequest{Versioned: true, HasStream: true, Stream: 0}, nil, ValueError}, // ambiguous
	}
	for _, c := range cases {
		resetLog(t)
		p, err := Export(tv, c.req)
		if CodeOf(err) != c.code {
			t.Errorf("stream %d: err %v, want %v", c.req.Stream, err, c.code)
		}
		if diff := cmp.Diff(c.log, orderLog(t, names)); diff != "" {
			t.Errorf("stream %d: records and waits (-want +got):\n%s", c.req.Stream, diff)
		}
		if p != nil {
			dlpack.DeleteVersioned(p)
		}
	}
	for _, c := range []*cuda.Stream{c1, c2} {
		if got := readOn(t, c, v); !cmp.Equal(got, []float32{1, 1, 1, 1}) {
			t.Fatalf("consumer read %v, want ones", got)
		}
	}
}

// TestChainThroughTheBridge: a producer writes slowly on its own stream
// and hands the tensor to dlbridge with the DLPack handshake (ordered
// before our work stream); dlbridge hands it to itself again (two hops)
// and then to consumers on other streams. Every consumer reads the
// producer's data, with one wait per hop and one event per pending write.
func TestChainThroughTheBridge(t *testing.T) {
	needCUDA(t)
	w := workStream(t, 0)
	prod, cons := newStream(t, 0), newStream(t, 0)
	names := map[uintptr]string{w.Handle(): "work", prod.Handle(): "prod", cons.Handle(): "cons", 1: "legacy"}
	mem, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 1<<14)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if err := zerocopy.Fill(mem, zerocopy.Float(0), nil); err != nil {
		t.Fatal(err)
	}
	if err := mem.Synchronize(); err != nil {
		t.Fatal(err)
	}
	k, err := prod.Context().LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unload()
	if fakeLib != "" {
		resetLog(t)
	}
	if err := k.SpinThenWrite(prod, cuda.DevicePtr(mem.Ptr()), mem.Len(), 0x40e00000, 200*time.Millisecond); err != nil { // 7.0
		t.Fatal(err)
	}
	mem.SetStream(prod.Handle())

	// The producer's __dlpack__(stream=work).
	if err := mem.OrderBefore(w.Handle()); err != nil {
		t.Fatal(err)
	}
	p, err := mem.ToDLPack()
	if err != nil {
		t.Fatal(err)
	}
	hop1, err := Import(p, true, false)
	if err != nil {
		t.Fatal(err)
	}
	h1 := NewTensor(hop1)
	defer CloseTensor(h1)
	t1, _ := Borrow(h1)
	defer t1.Return()
	if hop1.Stream() != w.Handle() {
		t.Fatalf("import: pending %#x, want the work stream", hop1.Stream())
	}
	// dlbridge -> dlbridge: the importer asks for our own work stream.
	p, err = Export(t1, ExportRequest{Versioned: true, HasStream: true, Stream: int64(w.Handle())})
	if err != nil {
		t.Fatal(err)
	}
	hop2, err := Import(p, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer hop2.Close()
	// To consumers: a stream of their own, and None (the legacy stream).
	for _, req := range []ExportRequest{{Versioned: true, HasStream: true, Stream: int64(cons.Handle())}, {Versioned: false}} {
		p, err = Export(tensorOf(hop2), req)
		if err != nil {
			t.Fatal(err)
		}
		if req.Versioned {
			dlpack.DeleteVersioned(p)
		} else {
			dlpack.DeleteLegacy(p)
		}
	}
	if got := readOn(t, cons, hop2); got[0] != 7 || got[len(got)-1] != 7 {
		t.Fatalf("the consumer read %v...: not ordered after the producer", got[:4])
	}
	if fakeLib == "" {
		return
	}
	want := []string{"r prod", "w work<-prod", "r work", "w cons<-work", "w legacy<-work"}
	if diff := cmp.Diff(want, orderLog(t, names)); diff != "" {
		t.Errorf("records and waits through the chain (-want +got):\n%s", diff)
	}
}

// TestImportOnProducerStream: an import whose producer ordered its writes
// before its own current stream (the C exchange API) is pending on that
// stream: nothing waits at import, a consumer on another stream waits for
// it at export.
func TestImportOnProducerStream(t *testing.T) {
	needFake(t)
	prod, cons := newStream(t, 0), newStream(t, 0)
	names := map[uintptr]string{prod.Handle(): "prod", cons.Handle(): "cons"}
	src := mustAlloc(t, dlpack.CUDADevice(0), dlpack.Float32Type, 64)
	if err := src.Synchronize(); err != nil {
		t.Fatal(err)
	}
	p, err := src.ToDLPack()
	if err != nil {
		t.Fatal(err)
	}
	resetLog(t)
	v, err := ImportOn(p, true, false, prod.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Stream() != prod.Handle() || len(orderLog(t, names)) != 0 {
		t.Fatalf("pending %#x, log %v; want the producer's stream and no wait", v.Stream(), orderLog(t, names))
	}
	q, err := Export(tensorOf(v), ExportRequest{Versioned: true, HasStream: true, Stream: int64(cons.Handle())})
	if err != nil {
		t.Fatal(err)
	}
	dlpack.DeleteVersioned(q)
	if diff := cmp.Diff([]string{"r prod", "w cons<-prod"}, orderLog(t, names)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWorkStream(t *testing.T) {
	needFake(t)
	w := workStream(t, 0)
	if h := WorkStream(0); h != w.Handle() || h <= 2 {
		t.Fatalf("WorkStream(0) = %#x, want the non-blocking stream %#x", h, w.Handle())
	}
	if f, err := w.Flags(); err != nil || f != cuda.StreamNonBlocking {
		t.Fatalf("work stream flags %#x, %v", f, err)
	}
}

func TestExportToOtherDeviceCopies(t *testing.T) {
	needCUDA(t)
	if CUDADeviceCount() < 2 {
		t.Skip("needs two CUDA devices")
	}
	v, _ := Arange(4, dlpack.Int32Type, dlpack.CPUDevice)
	defer v.Close()
	p, err := Export(tensorOf(v), ExportRequest{Versioned: true, HasDevice: true, Device: dlpack.CUDADevice(1)})
	if err != nil {
		t.Fatal(err)
	}
	m := (*dlpack.DLManagedTensorVersioned)(p)
	if m.DLTensor.Device != dlpack.CUDADevice(1) || m.Flags&dlpack.FlagIsCopied == 0 {
		t.Fatalf("export to cuda:1 gave device %v flags %v", m.DLTensor.Device, m.Flags)
	}
	w, err := Import(p, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, _ := Sum(tensorOf(w)); s.I != 6 {
		t.Fatalf("sum of the copy = %v", s)
	}
}

func TestPools(t *testing.T) {
	needFake(t)
	if err := SetPinnedPoolLimit(-1); CodeOf(err) != ValueError {
		t.Fatalf("negative limit: %v", err)
	}
	d, err := Allocate(dlpack.CUDADevice(0), dlpack.Uint8Type, []int64{1 << 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	if p := Pools(0); p.DeviceUsed < 1<<20 || p.DeviceReserved < p.DeviceUsed {
		t.Fatalf("device pool %+v after a 1 MiB tensor", p)
	}
	before := Pools(0)
	h, err := CopyToDevice(d, dlpack.CPUDevice, CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := Pools(0); p.PinnedInUse < before.PinnedInUse+1<<20 {
		t.Fatalf("pinned pool %+v: the new host array is not from it", p)
	}
	h.Close()
	if p := Pools(0); p.PinnedCached < 1<<20 || p.PinnedInUse != before.PinnedInUse {
		t.Fatalf("pinned pool %+v: the block did not come back", p)
	}
	// A limit below what a transfer needs: the new array is pageable.
	if err := SetPinnedPoolLimit(0); err != nil {
		t.Fatal(err)
	}
	defer SetPinnedPoolLimit(zerocopy.DefaultPinnedPoolLimit)
	if p := Pools(0); p.PinnedCached != 0 {
		t.Fatalf("limit 0 kept %d bytes cached", p.PinnedCached)
	}
	h, err = CopyToDevice(d, dlpack.CPUDevice, CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if IsPinned(tensorOf(h)) || !cmp.Equal(values(t, h)[:3], []float64{0, 0, 0}) {
		t.Fatalf("over the limit: pinned %v", IsPinned(tensorOf(h)))
	}
	h.Close()
	d.Close()
}

// TestCUDAWithoutDriver runs itself again in a process whose driver library
// does not exist (the driver is loaded once per process).
func TestCUDAWithoutDriver(t *testing.T) {
	if os.Getenv("PYBRIDGE_TEST_NO_DRIVER") == "1" {
		if _, err := Allocate(dlpack.CUDADevice(0), dlpack.Float32Type, []int64{2}, false); CodeOf(err) != RuntimeError {
			t.Fatalf("Allocate on cuda without a driver: %v", err)
		}
		if CUDAAvailable() || WorkStream(0) != 1 {
			t.Fatal("no driver, yet CUDA looks available")
		}
		v, _ := Arange(3, dlpack.Float32Type, dlpack.CPUDevice)
		defer v.Close()
		if _, err := CopyToDevice(v, dlpack.CUDADevice(0), CopyOptions{}); CodeOf(err) != BufferError {
			t.Fatalf("to cuda without a driver: %v", err)
		}
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("re-exec test on linux only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDAWithoutDriver$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PYBRIDGE_TEST_NO_DRIVER=1", cuda.EnvLibrary+"=/nonexistent/libcuda.so.1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
