package cuda

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// Tests of this file use the fake driver's controls: error injection, call
// counters and the strict context mode.

func TestInjectedErrors(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	k, err := c.LoadKernels()
	must(t, err)
	defer k.Unload()

	cases := []struct {
		fn   string
		code Result
		call func() error
	}{
		{"cuMemAlloc_v2", ErrOutOfMemory, func() error { _, err := c.MemAlloc(16); return err }},
		{"cuMemcpyHtoDAsync_v2", ErrInvalidValue, func() error { return s.MemcpyHtoDAsync(p, make([]byte, 4)) }},
		{"cuLaunchKernel", ErrLaunchFailed, func() error { return k.FillF32(s, p, 4, 1) }},
		{"cuStreamSynchronize", ErrIllegalAddress, s.Synchronize},
		{"cuEventCreate", ErrOutOfMemory, func() error { _, err := c.NewEvent(0); return err }},
		{"cuModuleLoadDataEx", ErrInvalidPTX, func() error {
			k, err := c.LoadKernels()
			if err == nil {
				k.Unload()
			}
			return err
		}},
		{"cuPointerGetAttributes", ErrInvalidValue, func() error { _, err := PointerGetAttributes(p); return err }},
		{"cuMemHostAlloc", ErrOutOfMemory, func() error { _, err := c.MemAllocHost(16, 0); return err }},
		{"cuDeviceGetName", ErrInvalidDevice, func() error { _, err := c.Device().Name(); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.fn, func(t *testing.T) {
			// The stream's context current on this thread: a call made
			// direct on a thread where another context, or none, is
			// current is made again in its own when it fails with
			// CUDA_ERROR_INVALID_VALUE (wrongContext), and the retry
			// does not see the one-shot injection. The goroutine may run
			// on such a thread (qemu's slow threads showed it).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			restore, err := c.SetCurrent()
			must(t, err)
			defer restore()
			f.Inject(t, tc.fn, tc.code, 0)
			err = tc.call()
			wantCode(t, err, tc.code)
			var e *Error
			errors.As(err, &e)
			want := &Error{Code: tc.code, Name: tc.code.Name(), Message: e.Message, Op: tc.fn, Detail: e.Detail}
			if diff := cmp.Diff(want, e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if e.Message == "" || e.Message == "unrecognized error code" {
				t.Errorf("no message from cuGetErrorString: %q", e.Message)
			}
			if err := tc.call(); err != nil {
				t.Errorf("second call (no injection) failed: %v", err)
			}
		})
	}

	// "after": the third allocation fails, not the first two.
	f.Inject(t, "cuMemAlloc_v2", ErrOutOfMemory, 2)
	var got []bool
	for i := 0; i < 4; i++ {
		q, err := c.MemAlloc(8)
		got = append(got, err == nil)
		if err == nil {
			c.MemFree(q)
		}
	}
	if diff := cmp.Diff([]bool{true, true, false, true}, got); diff != "" {
		t.Errorf("allocations that succeeded (-want +got):\n%s", diff)
	}
}

// TestKernelFault: a kernel that fails while running surfaces at the next
// synchronization of its stream, as a device fault does.
func TestKernelFault(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	k, err := c.LoadKernels()
	must(t, err)
	defer k.Unload()
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	f.Inject(t, "kernel", ErrLaunchFailed, 0)
	must(t, k.FillF32(s, p, 16, 1)) // queued fine
	wantCode(t, s.Synchronize(), ErrLaunchFailed)
	must(t, s.Synchronize()) // reported once

	// A kernel that runs past its allocation faults with an illegal address.
	must(t, k.FillF32(s, p, 17, 1))
	wantCode(t, s.Synchronize(), ErrIllegalAddress)
	// Memory of another device without peer access is out of reach.
	if n, _ := DeviceCount(); n >= 2 {
		c1 := retain(t, 1)
		q, err := c1.MemAlloc(64)
		must(t, err)
		defer c1.MemFree(q)
		must(t, k.FillF32(s, q, 16, 1))
		wantCode(t, s.Synchronize(), ErrIllegalAddress)
	}
}

// TestHotPathCalls counts driver calls: calls on an explicit stream or event
// go straight to the driver (one call, no context check); calls that need
// the calling thread's context check it once.
func TestHotPathCalls(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	s2, err := c.NewStream(0, 0)
	must(t, err)
	defer s2.Destroy()
	e, err := c.NewEvent(0)
	must(t, err)
	defer e.Destroy()
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	pin, err := c.MemAllocHost(64, 0)
	must(t, err)
	defer pin.Free()

	cases := []struct {
		name string
		call func() error
		want map[string]int
	}{
		{"EventRecord", func() error { return e.Record(s) }, map[string]int{"cuEventRecord": 1}},
		{"StreamWaitEvent", func() error { return s2.WaitEvent(e) }, map[string]int{"cuStreamWaitEvent": 1}},
		{"MemcpyHtoDAsync", func() error { return s.MemcpyHtoDAsync(p, pin.Bytes()) }, map[string]int{"cuMemcpyHtoDAsync_v2": 1}},
		{"PointerGetAttributes", func() error { _, err := PointerGetAttributes(p); return err }, map[string]int{"cuPointerGetAttributes": 1}},
		{"StreamQuery", func() error { _, err := s.Query(); return err }, map[string]int{"cuStreamQuery": 1}},
		// A context-bound call checks the current context (and sets it at
		// most once per thread; this goroutine may move between threads, so
		// only the check is counted exactly).
		{"MemGetInfo", func() error { _, _, err := c.MemGetInfo(); return err }, map[string]int{"cuMemGetInfo_v2": 1, "cuCtxGetCurrent": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.ResetCalls()
			must(t, tc.call())
			got := map[string]int{}
			for _, fn := range []string{"cuEventRecord", "cuStreamWaitEvent", "cuMemcpyHtoDAsync_v2", "cuPointerGetAttributes",
				"cuStreamQuery", "cuMemGetInfo_v2", "cuCtxGetCurrent"} {
				if n := f.Calls(fn); n > 0 {
					got[fn] = n
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("driver calls (-want +got):\n%s", diff)
			}
		})
	}
	must(t, s.Synchronize())
}

// TestStrictContextFallback: if the driver insists on a current context for
// a stream call (the fake's strict mode), the call is retried with the
// stream's context made current, from a thread that had none.
func TestStrictContextFallback(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	e, err := c.NewEvent(0)
	must(t, err)
	defer e.Destroy()
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	f.Strict(t, true)

	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f.ClearCurrent()
		f.ResetCalls()
		if err := e.Record(s); err != nil {
			t.Errorf("Record in strict mode: %v", err)
		}
		if n := f.Calls("cuEventRecord"); n != 2 {
			t.Errorf("cuEventRecord calls = %d, want 2 (refused, then retried)", n)
		}
		if cur, _ := CurrentContext(); cur != c.Handle() {
			t.Errorf("current context after the retry = %#x, want %#x", cur, c.Handle())
		}
		f.ResetCalls()
		if err := e.Record(s); err != nil {
			t.Errorf("second Record: %v", err)
		}
		if n := f.Calls("cuEventRecord"); n != 1 {
			t.Errorf("second Record made %d calls, want 1 (the context stays)", n)
		}
		f.ClearCurrent()
		if _, err := PointerGetAttributes(p); err != nil {
			t.Errorf("PointerGetAttributes in strict mode: %v", err)
		}
		if _, _, err := MemGetAddressRange(p); err != nil {
			t.Errorf("MemGetAddressRange in strict mode: %v", err)
		}
	}()
	<-done
	must(t, s.Synchronize())
}

// TestContextOfAnotherDevice: a stream call made while another device's
// context is current is made again in the stream's own context (the real
// driver answers CUDA_ERROR_INVALID_VALUE there, and so does the fake in
// strict mode), and the other context is current again afterwards. From a
// thread with no context, a call on device 1 leaves none current, so that
// libraries initialised later on that thread keep device 0 as their
// default; device 0's primary context stays (keepCtx).
func TestContextOfAnotherDevice(t *testing.T) {
	f := needFake(t)
	c0, c1 := retain(t, 0), retain(t, 1)
	s1, err := c1.NewStream(0, 0)
	must(t, err)
	defer s1.Destroy()
	e1, err := c1.NewEvent(0)
	must(t, err)
	defer e1.Destroy()
	s0, err := c0.NewStream(0, 0)
	must(t, err)
	defer s0.Destroy()
	e0, err := c0.NewEvent(0)
	must(t, err)
	defer e0.Destroy()
	p, err := c1.MemAlloc(64)
	must(t, err)
	defer c1.MemFree(p)
	f.Strict(t, true)

	current := func() uintptr {
		h, err := CurrentContext()
		if err != nil {
			t.Errorf("CurrentContext: %v", err)
		}
		return h
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()

		// Device 0's context current (as PyTorch leaves it), work on device 1.
		restore, err := c0.SetCurrent()
		if err != nil {
			t.Errorf("SetCurrent: %v", err)
			return
		}
		defer restore()
		f.ResetCalls()
		if err := s1.MemcpyHtoDAsync(p, make([]byte, 64)); err != nil {
			t.Errorf("MemcpyHtoDAsync on device 1 with device 0 current: %v", err)
		}
		if n := f.Calls("cuMemcpyHtoDAsync_v2"); n != 2 {
			t.Errorf("cuMemcpyHtoDAsync_v2 calls = %d, want 2 (refused, then made in the stream's context)", n)
		}
		if err := e1.Record(s1); err != nil {
			t.Errorf("Record on device 1 with device 0 current: %v", err)
		}
		if got := current(); got != c0.Handle() {
			t.Errorf("current context after device 1's calls = %#x, want device 0's %#x", got, c0.Handle())
		}

		// No context current: device 1's is taken off again, device 0's stays.
		f.ClearCurrent()
		if err := e1.Record(s1); err != nil {
			t.Errorf("Record on device 1 from a thread with no context: %v", err)
		}
		if got := current(); got != 0 {
			t.Errorf("current context after a call on device 1 from a thread with none = %#x, want none", got)
		}
		if err := e0.Record(s0); err != nil {
			t.Errorf("Record on device 0 from a thread with no context: %v", err)
		}
		if got := current(); got != c0.Handle() {
			t.Errorf("current context after a call on device 0 = %#x, want device 0's %#x (kept)", got, c0.Handle())
		}
	}()
	<-done
	must(t, s1.Synchronize())
	must(t, s0.Synchronize())
}

// TestCopyLayout compares the Go mirrors of CUDA_MEMCPY2D/3D with the C
// compiler's layout of the same declarations (in the fake), field by field.
func TestCopyLayout(t *testing.T) {
	f := needFake(t)
	var m2 Memcpy2D
	go2 := []uintptr{
		unsafe.Offsetof(m2.SrcXInBytes), unsafe.Offsetof(m2.SrcY), unsafe.Offsetof(m2.SrcMemoryType),
		unsafe.Offsetof(m2.SrcHost), unsafe.Offsetof(m2.SrcDevice), unsafe.Offsetof(m2.SrcArray),
		unsafe.Offsetof(m2.SrcPitch), unsafe.Offsetof(m2.DstXInBytes), unsafe.Offsetof(m2.DstY),
		unsafe.Offsetof(m2.DstMemoryType), unsafe.Offsetof(m2.DstHost), unsafe.Offsetof(m2.DstDevice),
		unsafe.Offsetof(m2.DstArray), unsafe.Offsetof(m2.DstPitch), unsafe.Offsetof(m2.WidthInBytes),
		unsafe.Offsetof(m2.Height), unsafe.Sizeof(m2),
	}
	var m3 Memcpy3D
	go3 := []uintptr{
		unsafe.Offsetof(m3.SrcXInBytes), unsafe.Offsetof(m3.SrcY), unsafe.Offsetof(m3.SrcZ),
		unsafe.Offsetof(m3.SrcLOD), unsafe.Offsetof(m3.SrcMemoryType), unsafe.Offsetof(m3.SrcHost),
		unsafe.Offsetof(m3.SrcDevice), unsafe.Offsetof(m3.SrcArray), unsafe.Offsetof(m3.Reserved0),
		unsafe.Offsetof(m3.SrcPitch), unsafe.Offsetof(m3.SrcHeight), unsafe.Offsetof(m3.DstXInBytes),
		unsafe.Offsetof(m3.DstY), unsafe.Offsetof(m3.DstZ), unsafe.Offsetof(m3.DstLOD),
		unsafe.Offsetof(m3.DstMemoryType), unsafe.Offsetof(m3.DstHost), unsafe.Offsetof(m3.DstDevice),
		unsafe.Offsetof(m3.DstArray), unsafe.Offsetof(m3.Reserved1), unsafe.Offsetof(m3.DstPitch),
		unsafe.Offsetof(m3.DstHeight), unsafe.Offsetof(m3.WidthInBytes), unsafe.Offsetof(m3.Height),
		unsafe.Offsetof(m3.Depth), unsafe.Sizeof(m3),
	}
	for _, tc := range []struct {
		name string
		fn   uintptr
		gos  []uintptr
	}{{"CUDA_MEMCPY2D", f.offsets2d, go2}, {"CUDA_MEMCPY3D", f.offsets3d, go3}} {
		cs := make([]uintptr, 64)
		n := callOffsets(tc.fn, cs)
		if diff := cmp.Diff(cs[:n], tc.gos); diff != "" {
			t.Errorf("%s offsets, last is sizeof (-C +Go):\n%s", tc.name, diff)
		}
	}
	// The layouts CUDA 12/13 document (x86-64, aarch64).
	if diff := cmp.Diff([]uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128}, go2); diff != "" {
		t.Errorf("CUDA_MEMCPY2D layout (-want +got):\n%s", diff)
	}
	if go3[len(go3)-1] != 200 {
		t.Errorf("sizeof CUDA_MEMCPY3D = %d, want 200", go3[len(go3)-1])
	}
}

func TestErrorValues(t *testing.T) {
	needDriver(t)
	e := newError("cuMemAlloc_v2", ErrOutOfMemory, "bytes=1")
	if got := e.Error(); !strings.HasPrefix(got, "cuda: cuMemAlloc_v2(bytes=1): CUDA_ERROR_OUT_OF_MEMORY: ") {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(e, ErrOutOfMemory) || errors.Is(e, ErrInvalidValue) || errors.Is(e, ErrNoDriver) {
		t.Error("errors.Is does not match on the code")
	}
	u := newError("cuX", Result(12345), "")
	var ue *Error
	if !errors.As(u, &ue) || ue.Name != "CUresult(12345)" || ue.Message != "unrecognized error code" {
		t.Errorf("unknown code: %#v", ue)
	}
	m := newError("cuMissing", resultNoSymbol, "")
	if !errors.Is(m, ErrMissingSymbol) || !strings.Contains(m.Error(), "does not export cuMissing") {
		t.Errorf("missing symbol: %v", m)
	}
	if ErrNotReady.Error() != "cuda: CUDA_ERROR_NOT_READY (600)" {
		t.Errorf("Result.Error() = %q", ErrNotReady.Error())
	}
}

// TestNilAndDeadHandles: every method on a nil or destroyed handle answers
// ErrInvalidHandle (or ErrInvalidValue for a nil descriptor), never panics.
func TestNilAndDeadHandles(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	var nc *Context
	var ns *Stream
	var ne *Event
	var nm *Module
	var nf *Function
	var nh *HostMem
	var nr *HostRegistration
	dead, err := c.NewStream(0, 0)
	must(t, err)
	must(t, dead.Destroy())
	deadE, err := c.NewEvent(0)
	must(t, err)
	must(t, deadE.Destroy())
	calls := map[string]func() error{
		"nil Context.MemAlloc":      func() error { _, err := nc.MemAlloc(1); return err },
		"nil Context.NewStream":     func() error { _, err := nc.NewStream(0, 0); return err },
		"nil Context.MemcpyHtoD":    func() error { return nc.MemcpyHtoD(1, []byte{1}) },
		"nil Context.Synchronize":   nc.Synchronize,
		"nil Stream.Synchronize":    ns.Synchronize,
		"nil Stream.WaitEvent":      func() error { return ns.WaitEvent(deadE) },
		"nil Stream.MemcpyDtoH":     func() error { return ns.MemcpyDtoHAsync([]byte{1}, 1) },
		"nil Stream.MemAllocAsync":  func() error { _, err := ns.MemAllocAsync(1); return err },
		"nil Stream.Destroy":        ns.Destroy,
		"dead Stream.MemsetD8Async": func() error { return dead.MemsetD8Async(1, 0, 1) },
		"dead Stream.Memcpy2DAsync": func() error { return dead.Memcpy2DAsync(&Memcpy2D{}) },
		"nil Event.Record":          func() error { return ne.Record(c.LegacyStream()) },
		"nil Event.Synchronize":     ne.Synchronize,
		"dead Event.Query":          func() error { _, err := deadE.Query(); return err },
		"dead Event.ElapsedTime":    func() error { _, err := ElapsedTime(deadE, deadE); return err },
		"nil Module.Function":       func() error { _, err := nm.Function("x"); return err },
		"nil Module.Unload":         nm.Unload,
		"nil Function.Launch":       func() error { return nf.Launch(nil, Dim3{}, Dim3{}, 0) },
		"nil Function.Attribute":    func() error { _, err := nf.Attribute(0); return err },
		"nil HostMem.Free":          nh.Free,
		"nil Registration.Unreg":    nr.Unregister,
		"nil Kernels.Unload":        (*Kernels)(nil).Unload,
		"event on nil stream":       func() error { e, _ := c.NewEvent(0); defer e.Destroy(); return e.Record(nil) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			wantCode(t, call(), ErrInvalidHandle)
		})
	}
	if nh.Bytes() != nil || nh.Len() != 0 || ns.Handle() != 0 || ne.Handle() != 0 || nm.Handle() != 0 || nf.Name() != "" {
		t.Error("nil accessors answer non-zero")
	}
}

// TestStreamOrderedAlloc: MemAllocAsync memory is usable in stream order
// and freed in stream order; freeing twice is an error.
func TestStreamOrderedAlloc(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	p, err := s.MemAllocAsync(256)
	must(t, err)
	must(t, s.MemsetD8Async(p, 5, 256))
	out := make([]byte, 256)
	must(t, s.MemcpyDtoHAsync(out, p))
	must(t, s.MemFreeAsync(p))
	must(t, s.Synchronize())
	for i, b := range out {
		if b != 5 {
			t.Fatalf("out[%d] = %d", i, b)
		}
	}
	if !gpuMode {
		wantCode(t, s.MemFreeAsync(p), ErrInvalidValue)
	}
	wantCode(t, s.MemFreeAsync(0), ErrInvalidValue)
	_, err = s.MemAllocAsync(0)
	wantCode(t, err, ErrInvalidValue)
}

// TestStreamIsCapturing: IsCapturing follows the stream's capture, and an
// allocation from a pool made for shareable handles is refused during one
// (graph allocations support no IPC) while the default pool's works.
func TestStreamIsCapturing(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	pool, err := c.NewIPCMemPool(HandlePOSIXFD, 1<<20)
	must(t, err)
	defer pool.Destroy()
	for _, on := range []bool{false, true, false} {
		f.SetCapturing(s, on)
		got, err := s.IsCapturing()
		must(t, err)
		if got != on {
			t.Fatalf("IsCapturing = %v, want %v", got, on)
		}
		p, err := s.MemAllocFromPoolAsync(pool, 256)
		if on {
			wantCode(t, err, ErrNotSupported)
		} else {
			must(t, err)
			must(t, s.MemFreeAsync(p))
		}
		q, err := s.MemAllocAsync(256)
		must(t, err)
		must(t, s.MemFreeAsync(q))
	}
	must(t, s.Synchronize())
}

// TestStreamOwnDevice: a stream handle wrapped in another device's context
// still reports the device it was made on, which is how a caller's bare
// handle is checked against the device of the work.
func TestStreamOwnDevice(t *testing.T) {
	needFake(t)
	c0, c1 := retain(t, 0), retain(t, 1)
	s1, err := c1.NewStream(0, 0)
	must(t, err)
	defer s1.Destroy()
	for _, c := range []struct {
		name string
		s    *Stream
		want int
	}{
		{"own context", s1, 1},
		{"wrapped in cuda:0", c0.WrapStream(s1.Handle()), 1},
	} {
		d, err := c.s.OwnDevice()
		if err != nil || d.Ordinal() != c.want {
			t.Errorf("%s: OwnDevice = %v, %v; want cuda:%d", c.name, d, err, c.want)
		}
	}
	if _, err := c0.WrapStream(0xdead0).OwnDevice(); err == nil {
		t.Errorf("OwnDevice of an unknown handle: no error")
	}
}
