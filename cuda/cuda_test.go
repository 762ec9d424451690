package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// TestNoDriver re-runs the test binary with a driver path that does not
// exist (and with a fake whose cuInit fails): every entry point must return
// an error matching ErrNoDriver, and nothing may panic.
func TestNoDriver(t *testing.T) {
	if mode := os.Getenv(envSubprocess); mode != "" {
		noDriverChecks(t, mode)
		return
	}
	cases := []struct{ name, lib, initErr string }{
		{"missing library", "/nonexistent/libcuda.so.1", ""},
	}
	if fakePath != "" {
		cases = append(cases, struct{ name, lib, initErr string }{"cuInit fails", fakePath, "100"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNoDriver$", "-test.v")
			cmd.Env = append(os.Environ(), envSubprocess+"="+c.name, EnvLibrary+"="+c.lib, "FAKECUDA_INIT_ERROR="+c.initErr)
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("--- PASS: TestNoDriver")) {
				t.Fatalf("subprocess: %v\n%s", err, out)
			}
		})
	}
}

func noDriverChecks(t *testing.T, mode string) {
	var c *Context
	var s *Stream
	calls := map[string]func() error{
		"Init":               Init,
		"DeviceCount":        func() error { _, err := DeviceCount(); return err },
		"DriverVersion":      func() error { _, err := DriverVersion(); return err },
		"GetDevice":          func() error { _, err := GetDevice(0); return err },
		"Retain":             func() error { _, err := Retain(0); return err },
		"PointerGetAttrs":    func() error { _, err := PointerGetAttributes(0x1000); return err },
		"PointerGetAttr":     func() error { _, err := PointerGetAttribute(PointerAttrMemoryType, 0x1000); return err },
		"MemGetAddressRange": func() error { _, _, err := MemGetAddressRange(0x1000); return err },
		"VerifyDeviceRange":  func() error { _, err := VerifyDeviceRange(0x1000, 4, 0); return err },
		"CurrentContext":     func() error { _, err := CurrentContext(); return err },
	}
	for name, f := range calls {
		if err := f(); !errors.Is(err, ErrNoDriver) {
			t.Errorf("%s: got %v, want ErrNoDriver", name, err)
		}
	}
	if mode == "cuInit fails" {
		_, err := DeviceCount()
		var e *Error
		if !errors.Is(err, ErrNoDevice) || !errors.As(err, &e) || e.Name != "CUDA_ERROR_NO_DEVICE" {
			t.Errorf("cuInit failure: got %v, want it to match ErrNoDevice with the driver's name", err)
		}
	}
	if Available() {
		t.Error("Available() = true without a driver")
	}
	// Methods on nil handles answer errors, never panic.
	if err := c.Release(); err == nil {
		t.Error("nil Context Release: no error")
	}
	if err := s.Synchronize(); err == nil {
		t.Error("nil Stream Synchronize: no error")
	}
}

func TestDevices(t *testing.T) {
	needDriver(t)
	n, err := DeviceCount()
	must(t, err)
	if n < 1 {
		t.Fatalf("DeviceCount = %d", n)
	}
	v, err := DriverVersion()
	must(t, err)
	if v < 11000 {
		t.Errorf("DriverVersion = %d, want a CUDA 11+ driver", v)
	}
	for i := 0; i < n; i++ {
		d, err := GetDevice(i)
		must(t, err)
		if d.Ordinal() != i {
			t.Errorf("Ordinal = %d, want %d", d.Ordinal(), i)
		}
		name, err := d.Name()
		must(t, err)
		major, minor, err := d.ComputeCapability()
		must(t, err)
		mem, err := d.TotalMem()
		must(t, err)
		bus, err := d.PCIBusID()
		must(t, err)
		uuid, err := d.UUID()
		must(t, err)
		warp, err := d.Attribute(AttrWarpSize)
		must(t, err)
		t.Logf("device %d: %q sm_%d%d %d MiB bus %s %v", i, name, major, minor, mem>>20, bus, uuid)
		if name == "" || major < 3 || mem == 0 || warp != 32 {
			t.Errorf("device %d: name %q cc %d.%d mem %d warp %d", i, name, major, minor, mem, warp)
		}
		if !regexp.MustCompile(`^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$`).MatchString(bus) {
			t.Errorf("PCIBusID %q", bus)
		}
		if !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(uuid.String()) {
			t.Errorf("UUID %q", uuid)
		}
		if gpuMode {
			continue
		}
		if want := "Fake CUDA Device " + string(rune('0'+i)); name != want || major != 8 || minor != 0 {
			t.Errorf("fake device %d: %q %d.%d", i, name, major, minor)
		}
	}
	for _, bad := range []int{-1, n, 1 << 20} {
		_, err := GetDevice(bad)
		wantCode(t, err, ErrInvalidDevice)
	}
	var zero Device
	_, err = zero.Name()
	wantCode(t, err, ErrInvalidHandle)
	_, err = zero.PrimaryContext()
	wantCode(t, err, ErrInvalidHandle)
	if n >= 2 {
		d0, _ := GetDevice(0)
		d1, _ := GetDevice(1)
		ok, err := d0.CanAccessPeer(d1)
		must(t, err)
		t.Logf("peer access 0->1: %v", ok)
	}
}

