package fakemem

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The errors a Tracker reports, wrapped with the pointer and sizes involved.
var (
	ErrDoubleFree       = errors.New("fakemem: double free")
	ErrUnknownPointer   = errors.New("fakemem: pointer was not allocated here")
	ErrUseAfterFree     = errors.New("fakemem: use after free")
	ErrOutOfBounds      = errors.New("fakemem: out of bounds")
	ErrGuardOverwritten = errors.New("fakemem: guard zone overwritten")
	ErrLeaked           = errors.New("fakemem: allocations still live")
	ErrClosed           = errors.New("fakemem: tracker closed")
)

// GuardByte fills the guard zone after every allocation.
const GuardByte = 0xFD

// DefaultPoison fills freed memory unless Options.Poison says otherwise.
const DefaultPoison = 0xDE

// Options configure a Tracker. The zero value is usable.
type Options struct {
	// Align is the alignment of every allocation's address; 0 means 256, as
	// cudaMalloc guarantees. It must be a power of two.
	Align int
	// Guard is the size of the guard zone after each allocation; 0 means 64,
	// negative means none.
	Guard int
	// Poison fills freed memory; 0 means DefaultPoison (0xDE).
	Poison byte
	// HostAccess registers every live allocation with
	// zerocopy.RegisterHostBacked, so typed host access (HostSlice, At,
	// Copy, Clone) works on views that name a device. Off, such views are
	// refused like real device memory and tests use Bytes.
	HostAccess bool
	// Label names the tracker's memory in owners' labels and errors.
	Label string
}

// Allocation is one block handed out by Alloc.
type Allocation struct {
	Ptr    uintptr
	Size   int64
	Device dlpack.Device
}

// Stats counts what a Tracker saw.
type Stats struct {
	Live         int   // allocations not yet freed
	LiveBytes    int64 // their total size
	Allocs       int   // successful Alloc calls
	Frees        int   // successful Free calls: deleter calls that freed something
	FreeCalls    int   // every Free call, bad ones included
	DoubleFrees  int
	UnknownFrees int
	UseAfterFree int // Check or Bytes on freed memory
	OutOfBounds  int // Check or Bytes past an allocation, guard zones overwritten
}

// EventKind says what went wrong.
type EventKind int

// The kinds of recorded events.
const (
	DoubleFree EventKind = iota + 1
	UnknownFree
	UseAfterFree
	OutOfBounds
	GuardOverwritten
)

