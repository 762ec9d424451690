package capi

/*
#include <stdint.h>
*/
import "C"

import "github.com/dlbridge/dlbridge/pybridge"

// The C ABI of dlbridge.Stream and dlbridge.Event (pybridge/stream.go).
// Streams and events are handles; "raw" arguments are CUstream handles of
// any library's streams, 0 meaning dlbridge's work stream of the device.

func nullOut(name string) error {
	return pybridge.Errorf(pybridge.ValueError, "dlbridge: NULL %s pointer", name)
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// dlb_stream_new creates a non-blocking stream on CUDA device dev and
// stores its handle in *out and its CUstream in *raw.
//
//export dlb_stream_new
func dlb_stream_new(dev, priority C.int32_t, out, raw *C.uint64_t) C.int32_t {
	return fence(func() error {
		if out == nil || raw == nil {
			return nullOut("out")
		}
		h, s, err := pybridge.NewStream(int32(dev), int(priority))
		if err != nil {
			return err
		}
		*out, *raw = C.uint64_t(h), C.uint64_t(s)
		return nil
	})
}

//export dlb_stream_close
func dlb_stream_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.CloseStream(pybridge.Handle(h)) })
}

//export dlb_stream_synchronize
func dlb_stream_synchronize(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.StreamSynchronize(pybridge.Handle(h)) })
}

//export dlb_stream_query
func dlb_stream_query(h C.uint64_t, ready *C.int32_t) C.int32_t {
	return fence(func() error {
		if ready == nil {
			return nullOut("ready")
		}
		ok, err := pybridge.StreamQuery(pybridge.Handle(h))
		*ready = cbool(ok)
		return err
	})
}

//export dlb_stream_priority
func dlb_stream_priority(h C.uint64_t, priority *C.int32_t) C.int32_t {
	return fence(func() error {
		if priority == nil {
			return nullOut("priority")
		}
		p, err := pybridge.StreamPriority(pybridge.Handle(h))
		*priority = C.int32_t(p)
		return err
	})
}

// dlb_stream_wait makes the consumer stream wait for the work queued so far
// on the producer stream (event record + wait; the host does not block).
//
//export dlb_stream_wait
func dlb_stream_wait(consumer C.uint64_t, cdev C.int32_t, producer C.uint64_t, pdev C.int32_t) C.int32_t {
	return fence(func() error {
		return pybridge.WaitStream(uintptr(consumer), int32(cdev), uintptr(producer), int32(pdev))
	})
}

//export dlb_event_new
func dlb_event_new(timing C.int32_t, out *C.uint64_t) C.int32_t {
	return fence(func() error {
		if out == nil {
			return nullOut("out")
		}
		*out = C.uint64_t(pybridge.NewEvent(timing != 0))
		return nil
	})
}

//export dlb_event_close
func dlb_event_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.CloseEvent(pybridge.Handle(h)) })
}

// dlb_event_record records event h on stream raw of device dev (dev < 0:
// the event's device, cuda:0 for a new event).
//
//export dlb_event_record
func dlb_event_record(h, raw C.uint64_t, dev C.int32_t) C.int32_t {
	return fence(func() error { return pybridge.EventRecord(pybridge.Handle(h), uintptr(raw), int32(dev)) })
}

//export dlb_event_synchronize
func dlb_event_synchronize(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.EventSynchronize(pybridge.Handle(h)) })
}

//export dlb_event_query
func dlb_event_query(h C.uint64_t, ready *C.int32_t) C.int32_t {
	return fence(func() error {
		if ready == nil {
			return nullOut("ready")
		}
		ok, err := pybridge.EventQuery(pybridge.Handle(h))
		*ready = cbool(ok)
		return err
	})
}

//export dlb_event_wait
func dlb_event_wait(h, raw C.uint64_t, dev C.int32_t) C.int32_t {
	return fence(func() error { return pybridge.EventWait(pybridge.Handle(h), uintptr(raw), int32(dev)) })
}

//export dlb_event_elapsed
func dlb_event_elapsed(start, end C.uint64_t, ms *C.double) C.int32_t {
	return fence(func() error {
		if ms == nil {
			return nullOut("ms")
		}
		v, err := pybridge.EventElapsedMS(pybridge.Handle(start), pybridge.Handle(end))
		*ms = C.double(v)
		return err
	})
}

//export dlb_event_device
func dlb_event_device(h C.uint64_t, dev *C.int32_t) C.int32_t {
	return fence(func() error {
		if dev == nil {
			return nullOut("dev")
		}
		d, err := pybridge.EventDevice(pybridge.Handle(h))
		*dev = C.int32_t(d)
		return err
	})
}

// dlb_synchronize waits for all work on CUDA device dev.
//
//export dlb_synchronize
func dlb_synchronize(dev C.int32_t) C.int32_t {
	return fence(func() error { return pybridge.SynchronizeDevice(int32(dev)) })
}

// dlb_stream_stats reports the open stream and event handles.
//
//export dlb_stream_stats
func dlb_stream_stats(streams, events *C.int64_t) C.int32_t {
	if streams != nil {
		*streams = C.int64_t(pybridge.LiveStreams())
	}
	if events != nil {
		*events = C.int64_t(pybridge.LiveEvents())
	}
	return 0
}
