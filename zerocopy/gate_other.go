//go:build !linux

package zerocopy

import "sync"

// gate is a counter that goroutines wait on; on Linux the futex system
// call wakes its waiters at once (gate_linux.go), here a condition
// variable does.
type gate struct {
	mu   sync.Mutex
	cond *sync.Cond
	v    uint32
}

func (g *gate) c() *sync.Cond {
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	return g.cond
}

func (g *gate) load() uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v
}

// store sets the counter and wakes every waiter.
func (g *gate) store(v uint32) {
	g.mu.Lock()
	g.v = v
	g.c().Broadcast()
	g.mu.Unlock()
}

// waitChange returns the counter once it differs from old.
func (g *gate) waitChange(old uint32) uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.v == old {
		g.c().Wait()
	}
	return g.v
}

// waitPast returns once the counter is above n.
func (g *gate) waitPast(n uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.v <= n {
		g.c().Wait()
	}
}