func (k EventKind) String() string {
	switch k {
	case DoubleFree:
		return "double free"
	case UnknownFree:
		return "free of unknown pointer"
	case UseAfterFree:
		return "use after free"
	case OutOfBounds:
		return "out of bounds"
	case GuardOverwritten:
		return "guard overwritten"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one misuse a Tracker saw.
type Event struct {
	Kind   EventKind
	Ptr    uintptr
	Size   int64         // bytes involved (the access, or the allocation freed)
	Device dlpack.Device // of the allocation concerned, if any
	Err    error         // the error that was returned
}

type block struct {
	mem        []byte // backing Go memory: alignment slack, the block, the guard
	base       uintptr
	size       int64
	guard      int
	dev        dlpack.Device
	freed      bool
	unregister func()
}

// Tracker hands out and tracks fake device allocations. It is safe for
// concurrent use. Freed memory stays reserved (poisoned) for the tracker's
// lifetime, so addresses are never reused and late accesses are caught.
type Tracker struct {
	opts   Options
	mu     sync.Mutex
	blocks []*block // every block ever allocated, sorted by base
	byPtr  map[uintptr]*block
	stats  Stats
	events []Event
	closed bool
}

// New returns a Tracker with opts (defaults filled in).
func New(opts Options) *Tracker {
	if opts.Align <= 0 || opts.Align&(opts.Align-1) != 0 {
		opts.Align = 256
	}
	if opts.Guard == 0 {
		opts.Guard = 64
	} else if opts.Guard < 0 {
		opts.Guard = 0
	}
	if opts.Poison == 0 {
		opts.Poison = DefaultPoison
	}
	if opts.Label == "" {
		opts.Label = "fakemem"
	}
	return &Tracker{opts: opts, byPtr: make(map[uintptr]*block)}
}

// Alloc returns nbytes of zeroed memory labelled as device dev. A zero-byte
// allocation still gets a unique non-null pointer.
func (t *Tracker) Alloc(dev dlpack.Device, nbytes int64) (Allocation, error) {
	if !dev.Type.Valid() {
		return Allocation{}, fmt.Errorf("fakemem: Alloc: device type %d is not a DLDeviceType", dev.Type)
	}
	const limit = 1 << 33 // 8 GiB: a test asking more has a bug
	if nbytes < 0 || nbytes > limit {
		return Allocation{}, fmt.Errorf("fakemem: Alloc: size %d out of range (0..%d)", nbytes, int64(limit))
	}
	align := t.opts.Align
	mem := make([]byte, int(max(nbytes, 1))+align+t.opts.Guard)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	off := int((uintptr(align) - start%uintptr(align)) % uintptr(align))
	b := &block{mem: mem[off:], base: start + uintptr(off), size: nbytes, guard: t.opts.Guard, dev: dev}
	for i := range b.guard {
		b.mem[int(nbytes)+i] = GuardByte
	}
	if t.opts.HostAccess && nbytes > 0 {
		un, err := zerocopy.RegisterHostBacked(b.base, nbytes)
		if err != nil {
			return Allocation{}, fmt.Errorf("fakemem: Alloc: %w", err)
		}
		b.unregister = un
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		if b.unregister != nil {
			b.unregister()
		}
		return Allocation{}, fmt.Errorf("%w: Alloc(%s, %d)", ErrClosed, dev, nbytes)
	}
	i := sort.Search(len(t.blocks), func(i int) bool { return t.blocks[i].base > b.base })
	t.blocks = append(t.blocks, nil)
	copy(t.blocks[i+1:], t.blocks[i:])
	t.blocks[i] = b
	t.byPtr[b.base] = b
	t.stats.Allocs++
	t.stats.Live++
	t.stats.LiveBytes += nbytes
	return Allocation{Ptr: b.base, Size: nbytes, Device: dev}, nil
}

// Free releases the allocation at ptr (the deleter of fake memory): it
// verifies the guard zone, poisons the block and keeps it reserved. A second
// free of the same pointer, or a pointer Alloc never returned, is an error
// and an event; the memory is left alone.
func (t *Tracker) Free(ptr uintptr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.FreeCalls++
	b := t.byPtr[ptr]
	if b == nil {
		t.stats.UnknownFrees++
		err := fmt.Errorf("%w: free(%#x)", ErrUnknownPointer, ptr)
		if c := t.containing(ptr); c != nil {
			err = fmt.Errorf("%w: free(%#x) is %d bytes into the allocation at %#x", ErrUnknownPointer, ptr, ptr-c.base, c.base)
		}
		return t.record(UnknownFree, ptr, 0, dlpack.Device{}, err)
	}
	if b.freed {
		t.stats.DoubleFrees++
		return t.record(DoubleFree, ptr, b.size, b.dev, fmt.Errorf("%w: free(%#x) of %d bytes on %s", ErrDoubleFree, ptr, b.size, b.dev))
	}
	b.freed = true
	if b.unregister != nil {
		b.unregister()
	}
	t.stats.Frees++
	t.stats.Live--
	t.stats.LiveBytes -= b.size
	var err error
	for i, c := range b.mem[b.size : b.size+int64(b.guard)] {
		if c != GuardByte {
			t.stats.OutOfBounds++
			err = t.record(GuardOverwritten, b.base+uintptr(b.size)+uintptr(i), 1, b.dev,
				fmt.Errorf("%w: byte %d past the end of the %d-byte allocation at %#x was written", ErrGuardOverwritten, i, b.size, ptr))
			break
		}
	}
	p := t.opts.Poison
	for i := range b.mem[:b.size] {
		b.mem[i] = p
	}
	return err
}

// record adds an event and returns its error. t.mu is held.
func (t *Tracker) record(k EventKind, ptr uintptr, n int64, dev dlpack.Device, err error) error {
	t.events = append(t.events, Event{Kind: k, Ptr: ptr, Size: n, Device: dev, Err: err})
	return err
}

// containing returns the block whose memory, guard zone included, holds
// ptr, or nil. t.mu is held.
func (t *Tracker) containing(ptr uintptr) *block {
	i := sort.Search(len(t.blocks), func(i int) bool { return t.blocks[i].base > ptr }) - 1
	if i < 0 {
		return nil
	}
	b := t.blocks[i]
	if ptr-b.base < uintptr(max(b.size, 1))+uintptr(b.guard) {
		return b
	}
	return nil
}

// locate checks that [ptr, ptr+n) lies inside one live allocation and
// returns it. t.mu is held.
func (t *Tracker) locate(op string, ptr uintptr, n int64) (*block, error) {
	if n < 0 {
		return nil, fmt.Errorf("fakemem: %s: negative size %d", op, n)
	}
	b := t.containing(ptr)
	if b == nil {
		return nil, fmt.Errorf("%w: %s(%#x, %d)", ErrUnknownPointer, op, ptr, n)
	}
	off := int64(ptr - b.base)
	if b.freed {
		t.stats.UseAfterFree++
		return nil, t.record(UseAfterFree, ptr, n, b.dev,
			fmt.Errorf("%w: %s(%#x, %d) touches the freed %d-byte allocation at %#x", ErrUseAfterFree, op, ptr, n, b.size, b.base))
	}
	if off > b.size || n > b.size-off {
		t.stats.OutOfBounds++
		return nil, t.record(OutOfBounds, ptr, n, b.dev,
			fmt.Errorf("%w: %s(%#x, %d) reaches byte %d of the %d-byte allocation at %#x", ErrOutOfBounds, op, ptr, n, off+n, b.size, b.base))
	}
	return b, nil
}

// Check reports whether [ptr, ptr+nbytes) lies inside one live allocation:
// ErrUseAfterFree, ErrOutOfBounds (both also recorded as events) or
// ErrUnknownPointer otherwise.
func (t *Tracker) Check(ptr uintptr, nbytes int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.locate("Check", ptr, nbytes)
	return err
}

// CheckView is Check for the bytes a view may touch.
func (t *Tracker) CheckView(v *zerocopy.View) error {
	lo, hi := v.ByteSpan()
	if hi == lo {
		return nil
	}
	return t.Check(v.Ptr()+uintptr(lo), hi-lo)
}

// Bytes returns [ptr, ptr+n) of a live allocation as a byte slice sharing
// the memory, for tests to read and write fake device memory. It fails
// like Check.
func (t *Tracker) Bytes(ptr uintptr, n int64) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, err := t.locate("Bytes", ptr, n)
	if err != nil {
		return nil, err
	}
	off := int64(ptr - b.base)
	return b.mem[off : off+n : off+n], nil
}

// Stats returns the counters.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Events returns the misuses recorded so far, oldest first.
func (t *Tracker) Events() []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Event(nil), t.events...)
}

