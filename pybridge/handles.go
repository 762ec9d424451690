package pybridge

import "sync"

// Handle names a Go object that C code holds. C gets a plain integer, never
// a Go pointer, so the cgo pointer rules hold and the GC stays free to manage
// the object. The low 32 bits are a slot index plus one (so 0 is never a
// handle); the high 32 bits are the slot's generation, so a handle that was
// deleted never names the object that reuses its slot.
type Handle uint64

// Table maps handles to values of type T. It is safe for concurrent use.
// The zero Table is ready to use.
type Table[T any] struct {
	mu    sync.RWMutex
	slots []slot[T]
	free  []uint32 // indexes of unused slots
	live  int
}

type slot[T any] struct {
	gen  uint32
	used bool
	val  T
}

func (h Handle) split() (index uint32, gen uint32) {
	return uint32(h) - 1, uint32(h >> 32)
}

func makeHandle(index, gen uint32) Handle { return Handle(uint64(gen)<<32 | uint64(index+1)) }

// Add stores v and returns its new handle.
func (t *Table[T]) Add(v T) Handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.slots = append(t.slots, slot[T]{gen: 1})
		i = uint32(len(t.slots) - 1)
	}
	s := &t.slots[i]
	s.used, s.val = true, v
	t.live++
	return makeHandle(i, s.gen)
}

// Get returns the value h names, or an error (code ValueError) when h was
// never issued by this table or was deleted.
func (t *Table[T]) Get(h Handle) (T, error) {
	i, gen := h.split()
	t.mu.RLock()
	if int(i) < len(t.slots) {
		if s := &t.slots[i]; s.used && s.gen == gen {
			v := s.val
			t.mu.RUnlock()
			return v, nil
		}
	}
	t.mu.RUnlock()
	var zero T
	return zero, staleHandle(h)
}

// Delete removes h and returns the value it named, so the caller can release
// it outside the table's lock. Deleting a stale handle is an error
// (ValueError), which catches double closes.
func (t *Table[T]) Delete(h Handle) (T, error) {
	i, gen := h.split()
	var zero T
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(i) >= len(t.slots) {
		return zero, staleHandle(h)
	}
	s := &t.slots[i]
	if !s.used || s.gen != gen {
		return zero, staleHandle(h)
	}
	v := s.val
	s.val, s.used = zero, false
	s.gen++
	if s.gen == 0 { // wrapped after 2^32 reuses: skip 0 so handles stay non-zero
		s.gen = 1
	}
	t.free = append(t.free, i)
	t.live--
	return v, nil
}

// Len is the number of live handles.
func (t *Table[T]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.live
}

// Range calls f for every live handle until f returns false. f must not
// call the table's methods that take its write lock (Add, Delete).
func (t *Table[T]) Range(f func(Handle, T) bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := range t.slots {
		if s := &t.slots[i]; s.used && !f(makeHandle(uint32(i), s.gen), s.val) {
			return
		}
	}
}

func staleHandle(h Handle) error {
	if h == 0 {
		return Errorf(ValueError, "dlbridge: handle 0 is not a tensor (closed, or never created)")
	}
	return Errorf(ValueError, "dlbridge: handle %#x is not live (closed, or never created)", uint64(h))
}

// objectOf returns the object of type T that h names in tab, the table of
// one Python module's objects (dlbridge.ipc's, dlbridge.nccl's); mod and
// what name them in the error: ValueError for a handle closed or never
// made, TypeError for one of another kind.
func objectOf[T any](tab *Table[any], h Handle, mod, what string) (T, error) {
	var zero T
	o, err := tab.Get(h)
	if err != nil {
		return zero, Errorf(ValueError, "%s: handle %#x is not a live %s (closed, or never created)", mod, uint64(h), what)
	}
	t, ok := o.(T)
	if !ok {
		return zero, Errorf(TypeError, "%s: handle %#x is not a %s", mod, uint64(h), what)
	}
	return t, nil
}
