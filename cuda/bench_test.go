package cuda

import (
	"runtime"
	"testing"
	"unsafe"
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

// BenchmarkCtxBound measures what making the context current costs a
// context-bound call: cuCtxGetDevice through the binding that checks (and
// if needed sets) the thread's context, against the bare binding on a
// thread where the context is already current.
func BenchmarkCtxBound(b *testing.B) {
	c := benchCtx(b)
	other := benchOther(b)
	// Sub-benchmarks run on goroutines of their own: each locks its thread
	// and sets the context it needs.
	onThread := func(b *testing.B, cur *Context, f func() Result) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		restore, err := cur.SetCurrent()
		must(b, err)
		defer restore()
		for b.Loop() {
			if r := f(); r != Success {
				b.Fatal(r)
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		onThread(b, c, func() Result { _, r := cuCtxGetDevice(); return r })
	})
	b.Run("ctx-checked", func(b *testing.B) {
		onThread(b, c, func() Result { _, r := cuCtxGetDevice_ctx(c.h); return r })
	})
	if other != nil {
		// A foreign context is current: set ours, call, restore theirs.
		b.Run("ctx-switched", func(b *testing.B) {
			onThread(b, other, func() Result { _, r := cuCtxGetDevice_ctx(c.h); return r })
		})
	}
}

// benchOther retains device 1, or returns nil with one device.
func benchOther(b *testing.B) *Context {
	if n, _ := DeviceCount(); n < 2 {
		return nil
	}
	return retain(b, 1)
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

// BenchmarkPointerGetAttributesParts takes PointerGetAttributes apart: the
// bare binding on one buffer, with the buffer from the pool, and the whole
// function.
func BenchmarkPointerGetAttributesParts(b *testing.B) {
	c := benchCtx(b)
	p, err := c.MemAlloc(1 << 10)
	must(b, err)
	defer c.MemFree(p)
	fixed := attrPool.New().(*attrBuf)
	b.Run("binding", func(b *testing.B) {
		for b.Loop() {
			if r := cuPointerGetAttributes(uint32(numBatch), unsafe.Pointer(&fixed.attrs), unsafe.Pointer(fixed), uint64(p)); r != Success {
				b.Fatal(r)
			}
		}
	})
	b.Run("binding+pool", func(b *testing.B) {
		for b.Loop() {
			x := attrPool.Get().(*attrBuf)
			x.slots = [numBatch]uint64{}
			if r := cuPointerGetAttributes(uint32(numBatch), unsafe.Pointer(&x.attrs), unsafe.Pointer(x), uint64(p)); r != Success {
				b.Fatal(r)
			}
			attrPool.Put(x)
		}
	})
	b.Run("PointerGetAttributes", func(b *testing.B) {
		for b.Loop() {
			if _, err := PointerGetAttributes(p); err != nil {
				b.Fatal(err)
			}
		}
	})
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