func TestContextRetainRelease(t *testing.T) {
	f := needFake(t)
	before := f.Refs(0)
	c, err := Retain(0)
	must(t, err)
	if got := f.Refs(0); got != before+1 {
		t.Fatalf("refs after Retain = %d, want %d", got, before+1)
	}
	s, err := c.NewStream(0, 0)
	must(t, err)
	must(t, c.Release())
	// The stream keeps the primary context retained.
	if got := f.Refs(0); got != before+1 {
		t.Fatalf("refs after Release with a live stream = %d, want %d", got, before+1)
	}
	must(t, s.Synchronize())
	_, err = c.MemAlloc(16)
	wantCode(t, err, ErrInvalidHandle)
	_, err = c.NewStream(0, 0)
	wantCode(t, err, ErrInvalidHandle)
	wantCode(t, c.Release(), ErrInvalidHandle)
	must(t, s.Destroy())
	if got := f.Refs(0); got != before {
		t.Fatalf("refs after the last child = %d, want %d", got, before)
	}
}

// TestContextAnyGoroutine runs context-bound calls from many goroutines
// that never lock OS threads.
func TestContextAnyGoroutine(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				p, err := c.MemAlloc(256)
				if err != nil {
					errs <- err
					return
				}
				in := bytes.Repeat([]byte{byte(g), byte(i)}, 128)
				out := make([]byte, 256)
				if err := c.MemcpyHtoD(p, in); err != nil {
					errs <- err
				} else if err := c.MemcpyDtoH(out, p); err != nil {
					errs <- err
				} else if !bytes.Equal(in, out) {
					errs <- errors.New("round trip differs")
				}
				if err := c.MemFree(p); err != nil {
					errs <- err
				}
				runtime.Gosched()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestContextRestore checks the thread rules: a thread without a context
// keeps ours after a call; a thread with a foreign context gets it back.
func TestContextRestore(t *testing.T) {
	needDriver(t)
	need2(t)
	c0 := retain(t, 0)
	c1 := retain(t, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	restore, err := c1.SetCurrent()
	must(t, err)
	_, _, err = c0.MemGetInfo()
	must(t, err)
	cur, err := CurrentContext()
	must(t, err)
	if cur != c1.Handle() {
		t.Errorf("after a call on c0 from a thread where c1 was current: current = %#x, want c1 %#x", cur, c1.Handle())
	}
	restore()

	// No context current: ours stays after the call.
	r, err := c0.SetCurrent()
	must(t, err)
	r() // back to whatever the thread had, possibly nothing
	if cur, _ := CurrentContext(); cur == 0 {
		_, _, err = c0.MemGetInfo()
		must(t, err)
		if cur, _ = CurrentContext(); cur != c0.Handle() {
			t.Errorf("after a call from a thread without context: current = %#x, want c0 %#x", cur, c0.Handle())
		}
	}
}

func TestMemAllocFree(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	p, err := c.MemAlloc(1000)
	must(t, err)
	base, size, err := MemGetAddressRange(p + 10)
	must(t, err)
	if base != p || size < 1000 {
		t.Errorf("MemGetAddressRange(p+10) = %v, %d; want %v, >=1000", base, size, p)
	}
	free0, total, err := c.MemGetInfo()
	must(t, err)
	if free0 == 0 || total < free0 {
		t.Errorf("MemGetInfo = %d free of %d", free0, total)
	}
	must(t, c.MemFree(p))
	wantCode(t, c.MemFree(p), ErrInvalidValue)
	wantCode(t, c.MemFree(0), ErrInvalidValue)
	for _, n := range []int64{0, -1} {
		_, err := c.MemAlloc(n)
		wantCode(t, err, ErrInvalidValue)
	}
	_, err = c.MemAlloc(1 << 50)
	wantCode(t, err, ErrOutOfMemory)
	if _, _, err := MemGetAddressRange(p); err == nil {
		t.Error("MemGetAddressRange of freed memory: no error")
	}

	m, err := c.MemAllocManaged(64, 0)
	must(t, err)
	a, err := PointerGetAttributes(m)
	must(t, err)
	if !a.IsManaged || a.Kind() != KindManaged {
		t.Errorf("managed attributes %+v", a)
	}
	must(t, c.MemFree(m))
}

func TestCopies(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	const n = 4096
	in := make([]byte, n)
	for i := range in {
		in[i] = byte(i * 7)
	}
	a, err := c.MemAlloc(n)
	must(t, err)
	defer c.MemFree(a)
	b, err := c.MemAlloc(n)
	must(t, err)
	defer c.MemFree(b)

	must(t, c.MemcpyHtoD(a, in))
	must(t, c.MemcpyDtoD(b, a, n))
	out := make([]byte, n)
	must(t, c.MemcpyDtoH(out, b))
	if !bytes.Equal(in, out) {
		t.Fatal("sync round trip differs")
	}

	// Asynchronous, through pinned memory, on a stream.
	s, err := c.NewStream(StreamNonBlocking, 0)
	must(t, err)
	defer s.Destroy()
	pin, err := c.MemAllocHost(n, 0)
	must(t, err)
	defer pin.Free()
	pb := pin.Bytes()
	for i := range pb {
		pb[i] = byte(255 - i)
	}
	must(t, s.MemcpyHtoDAsync(a, pb))
	must(t, s.MemcpyDtoDAsync(b, a, n))
	clear(out)
	back, err := c.MemAllocHost(n, 0)
	must(t, err)
	defer back.Free()
	must(t, s.MemcpyDtoHAsync(back.Bytes(), b))
	must(t, s.Synchronize())
	if !bytes.Equal(pb, back.Bytes()) {
		t.Fatal("async round trip differs")
	}
	// From pageable Go memory: the source may be reused as soon as the call returns.
	src := bytes.Repeat([]byte{42}, n)
	must(t, s.MemcpyHtoDAsync(a, src))
	clear(src)
	must(t, s.MemcpyDtoHAsync(out, a))
	must(t, s.Synchronize())
	if !bytes.Equal(out, bytes.Repeat([]byte{42}, n)) {
		t.Fatal("pageable async round trip differs")
	}

	// Zero-length copies are no-ops; null pointers and negative counts are errors.
	must(t, c.MemcpyHtoD(0, nil))
	wantCode(t, c.MemcpyHtoD(0, in), ErrInvalidValue)
	wantCode(t, c.MemcpyDtoH(out, 0), ErrInvalidValue)
	wantCode(t, c.MemcpyDtoD(a, b, -1), ErrInvalidValue)
	wantCode(t, c.MemcpyDtoD(0, b, 1), ErrInvalidValue)
	wantCode(t, s.MemcpyHtoDAsync(0, in), ErrInvalidValue)
	wantCode(t, s.MemcpyDtoDAsync(a, 0, 4), ErrInvalidValue)
}

// TestCopyBeyondAllocation needs the fake: the real driver does not promise
// to check the device side of a copy against its allocation.
func TestCopyBeyondAllocation(t *testing.T) {
	needFake(t)
	c := retain(t, 0)
	p, err := c.MemAlloc(100)
	must(t, err)
	defer c.MemFree(p)
	wantCode(t, c.MemcpyHtoD(p, make([]byte, 101)), ErrInvalidValue)
	wantCode(t, c.MemcpyDtoH(make([]byte, 8), p+96), ErrInvalidValue)
	wantCode(t, c.MemsetD32(p, 0, 26), ErrInvalidValue)
	q, err := c.MemAlloc(100)
	must(t, err)
	must(t, c.MemFree(q))
	wantCode(t, c.MemcpyHtoD(q, make([]byte, 4)), ErrInvalidValue)
}

func TestMemset(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	must(t, c.MemsetD8(p, 0xab, 64))
	must(t, c.MemsetD32(p+8, 0x01020304, 2))
	out := make([]byte, 64)
	must(t, c.MemcpyDtoH(out, p))
	want := bytes.Repeat([]byte{0xab}, 64)
	binary.LittleEndian.PutUint32(want[8:], 0x01020304)
	binary.LittleEndian.PutUint32(want[12:], 0x01020304)
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("sync memset (-want +got):\n%s", diff)
	}
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	must(t, s.MemsetD8Async(p, 1, 64))
	must(t, s.MemsetD32Async(p+60, 0xffffffff, 1))
	must(t, s.Synchronize())
	must(t, c.MemcpyDtoH(out, p))
	want = bytes.Repeat([]byte{1}, 64)
	copy(want[60:], []byte{0xff, 0xff, 0xff, 0xff})
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("async memset (-want +got):\n%s", diff)
	}
	wantCode(t, c.MemsetD8(0, 0, 1), ErrInvalidValue)
	wantCode(t, s.MemsetD32Async(p, 0, -1), ErrInvalidValue)
}

