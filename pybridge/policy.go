package pybridge

import (
	"fmt"
	"strings"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The stream policy: PlanStream is the one place that decides which CUDA
// stream an operation Python asks for runs on, what that stream waits for
// first, and whether the work may be left in flight on return. C and
// Python only pass what they know (StreamArg: what the caller gave; the
// framework's current stream; the devices; non_blocking; whether an
// address was given out) and decide nothing.
//
// The rules:
//   - stream= given: that stream. A handle of 0 is CUDA's NULL stream, the
//     legacy default stream (1). Its device (named by the stream object,
//     else asked of the driver for a real handle) must be one of the
//     operation's CUDA devices: work queued on another device's stream is
//     refused by the driver at best, inside a kernel launch at worst, so
//     it is refused here before anything is queued.
//   - otherwise, a call runs on the framework's current stream, the one its
//     caller's producer named (PyTorch's, CuPy's), and without one on
//     dlbridge's work stream of the device.
//   - otherwise (copy_, to, fill_, sum), dlbridge's work stream of the
//     device whose context runs the copy (the destination's when it is a
//     CUDA device), ordered first after the legacy default stream of every
//     CUDA device involved, where PyTorch and CuPy work by default: what
//     they wrote there through handles of their own is then seen. A copy
//     between device memory only dlbridge can reach (Private) skips that
//     order; host memory it reads may still be the target of a copy
//     queued there, so a copy from the host keeps it.
//   - an IPC send without stream= hands the tensor over after its pending
//     write; with one, after the work queued on it.
//   - a collective (dlbridge.nccl) runs on the stream the tensors' pending
//     write is on (PyTorch's or CuPy's current stream, for their tensors),
//     else on dlbridge's work stream of the communicator's device; its
//     results are left pending there.
//   - an import from a producer that named its current stream leaves the
//     write pending there (0, its NULL stream, is the legacy default
//     stream); nothing waits at import.
//   - from_dlpack asks a producer's __dlpack__ for stream= its current
//     stream when its probe names one (it has nothing to order), else
//     dlbridge's work stream, before which it orders its writes; the
//     imported tensor's write is pending on that stream.
//   - an export orders the tensor's pending write before the consumer's
//     stream=: None is the legacy default stream, -1 asks for no order; a
//     C exchange API consumer orders itself after dlbridge's work stream
//     (the current_work_stream it is told), so the write goes before that.
//   - a write into existing memory is complete on return unless
//     non_blocking, or unless it is Private and a device-to-device or
//     host-to-device copy: nobody outside dlbridge can tell it from a
//     complete one, and every reader through dlbridge is ordered after it.

// StreamArg is a stream= as the caller gave it. Given false: None. Handle:
// the CUstream (0 is CUDA's NULL stream). Device: the CUDA device the
// stream object names (dlbridge, torch, CuPy and cuda.core streams do),
// -1 for a bare integer handle, which says nothing.
type StreamArg struct {
	Given  bool
	Handle uintptr
	Device int32
}

// Entry is the kind of operation a stream is planned for.
type Entry uint8

const (
	// EntryCopy is copy_, to and pin_memory: Devices is {destination, source}.
	EntryCopy Entry = iota
	// EntryOp is a Go-side operation on one tensor (fill_, sum): Devices[0].
	EntryOp
	// EntryCall is a call of a Go function: Devices[0] is the device of
	// its CUDA tensors (a zero Device when it has none), named by DevFrom.
	EntryCall
	// EntrySend is an IPC send of a tensor of the pool on Devices[0]: the
	// peer's use waits for the work queued on the given stream, or without
	// one for the tensor's pending write (no stream).
	EntrySend
	// EntryImport is from_dlpack of a producer that ordered its writes
	// before its own current stream (Current) rather than ours: the
	// imported tensor's write is pending there.
	EntryImport
	// EntryCollective is an NCCL operation of a communicator on
	// Devices[0]; Current is the stream its tensors' pending write is on.
	EntryCollective
	// EntryDLPackStream is the stream= from_dlpack passes to a producer's
	// __dlpack__ for a tensor on CUDA device Devices[0]; Current is the
	// producer's current stream as its probe named it (0: none).
	EntryDLPackStream
	// EntryExport orders a tensor's pending write on CUDA device
	// Devices[0] before its consumer: Given is the consumer's stream=
	// (Handle -1: no order), Exchange a C exchange API consumer.
	EntryExport
)

// StreamAsk is what PlanStream decides from.
type StreamAsk struct {
	Entry   Entry
	Op      string // the operation, for messages ("copy", "gofunc.axpy")
	Given   StreamArg
	Devices [2]dlpack.Device
	// DevFrom names the argument Devices[0] comes from (EntryCall).
	DevFrom string
	// Current is the framework's current stream on the device, as the
	// producer of a call's tensor named it (EntryCall; 0: none), or as an
	// imported tensor's producer named it (EntryImport; 0: its NULL
	// stream, the legacy default stream), or the stream a collective's
	// tensors' write is pending on (EntryCollective; 0: none).
	Current uintptr
	// NonBlocking is the caller's non_blocking=.
	NonBlocking bool
	// Private: no address of the tensors was given out (the caller's
	// fact; PlanStream adds the engine's: capi checks the owners).
	Private bool
	// Exchange: an export to a consumer of the C exchange API (EntryExport).
	Exchange bool
}

// StreamPlan is PlanStream's answer.
type StreamPlan struct {
	// Stream is where the work runs; nil: no CUDA stream (host work that
	// zerocopy runs on the host, or a call without CUDA tensors or stream),
	// and for a call, which wraps Handle itself (pyfunc.Args).
	Stream *cuda.Stream
	// Handle is the stream's CUstream (0: none), Device its CUDA device
	// (-1: none).
	Handle uintptr
	Device int32
	// InFlight: a write into existing memory may be left pending on
	// Stream (else it is complete on return).
	InFlight bool
}

// PlanStream decides where the operation a describes runs, in *p; see
// the rules at the top of this file.
func PlanStream(a *StreamAsk, p *StreamPlan) error {
	if a.Given.Given || a.Entry == EntryImport || a.Entry == EntryDLPackStream || a.Entry == EntryExport || a.Devices[0].Type == dlpack.CUDA || a.Devices[1].Type == dlpack.CUDA {
		return planStream(a, p)
	}
	// Nothing on a device and no stream given: host work, no stream (the
	// common case of a call over NumPy arrays: a few nanoseconds).
	*p = StreamPlan{Device: -1}
	return nil
}

func planStream(a *StreamAsk, plan *StreamPlan) error {
	*plan = StreamPlan{Device: -1}
	switch a.Entry {
	case EntryImport:
		// Nothing runs: the write stays pending where the producer queued it.
		plan.Handle = a.Current
		if plan.Handle == 0 {
			plan.Handle = uintptr(StreamLegacy)
		}
		return nil
	case EntryDLPackStream:
		plan.Handle, plan.Device = a.Current, a.Devices[0].ID
		if plan.Handle == 0 {
			plan.Handle = WorkStream(a.Devices[0].ID)
		}
		return nil
	case EntryExport:
		// Nothing runs here either: the consumer's stream waits (by event).
		switch {
		case a.Exchange:
			plan.Handle = WorkStream(a.Devices[0].ID)
		case !a.Given.Given:
			plan.Handle = uintptr(StreamLegacy) // DLPack's stream=None
		case int64(a.Given.Handle) != StreamNoSync:
			plan.Handle = a.Given.Handle
		}
		plan.Device = a.Devices[0].ID
		return nil
	}
	var cudaDevs [2]int32
	n := 0
	for _, d := range a.Devices {
		if !isCUDA(d) {
			continue
		}
		if !CUDAAvailable() {
			return noGPU(d)
		}
		if n == 0 || cudaDevs[0] != d.ID {
			cudaDevs[n] = d.ID
			n++
		}
	}
	run := int32(-1) // the device whose context runs the work
	if n > 0 {
		run = cudaDevs[0]
	}
	if a.Given.Given {
		h := a.Given.Handle
		if h == 0 {
			h = uintptr(StreamLegacy)
		}
		dev, err := givenDevice(a.Given, h, n, run)
		if err != nil {
			return err
		}
		switch {
		case dev >= 0 && n > 0 && dev != cudaDevs[0] && (n == 1 || dev != cudaDevs[1]):
			return wrongStreamDevice(a, dev, cudaDevs[:n])
		case dev >= 0:
			run = dev // a copy between two devices runs on either's stream
		case run < 0:
			if a.Entry == EntryCall {
				// A stream without a device: no CUDA work for it to order.
				return nil
			}
			run = 0 // host-only work on a given stream (of cuda:0, as a handle says nothing)
		}
		plan.Handle, plan.Device = h, run
		if a.Entry == EntryCall {
			return nil
		}
		s, err := zerocopy.StreamOf(int(run), h)
		if err != nil {
			return engineErr(err)
		}
		plan.Stream = s
		plan.InFlight = a.NonBlocking || a.Private && a.Entry == EntryCopy || a.Entry == EntryCollective
		return nil
	}
	if run < 0 || a.Entry == EntrySend {
		return nil // zerocopy picks the work stream of the device involved; a send orders after the pending write
	}
	if a.Entry == EntryCall && a.Current != 0 {
		plan.Handle, plan.Device = a.Current, run
		return nil
	}
	if a.Entry == EntryCollective && a.Current != 0 {
		s, err := zerocopy.StreamOf(int(run), a.Current)
		if err != nil {
			return engineErr(err)
		}
		plan.Stream, plan.Handle, plan.Device, plan.InFlight = s, a.Current, run, true
		return nil
	}
	s, err := zerocopy.WorkStream(int(run))
	if err != nil {
		return engineErr(err)
	}
	plan.Handle, plan.Device = s.Handle(), run
	if a.Entry == EntryCall {
		return nil
	}
	plan.Stream = s
	plan.InFlight = a.NonBlocking || a.Private && a.Entry == EntryCopy || a.Entry == EntryCollective
	if a.Entry == EntryCollective {
		return nil // the tensors' writes are ordered by the operation's events, not by the legacy stream
	}
	if a.Private && isCUDA(a.Devices[0]) && isCUDA(a.Devices[1]) {
		return nil
	}
	if err := orderAfterLegacy(s, s.Context().LegacyStream()); err != nil {
		return err
	}
	// PyTorch and CuPy write the source on its own device's legacy stream
	// (pytest on two H200s: a copy from cuda:1 ordered after cuda:0's alone
	// read the value from before PyTorch's last write).
	if n == 2 {
		legacy, err := zerocopy.StreamOf(int(cudaDevs[1]), uintptr(StreamLegacy))
		if err != nil {
			return engineErr(err)
		}
		if err := orderAfterLegacy(s, legacy); err != nil {
			return err
		}
	}
	return nil
}

// givenDevice is the CUDA device of a given stream: the one its object
// names, else, when the operation has n > 0 CUDA devices to check it
// against and h is a real handle (not 1 or 2, the default streams of
// whatever context is current), the driver's answer. -1 when unknown.
func givenDevice(g StreamArg, h uintptr, n int, run int32) (int32, error) {
	if g.Device >= 0 || n == 0 || h <= uintptr(StreamPerThread) {
		return g.Device, nil
	}
	s, err := zerocopy.StreamOf(int(run), h)
	if err != nil {
		return -1, engineErr(err)
	}
	d, err := s.OwnDevice()
	if err != nil {
		return -1, Errorf(ValueError, "dlbridge: stream= %#x is not a CUDA stream the driver knows (%v)", h, err)
	}
	return int32(d.Ordinal()), nil
}

// wrongStreamDevice is the error for a stream of device dev given to an
// operation on devs.
func wrongStreamDevice(a *StreamAsk, dev int32, devs []int32) error {
	if a.Entry == EntryCall {
		return Errorf(ValueError, "%s: stream= is a stream of cuda:%d, but argument %s is on cuda:%d: pass a stream of cuda:%d (or none for the tensors' current stream)",
			a.Op, dev, a.DevFrom, devs[0], devs[0])
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = fmt.Sprintf("cuda:%d", d)
	}
	if len(names) == 2 && devs[0] > devs[1] {
		names[0], names[1] = names[1], names[0]
	}
	none := "None for dlbridge's own"
	switch a.Entry {
	case EntrySend:
		none = "None to send after the tensor's pending write"
	case EntryCollective:
		none = "None for the tensors' current stream"
	}
	return Errorf(ValueError, "dlbridge: stream= is a stream of cuda:%d, but this %s runs on %s: pass a stream of %s (or %s)",
		dev, a.Op, strings.Join(names, " and "), strings.Join(names, " or "), none)
}
