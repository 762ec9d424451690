package pybridge

import (
	"fmt"
	"sync"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
)

// cudaGPU is gpuBackend on the CUDA driver (package cuda, loaded at run
// time: nothing here needs a driver to build or to load the library).
type cudaGPU struct {
	once    sync.Once
	n       int
	loadErr error

	mu   sync.Mutex
	devs []*cudaDev
}

// cudaDev is one device's retained primary context (shared with PyTorch,
// CuPy and JAX, so pointers and streams are interchangeable) and the one
// event used to order streams: cuStreamWaitEvent captures the event's state
// when it is queued, so the event may be recorded again right after.
type cudaDev struct {
	ctx *cuda.Context
	mu  sync.Mutex // serializes record+wait on ev
	ev  *cuda.Event

	kmu     sync.Mutex
	kernels *cuda.Kernels // loaded on first use (tests only)
}

func init() { gpu = &cudaGPU{} }

func (g *cudaGPU) load() {
	g.once.Do(func() {
		n, err := cuda.DeviceCount()
		if err != nil {
			g.loadErr = err
			return
		}
		g.n = n
		g.devs = make([]*cudaDev, n)
	})
}

func (g *cudaGPU) DeviceCount() int { g.load(); return g.n }

func (g *cudaGPU) Unavailable() error {
	g.load()
	if g.loadErr != nil {
		return g.loadErr
	}
	if g.n == 0 {
		return fmt.Errorf("the CUDA driver sees no device")
	}
	return nil
}

func (g *cudaGPU) dev(id int32) (*cudaDev, error) {
	g.load()
	if id < 0 || int(id) >= g.n {
		return nil, Errorf(ValueError, "dlbridge: cuda:%d: there are %d CUDA devices", id, g.n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := g.devs[id]; d != nil {
		return d, nil
	}
	ctx, err := cuda.Retain(int(id))
	if err != nil {
		return nil, WithCode(RuntimeError, err)
	}
	ev, err := ctx.NewEvent(0)
	if err != nil {
		ctx.Release()
		return nil, WithCode(RuntimeError, err)
	}
	d := &cudaDev{ctx: ctx, ev: ev}
	g.devs[id] = d // kept for the life of the process
	return d, nil
}

func (g *cudaGPU) WorkStream(id int32) uintptr { return cuda.StreamHandleLegacy }

func (g *cudaGPU) Alloc(id int32, n int64) (uintptr, error) {
	d, err := g.dev(id)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		n = 1 // cuMemAlloc refuses 0 bytes; a real address keeps empty tensors simple
	}
	p, err := d.ctx.MemAlloc(n)
	if err != nil {
		return 0, WithCode(MemoryError, err)
	}
	return uintptr(p), nil
}

func (g *cudaGPU) Free(id int32, p uintptr) {
	if d, err := g.dev(id); err == nil {
		_ = d.ctx.MemFree(cuda.DevicePtr(p)) // a failure here has no one to report to
	}
}

func (g *cudaGPU) CopyHtoD(id int32, dst uintptr, src []byte, stream uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	return WithCode(RuntimeError, d.ctx.WrapStream(stream).MemcpyHtoDAsync(cuda.DevicePtr(dst), src))
}

func (g *cudaGPU) CopyDtoH(id int32, dst []byte, src uintptr, stream uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	return WithCode(RuntimeError, d.ctx.WrapStream(stream).MemcpyDtoHAsync(dst, cuda.DevicePtr(src)))
}

func (g *cudaGPU) CopyDtoD(id int32, dst, src uintptr, n int64, stream uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	return WithCode(RuntimeError, d.ctx.WrapStream(stream).MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), n))
}

func (g *cudaGPU) Memset8(id int32, dst uintptr, b byte, n int64, stream uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	return WithCode(RuntimeError, d.ctx.WrapStream(stream).MemsetD8Async(cuda.DevicePtr(dst), b, n))
}

func (g *cudaGPU) Sync(id int32, stream uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	return WithCode(RuntimeError, d.ctx.WrapStream(stream).Synchronize())
}

func (g *cudaGPU) Wait(id int32, producer, consumer uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ev.Record(d.ctx.WrapStream(producer)); err != nil {
		return WithCode(RuntimeError, err)
	}
	return WithCode(RuntimeError, d.ctx.WrapStream(consumer).WaitEvent(d.ev))
}

func (g *cudaGPU) PointerDevice(p uintptr) (int32, error) {
	v, err := cuda.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, cuda.DevicePtr(p))
	if err != nil {
		return 0, Errorf(BufferError, "dlbridge: %#x is not CUDA memory the driver knows: %v", p, err)
	}
	return int32(v), nil
}

// SpinWrite queues a kernel on stream that spins for spin, then writes value
// to the n 32-bit words at p: a slow producer, for stream-ordering tests.
func (g *cudaGPU) SpinWrite(id int32, p uintptr, n int64, value uint32, spin time.Duration, stream uintptr) error {
	d, err := g.dev(id)
	if err != nil {
		return err
	}
	d.kmu.Lock()
	if d.kernels == nil {
		if d.kernels, err = d.ctx.LoadKernels(); err != nil {
			d.kmu.Unlock()
			return WithCode(RuntimeError, err)
		}
	}
	k := d.kernels
	d.kmu.Unlock()
	return WithCode(RuntimeError, k.SpinThenWrite(d.ctx.WrapStream(stream), cuda.DevicePtr(p), n, value, spin))
}