func TestMemcpy2D3D(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	// A 6x10-byte host matrix with pitch 16, into a device buffer with pitch
	// 32, then the middle 4x4 block back into a dense host buffer.
	const rows, w, hp, dp = 6, 10, 16, 32
	host := make([]byte, rows*hp)
	for r := 0; r < rows; r++ {
		for x := 0; x < hp; x++ {
			host[r*hp+x] = byte(r*16 + x)
		}
	}
	d, err := c.MemAlloc(rows * dp)
	must(t, err)
	defer c.MemFree(d)
	must(t, c.MemsetD8(d, 0, rows*dp))
	must(t, c.Memcpy2D(&Memcpy2D{
		SrcMemoryType: MemoryTypeHost, SrcHost: unsafe.Pointer(&host[0]), SrcPitch: hp,
		DstMemoryType: MemoryTypeDevice, DstDevice: d, DstPitch: dp,
		WidthInBytes: w, Height: rows,
	}))
	block := make([]byte, 16)
	must(t, c.Memcpy2D(&Memcpy2D{
		SrcMemoryType: MemoryTypeDevice, SrcDevice: d, SrcPitch: dp, SrcXInBytes: 3, SrcY: 1,
		DstMemoryType: MemoryTypeHost, DstHost: unsafe.Pointer(&block[0]), DstPitch: 4,
		WidthInBytes: 4, Height: 4,
	}))
	var want []byte
	for r := 1; r < 5; r++ {
		want = append(want, host[r*hp+3:r*hp+7]...)
	}
	if diff := cmp.Diff(want, block); diff != "" {
		t.Fatalf("2D block (-want +got):\n%s", diff)
	}

	// 3D: 2 slices of 3 rows of 4 bytes, device (pitch 8, height 4) to pinned host, async.
	d3, err := c.MemAlloc(2 * 4 * 8)
	must(t, err)
	defer c.MemFree(d3)
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i)
	}
	must(t, c.MemcpyHtoD(d3, src))
	pin, err := c.MemAllocHost(24, 0)
	must(t, err)
	defer pin.Free()
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	must(t, s.Memcpy3DAsync(&Memcpy3D{
		SrcMemoryType: MemoryTypeDevice, SrcDevice: d3, SrcPitch: 8, SrcHeight: 4,
		DstMemoryType: MemoryTypeHost, DstHost: pin.Ptr(), DstPitch: 4, DstHeight: 3,
		WidthInBytes: 4, Height: 3, Depth: 2,
	}))
	must(t, s.Synchronize())
	want = want[:0]
	for z := 0; z < 2; z++ {
		for y := 0; y < 3; y++ {
			o := z*32 + y*8
			want = append(want, src[o:o+4]...)
		}
	}
	if diff := cmp.Diff(want, pin.Bytes()); diff != "" {
		t.Fatalf("3D copy (-want +got):\n%s", diff)
	}
	// 2D async from pinned memory.
	must(t, s.Memcpy2DAsync(&Memcpy2D{
		SrcMemoryType: MemoryTypeHost, SrcHost: pin.Ptr(), SrcPitch: 4,
		DstMemoryType: MemoryTypeDevice, DstDevice: d, DstPitch: dp,
		WidthInBytes: 4, Height: 6,
	}))
	must(t, s.Synchronize())
	must(t, c.MemcpyDtoH(host[:4], d+dp*5))
	if !bytes.Equal(host[:4], pin.Bytes()[20:24]) {
		t.Fatalf("2D async row 5 = %v, want %v", host[:4], pin.Bytes()[20:24])
	}

	bad := []struct {
		name string
		m    *Memcpy2D
	}{
		{"nil", nil},
		{"no type", &Memcpy2D{WidthInBytes: 1, Height: 1}},
		{"host nil", &Memcpy2D{SrcMemoryType: MemoryTypeHost, DstMemoryType: MemoryTypeDevice, DstDevice: d, WidthInBytes: 1, Height: 1}},
		{"device 0", &Memcpy2D{SrcMemoryType: MemoryTypeHost, SrcHost: pin.Ptr(), DstMemoryType: MemoryTypeDevice, WidthInBytes: 1, Height: 1}},
		{"pitch", &Memcpy2D{SrcMemoryType: MemoryTypeDevice, SrcDevice: d, SrcPitch: 2, DstMemoryType: MemoryTypeDevice, DstDevice: d, DstPitch: 8, WidthInBytes: 4, Height: 2}},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			wantCode(t, c.Memcpy2D(b.m), ErrInvalidValue)
			wantCode(t, s.Memcpy2DAsync(b.m), ErrInvalidValue)
		})
	}
	wantCode(t, c.Memcpy3D(&Memcpy3D{SrcMemoryType: MemoryTypeDevice, SrcDevice: d, DstMemoryType: MemoryTypeDevice, DstDevice: d,
		WidthInBytes: 4, Height: 2, Depth: 2, SrcPitch: 8, DstPitch: 8, SrcHeight: 1, DstHeight: 2}), ErrInvalidValue)
}