// Live returns the allocations not yet freed, by address.
func (t *Tracker) Live() []Allocation {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Allocation
	for _, b := range t.blocks {
		if !b.freed {
			out = append(out, Allocation{Ptr: b.base, Size: b.size, Device: b.dev})
		}
	}
	return out
}

// Close ends the tracker's use: it withdraws the host-access registrations
// of live allocations and refuses further Alloc calls. Frees still work and
// are counted (a deleter may come late). It returns ErrLeaked, listing
// them, when allocations are still live: call it at the end of a test.
func (t *Tracker) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var live []string
	for _, b := range t.blocks {
		if b.freed {
			continue
		}
		if b.unregister != nil {
			b.unregister()
		}
		live = append(live, fmt.Sprintf("%d bytes at %#x on %s", b.size, b.base, b.dev))
	}
	if len(live) > 0 {
		return fmt.Errorf("%w: %s", ErrLeaked, strings.Join(live, ", "))
	}
	return nil
}

// Releaser returns a zerocopy.Releaser that frees ptr: the deleter to put
// in an Owner. Errors it meets are recorded as events.
func (t *Tracker) Releaser(ptr uintptr) zerocopy.Releaser {
	return zerocopy.ReleaseFunc(func() { _ = t.Free(ptr) })
}

// View allocates memory for a C-contiguous tensor of dtype dt and shape on
// dev and wraps it in a view whose owner frees it exactly once, when the
// last view over it is closed.
func (t *Tracker) View(dev dlpack.Device, dt dlpack.DataType, shape ...int64) (*zerocopy.View, error) {
	if err := dt.Validate(); err != nil {
		return nil, fmt.Errorf("fakemem: View: %w", err)
	}
	n, err := dlpack.NumElements(shape)
	if err != nil {
		return nil, fmt.Errorf("fakemem: View: %w", err)
	}
	nb, ok := dt.StorageBytes(n, false)
	if !ok {
		return nil, fmt.Errorf("fakemem: View: %v elements of %s overflow int64 bytes", shape, dt)
	}
	a, err := t.Alloc(dev, nb)
	if err != nil {
		return nil, fmt.Errorf("fakemem: View: %w", err)
	}
	owner := zerocopy.NewOwner(t.Releaser(a.Ptr), t.opts.Label+" "+dev.String())
	return zerocopy.Wrap(zerocopy.Spec{Ptr: a.Ptr, Device: dev, DType: dt, Shape: shape}, owner)
}
