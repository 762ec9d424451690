package cuda

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Event creation flags. Timing is off unless EventTiming is given: events
// without timing are cheaper to record and wait on, and stream ordering is
// what they are mostly for.
const (
	EventBlockingSync uint32 = 1 // Synchronize sleeps instead of spinning
	EventInterprocess uint32 = 4 // shareable across processes (no timing)
	// EventTiming enables ElapsedTime. It is this package's flag: the
	// driver's CU_EVENT_DISABLE_TIMING (2) is set unless it is given.
	EventTiming uint32 = 1 << 31
)

const cuEventDisableTiming = 2

// Event is a CUDA event: a marker recorded on a stream that other streams
// or the host can wait for.
type Event struct {
	h      atomic.Uintptr // the CUevent; 0 once destroyed
	ctx    *Context
	timing bool
}

// NewEvent creates an event (cuEventCreate). flags combines EventTiming,
// EventBlockingSync and EventInterprocess; 0 gives a plain event without
// timing. Destroy it when done.
func (c *Context) NewEvent(flags uint32) (*Event, error) {
	if err := c.use("Context.NewEvent"); err != nil {
		return nil, err
	}
	if flags&^(EventTiming|EventBlockingSync|EventInterprocess) != 0 {
		return nil, invalid(ErrInvalidValue, "Context.NewEvent", "flags %#x: unknown bits (use EventTiming, EventBlockingSync, EventInterprocess)", flags)
	}
	timing := flags&EventTiming != 0
	if timing && flags&EventInterprocess != 0 {
		return nil, invalid(ErrInvalidValue, "Context.NewEvent", "EventInterprocess events cannot time")
	}
	cf := flags &^ EventTiming
	if !timing {
		cf |= cuEventDisableTiming
	}
	if err := c.addChild("Context.NewEvent"); err != nil {
		return nil, err
	}
	var h uintptr
	if r := cuEventCreate_ctx(c.h, ptrOf(&h), cf); r != Success {
		c.removeChild()
		return nil, newError("cuEventCreate", r, fmt.Sprintf("flags=%#x", cf))
	}
	e := &Event{ctx: c, timing: timing}
	e.h.Store(h)
	return e, nil
}

// Handle returns the raw CUevent (0 once destroyed).
func (e *Event) Handle() uintptr {
	if e == nil {
		return 0
	}
	return e.h.Load()
}

// Context returns the context the event belongs to.
func (e *Event) Context() *Context {
	if e == nil {
		return nil
	}
	return e.ctx
}

func (e *Event) get(op string) (uintptr, error) {
	if e == nil {
		return 0, errHandle(op, "nil *Event")
	}
	h := e.h.Load()
	if h == 0 {
		return 0, errHandle(op, "event was destroyed")
	}
	return h, nil
}

// Record captures the work queued on s so far (cuEventRecord): the event
// completes when that work is done. s must belong to the event's context.
func (e *Event) Record(s *Stream) error {
	eh, err := e.get("Event.Record")
	if err != nil {
		return err
	}
	sh, _, direct, err := s.get("Event.Record")
	if err != nil {
		return err
	}
	if s.ctx.h != e.ctx.h {
		return invalid(ErrInvalidHandle, "Event.Record", "event of %v recorded on a stream of %v", e.ctx.dev, s.ctx.dev)
	}
	if r := cuEventRecord_auto(e.ctx.h, direct, eh, sh); r != Success {
		return newError("cuEventRecord", r, fmt.Sprintf("event=%#x stream=%#x", eh, sh))
	}
	return nil
}

// Synchronize blocks until the event's recorded work is done
// (cuEventSynchronize). An event never recorded is complete.
func (e *Event) Synchronize() error {
	eh, err := e.get("Event.Synchronize")
	if err != nil {
		return err
	}
	if r := cuEventSynchronize_auto(e.ctx.h, true, eh); r != Success {
		return newError("cuEventSynchronize", r, fmt.Sprintf("event=%#x", eh))
	}
	return nil
}

// Query reports whether the event's recorded work is done (cuEventQuery),
// without blocking.
func (e *Event) Query() (ready bool, err error) {
	eh, err := e.get("Event.Query")
	if err != nil {
		return false, err
	}
	switch r := cuEventQuery_auto(e.ctx.h, true, eh); r {
	case Success:
		return true, nil
	case ErrNotReady:
		return false, nil
	default:
		return false, newError("cuEventQuery", r, fmt.Sprintf("event=%#x", eh))
	}
}

// ElapsedTime returns the time between two completed events that were
// created with EventTiming (cuEventElapsedTime; resolution about 0.5 µs).
func ElapsedTime(start, end *Event) (time.Duration, error) {
	sh, err := start.get("ElapsedTime(start)")
	if err != nil {
		return 0, err
	}
	eh, err := end.get("ElapsedTime(end)")
	if err != nil {
		return 0, err
	}
	if !start.timing || !end.timing {
		return 0, invalid(ErrInvalidHandle, "ElapsedTime", "both events need EventTiming (start %v, end %v)", start.timing, end.timing)
	}
	var ms float32
	if r := cuEventElapsedTime_auto(start.ctx.h, true, ptrOf(&ms), sh, eh); r != Success {
		return 0, newError("cuEventElapsedTime", r, fmt.Sprintf("start=%#x end=%#x", sh, eh))
	}
	return time.Duration(math.Round(float64(ms) * 1e6)), nil
}

// Destroy destroys the event (cuEventDestroy_v2). A second Destroy returns
// an error matching ErrInvalidHandle.
func (e *Event) Destroy() error {
	if e == nil {
		return errHandle("Event.Destroy", "nil *Event")
	}
	h := e.h.Swap(0)
	if h == 0 {
		return errHandle("Event.Destroy", "event destroyed twice")
	}
	r := cuEventDestroy_v2_auto(e.ctx.h, true, h)
	err := e.ctx.removeChild()
	if r != Success {
		return newError("cuEventDestroy_v2", r, fmt.Sprintf("event=%#x", h))
	}
	return err
}