func TestPeer(t *testing.T) {
	needDriver(t)
	need2(t)
	c0 := retain(t, 0)
	c1 := retain(t, 1)
	a, err := c0.MemAlloc(256)
	must(t, err)
	defer c0.MemFree(a)
	b, err := c1.MemAlloc(256)
	must(t, err)
	defer c1.MemFree(b)
	in := bytes.Repeat([]byte{9, 8, 7, 6}, 64)
	must(t, c0.MemcpyHtoD(a, in))
	must(t, MemcpyPeer(b, c1, a, c0, 256))
	out := make([]byte, 256)
	must(t, c1.MemcpyDtoH(out, b))
	if !bytes.Equal(in, out) {
		t.Fatal("peer copy differs")
	}
	s, err := c1.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	must(t, c0.MemsetD8(a, 3, 256))
	must(t, s.MemcpyPeerAsync(b, c1, a, c0, 256))
	must(t, s.Synchronize())
	must(t, c1.MemcpyDtoH(out, b))
	if !bytes.Equal(out, bytes.Repeat([]byte{3}, 256)) {
		t.Fatal("async peer copy differs")
	}
	must(t, c0.EnablePeerAccess(c1))
	must(t, c0.EnablePeerAccess(c1)) // twice is fine
	wantCode(t, MemcpyPeer(b, c1, a, nil, 4), ErrInvalidHandle)
}

func TestStreams(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	least, greatest, err := c.StreamPriorityRange()
	must(t, err)
	if greatest > least {
		t.Errorf("priority range least %d greatest %d", least, greatest)
	}
	s, err := c.NewStream(StreamNonBlocking, greatest)
	must(t, err)
	p, err := s.Priority()
	must(t, err)
	f, err := s.Flags()
	must(t, err)
	if p != greatest || f != StreamNonBlocking {
		t.Errorf("priority %d flags %d, want %d %d", p, f, greatest, StreamNonBlocking)
	}
	ready, err := s.Query()
	must(t, err)
	if !ready {
		t.Error("empty stream not ready")
	}
	must(t, s.Synchronize())
	for _, x := range []*Stream{c.LegacyStream(), c.PerThreadStream(), c.WrapStream(0)} {
		must(t, x.Synchronize())
		if _, err := x.Query(); err != nil {
			t.Error(err)
		}
	}
	if h := c.LegacyStream().Handle(); h != StreamHandleLegacy {
		t.Errorf("legacy handle %d", h)
	}
	w := c.WrapStream(s.Handle())
	must(t, w.Synchronize())
	must(t, w.Destroy()) // forgets only
	must(t, s.Synchronize())
	must(t, s.Destroy())
	wantCode(t, s.Destroy(), ErrInvalidHandle)
	wantCode(t, s.Synchronize(), ErrInvalidHandle)
	_, err = s.Query()
	wantCode(t, err, ErrInvalidHandle)
	_, err = c.NewStream(4, 0)
	wantCode(t, err, ErrInvalidValue)
}

func TestStreamQueryPending(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	p, err := c.MemAlloc(16)
	must(t, err)
	defer c.MemFree(p)
	must(t, s.MemsetD8Async(p, 1, 16))
	must(t, s.MemsetD8Async(p, 2, 16))
	if n := f.Pending(s); n != 2 {
		t.Fatalf("pending = %d, want 2", n)
	}
	ready, err := s.Query()
	must(t, err)
	if ready {
		t.Fatal("Query ready with work pending")
	}
	for i := 0; i < 10 && !ready; i++ {
		ready, err = s.Query()
		must(t, err)
	}
	if !ready || f.Pending(s) != 0 {
		t.Fatalf("Query never became ready (pending %d)", f.Pending(s))
	}
}

