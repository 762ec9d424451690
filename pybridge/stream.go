package pybridge

import (
	"sync"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Streams and events that Python creates (dlbridge.Stream, dlbridge.Event).
//
// Python holds handles from the two tables below, never Go pointers. Each
// entry is closed exactly once: Table.Delete hands it to one closer only,
// and the closer takes the entry's write lock, so it waits for calls that
// are using the stream or event on other threads (they hold the read lock)
// and every later call finds it closed. All functions are safe from any
// thread.
//
// Streams are non-blocking streams (CU_STREAM_NON_BLOCKING) of the device's
// primary context, the context PyTorch, CuPy and JAX use, so their handles
// are valid in those libraries (torch.cuda.ExternalStream,
// cupy.cuda.ExternalStream). Closing a stream that still has queued work is
// safe: cuStreamDestroy returns at once and the driver frees the stream
// after that work completes, so closing never waits and never cuts work
// short.
//
// Arguments named "raw" are CUstream handles of anyone's streams (ours,
// torch's, cupy's); 0 means dlbridge's own work stream of the device
// (WorkStream), as None does in Python.

type streamEntry struct {
	mu  sync.RWMutex
	s   *cuda.Stream // nil once closed
	dev int32
}

type eventEntry struct {
	mu     sync.RWMutex
	timing bool
	ev     *cuda.Event // nil until first recorded (then the device is known)
	dev    int32
	closed bool
}

var (
	streams Table[*streamEntry]
	events  Table[*eventEntry]
)

// deviceContext is CUDA device dev's primary context, the one zerocopy
// retains for the life of the process (streams and events are made in it,
// foreign stream handles are wrapped in it), after checking dev.
func deviceContext(dev int32) (*cuda.Context, error) {
	if err := checkDevice(dlpack.CUDADevice(int(dev))); err != nil {
		return nil, err
	}
	c, err := zerocopy.DeviceContext(int(dev))
	if err != nil {
		return nil, WithCode(RuntimeError, err)
	}
	return c, nil
}

// wrapRaw is a Stream for the raw handle h on device dev (0: our work stream).
func wrapRaw(dev int32, h uintptr) (*cuda.Stream, error) {
	c, err := deviceContext(dev)
	if err != nil {
		return nil, err
	}
	if h == 0 {
		h = WorkStream(dev)
	}
	return c.WrapStream(h), nil
}

// NewStream creates a non-blocking stream on CUDA device dev with the given
// priority (0 is the default, lower numbers are more urgent; the driver
// clamps values outside the device's range) and returns its handle and its
// raw CUstream.
func NewStream(dev int32, priority int) (Handle, uintptr, error) {
	c, err := deviceContext(dev)
	if err != nil {
		return 0, 0, err
	}
	s, err := c.NewStream(cuda.StreamNonBlocking, priority)
	if err != nil {
		return 0, 0, WithCode(RuntimeError, err)
	}
	return streams.Add(&streamEntry{s: s, dev: dev}), s.Handle(), nil
}

// useStream runs f with the stream h names, which stays open meanwhile.
func useStream(h Handle, f func(*cuda.Stream) error) error {
	e, err := streams.Get(h)
	if err != nil {
		return staleObject("stream", h)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.s == nil {
		return staleObject("stream", h)
	}
	return f(e.s)
}

// CloseStream forgets h and destroys its stream without waiting for the work
// queued on it (which still completes). A second close is a ValueError.
func CloseStream(h Handle) error {
	e, err := streams.Delete(h)
	if err != nil {
		return staleObject("stream", h)
	}
	e.mu.Lock()
	s := e.s
	e.s = nil
	e.mu.Unlock()
	return WithCode(RuntimeError, s.Destroy())
}

// StreamSynchronize blocks until the work queued on stream h is done.
func StreamSynchronize(h Handle) error {
	return useStream(h, func(s *cuda.Stream) error { return WithCode(RuntimeError, s.Synchronize()) })
}

// StreamQuery reports whether the work queued on stream h is done.
func StreamQuery(h Handle) (ready bool, err error) {
	err = useStream(h, func(s *cuda.Stream) error {
		ready, err = s.Query()
		return WithCode(RuntimeError, err)
	})
	return ready, err
}

// StreamPriority is the priority stream h was given (as clamped by the driver).
func StreamPriority(h Handle) (p int, err error) {
	err = useStream(h, func(s *cuda.Stream) error {
		p, err = s.Priority()
		return WithCode(RuntimeError, err)
	})
	return p, err
}

// LiveStreams and LiveEvents count the open handles (for leak tests).
func LiveStreams() int { return streams.Len() }

// LiveEvents is the number of open event handles.
func LiveEvents() int { return events.Len() }

// WaitStream makes future work on the consumer stream (raw handle on
// device cdev) wait for the work queued so far on the producer stream (on
// pdev), by an event recorded on the producer: the host never blocks. The
// devices may differ. Waiting for itself does nothing.
func WaitStream(consumer uintptr, cdev int32, producer uintptr, pdev int32) error {
	cs, err := wrapRaw(cdev, consumer)
	if err != nil {
		return err
	}
	ps, err := wrapRaw(pdev, producer)
	if err != nil {
		return err
	}
	if cs.Handle() == ps.Handle() && cdev == pdev {
		return nil
	}
	return WithCode(RuntimeError, zerocopy.OrderAfter(cs, ps))
}

// NewEvent returns the handle of a new event, created in the driver when it
// is first recorded (then its device is known, as in PyTorch). timing
// enables ElapsedMS.
func NewEvent(timing bool) Handle { return events.Add(&eventEntry{timing: timing, dev: -1}) }

// useEvent runs f with the event h names, which stays open meanwhile. f
// gets nil for an event never recorded.
func useEvent(h Handle, f func(e *eventEntry) error) error {
	e, err := events.Get(h)
	if err != nil {
		return staleObject("event", h)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return staleObject("event", h)
	}
	return f(e)
}

// CloseEvent forgets h and destroys its event. A second close is a ValueError.
func CloseEvent(h Handle) error {
	e, err := events.Delete(h)
	if err != nil {
		return staleObject("event", h)
	}
	e.mu.Lock()
	ev := e.ev
	e.ev, e.closed = nil, true
	e.mu.Unlock()
	if ev == nil {
		return nil
	}
	return WithCode(RuntimeError, ev.Destroy())
}

// EventDevice is the device of event h, or -1 when it was never recorded.
func EventDevice(h Handle) (dev int32, err error) {
	err = useEvent(h, func(e *eventEntry) error {
		dev = e.dev
		return nil
	})
	return dev, err
}

// EventRecord records event h on the stream raw of device dev (dev < 0:
// the event's device, or cuda:0 for an event never recorded). An event
// belongs to the device of its first record; recording it on another
// device's stream is a ValueError.
func EventRecord(h Handle, raw uintptr, dev int32) error {
	e, err := events.Get(h)
	if err != nil {
		return staleObject("event", h)
	}
	if err := e.create(h, dev); err != nil {
		return err
	}
	return useEvent(h, func(e *eventEntry) error {
		s, err := wrapRaw(e.dev, raw)
		if err != nil {
			return err
		}
		return WithCode(RuntimeError, e.ev.Record(s))
	})
}

// create makes the driver's event on dev (dev < 0: cuda:0) unless it exists
// already, on that same device.
func (e *eventEntry) create(h Handle, dev int32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return staleObject("event", h)
	case e.ev != nil:
		if dev >= 0 && dev != e.dev {
			return Errorf(ValueError, "dlbridge: the event was recorded on cuda:%d; it cannot be recorded on a stream of cuda:%d (use one event per device)", e.dev, dev)
		}
		return nil
	}
	if dev < 0 {
		dev = 0
	}
	c, err := deviceContext(dev)
	if err != nil {
		return err
	}
	var flags uint32
	if e.timing {
		flags = cuda.EventTiming
	}
	ev, err := c.NewEvent(flags)
	if err != nil {
		return WithCode(RuntimeError, err)
	}
	e.ev, e.dev = ev, dev
	return nil
}

// EventSynchronize blocks until the work recorded in event h is done (at
// once for an event never recorded).
func EventSynchronize(h Handle) error {
	return useEvent(h, func(e *eventEntry) error {
		if e.ev == nil {
			return nil
		}
		return WithCode(RuntimeError, e.ev.Synchronize())
	})
}

// EventQuery reports whether the work recorded in event h is done (true for
// an event never recorded).
func EventQuery(h Handle) (ready bool, err error) {
	err = useEvent(h, func(e *eventEntry) error {
		if e.ev == nil {
			ready = true
			return nil
		}
		ready, err = e.ev.Query()
		return WithCode(RuntimeError, err)
	})
	return ready, err
}

// EventWait makes future work on the stream raw of device dev (dev < 0:
// the event's device) wait for the work recorded in event h; nothing for
// an event never recorded, as in PyTorch.
func EventWait(h Handle, raw uintptr, dev int32) error {
	return useEvent(h, func(e *eventEntry) error {
		if e.ev == nil {
			return nil
		}
		if dev < 0 {
			dev = e.dev
		}
		s, err := wrapRaw(dev, raw)
		if err != nil {
			return err
		}
		return WithCode(RuntimeError, s.WaitEvent(e.ev))
	})
}

// EventElapsedMS is the GPU time in milliseconds from event start to event
// end; both must have been created with timing, recorded and completed.
func EventElapsedMS(start, end Handle) (ms float64, err error) {
	err = useEvent(start, func(a *eventEntry) error {
		get := func(b *eventEntry) error {
			if !a.timing || !b.timing {
				return Errorf(ValueError, "dlbridge: elapsed_time needs two events created with enable_timing=True (start: %v, end: %v)", a.timing, b.timing)
			}
			if a.ev == nil || b.ev == nil {
				return Errorf(ValueError, "dlbridge: elapsed_time needs both events recorded (start recorded: %v, end recorded: %v)", a.ev != nil, b.ev != nil)
			}
			d, err := cuda.ElapsedTime(a.ev, b.ev)
			if err != nil {
				return WithCode(RuntimeError, err)
			}
			ms = float64(d) / float64(time.Millisecond)
			return nil
		}
		if start == end {
			return get(a) // one read lock: RWMutex read locks do not nest safely
		}
		return useEvent(end, get)
	})
	return ms, err
}

// SynchronizeDevice blocks until all work on CUDA device dev is done
// (cuCtxSynchronize on its primary context: every stream of every library
// that shares it).
func SynchronizeDevice(dev int32) error {
	c, err := deviceContext(dev)
	if err != nil {
		return err
	}
	return WithCode(RuntimeError, c.Synchronize())
}

func staleObject(what string, h Handle) error {
	return Errorf(ValueError, "dlbridge: %s handle %#x is not live (closed, or never created)", what, uint64(h))
}
