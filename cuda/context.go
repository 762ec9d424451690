package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Context is a retained reference to a device's primary context, the one
// context per device that the CUDA runtime, PyTorch, CuPy and JAX share, so
// pointers and streams made here are valid there and the other way round.
//
// Every method works from any goroutine: calls that depend on the calling
// thread's current context make this one current on the OS thread for the
// duration of the call (see the package documentation), so callers never
// lock OS threads or call cuCtxSetCurrent themselves.
//
// Streams, events, modules and host allocations made through a Context keep
// it alive: Release drops the caller's reference, and the primary context
// is released to the driver once Release was called and the last of those
// objects is destroyed.
type Context struct {
	h   uintptr // the CUcontext
	dev Device

	mu       sync.Mutex
	children int  // live streams, events, modules, host allocations
	released bool // Release was called
	dropped  bool // cuDevicePrimaryCtxRelease_v2 was called

	closed atomic.Bool // mirrors released, read on hot paths without mu
}

// live records retained primary contexts, so that a query that needs some
// context (and has none of its own) can borrow one.
var live struct {
	sync.Mutex
	ctxs []*Context
}

// PrimaryContext retains the device's primary context
// (cuDevicePrimaryCtxRetain), creating it on first use. Each call returns a
// new reference; balance it with Release.
func (d Device) PrimaryContext() (*Context, error) {
	if err := d.check("Device.PrimaryContext"); err != nil {
		return nil, err
	}
	var h uintptr
	if r := cuDevicePrimaryCtxRetain(ptrOf(&h), d.handle); r != Success {
		return nil, newError("cuDevicePrimaryCtxRetain", r, d.String())
	}
	c := &Context{h: h, dev: d}
	if d.Ordinal() == 0 {
		setKeepCtx(h)
	}
	live.Lock()
	live.ctxs = append(live.ctxs, c)
	live.Unlock()
	return c, nil
}

// keepCtx: a call that makes one of our contexts current on a thread that
// had none (a Go thread, or a Python thread before PyTorch or CuPy touched
// CUDA) leaves it current afterwards only if it is device 0's primary
// context, the one the CUDA runtime would take there by default. Any other
// is taken off again: left current, device 1's context made device 1 the
// default of every library initialised on that thread afterwards (pytest
// on two H200s: torch.cuda.Stream() and torch's "cuda" tensors went to
// cuda:1). The kept one saves the next call on that thread a context switch.

// wrongContext reports whether result r of an _auto call made direct may
// be the driver's answer to a call made in another context than ctx (its
// stream's or event's), or in none: the call is then made again with ctx
// current. CUDA_ERROR_INVALID_CONTEXT always is; the real driver answers
// CUDA_ERROR_INVALID_VALUE to cuMemcpyHtoDAsync on a stream of device 0
// while device 1's context is current (pytest on two H200s), so that and
// CUDA_ERROR_INVALID_HANDLE are when another context, or none, is current.
// A real error of that kind comes back again from the retry.
func wrongContext(ctx uintptr, r Result) bool {
	if r == ErrInvalidContext {
		return true
	}
	if r != ErrInvalidValue && r != ErrInvalidHandle {
		return false
	}
	cur, rc := cuCtxGetCurrent()
	return rc == Success && uintptr(cur) != ctx
}

// Retain is shorthand for GetDevice(ordinal) then PrimaryContext.
func Retain(ordinal int) (*Context, error) {
	d, err := GetDevice(ordinal)
	if err != nil {
		return nil, err
	}
	return d.PrimaryContext()
}

// Handle returns the raw CUcontext.
func (c *Context) Handle() uintptr {
	if c == nil {
		return 0
	}
	return c.h
}

// Device returns the context's device.
func (c *Context) Device() Device {
	if c == nil {
		return Device{}
	}
	return c.dev
}

func (c *Context) String() string {
	if c == nil {
		return "cuda.Context(nil)"
	}
	return fmt.Sprintf("cuda.Context(%v, %#x)", c.dev, c.h)
}

// use checks that c may be used by op.
func (c *Context) use(op string) error {
	if c == nil {
		return errHandle(op, "nil *Context")
	}
	if c.closed.Load() {
		return errHandle(op, fmt.Sprintf("%v was released", c))
	}
	return nil
}

// Release drops this reference to the primary context. The driver's
// reference is released once the streams, events, modules and host
// allocations made through c are gone too. A second Release returns an
// error matching ErrInvalidHandle.
func (c *Context) Release() error {
	if c == nil {
		return errHandle("Context.Release", "nil *Context")
	}
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return errHandle("Context.Release", fmt.Sprintf("%v released twice", c))
	}
	c.released = true
	c.closed.Store(true)
	drop := c.children == 0 && !c.dropped
	if drop {
		c.dropped = true
	}
	c.mu.Unlock()
	if drop {
		return c.drop()
	}
	return nil
}