func TestEvents(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	start, err := c.NewEvent(EventTiming)
	must(t, err)
	defer start.Destroy()
	end, err := c.NewEvent(EventTiming)
	must(t, err)
	defer end.Destroy()
	plain, err := c.NewEvent(0)
	must(t, err)
	defer plain.Destroy()

	p, err := c.MemAlloc(1 << 20)
	must(t, err)
	defer c.MemFree(p)
	must(t, start.Record(s))
	must(t, s.MemsetD8Async(p, 7, 1<<20))
	must(t, end.Record(s))
	must(t, plain.Record(s))
	must(t, end.Synchronize())
	ready, err := end.Query()
	must(t, err)
	if !ready {
		t.Error("synchronized event not ready")
	}
	d, err := ElapsedTime(start, end)
	must(t, err)
	if d < 0 || d > time.Minute {
		t.Errorf("elapsed %v", d)
	}
	_, err = ElapsedTime(start, plain)
	wantCode(t, err, ErrInvalidHandle)
	must(t, plain.Synchronize())

	// Another stream waits for the event.
	s2, err := c.NewStream(StreamNonBlocking, 0)
	must(t, err)
	defer s2.Destroy()
	must(t, s2.WaitEvent(plain))
	must(t, s2.Synchronize())

	_, err = c.NewEvent(1 << 8)
	wantCode(t, err, ErrInvalidValue)
	_, err = c.NewEvent(EventTiming | EventInterprocess)
	wantCode(t, err, ErrInvalidValue)
	e, err := c.NewEvent(0)
	must(t, err)
	must(t, e.Destroy())
	wantCode(t, e.Destroy(), ErrInvalidHandle)
	wantCode(t, e.Record(s), ErrInvalidHandle)
	wantCode(t, s.WaitEvent(e), ErrInvalidHandle)
	wantCode(t, s.WaitEvent(nil), ErrInvalidHandle)
}

// TestEventOtherDevice records an event of device 0 on a stream of device 1.
func TestEventOtherDevice(t *testing.T) {
	needDriver(t)
	need2(t)
	c0 := retain(t, 0)
	c1 := retain(t, 1)
	e, err := c0.NewEvent(0)
	must(t, err)
	defer e.Destroy()
	s1, err := c1.NewStream(0, 0)
	must(t, err)
	defer s1.Destroy()
	wantCode(t, e.Record(s1), ErrInvalidHandle)
	s0, err := c0.NewStream(0, 0)
	must(t, err)
	defer s0.Destroy()
	must(t, e.Record(s0))
	must(t, s1.WaitEvent(e)) // cross-device waits are allowed
	must(t, s1.Synchronize())
}

func TestPointerAttributes(t *testing.T) {
	needDriver(t)
	need := func(a PointerAttributes, err error) PointerAttributes {
		t.Helper()
		must(t, err)
		return a
	}
	c := retain(t, 0)
	p, err := c.MemAlloc(4096)
	must(t, err)
	a := need(PointerGetAttributes(p + 100))
	if a.MemoryType != MemoryTypeDevice || a.DeviceOrdinal != 0 || a.RangeStart != p || a.RangeSize < 4096 ||
		a.Context != c.Handle() || a.DevicePointer != p+100 || a.IsManaged || a.BufferID == 0 || a.Kind() != KindDevice {
		t.Errorf("device memory: %+v (ctx %#x)", a, c.Handle())
	}
	v, err := PointerGetAttribute(PointerAttrMemoryType, p)
	must(t, err)
	if MemoryType(v) != MemoryTypeDevice {
		t.Errorf("PointerGetAttribute(memory type) = %d", v)
	}
	v, err = PointerGetAttribute(PointerAttrRangeSize, p+1)
	must(t, err)
	if v < 4096 {
		t.Errorf("PointerGetAttribute(range size) = %d", v)
	}
	h, err := c.MemAllocHost(100, 0)
	must(t, err)
	a = need(PointerGetAttributes(h.DevicePtr()))
	if a.MemoryType != MemoryTypeHost || a.Kind() != KindPinnedHost || a.HostPointer != uintptr(h.Ptr()) {
		t.Errorf("pinned memory: %+v", a)
	}
	must(t, h.Free())
	wantCode(t, h.Free(), ErrInvalidHandle)

	goMem := make([]byte, 64)
	a = need(PointerGetAttributes(DevicePtr(uintptr(unsafe.Pointer(&goMem[0])))))
	if a.Known() || a.Kind() != KindUnknown || a.DeviceOrdinal != -1 {
		t.Errorf("pageable Go memory: %+v", a)
	}
	must(t, c.MemFree(p))
	a = need(PointerGetAttributes(p))
	if a.Known() {
		t.Errorf("freed memory still known: %+v", a)
	}
	if _, err := PointerGetAttribute(PointerAttrMemoryType, p); err == nil {
		t.Error("PointerGetAttribute of freed memory: no error")
	}
}

func TestVerifyDeviceRange(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	p, err := c.MemAlloc(1000)
	must(t, err)
	defer c.MemFree(p)
	_, size, err := MemGetAddressRange(p)
	must(t, err)
	_, err = VerifyDeviceRange(p, 1000, 0)
	must(t, err)
	_, err = VerifyDeviceRange(p+500, 500, -1)
	must(t, err)
	_, err = VerifyDeviceRange(p+500, size, 0)
	wantCode(t, err, ErrInvalidValue)
	if !strings.Contains(err.Error(), "past the end of the allocation") {
		t.Errorf("error does not name the bound: %v", err)
	}
	_, err = VerifyDeviceRange(DevicePtr(uintptr(unsafe.Pointer(&size))), 8, 0)
	wantCode(t, err, ErrInvalidValue)
	if n, _ := DeviceCount(); n >= 2 {
		_, err = VerifyDeviceRange(p, 8, 1)
		wantCode(t, err, ErrInvalidDevice)
		if !strings.Contains(err.Error(), "is on device 0, not device 1") {
			t.Errorf("error does not name the devices: %v", err)
		}
	}
	h, err := c.MemAllocHost(64, 0)
	must(t, err)
	defer h.Free()
	_, err = VerifyDeviceRange(h.DevicePtr(), 8, 0)
	wantCode(t, err, ErrInvalidValue)
}

