package fakemem_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
)

func TestAllocFree(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	a, err := tr.Alloc(dlpack.CUDADevice(1), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if a.Ptr%256 != 0 || a.Size != 1000 || a.Device != dlpack.CUDADevice(1) {
		t.Errorf("allocation %+v: want 256-aligned, 1000 bytes, cuda:1", a)
	}
	b, err := tr.Bytes(a.Ptr, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		if c != 0 {
			t.Fatalf("new memory byte %d = %#x, want zero", i, c)
		}
	}
	b[0], b[999] = 1, 2
	if diff := cmp.Diff(fakemem.Stats{Live: 1, LiveBytes: 1000, Allocs: 1}, tr.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]fakemem.Allocation{a}, tr.Live()); diff != "" {
		t.Errorf("live (-want +got):\n%s", diff)
	}
	if err := tr.Free(a.Ptr); err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		if c != fakemem.DefaultPoison {
			t.Fatalf("freed byte %d = %#x, want poison %#x", i, c, fakemem.DefaultPoison)
		}
	}
	if len(tr.Live()) != 0 {
		t.Errorf("live after free: %v", tr.Live())
	}
	z, err := tr.Alloc(dlpack.CPUDevice, 0)
	if err != nil || z.Ptr == 0 || z.Ptr == a.Ptr {
		t.Errorf("zero-byte allocation %+v, %v: want a fresh non-null pointer", z, err)
	}
}

func TestMisuse(t *testing.T) {
	tr := fakemem.New(fakemem.Options{Poison: 0xAB})
	a, _ := tr.Alloc(dlpack.CUDADevice(0), 64)
	other, _ := tr.Alloc(dlpack.CUDADevice(0), 16)
	tests := []struct {
		name string
		err  error
		is   error
		want string
	}{
		{"check ok", tr.Check(a.Ptr+8, 56), nil, ""},
		{"check past end", tr.Check(a.Ptr+8, 57), fakemem.ErrOutOfBounds, "reaches byte 65 of the 64-byte allocation"},
		{"check in guard", tr.Check(a.Ptr+64, 1), fakemem.ErrOutOfBounds, "reaches byte 65"},
		{"check unknown", tr.Check(8, 1), fakemem.ErrUnknownPointer, "Check(0x8, 1)"},
		{"free interior", tr.Free(a.Ptr + 4), fakemem.ErrUnknownPointer, "4 bytes into the allocation"},
		{"free unknown", tr.Free(16), fakemem.ErrUnknownPointer, "free(0x10)"},
		{"free", tr.Free(a.Ptr), nil, ""},
		{"double free", tr.Free(a.Ptr), fakemem.ErrDoubleFree, "of 64 bytes on cuda:0"},
		{"use after free", tr.Check(a.Ptr, 4), fakemem.ErrUseAfterFree, "touches the freed 64-byte allocation"},
		{"bytes after free", second(tr.Bytes(a.Ptr+60, 4)), fakemem.ErrUseAfterFree, ""},
		{"other still fine", tr.Check(other.Ptr, 16), nil, ""},
	}
	for _, tc := range tests {
		if tc.is == nil {
			if tc.err != nil {
				t.Errorf("%s: %v", tc.name, tc.err)
			}
			continue
		}
		if !errors.Is(tc.err, tc.is) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %v containing %q", tc.name, tc.err, tc.is, tc.want)
		}
	}
	want := fakemem.Stats{Live: 1, LiveBytes: 16, Allocs: 2, Frees: 1, FreeCalls: 4, DoubleFrees: 1,
		UnknownFrees: 2, UseAfterFree: 2, OutOfBounds: 2}
	if diff := cmp.Diff(want, tr.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	var kinds []fakemem.EventKind
	for _, e := range tr.Events() {
		kinds = append(kinds, e.Kind)
		if e.Err == nil {
			t.Errorf("event %v without its error", e.Kind)
		}
	}
	wantKinds := []fakemem.EventKind{fakemem.OutOfBounds, fakemem.OutOfBounds, fakemem.UnknownFree,
		fakemem.UnknownFree, fakemem.DoubleFree, fakemem.UseAfterFree, fakemem.UseAfterFree}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if s := fakemem.DoubleFree.String(); s != "double free" {
		t.Errorf("DoubleFree.String() = %q", s)
	}
}

func second[T any](_ T, err error) error { return err }

func TestGuardOverwritten(t *testing.T) {
	tr := fakemem.New(fakemem.Options{Guard: 8})
	a, _ := tr.Alloc(dlpack.CUDADevice(0), 10)
	b, _ := tr.Bytes(a.Ptr, a.Size)
	// Write one byte past the end, as a buggy kernel would: the guard zone
	// is part of the same Go allocation, so this stays memory-safe.
	unsafe.Slice(unsafe.SliceData(b), 12)[11] = 0
	err := tr.Free(a.Ptr)
	if !errors.Is(err, fakemem.ErrGuardOverwritten) || !strings.Contains(err.Error(), "byte 1 past the end of the 10-byte allocation") {
		t.Errorf("Free after an overrun: %v", err)
	}
	if s := tr.Stats(); s.Frees != 1 || s.Live != 0 || s.OutOfBounds != 1 {
		t.Errorf("stats after an overrun %+v: want freed anyway and counted", s)
	}
}