// addChild records an object that keeps c alive. It fails once c is released.
func (c *Context) addChild(op string) error {
	if c == nil {
		return errHandle(op, "nil *Context")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return errHandle(op, fmt.Sprintf("%v was released", c))
	}
	c.children++
	return nil
}

// removeChild forgets one child and drops the driver's reference when it was
// the last one after Release.
func (c *Context) removeChild() error {
	c.mu.Lock()
	c.children--
	drop := c.released && c.children == 0 && !c.dropped
	if drop {
		c.dropped = true
	}
	c.mu.Unlock()
	if drop {
		return c.drop()
	}
	return nil
}

func (c *Context) drop() error {
	live.Lock()
	for i, x := range live.ctxs {
		if x == c {
			live.ctxs = append(live.ctxs[:i], live.ctxs[i+1:]...)
			break
		}
	}
	live.Unlock()
	if r := cuDevicePrimaryCtxRelease_v2(c.dev.handle); r != Success {
		return newError("cuDevicePrimaryCtxRelease_v2", r, c.dev.String())
	}
	return nil
}

// anyContext returns the handle of some retained primary context, or 0.
func anyContext() uintptr {
	live.Lock()
	defer live.Unlock()
	for _, c := range live.ctxs {
		c.mu.Lock()
		ok := !c.dropped
		c.mu.Unlock()
		if ok {
			return c.h
		}
	}
	return 0
}

// Synchronize blocks until all work in the context is done (cuCtxSynchronize).
// Prefer Stream.Synchronize or Event.Synchronize: this waits for every stream.
func (c *Context) Synchronize() error {
	if err := c.use("Context.Synchronize"); err != nil {
		return err
	}
	return check("cuCtxSynchronize", cuCtxSynchronize_ctx(c.h), nil)
}

// MemGetInfo returns the free and total device memory in bytes.
func (c *Context) MemGetInfo() (free, total uint64, err error) {
	if err := c.use("Context.MemGetInfo"); err != nil {
		return 0, 0, err
	}
	if r := cuMemGetInfo_v2_ctx(c.h, ptrOf(&free), ptrOf(&total)); r != Success {
		return 0, 0, newError("cuMemGetInfo_v2", r, c.dev.String())
	}
	return free, total, nil
}

// StreamPriorityRange returns the numerical range of stream priorities:
// least (usually 0) and greatest (a negative number: lower is more urgent).
func (c *Context) StreamPriorityRange() (least, greatest int, err error) {
	if err := c.use("Context.StreamPriorityRange"); err != nil {
		return 0, 0, err
	}
	var lo, hi int32
	if r := cuCtxGetStreamPriorityRange_ctx(c.h, ptrOf(&lo), ptrOf(&hi)); r != Success {
		return 0, 0, newError("cuCtxGetStreamPriorityRange", r, c.dev.String())
	}
	return int(lo), int(hi), nil
}

// EnablePeerAccess lets kernels in c address memory of peer's device
// (cuCtxEnablePeerAccess). Enabling it twice is not an error here.
func (c *Context) EnablePeerAccess(peer *Context) error {
	if err := c.use("Context.EnablePeerAccess"); err != nil {
		return err
	}
	if err := peer.use("Context.EnablePeerAccess"); err != nil {
		return err
	}
	r := cuCtxEnablePeerAccess_ctx(c.h, peer.h, 0)
	if r == ErrPeerAccessAlreadyEnabled {
		return nil
	}
	if r != Success {
		return newError("cuCtxEnablePeerAccess", r, fmt.Sprintf("%v peer=%v", c.dev, peer.dev))
	}
	return nil
}

// SetCurrent makes c the current context of the calling OS thread and
// returns a function that restores the previous one. Callers of this
// package never need it; it is for handing the thread to C code that
// expects a current context (lock the OS thread around both calls).
func (c *Context) SetCurrent() (restore func(), err error) {
	if err := c.use("Context.SetCurrent"); err != nil {
		return nil, err
	}
	prev, r := cuCtxGetCurrent()
	if r != Success {
		return nil, newError("cuCtxGetCurrent", r, "")
	}
	if r := cuCtxSetCurrent(c.h); r != Success {
		return nil, newError("cuCtxSetCurrent", r, c.String())
	}
	return func() { cuCtxSetCurrent(uintptr(prev)) }, nil
}

// CurrentContext returns the raw CUcontext current on the calling OS thread
// (0 for none). Without a locked OS thread the answer may describe another
// thread by the time it is used; it exists for tests and diagnostics.
func CurrentContext() (uintptr, error) {
	if err := load(); err != nil {
		return 0, err
	}
	h, r := cuCtxGetCurrent()
	if r != Success {
		return 0, newError("cuCtxGetCurrent", r, "")
	}
	return uintptr(h), nil
}