func TestHostRegister(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	buf := make([]float32, 1024)
	for i := range buf {
		buf[i] = float32(i)
	}
	reg, err := RegisterSlice(c, buf, 0)
	must(t, err)
	a, err := PointerGetAttributes(DevicePtr(uintptr(reg.Ptr())))
	must(t, err)
	if a.Kind() != KindPinnedHost {
		t.Errorf("registered memory: %+v", a)
	}
	dp, err := reg.DevicePtr()
	must(t, err)
	if dp == 0 {
		t.Error("registered DevicePtr = 0")
	}
	d, err := c.MemAlloc(4096)
	must(t, err)
	defer c.MemFree(d)
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	must(t, s.MemcpyHtoDAsync(d, SliceBytes(buf)))
	must(t, s.Synchronize())
	clear(buf)
	must(t, s.MemcpyDtoHAsync(SliceBytes(buf), d))
	must(t, s.Synchronize())
	for i, v := range buf {
		if v != float32(i) {
			t.Fatalf("buf[%d] = %v", i, v)
		}
	}
	_, err = c.MemHostRegister(unsafe.Pointer(&buf[10]), 16, 0)
	wantCode(t, err, ErrHostMemoryAlreadyRegd)
	must(t, reg.Unregister())
	wantCode(t, reg.Unregister(), ErrInvalidHandle)
	_, err = reg.DevicePtr()
	wantCode(t, err, ErrInvalidHandle)
	_, err = c.MemHostRegister(nil, 16, 0)
	wantCode(t, err, ErrInvalidValue)
	_, err = RegisterSlice(c, []byte{}, 0)
	wantCode(t, err, ErrInvalidValue)
	registrations.Lock()
	left := len(registrations.m)
	registrations.Unlock()
	if left != 0 {
		t.Errorf("%d registrations left", left)
	}
}

func TestHostRegisterNoLeak(t *testing.T) {
	f := needFake(t)
	c := retain(t, 0)
	before := f.Live(3)
	for i := 0; i < 10; i++ {
		reg, err := RegisterSlice(c, make([]byte, 4096), HostRegisterPortable)
		must(t, err)
		must(t, reg.Unregister())
	}
	if got := f.Live(3); got != before {
		t.Errorf("registered ranges %d, want %d", got, before)
	}
}

func TestKernels(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	k, err := c.LoadKernels()
	must(t, err)
	defer k.Unload()
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()
	const n = 3000
	p, err := c.MemAlloc(4 * n)
	must(t, err)
	defer c.MemFree(p)
	got := make([]float32, n)
	read := func() {
		t.Helper()
		must(t, s.Synchronize())
		must(t, c.MemcpyDtoH(SliceBytes(got), p))
	}

	must(t, k.FillF32(s, p, n, 2.5))
	read()
	for i, v := range got {
		if v != 2.5 {
			t.Fatalf("fill: [%d] = %v", i, v)
		}
	}
	must(t, k.IotaF32(s, p, n, 1, 0.5))
	must(t, k.ScaleF32(s, p, n, 4))
	read()
	for i, v := range got {
		want := float32(1+float32(float32(i)*0.5)) * 4
		if v != want {
			t.Fatalf("iota+scale: [%d] = %v, want %v", i, v, want)
		}
	}
	must(t, k.SpinThenWrite(s, p, n, math.Float32bits(-1), time.Microsecond))
	read()
	for i, v := range got {
		if v != -1 {
			t.Fatalf("spin_then_write: [%d] = %v", i, v)
		}
	}
	// Launch on the legacy stream (nil) through Function.
	must(t, k.Function("fill_f32").Launch(nil, Dim3{X: 2}, Dim3{X: 128}, 0, p, uint64(10), float32(8)))
	must(t, c.LegacyStream().Synchronize())
	must(t, c.MemcpyDtoH(SliceBytes(got[:11]), p))
	if got[9] != 8 || got[10] != -1 {
		t.Fatalf("fill via Launch: %v", got[:11])
	}
	wantCode(t, k.FillF32(s, p+2, 4, 0), ErrMisalignedAddress)
	wantCode(t, k.FillF32(s, 0, 4, 0), ErrInvalidValue)
	wantCode(t, k.FillF32(s, p, -4, 0), ErrInvalidValue)
	must(t, k.FillF32(s, p, 0, 0))
	var nilK *Kernels
	wantCode(t, nilK.FillF32(s, p, 1, 0), ErrInvalidHandle)
}

