package zerocopy_test

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func retain(t testing.TB, ord int) *cuda.Context {
	t.Helper()
	c, err := cuda.Retain(ord)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Release() })
	return c
}

func newStream(t testing.TB, c *cuda.Context) *cuda.Stream {
	t.Helper()
	s, err := c.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return s
}

// TestAllocCUDAFreesOnce: the memory is freed when the last of the views
// over it is closed, once, in any order.
func TestAllocCUDAFreesOnce(t *testing.T) {
	needFake(t)
	before, frees := fakeLive(t, fakeDevice), fakeCalls(t, "cuMemFree_v2")
	v, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := fakeLive(t, fakeDevice); got != before+1 {
		t.Fatalf("live device allocations %d, want %d", got, before+1)
	}
	if v.Device() != dlpack.CUDADevice(0) || !v.IsCContiguous() || v.Len() != 20 {
		t.Fatalf("view %v", v)
	}
	col, err := retained(v.Select(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	v.Close()
	if got := fakeLive(t, fakeDevice); got != before+1 {
		t.Fatalf("freed while a retained derived view is open")
	}
	col.Close()
	if got := fakeLive(t, fakeDevice); got != before {
		t.Fatalf("live device allocations %d after the last Close, want %d", got, before)
	}
	if got := fakeCalls(t, "cuMemFree_v2") - frees; got != 1 {
		t.Fatalf("cuMemFree_v2 called %d times, want 1", got)
	}

	// Pinned memory likewise.
	hb := fakeLive(t, fakePinned)
	p, err := zerocopy.AllocPinned(dlpack.Int64Type, 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.Device().Type != dlpack.CUDAHost || fakeLive(t, fakePinned) != hb+1 {
		t.Fatalf("pinned view %v, live %d", p, fakeLive(t, fakePinned))
	}
	if err := zerocopy.Set[int64](p, 42, 1); err != nil {
		t.Fatalf("host access to pinned memory: %v", err)
	}
	p.Close()
	if fakeLive(t, fakePinned) != hb {
		t.Fatal("pinned memory not freed")
	}
}

func TestAllocErrors(t *testing.T) {
	needCUDA(t)
	cases := []struct {
		name string
		fn   func() (*zerocopy.View, error)
		want string
	}{
		{"bad ordinal", func() (*zerocopy.View, error) { return zerocopy.AllocCUDA(7, dlpack.Float32Type, 3) }, "ordinal 7"},
		{"negative extent", func() (*zerocopy.View, error) { return zerocopy.AllocCUDA(0, dlpack.Float32Type, 3, -1) }, "negative"},
		{"bad dtype", func() (*zerocopy.View, error) {
			return zerocopy.AllocCUDA(0, dlpack.DataType{Code: 99, Bits: 8, Lanes: 1}, 3)
		}, "not a DLDataTypeCode"},
		{"nil stream", func() (*zerocopy.View, error) { return zerocopy.AllocCUDAAsync(nil, dlpack.Float32Type, 3) }, "nil or destroyed stream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := c.fn()
			if err == nil {
				v.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.want)) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
	if fakeLib != "" {
		fakeInject(t, "cuMemAlloc_v2", cuda.ErrOutOfMemory, 0)
		_, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 1<<20)
		if !errors.Is(err, cuda.ErrOutOfMemory) {
			t.Fatalf("injected OOM: got %v", err)
		}
	}
}

// TestCopyCUDAErrors: mismatches are named, nothing is copied.
func TestCopyCUDAErrors(t *testing.T) {
	needCUDA(t)
	d := devWith(t, 0, make([]byte, 24), dlpack.Float32Type, 2, 3)
	ro := d.AsReadOnly()
	closed, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	row, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 1, 3)
	row = mustView(t, row, err)
	bcast, err := row.Broadcast(2, 3)
	bcast = mustView(t, bcast, err)
	h32 := goView(t, make([]byte, 24), dlpack.Float32Type, 2, 3)
	var other *cuda.Stream
	if n, _ := cuda.DeviceCount(); n > 1 {
		other = newStream(t, retain(t, 1))
	}
	cases := []struct {
		name     string
		dst, src *zerocopy.View
		s        *cuda.Stream
		want     string
	}{
		{"dtype", d, goView(t, make([]byte, 48), dlpack.Float64Type, 2, 3), nil, "dst dtype float32 != src dtype float64"},
		{"shape", d, goView(t, make([]byte, 24), dlpack.Float32Type, 3, 2), nil, "dst shape [2, 3] != src shape [3, 2]"},
		{"read-only dst", ro, h32, nil, "read-only"},
		{"closed src", h32, closed, nil, "src: zerocopy: use of a closed view"},
		{"broadcast dst", bcast, h32, nil, "stride 0"},
		{"nil", nil, h32, nil, "nil view"},
		{"wrong stream", d, h32, other, "needs a stream of cuda:0"},
	}
	for _, c := range cases {
		if c.name == "wrong stream" && other == nil {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			err := zerocopy.CopyCUDA(c.dst, c.src, c.s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	t.Run("path", func(t *testing.T) {
		_, err := zerocopy.DefaultCopier().CopyVia(d, h32, nil, zerocopy.PathHost)
		if err == nil || !strings.Contains(err.Error(), "transfer path") {
			t.Fatalf("got %v", err)
		}
	})
	if fakeLib != "" {
		t.Run("driver error", func(t *testing.T) {
			// Not CUDA_ERROR_INVALID_VALUE: a copy made direct on a
			// thread where its stream's context is not current is made
			// again in that context when it fails so (package cuda's
			// wrongContext), and the retry would not see the one-shot
			// injection; the crew's threads may be such threads.
			fakeInject(t, "cuMemcpyHtoDAsync_v2", cuda.ErrIllegalAddress, 0)
			_, err := zerocopy.DefaultCopier().CopyVia(d, h32, nil, zerocopy.PathStaged)
			if !errors.Is(err, cuda.ErrIllegalAddress) {
				t.Fatalf("got %v, want CUDA_ERROR_ILLEGAL_ADDRESS", err)
			}
		})
	}
}

// TestStreamOrdering: a write pending on stream A is seen by a copy on
// stream B because the copy waits for it with an event; when the view
// forgets the pending stream, the copy reads stale data (the check can
// fail). The spinning kernel makes the write late on a real GPU; the fake
// driver runs stream A's work only when something waits for it.
func TestStreamOrdering(t *testing.T) {
	needCUDA(t)
	ctx := retain(t, 0)
	k, err := ctx.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Unload()
	a, b := newStream(t, ctx), newStream(t, ctx)
	const n = 1 << 16
	dev := devWith(t, 0, make([]byte, 4*n), dlpack.Uint32Type, n)
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	read := func() uint32 {
		t.Helper()
		clear(out)
		if err := zerocopy.CopyCUDA(goView(t, out, dlpack.Uint32Type, n), dev, b); err != nil {
			t.Fatal(err)
		}
		x := *(*uint32)(unsafe.Pointer(&out[4*(n-1)]))
		for i := 0; i < 4*n; i += 4 {
			if y := *(*uint32)(unsafe.Pointer(&out[i])); y != x {
				return 0xdeadbeef // torn: some written, some not
			}
		}
		return x
	}

	// With the event wait.
	if err := k.SpinThenWrite(a, cuda.DevicePtr(dev.Ptr()), n, 7, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	dev.SetStream(a.Handle())
	if got := read(); got != 7 {
		t.Fatalf("with the event wait: read %#x, want 7", got)
	}
	if dev.Stream() != a.Handle() {
		t.Fatalf("source pending stream changed to %#x", dev.Stream())
	}

	// Without it: the copy on b may run before the kernel on a.
	if err := k.SpinThenWrite(a, cuda.DevicePtr(dev.Ptr()), n, 9, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	dev.SetStream(0) // forget the pending write
	if got := read(); got == 9 {
		t.Fatalf("without the wait the copy still saw the new data: the test cannot detect stale reads")
	}
	if err := a.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != 9 {
		t.Fatalf("after synchronizing a: read %#x, want 9", got)
	}
}

// TestStreamOrderingPinned: an asynchronous copy into pinned memory is
// pending on its stream; Synchronize makes it visible, and a copy from the
// pinned view on another stream waits for it.
func TestStreamOrderingPinned(t *testing.T) {
	needCUDA(t)
	ctx := retain(t, 0)
	a, b := newStream(t, ctx), newStream(t, ctx)
	src := pattern(4096, 3)
	dev := devWith(t, 0, src, dlpack.Uint8Type, 4096)
	pin, err := zerocopy.AllocPinned(dlpack.Uint8Type, 4096)
	pin = mustView(t, pin, err)
	if err := zerocopy.CopyCUDA(pin, dev, a); err != nil {
		t.Fatal(err)
	}
	if pin.Stream() != a.Handle() {
		t.Fatalf("pinned dst pending stream %#x, want stream a %#x", pin.Stream(), a.Handle())
	}
	dev2, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, 4096)
	dev2 = mustView(t, dev2, err)
	if err := zerocopy.CopyCUDA(dev2, pin, b); err != nil {
		t.Fatal(err)
	}
	if got := devBytes(t, dev2); string(got) != string(src) {
		t.Fatalf("pinned hop lost data at byte %d", firstDiff(got, src))
	}
	if err := pin.Synchronize(); err != nil || pin.Stream() != 0 {
		t.Fatalf("Synchronize: %v, pending %#x", err, pin.Stream())
	}
	if string(viewBytes(t, pin)) != string(src) {
		t.Fatal("pinned memory wrong after Synchronize")
	}
}

// TestAllocCUDAAsync: stream-ordered memory is pending on its stream, used
// on another, and freed in order after both.
func TestAllocCUDAAsync(t *testing.T) {
	needCUDA(t)
	ctx := retain(t, 0)
	a, b := newStream(t, ctx), newStream(t, ctx)
	v, err := zerocopy.AllocCUDAAsync(a, dlpack.Float32Type, 256)
	if err != nil {
		t.Fatal(err)
	}
	if v.Stream() != a.Handle() {
		t.Fatalf("pending stream %#x, want %#x", v.Stream(), a.Handle())
	}
	src := pattern(1024, 9)
	if err := zerocopy.CopyCUDA(v, goView(t, src, dlpack.Float32Type, 256), b); err != nil {
		t.Fatal(err)
	}
	if got := devBytes(t, v); string(got) != string(src) {
		t.Fatal("data lost")
	}
	frees := 0
	if fakeLib != "" {
		frees = fakeCalls(t, "cuMemFreeAsync")
	}
	v.Close()
	if fakeLib != "" {
		if got := fakeCalls(t, "cuMemFreeAsync") - frees; got != 1 {
			t.Fatalf("cuMemFreeAsync calls %d, want 1", got)
		}
	}
	if err := a.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestFreeAfterForeignStreamDestroyed: stream-ordered memory used on
// another library's stream (a copy on it, an export to it) is freed after
// that work although the stream was destroyed in between: the uses were
// marked with events when they were queued, and the free touches no
// foreign stream handle (the real driver crashes on a destroyed one). Uses
// by the legacy default stream are ordered at the free itself.
func TestFreeAfterForeignStreamDestroyed(t *testing.T) {
	needFake(t)
	ctx := retain(t, 0)
	a := newStream(t, ctx)
	v, err := zerocopy.AllocCUDAAsync(a, dlpack.Float32Type, 256)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.CopyCUDA(v, goView(t, pattern(1024, 3), dlpack.Float32Type, 256), theirs); err != nil {
		t.Fatal(err)
	}
	consumer, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.OrderBefore(consumer.Handle()); err != nil {
		t.Fatal(err)
	}
	if err := v.OrderBefore(cuda.StreamHandleLegacy); err != nil { // PyTorch's default stream
		t.Fatal(err)
	}
	for _, s := range []*cuda.Stream{theirs, consumer} {
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	stale := int(fakeCall(t, "fakecuda_stale_stream_uses"))
	records, waits := fakeCalls(t, "cuEventRecord"), fakeCalls(t, "cuStreamWaitEvent")
	frees, syncFrees := fakeCalls(t, "cuMemFreeAsync"), fakeCalls(t, "cuMemFree_v2")
	v.Close()
	if got := int(fakeCall(t, "fakecuda_stale_stream_uses")) - stale; got != 0 {
		t.Errorf("the free named a destroyed stream %d times (the real driver crashes)", got)
	}
	if got := fakeCalls(t, "cuEventRecord") - records; got != 1 {
		t.Errorf("the free recorded %d events, want 1 (on the legacy stream, which outlives it; none on streams that may be gone)", got)
	}
	if got := fakeCalls(t, "cuStreamWaitEvent") - waits; got != 3 {
		t.Errorf("the free waited for %d uses, want 3 (the copy's stream, the consumer's, the legacy stream)", got)
	}
	if got, sync := fakeCalls(t, "cuMemFreeAsync")-frees, fakeCalls(t, "cuMemFree_v2")-syncFrees; got != 1 || sync != 0 {
		t.Errorf("frees: %d stream-ordered, %d synchronous; want 1 and 0", got, sync)
	}
	if err := a.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCUDA checks views against the driver's allocations.
func TestVerifyCUDA(t *testing.T) {
	needCUDA(t)
	base, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 1024)
	base = mustView(t, base, err)
	p := base.Ptr()
	wrap := func(s zerocopy.Spec) *zerocopy.View {
		v, err := zerocopy.Wrap(s, zerocopy.NewOwner(nil, "test"))
		return mustView(t, v, err)
	}
	f32 := dlpack.Float32Type
	dev0 := dlpack.CUDADevice(0)
	goMem := make([]float32, 64)
	pinned, err := zerocopy.AllocPinned(f32, 16)
	pinned = mustView(t, pinned, err)
	cases := []struct {
		name string
		v    *zerocopy.View
		want string // regexp; "" for no error
		is   error
	}{
		{"whole", base, "", nil},
		{"inside", wrap(zerocopy.Spec{Ptr: p + 64, Device: dev0, DType: f32, Shape: []int64{10, 4}, Strides: []int64{8, 1}}), "", nil},
		{"past end", wrap(zerocopy.Spec{Ptr: p + 512, Device: dev0, DType: f32, Shape: []int64{1024}}),
			`span \[ptr, ptr\+4096\) = \[0x[0-9a-f]+, 0x[0-9a-f]+\) ends 512 bytes past the allocation \[0x[0-9a-f]+, 0x[0-9a-f]+\+4096\)`, zerocopy.ErrNotInAllocation},
		{"negative stride before start", wrap(zerocopy.Spec{Ptr: p + 8, Device: dev0, DType: f32, Shape: []int64{4}, Strides: []int64{-4}}),
			`span \[ptr-48, ptr\+4\) .* starts 40 bytes before the allocation`, zerocopy.ErrNotInAllocation},
		{"go memory as cuda", wrap(zerocopy.Spec{Ptr: uintptrOf(goMem), Device: dev0, DType: f32, Shape: []int64{64}}),
			`knows no allocation`, zerocopy.ErrNotInAllocation},
		{"pinned claimed as device", wrap(zerocopy.Spec{Ptr: pinned.Ptr(), Device: dev0, DType: f32, Shape: []int64{16}}),
			`claims cuda:0 but the driver says pinned host memory`, zerocopy.ErrWrongDevice},
		{"device claimed as pinned", wrap(zerocopy.Spec{Ptr: p, Device: dlpack.Device{Type: dlpack.CUDAHost}, DType: f32, Shape: []int64{16}}),
			`claims pinned host memory but the driver says device memory`, zerocopy.ErrWrongDevice},
		{"pinned", pinned, "", nil},
		{"cpu view", goView(t, make([]byte, 8), f32), "not CUDA memory", nil},
		{"empty", wrap(zerocopy.Spec{Ptr: 0, Device: dev0, DType: f32, Shape: []int64{0}}), "", nil},
	}
	if n, _ := cuda.DeviceCount(); n > 1 {
		on1, err := zerocopy.AllocCUDA(1, f32, 8)
		on1 = mustView(t, on1, err)
		cases = append(cases, struct {
			name string
			v    *zerocopy.View
			want string
			is   error
		}{"wrong device", wrap(zerocopy.Spec{Ptr: on1.Ptr(), Device: dev0, DType: f32, Shape: []int64{8}}),
			`claims cuda:0 but the memory is on cuda:1`, zerocopy.ErrWrongDevice})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := zerocopy.VerifyCUDA(c.v)
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !regexp.MustCompile(c.want).MatchString(err.Error()) {
				t.Fatalf("got %v\nwant match for %s", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("%v does not match %v", err, c.is)
			}
		})
	}
	keep(goMem)

	freed, err := zerocopy.AllocCUDA(0, f32, 16)
	if err != nil {
		t.Fatal(err)
	}
	stale := wrap(zerocopy.Spec{Ptr: freed.Ptr(), Device: dev0, DType: f32, Shape: []int64{16}})
	freed.Close()
	if err := zerocopy.VerifyCUDA(stale); !errors.Is(err, zerocopy.ErrNotInAllocation) {
		t.Fatalf("freed memory: got %v", err)
	}
}

func TestClassifyPointer(t *testing.T) {
	needCUDA(t)
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, 64)
	d = mustView(t, d, err)
	p, err := zerocopy.AllocPinned(dlpack.Uint8Type, 64)
	p = mustView(t, p, err)
	buf := make([]byte, 1<<16)
	g := goView(t, buf, dlpack.Uint8Type)
	cases := []struct {
		name string
		ptr  uintptr
		kind zerocopy.PointerKind
		dev  int
	}{
		{"device", d.Ptr() + 10, zerocopy.PointerDevice, 0},
		{"pinned", p.Ptr(), zerocopy.PointerHost, 0},
		{"go", g.Ptr(), zerocopy.PointerUnknown, -1},
		{"null", 0, zerocopy.PointerUnknown, -1},
	}
	for _, c := range cases {
		kind, dev, err := zerocopy.ClassifyPointer(c.ptr)
		if err != nil || kind != c.kind || (c.dev >= 0 && dev != c.dev) {
			t.Errorf("%s: got %v on %d (%v), want %v on %d", c.name, kind, dev, err, c.kind, c.dev)
		}
	}
	if err := zerocopy.RegisterHost(g); err != nil {
		t.Fatal(err)
	}
	if kind, _, _ := zerocopy.ClassifyPointer(g.Ptr() + 100); kind != zerocopy.PointerRegistered {
		t.Fatalf("after RegisterHost: %v", kind)
	}
	if err := zerocopy.UnregisterHost(g); err != nil {
		t.Fatal(err)
	}
	if kind, _, _ := zerocopy.ClassifyPointer(g.Ptr()); kind != zerocopy.PointerUnknown {
		t.Fatalf("after UnregisterHost: %v", kind)
	}
	if s := zerocopy.PointerManaged.String(); s != "managed" {
		t.Errorf("String %q", s)
	}
}

// TestAutoRegisters: PathAuto registers a buffer it sees again and again,
// and the registration ends when the buffer's last view is closed.
func TestAutoRegisters(t *testing.T) {
	needFake(t)
	c := newCopier(t, zerocopy.CopierOptions{StagedMin: 1024, RegisterMin: 4096, RegisterAfter: 2, ChunkBytes: 64 << 10})
	n := 256 << 10
	src := pattern(n, 4)
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, int64(n))
	d = mustView(t, d, err)
	h, err := zerocopy.FromBytes(src, dlpack.Uint8Type)
	if err != nil {
		t.Fatal(err)
	}
	regs := fakeLive(t, fakeRegistered)
	var got []zerocopy.TransferPath
	for range 3 {
		p, err := c.CopyVia(d, h, nil, zerocopy.PathAuto)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	want := []zerocopy.TransferPath{zerocopy.PathStaged, zerocopy.PathRegistered, zerocopy.PathDirect}
	if string(fmtPaths(got)) != string(fmtPaths(want)) {
		t.Fatalf("paths %v, want %v", got, want)
	}
	if fakeLive(t, fakeRegistered) != regs+1 {
		t.Fatalf("registered allocations %d, want %d", fakeLive(t, fakeRegistered), regs+1)
	}
	small := goView(t, make([]byte, 100), dlpack.Uint8Type)
	head := apply(t, func(v *zerocopy.View) (*zerocopy.View, error) { return v.Slice(0, 0, 100, 1) }, d)
	if p, err := c.CopyVia(small, head, nil, zerocopy.PathAuto); err != nil || p != zerocopy.PathDirect {
		t.Fatalf("small copy: %v %v", p, err)
	}
	if got := devBytes(t, d); string(got) != string(src) {
		t.Fatal("data lost")
	}
	h.Close()
	if fakeLive(t, fakeRegistered) != regs {
		t.Fatal("closing the last view did not unregister the buffer")
	}
}

func fmtPaths(ps []zerocopy.TransferPath) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + " ")
	}
	return b.String()
}

func TestParseTransferPath(t *testing.T) {
	for _, s := range []string{"auto", "direct", "Staged", "registered"} {
		p, err := zerocopy.ParseTransferPath(s)
		if err != nil || !strings.EqualFold(p.String(), s) {
			t.Errorf("%s: %v %v", s, p, err)
		}
	}
	if _, err := zerocopy.ParseTransferPath("host"); err == nil {
		t.Error("host is not forcible")
	}
}

func TestSmallTransfersAskOnlyWhatMatters(t *testing.T) {
	// A small download of one contiguous run takes the same path into
	// pinned and pageable memory, so it skips the driver's pointer query.
	// An upload asks: from pageable memory (staged by the driver before
	// cuMemcpyHtoDAsync returns) it leaves the device destination in
	// flight, and the source may be changed at once. A strided host side
	// asks too (pinned memory may go pitched).
	needFake(t)
	const n = 4096
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, n)
	d = mustView(t, d, err)
	src := make([]byte, 2*n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	want := bytes.Clone(src[:n])
	calls := func() int { return fakeCalls(t, "cuPointerGetAttributes") }
	before := calls()
	if err := zerocopy.CopyCUDA(d, goView(t, src[:n], dlpack.Uint8Type), nil); err != nil {
		t.Fatal(err)
	}
	if calls() != before+1 {
		t.Errorf("the upload asked the driver %d times, want once", calls()-before)
	}
	if d.Stream() == 0 {
		t.Error("an upload from pageable memory left nothing pending on the destination")
	}
	clear(src[:n]) // the driver staged it: the copy must not see this
	back := make([]byte, n)
	before = calls()
	if err := zerocopy.CopyCUDA(goView(t, back, dlpack.Uint8Type), d, nil); err != nil {
		t.Fatal(err)
	}
	if got := calls() - before; got != 0 {
		t.Errorf("a 4 KiB contiguous download asked the driver %d times", got)
	}
	if !bytes.Equal(back, want) {
		t.Fatalf("round trip: got %v..., want %v...", back[:4], want[:4])
	}
	every, err := zerocopy.Wrap(zerocopy.Spec{Ptr: uintptrOf(src), Device: dlpack.CPUDevice, DType: dlpack.Uint8Type,
		Shape: []int64{n}, Strides: []int64{2}}, zerocopy.NewOwner(nil, "test"))
	every = mustView(t, every, err)
	before = calls()
	if err := zerocopy.CopyCUDA(every, d, nil); err != nil {
		t.Fatal(err)
	}
	if calls() == before {
		t.Error("a strided download did not ask what its host memory is")
	}
	keep(src)
}

// Memory allocated on a stream its owner destroys first: after
// FreeOnWorkStream and MarkPending, neither readers nor the free name that
// stream again (the real driver crashes on a destroyed stream's handle),
// and the data is there.
func TestMemoryOutlivesTheStreamItWasMadeOn(t *testing.T) {
	needFake(t)
	ctx, err := zerocopy.DeviceContext(0)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	caller := ctx.WrapStream(theirs.Handle()) // what a Go function gets: a handle, not the owner's object
	v, err := zerocopy.AllocCUDAAsync(caller, dlpack.Float32Type, 256)
	if err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.Fill(v, zerocopy.Float(3), caller); err != nil {
		t.Fatal(err)
	}
	if v.Stream() != theirs.Handle() {
		t.Fatalf("the fill is pending on %#x, want the caller's stream %#x", v.Stream(), theirs.Handle())
	}
	if err := v.MarkPending(); err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.FreeOnWorkStream(v); err != nil {
		t.Fatal(err)
	}
	if err := theirs.Destroy(); err != nil {
		t.Fatal(err)
	}
	stale := int(fakeCall(t, "fakecuda_stale_stream_uses"))
	host := make([]float32, 256)
	hv, _ := zerocopy.FromSlice(host, 256)
	defer hv.Close()
	if err := zerocopy.CopyCUDA(hv, v, nil); err != nil {
		t.Fatal(err)
	}
	if host[0] != 3 || host[255] != 3 {
		t.Fatalf("read %v ... %v, want 3", host[0], host[255])
	}
	v.Close()
	if got := int(fakeCall(t, "fakecuda_stale_stream_uses")) - stale; got != 0 {
		t.Errorf("the reader or the free named the destroyed stream %d times", got)
	}
}