func TestOptionsAndErrors(t *testing.T) {
	tr := fakemem.New(fakemem.Options{Align: 4096, Guard: -1})
	a, err := tr.Alloc(dlpack.Device{Type: dlpack.ROCM}, 3)
	if err != nil || a.Ptr%4096 != 0 {
		t.Errorf("Align 4096: %+v, %v", a, err)
	}
	if err := tr.Check(a.Ptr+3, 1); !errors.Is(err, fakemem.ErrUnknownPointer) {
		t.Errorf("with no guard, the byte past the end is nobody's: %v", err)
	}
	for _, tc := range []struct {
		dev dlpack.Device
		n   int64
	}{{dlpack.Device{Type: 5}, 1}, {dlpack.CPUDevice, -1}, {dlpack.CPUDevice, 1 << 40}} {
		if _, err := tr.Alloc(tc.dev, tc.n); err == nil {
			t.Errorf("Alloc(%v, %d) accepted", tc.dev, tc.n)
		}
	}
	if _, err := tr.View(dlpack.CPUDevice, dlpack.DataType{Code: 77, Bits: 8, Lanes: 1}, 2); err == nil {
		t.Errorf("View with a bad dtype accepted")
	}
	if _, err := tr.View(dlpack.CPUDevice, dlpack.Float32Type, -2); err == nil {
		t.Errorf("View with a negative extent accepted")
	}
}

// TestViewFreesOnce: a tracker view is freed exactly once, after the last
// of the views retained from it is closed, whichever goroutine closes it.
func TestViewFreesOnce(t *testing.T) {
	tr := fakemem.New(fakemem.Options{})
	v, err := tr.View(dlpack.CUDADevice(0), dlpack.Float32Type, 16, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.CheckView(v); err != nil {
		t.Fatal(err)
	}
	var views []*zerocopy.View
	for i := int64(0); i < 16; i++ {
		s, err := v.Select(0, i)
		if err != nil {
			t.Fatal(err)
		}
		// Derived views borrow v's reference; Retain gives each its own,
		// so that they outlive v.
		if s, err = s.Retain(); err != nil {
			t.Fatal(err)
		}
		views = append(views, s)
	}
	v.Close()
	var wg sync.WaitGroup
	for _, s := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tr.CheckView(s); err != nil {
				t.Error(err)
			}
			s.Close()
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(fakemem.Stats{Allocs: 1, Frees: 1, FreeCalls: 1}, tr.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if err := tr.CheckView(views[0]); !errors.Is(err, fakemem.ErrUseAfterFree) {
		t.Errorf("CheckView after the free: %v", err)
	}
}

func TestHostAccessOption(t *testing.T) {
	for _, host := range []bool{false, true} {
		tr := fakemem.New(fakemem.Options{HostAccess: host})
		v, err := tr.View(dlpack.CUDADevice(0), dlpack.Int32Type, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		err = zerocopy.Set[int32](v, 7, 1, 2)
		if !host {
			if err == nil || !strings.Contains(err.Error(), "not host-accessible") {
				t.Errorf("Set on fake cuda memory without HostAccess: %v", err)
			}
			b, err := tr.Bytes(v.Ptr(), 24)
			if err != nil {
				t.Fatal(err)
			}
			b[20] = 7 // element [1, 2], little-endian
		} else if err != nil {
			t.Fatalf("Set with HostAccess: %v", err)
		}
		c, err := tr.View(dlpack.CUDADevice(0), dlpack.Int32Type, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		err = zerocopy.Copy(c, v)
		if host != (err == nil) {
			t.Errorf("HostAccess=%t: Copy between fake cuda views: %v", host, err)
		}
		if host {
			got, err := zerocopy.HostSliceRO[int32](c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int32{0, 0, 0, 0, 0, 7}, got); diff != "" {
				t.Errorf("copied (-want +got):\n%s", diff)
			}
		}
		v.Close()
		c.Close()
		if host {
			if _, err := zerocopy.HostSliceRO[int32](v); err == nil {
				t.Errorf("HostSliceRO of a closed view succeeded")
			}
		}
		if s := tr.Stats(); s.Frees != 2 || s.Live != 0 {
			t.Errorf("stats %+v", s)
		}
	}
}

func TestConcurrentAllocFree(t *testing.T) {
	tr := fakemem.New(fakemem.Options{HostAccess: true})
	var wg sync.WaitGroup
	ptrs := make(chan uintptr, 400)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				a, err := tr.Alloc(dlpack.CUDADevice(g%2), int64(8*(i+1)))
				if err != nil {
					t.Error(err)
					return
				}
				ptrs <- a.Ptr
			}
		}(g)
	}
	var fg sync.WaitGroup
	for g := 0; g < 4; g++ {
		fg.Add(1)
		go func() {
			defer fg.Done()
			for p := range ptrs {
				if err := tr.Free(p); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	close(ptrs)
	fg.Wait()
	want := fakemem.Stats{Allocs: 400, Frees: 400, FreeCalls: 400}
	if diff := cmp.Diff(want, tr.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if ev := tr.Events(); len(ev) != 0 {
		t.Errorf("events: %v", ev)
	}
}

func TestClose(t *testing.T) {
	tr := fakemem.New(fakemem.Options{HostAccess: true})
	v, err := tr.View(dlpack.CUDADevice(0), dlpack.Uint8Type, 4)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Close()
	if !errors.Is(err, fakemem.ErrLeaked) || !strings.Contains(err.Error(), "4 bytes at") {
		t.Errorf("Close with a live allocation: %v", err)
	}
	if _, err := zerocopy.HostSliceRO[uint8](v); err == nil {
		t.Errorf("host access still registered after Close")
	}
	if _, err := tr.Alloc(dlpack.CPUDevice, 1); !errors.Is(err, fakemem.ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
	v.Close() // a late deleter still counts
	if s := tr.Stats(); s.Frees != 1 || s.Live != 0 {
		t.Errorf("stats after a late free: %+v", s)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