// TestStridedCopy2D checks pack, unpack and strided-to-strided copies for
// every element size against a Go reference.
func TestStridedCopy2D(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	k, err := c.LoadKernels()
	must(t, err)
	defer k.Unload()
	s, err := c.NewStream(0, 0)
	must(t, err)
	defer s.Destroy()

	const R, C = 37, 300 // a row-major R x C matrix of each element size
	for _, es := range []int{1, 2, 4, 8} {
		for _, tc := range []struct {
			name             string
			r0, c0, rows, cs int64 // block origin, rows, and column step
			cols             int64
			negRows          bool
		}{
			{"column block", 3, 10, 20, 1, 100, false},
			{"every 3rd column", 0, 1, R, 3, 99, false},
			{"rows reversed", 0, 0, R, 1, C, true},
		} {
			t.Run(tc.name+"/"+string(rune('0'+es)), func(t *testing.T) {
				src := make([]byte, R*C*es)
				for i := range src {
					src[i] = byte(i*31 + i/7)
				}
				ds, err := c.MemAlloc(int64(len(src)))
				must(t, err)
				defer c.MemFree(ds)
				must(t, c.MemcpyHtoD(ds, src))
				packed := tc.rows * tc.cols * int64(es)
				dd, err := c.MemAlloc(packed)
				must(t, err)
				defer c.MemFree(dd)
				rs := int64(C * es)
				start := ds.Add((tc.r0*C + tc.c0) * int64(es))
				if tc.negRows {
					start = ds.Add((R - 1) * rs)
					rs = -rs
				}
				side := Strided2D{Ptr: start, RowStride: rs, ColStride: tc.cs * int64(es)}
				must(t, k.Pack2D(s, dd, side, tc.rows, tc.cols, es))
				must(t, s.Synchronize())
				got := make([]byte, packed)
				must(t, c.MemcpyDtoH(got, dd))
				want := make([]byte, 0, packed)
				for r := int64(0); r < tc.rows; r++ {
					for cc := int64(0); cc < tc.cols; cc++ {
						off := int64(start-ds) + r*rs + cc*side.ColStride
						want = append(want, src[off:off+int64(es)]...)
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("pack differs (first bytes got %v want %v)", got[:8], want[:8])
				}
				// Unpack into a zeroed copy of the matrix: exactly the block comes back.
				must(t, c.MemsetD8(ds, 0, int64(len(src))))
				must(t, k.Unpack2D(s, side, dd, tc.rows, tc.cols, es))
				must(t, s.Synchronize())
				back := make([]byte, len(src))
				must(t, c.MemcpyDtoH(back, ds))
				wantBack := make([]byte, len(src))
				for r := int64(0); r < tc.rows; r++ {
					for cc := int64(0); cc < tc.cols; cc++ {
						off := int64(start-ds) + r*rs + cc*side.ColStride
						copy(wantBack[off:off+int64(es)], src[off:off+int64(es)])
					}
				}
				if !bytes.Equal(back, wantBack) {
					t.Fatal("unpack differs")
				}
			})
		}
	}
	d, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(d)
	wantCode(t, k.StridedCopy2D(s, Strided2D{Ptr: d}, Strided2D{Ptr: d}, 1, 1, 3), ErrInvalidValue)
	wantCode(t, k.StridedCopy2D(s, Strided2D{Ptr: d, RowStride: 6}, Strided2D{Ptr: d}, 1, 1, 4), ErrMisalignedAddress)
	wantCode(t, k.StridedCopy2D(s, Strided2D{}, Strided2D{Ptr: d}, 1, 1, 4), ErrInvalidValue)
	must(t, k.StridedCopy2D(s, Strided2D{Ptr: d}, Strided2D{Ptr: d}, 0, 5, 4))
}

func TestModuleErrors(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	_, err := c.ModuleLoadData(nil)
	wantCode(t, err, ErrInvalidImage)
	_, err = c.ModuleLoadData([]byte(".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry broken(\n{\n\tthis is not ptx;\n}\n"))
	if err == nil {
		t.Fatal("broken PTX loaded")
	}
	var e *Error
	if !errors.As(err, &e) || (e.Code != ErrInvalidPTX && e.Code != ErrInvalidImage) {
		t.Fatalf("broken PTX: %v", err)
	}
	t.Logf("broken PTX: %v", err)

	src, err := KernelPTX("fill.ptx")
	must(t, err)
	m, err := c.ModuleLoadData(src)
	must(t, err)
	_, err = m.Function("no_such_kernel")
	wantCode(t, err, ErrNotFound)
	_, err = m.Function("")
	wantCode(t, err, ErrInvalidValue)
	f, err := m.Function("fill_f32")
	must(t, err)
	maxT, err := f.Attribute(FuncAttrMaxThreadsPerBlock)
	must(t, err)
	if maxT <= 0 || maxT > 1024 {
		t.Errorf("max threads per block %d", maxT)
	}
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	for _, bad := range [][]any{
		{p, 16, float32(1)},        // int has no fixed width
		{p, uint64(16), "x"},       // unsupported type
		{p, uint64(16), nil},       // nil
		{p, uint64(16), []byte{1}}, // slice
	} {
		wantCode(t, f.Launch(nil, Dim3{X: 1}, Dim3{X: 32}, 0, bad...), ErrInvalidValue)
	}
	wantCode(t, f.Launch(nil, Dim3{X: 1}, Dim3{X: 2048}, 0, p, uint64(16), float32(1)), ErrInvalidValue)
	if n, _ := DeviceCount(); n >= 2 {
		c1 := retain(t, 1)
		s1, err := c1.NewStream(0, 0)
		must(t, err)
		defer s1.Destroy()
		wantCode(t, f.Launch(s1, Dim3{X: 1}, Dim3{X: 32}, 0, p, uint64(16), float32(1)), ErrInvalidHandle)
	}
	if _, err := KernelPTX("nope.ptx"); err == nil {
		t.Error("KernelPTX of a missing file: no error")
	}
	must(t, m.Unload())
	wantCode(t, m.Unload(), ErrInvalidHandle)
	_, err = m.Function("fill_f32")
	wantCode(t, err, ErrInvalidHandle)
	wantCode(t, f.Launch(nil, Dim3{X: 1}, Dim3{X: 32}, 0, p, uint64(16), float32(1)), ErrInvalidHandle)
}

// TestFakePTXSignature checks that the fake rejects a known kernel whose
// PTX parameters do not match what it implements (so a PTX edit that
// changes a signature is caught in CI).
func TestFakePTXSignature(t *testing.T) {
	needFake(t)
	c := retain(t, 0)
	src, err := KernelPTX("fill.ptx")
	must(t, err)
	bad := bytes.Replace(src, []byte(".param .f32 fill_f32_value"), []byte(".param .f64 fill_f32_value"), 1)
	_, err = c.ModuleLoadData(bad)
	wantCode(t, err, ErrInvalidPTX)
	if !strings.Contains(err.Error(), "entry fill_f32 has parameter sizes (8,8,8)") {
		t.Errorf("error lacks the JIT log: %v", err)
	}
}

// TestStreamOrdering: data written by spin_then_write on stream A and read
// on stream B comes back right when B waits for an event recorded on A, and
// is detectably stale without the wait (so the check can fail). It runs on
// the fake (whose queues never run early) and on the GPU (where the kernel
// spins long enough for an unordered read to win).
func TestStreamOrdering(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	k, err := c.LoadKernels()
	must(t, err)
	defer k.Unload()
	const n = 1 << 20
	const spin = 200 * time.Millisecond
	p, err := c.MemAlloc(4 * n)
	must(t, err)
	defer c.MemFree(p)
	a, err := c.NewStream(StreamNonBlocking, 0)
	must(t, err)
	defer a.Destroy()
	b, err := c.NewStream(StreamNonBlocking, 0)
	must(t, err)
	defer b.Destroy()
	ev, err := c.NewEvent(0)
	must(t, err)
	defer ev.Destroy()
	host, err := c.MemAllocHost(4*n, 0)
	must(t, err)
	defer host.Free()

	run := func(wait bool, value uint32) (stale int) {
		must(t, c.MemsetD32(p, 0, n))
		must(t, c.LegacyStream().Synchronize()) // A and B do not wait for the legacy stream
		hb := host.Bytes()
		for i := range hb {
			hb[i] = 0xee
		}
		must(t, k.SpinThenWrite(a, p, n, value, spin))
		must(t, ev.Record(a))
		if wait {
			must(t, b.WaitEvent(ev))
		}
		must(t, b.MemcpyDtoHAsync(host.Bytes(), p))
		must(t, b.Synchronize())
		words := unsafe.Slice((*uint32)(host.Ptr()), n)
		for _, w := range words {
			if w != value {
				stale++
			}
		}
		must(t, a.Synchronize())
		return stale
	}
	if stale := run(true, 0xC0FFEE); stale != 0 {
		t.Errorf("with the event wait: %d of %d words stale", stale, n)
	}
	if stale := run(false, 0xBEEF); stale == 0 {
		t.Errorf("without the wait every word was already written: the ordering check cannot detect a missing wait")
	} else {
		t.Logf("without the wait: %d of %d words stale, as expected", stale, n)
	}
}

// TestEventReuseAcrossStreams: one event recorded on A and waited for by B,
// then recorded again on C and waited for by D. Each wait orders after the
// record that was current when the wait was queued (CUDA semantics), so B
// sees A's write and D sees C's, whichever of B and D is synchronized
// first. (The fake once drained the event's latest stream at wait time, C,
// and let B's copy read stale memory.)
func TestEventReuseAcrossStreams(t *testing.T) {
	needDriver(t)
	c := retain(t, 0)
	k, err := c.LoadKernels()
	must(t, err)
	defer k.Unload()
	const n = 1 << 16
	const spin = 20 * time.Millisecond // on a GPU: long enough for an unordered read to win
	stream := func() *Stream {
		s, err := c.NewStream(StreamNonBlocking, 0)
		must(t, err)
		t.Cleanup(func() { s.Destroy() })
		return s
	}
	a, b, cs, d := stream(), stream(), stream(), stream()
	ev, err := c.NewEvent(0)
	must(t, err)
	defer ev.Destroy()
	pa, err := c.MemAlloc(4 * n)
	must(t, err)
	defer c.MemFree(pa)
	pc, err := c.MemAlloc(4 * n)
	must(t, err)
	defer c.MemFree(pc)
	hb, err := c.MemAllocHost(4*n, 0)
	must(t, err)
	defer hb.Free()
	hd, err := c.MemAllocHost(4*n, 0)
	must(t, err)
	defer hd.Free()

	for _, tc := range []struct {
		name   string
		syncBD bool // synchronize B before D
	}{{"B first", true}, {"D first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, c.MemsetD32(pa, 0, n))
			must(t, c.MemsetD32(pc, 0, n))
			must(t, c.Synchronize())
			must(t, k.SpinThenWrite(a, pa, n, 0xA, spin))
			must(t, ev.Record(a))
			must(t, b.WaitEvent(ev))
			must(t, b.MemcpyDtoHAsync(hb.Bytes(), pa))
			// Reuse the event: legal once the wait above is queued.
			must(t, k.SpinThenWrite(cs, pc, n, 0xC, spin))
			must(t, ev.Record(cs))
			must(t, d.WaitEvent(ev))
			must(t, d.MemcpyDtoHAsync(hd.Bytes(), pc))
			if tc.syncBD {
				must(t, b.Synchronize())
				must(t, d.Synchronize())
			} else {
				must(t, d.Synchronize())
				must(t, b.Synchronize())
			}
			for _, chk := range []struct {
				name string
				h    *HostMem
				want uint32
			}{{"B (waited for A)", hb, 0xA}, {"D (waited for C)", hd, 0xC}} {
				stale := 0
				for _, w := range unsafe.Slice((*uint32)(chk.h.Ptr()), n) {
					if w != chk.want {
						stale++
					}
				}
				if stale != 0 {
					t.Errorf("%s: %d of %d words stale", chk.name, stale, n)
				}
			}
			must(t, a.Synchronize())
			must(t, cs.Synchronize())
		})
	}
}
