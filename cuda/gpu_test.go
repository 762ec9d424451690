package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// Tests that only mean something against the real driver (DLBRIDGE_GPU=1).

// cudaInclude finds the directory holding the CUDA toolkit's cuda.h.
func cudaInclude() string {
	var dirs []string
	if d := os.Getenv("CUDA_HOME"); d != "" {
		dirs = append(dirs, filepath.Join(d, "include"))
	}
	dirs = append(dirs, "/usr/local/cuda/include", "/usr/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "cuda.h")); err == nil {
			return d
		}
	}
	return ""
}

// TestGPUCopyLayoutAgainstCudaH compiles a C program against the toolkit's
// cuda.h that prints the field offsets of CUDA_MEMCPY2D/3D and compares
// them with the Go mirrors.
func TestGPUCopyLayoutAgainstCudaH(t *testing.T) {
	needGPU(t)
	inc := cudaInclude()
	if inc == "" {
		t.Skip("no cuda.h found (set CUDA_HOME)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no C compiler")
		}
	}
	dir := t.TempDir()
	src := `#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
#define F2(f) printf("%zu ", offsetof(CUDA_MEMCPY2D, f))
#define F3(f) printf("%zu ", offsetof(CUDA_MEMCPY3D, f))
int main(void) {
	F2(srcXInBytes); F2(srcY); F2(srcMemoryType); F2(srcHost); F2(srcDevice); F2(srcArray); F2(srcPitch);
	F2(dstXInBytes); F2(dstY); F2(dstMemoryType); F2(dstHost); F2(dstDevice); F2(dstArray); F2(dstPitch);
	F2(WidthInBytes); F2(Height); printf("%zu\n", sizeof(CUDA_MEMCPY2D));
	F3(srcXInBytes); F3(srcY); F3(srcZ); F3(srcLOD); F3(srcMemoryType); F3(srcHost); F3(srcDevice); F3(srcArray);
	F3(reserved0); F3(srcPitch); F3(srcHeight); F3(dstXInBytes); F3(dstY); F3(dstZ); F3(dstLOD); F3(dstMemoryType);
	F3(dstHost); F3(dstDevice); F3(dstArray); F3(reserved1); F3(dstPitch); F3(dstHeight); F3(WidthInBytes);
	F3(Height); F3(Depth); printf("%zu\n", sizeof(CUDA_MEMCPY3D));
	return 0;
}
`
	must(t, os.WriteFile(filepath.Join(dir, "l.c"), []byte(src), 0o644))
	bin := filepath.Join(dir, "l")
	if out, err := exec.Command(cc, "-I", inc, "-o", bin, filepath.Join(dir, "l.c")).CombinedOutput(); err != nil {
		t.Fatalf("compiling against %s/cuda.h: %v\n%s", inc, err, out)
	}
	out, err := exec.Command(bin).Output()
	must(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q", out)
	}
	parse := func(s string) []uintptr {
		var v []uintptr
		for _, f := range strings.Fields(s) {
			n, err := strconv.ParseUint(f, 10, 64)
			must(t, err)
			v = append(v, uintptr(n))
		}
		return v
	}
	var m2 Memcpy2D
	var m3 Memcpy3D
	go2 := []uintptr{
		unsafe.Offsetof(m2.SrcXInBytes), unsafe.Offsetof(m2.SrcY), unsafe.Offsetof(m2.SrcMemoryType),
		unsafe.Offsetof(m2.SrcHost), unsafe.Offsetof(m2.SrcDevice), unsafe.Offsetof(m2.SrcArray),
		unsafe.Offsetof(m2.SrcPitch), unsafe.Offsetof(m2.DstXInBytes), unsafe.Offsetof(m2.DstY),
		unsafe.Offsetof(m2.DstMemoryType), unsafe.Offsetof(m2.DstHost), unsafe.Offsetof(m2.DstDevice),
		unsafe.Offsetof(m2.DstArray), unsafe.Offsetof(m2.DstPitch), unsafe.Offsetof(m2.WidthInBytes),
		unsafe.Offsetof(m2.Height), unsafe.Sizeof(m2),
	}
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
	if diff := cmp.Diff(parse(lines[0]), go2); diff != "" {
		t.Errorf("CUDA_MEMCPY2D (-cuda.h +Go):\n%s", diff)
	}
	if diff := cmp.Diff(parse(lines[1]), go3); diff != "" {
		t.Errorf("CUDA_MEMCPY3D (-cuda.h +Go):\n%s", diff)
	}
}

