package zerocopy

import (
	"math"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// gate is a counter that goroutines wait on in the futex system call, so
// that a store wakes every waiting thread at once, through the kernel
// (see crew for why not through the Go scheduler). A waiting goroutine
// keeps its thread; the runtime gives its P to others meanwhile.
type gate struct {
	v       atomic.Uint32
	waiters atomic.Int32
}

const (
	futexWaitPrivate = 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 129 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

func (g *gate) load() uint32 { return g.v.Load() }

// store sets the counter and wakes every waiter.
func (g *gate) store(v uint32) {
	g.v.Store(v)
	// A waiter counts itself before it checks the value, so a zero here
	// means it will see v and not sleep.
	g.wake()
}

// wake wakes every waiter.
func (g *gate) wake() {
	if g.waiters.Load() > 0 {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&g.v)), futexWakePrivate, math.MaxInt32, 0, 0, 0)
	}
}

// sleep waits while the counter is old (the kernel checks it again under
// its lock, so a store in between is not missed; it may return early).
func (g *gate) sleep(old uint32) {
	g.waiters.Add(1)
	if g.v.Load() == old {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&g.v)), futexWaitPrivate, uintptr(old), 0, 0, 0)
	}
	g.waiters.Add(-1)
}

// waitChange returns the counter once it differs from old.
func (g *gate) waitChange(old uint32) uint32 {
	for {
		if v := g.v.Load(); v != old {
			return v
		}
		g.sleep(old)
	}
}

// waitPast returns once the counter is above n.
func (g *gate) waitPast(n uint32) {
	for {
		v := g.v.Load()
		if v > n {
			return
		}
		g.sleep(v)
	}
}
