package cuda

import (
	"testing"
)

// Benchmarks of the binding's hot paths. Against the fake they measure the
// binding plus a mutex in the fake; bench/bindcost compares the bindings
// against the real driver side by side.

func benchCtx(b *testing.B) *Context {
	b.Helper()
	needDriver(b)
	return retain(b, 0)
}

// BenchmarkDeviceAttribute is a trivial driver call that needs no context:
// the floor of one binding call.
func BenchmarkDeviceAttribute(b *testing.B) {
	c := benchCtx(b)
	d := c.Device()
	for b.Loop() {
		if _, err := d.Attribute(AttrWarpSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawDeviceAttribute is the same call through the generated
// binding alone, without the Go method around it.
func BenchmarkRawDeviceAttribute(b *testing.B) {
	c := benchCtx(b)
	h := c.Device().Handle()
	for b.Loop() {
		if _, r := cuDeviceGetAttribute(int32(AttrWarpSize), h); r != Success {
			b.Fatal(r)
		}
	}
}

// BenchmarkMemGetInfo is a context-bound call: it checks the thread's
// current context first (one more driver call). Compare with
// BenchmarkRawMemGetInfo, the same call with the context already current.
func BenchmarkMemGetInfo(b *testing.B) {
	c := benchCtx(b)
	for b.Loop() {
		if _, _, err := c.MemGetInfo(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawMemGetInfo(b *testing.B) {
	c := benchCtx(b)
	restore, err := c.SetCurrent()
	must(b, err)
	defer restore()
	var free, total uint64
	pf, pt := ptrOf(&free), ptrOf(&total)
	for b.Loop() {
		// The goroutine may move to a thread without the context; count
		// only the successful calls' cost, which is what matters here.
		cuMemGetInfo_v2(pf, pt)
	}
}

func BenchmarkPointerGetAttributes(b *testing.B) {
	c := benchCtx(b)
	p, err := c.MemAlloc(1 << 10)
	must(b, err)
	defer c.MemFree(p)
	for b.Loop() {
		if _, err := PointerGetAttributes(p + 10); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPointerGetAttribute(b *testing.B) {
	c := benchCtx(b)
	p, err := c.MemAlloc(1 << 10)
	must(b, err)
	defer c.MemFree(p)
	for b.Loop() {
		if _, err := PointerGetAttribute(PointerAttrDeviceOrdinal, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEventRecordWait is the ordering step of a zero-copy handoff: an
// event recorded on one stream and waited for by another.
func BenchmarkEventRecordWait(b *testing.B) {
	c := benchCtx(b)
	s1, err := c.NewStream(StreamNonBlocking, 0)
	must(b, err)
	defer s1.Destroy()
	s2, err := c.NewStream(StreamNonBlocking, 0)
	must(b, err)
	defer s2.Destroy()
	e, err := c.NewEvent(0)
	must(b, err)
	defer e.Destroy()
	i := 0
	for b.Loop() {
		if err := e.Record(s1); err != nil {
			b.Fatal(err)
		}
		if err := s2.WaitEvent(e); err != nil {
			b.Fatal(err)
		}
		if i++; i%1024 == 0 {
			b.StopTimer()
			must(b, s2.Synchronize())
			b.StartTimer()
		}
	}
	must(b, s2.Synchronize())
}

// BenchmarkMemcpyHtoDAsync4B queues tiny copies from pinned memory: the
// call's cost, not the bus's.
func BenchmarkMemcpyHtoDAsync4B(b *testing.B) {
	c := benchCtx(b)
	s, err := c.NewStream(StreamNonBlocking, 0)
	must(b, err)
	defer s.Destroy()
	h, err := c.MemAllocHost(4, 0)
	must(b, err)
	defer h.Free()
	p, err := c.MemAlloc(4)
	must(b, err)
	defer c.MemFree(p)
	src := h.Bytes()
	i := 0
	for b.Loop() {
		if err := s.MemcpyHtoDAsync(p, src); err != nil {
			b.Fatal(err)
		}
		if i++; i%1024 == 0 {
			b.StopTimer()
			must(b, s.Synchronize())
			b.StartTimer()
		}
	}
	must(b, s.Synchronize())
}