// TestGPUCallsWithoutContext records which calls the real driver accepts
// from a thread with no current context. The package calls stream and event
// functions directly (and retries with the context only on
// CUDA_ERROR_INVALID_CONTEXT); this test shows how often that retry is
// needed. It logs; it fails only if the retry path itself fails.
func TestGPUCallsWithoutContext(t *testing.T) {
	needGPU(t)
	c := retain(t, 0)
	s, err := c.NewStream(StreamNonBlocking, 0)
	must(t, err)
	defer s.Destroy()
	e, err := c.NewEvent(0)
	must(t, err)
	defer e.Destroy()
	p, err := c.MemAlloc(64)
	must(t, err)
	defer c.MemFree(p)
	pin, err := c.MemAllocHost(64, 0)
	must(t, err)
	defer pin.Free()

	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		sh, eh := s.Handle(), e.Handle()
		b := attrPool.New().(*attrBuf)
		raw := []struct {
			name string
			call func() Result
		}{
			{"cuEventRecord", func() Result { return cuEventRecord(eh, sh) }},
			{"cuStreamWaitEvent", func() Result { return cuStreamWaitEvent(sh, eh, 0) }},
			{"cuMemcpyHtoDAsync_v2", func() Result { return cuMemcpyHtoDAsync_v2(uint64(p), pin.Ptr(), 64, sh) }},
			{"cuStreamQuery", func() Result { return cuStreamQuery(sh) }},
			{"cuStreamSynchronize", func() Result { return cuStreamSynchronize(sh) }},
			{"cuEventSynchronize", func() Result { return cuEventSynchronize(eh) }},
			{"cuPointerGetAttributes", func() Result {
				return cuPointerGetAttributes(uint32(numBatch), unsafe.Pointer(&b.attrs), unsafe.Pointer(b), uint64(p))
			}},
			{"cuMemGetAddressRange_v2", func() Result { _, _, r := cuMemGetAddressRange_v2(uint64(p)); return r }},
			{"cuMemAlloc_v2 (needs one)", func() Result { _, r := cuMemAlloc_v2(16); return r }},
		}
		var report []string
		for _, r := range raw {
			cuCtxSetCurrent(0)
			report = append(report, fmt.Sprintf("%s: %s", r.name, r.call().Name()))
		}
		t.Logf("from a thread without a current context:\n\t%s", strings.Join(report, "\n\t"))
		// The package's own calls work there whatever the driver says.
		cuCtxSetCurrent(0)
		if err := e.Record(s); err != nil {
			t.Errorf("Record: %v", err)
		}
		cuCtxSetCurrent(0)
		if err := s.WaitEvent(e); err != nil {
			t.Errorf("WaitEvent: %v", err)
		}
		cuCtxSetCurrent(0)
		if _, err := PointerGetAttributes(p); err != nil {
			t.Errorf("PointerGetAttributes: %v", err)
		}
		cuCtxSetCurrent(0)
		if err := s.Synchronize(); err != nil {
			t.Errorf("Synchronize: %v", err)
		}
	}()
	<-done
}

// TestGPUPointerKinds logs what the real driver reports for each kind of
// memory, for the record (the assertions live in TestPointerAttributes).
func TestGPUPointerKinds(t *testing.T) {
	needGPU(t)
	c := retain(t, 0)
	p, err := c.MemAlloc(1 << 20)
	must(t, err)
	defer c.MemFree(p)
	m, err := c.MemAllocManaged(1<<20, 0)
	must(t, err)
	defer c.MemFree(m)
	h, err := c.MemAllocHost(1<<20, 0)
	must(t, err)
	defer h.Free()
	goMem := make([]byte, 1<<20)
	reg, err := RegisterSlice(c, goMem, 0)
	must(t, err)
	defer reg.Unregister()
	pageable := make([]byte, 64)
	for _, x := range []struct {
		name string
		p    DevicePtr
	}{
		{"device", p}, {"device+1000", p + 1000}, {"managed", m}, {"pinned", h.DevicePtr()},
		{"registered Go", DevicePtr(uintptr(reg.Ptr()))},
		{"pageable Go", DevicePtr(uintptr(unsafe.Pointer(&pageable[0])))},
	} {
		a, err := PointerGetAttributes(x.p)
		if err != nil {
			t.Errorf("%s: %v", x.name, err)
			continue
		}
		t.Logf("%-14s kind=%-11v %+v", x.name, a.Kind(), a)
	}
}
