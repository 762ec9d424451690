package pybridge

import (
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// TestPlanStream: the one stream decision, for each entry point, from what
// the caller gave. A stream of another device is refused before anything
// is queued on it, also as a bare handle (Device -1), whose device the
// driver is asked for.
func TestPlanStream(t *testing.T) {
	needCUDA(t)
	s0, s1 := newStream(t, 0), newStream(t, 1)
	w0, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := zerocopy.WorkStream(1)
	if err != nil {
		t.Fatal(err)
	}
	cu0, cu1, cpu := dlpack.CUDADevice(0), dlpack.CUDADevice(1), dlpack.CPUDevice
	given := func(h uintptr, dev int32) StreamArg { return StreamArg{Given: true, Handle: h, Device: dev} }
	cases := []struct {
		name     string
		ask      StreamAsk
		handle   uintptr // want; 0 with wantErr
		dev      int32
		inFlight bool
		wantErr  string
	}{
		{"copy, none given: the work stream", StreamAsk{Entry: EntryCopy, Op: "copy", Devices: [2]dlpack.Device{cu0, cpu}}, w0.Handle(), 0, false, ""},
		{"copy to the host runs on the source's device", StreamAsk{Entry: EntryCopy, Op: "copy", Devices: [2]dlpack.Device{cpu, cu1}}, w1.Handle(), 1, false, ""},
		{"non_blocking", StreamAsk{Entry: EntryCopy, Op: "copy", Devices: [2]dlpack.Device{cu0, cu0}, NonBlocking: true}, w0.Handle(), 0, true, ""},
		{"private copy may stay in flight", StreamAsk{Entry: EntryCopy, Op: "copy", Devices: [2]dlpack.Device{cu0, cu0}, Private: true}, w0.Handle(), 0, true, ""},
		{"handle 0 is the legacy stream", StreamAsk{Entry: EntryCopy, Op: "copy", Given: given(0, -1), Devices: [2]dlpack.Device{cu0, cpu}}, 1, 0, false, ""},
		{"a stream object of the device", StreamAsk{Entry: EntryCopy, Op: "copy", Given: given(s0.Handle(), 0), Devices: [2]dlpack.Device{cu0, cpu}}, s0.Handle(), 0, false, ""},
		{"a bare handle of the device", StreamAsk{Entry: EntryCopy, Op: "copy", Given: given(s0.Handle(), -1), Devices: [2]dlpack.Device{cu0, cpu}}, s0.Handle(), 0, false, ""},
		{"a peer copy on the source's stream", StreamAsk{Entry: EntryCopy, Op: "copy", Given: given(s1.Handle(), -1), Devices: [2]dlpack.Device{cu0, cu1}}, s1.Handle(), 1, false, ""},
		{"a stream object of another device", StreamAsk{Entry: EntryCopy, Op: "copy", Given: given(s1.Handle(), 1), Devices: [2]dlpack.Device{cu0, cpu}}, 0, 0, false,
			"dlbridge: stream= is a stream of cuda:1, but this copy runs on cuda:0: pass a stream of cuda:0 (or None for dlbridge's own)"},
		{"a bare handle of another device", StreamAsk{Entry: EntryCopy, Op: "copy", Given: given(s1.Handle(), -1), Devices: [2]dlpack.Device{cpu, cu0}}, 0, 0, false,
			"dlbridge: stream= is a stream of cuda:1, but this copy runs on cuda:0: pass a stream of cuda:0 (or None for dlbridge's own)"},
		{"fill on the host: no stream", StreamAsk{Entry: EntryOp, Op: "fill_", Devices: [2]dlpack.Device{cpu}}, 0, -1, false, ""},
		{"call, none given: the producer's current stream", StreamAsk{Entry: EntryCall, Op: "t.f", Devices: [2]dlpack.Device{cu0}, Current: s0.Handle()}, s0.Handle(), 0, false, ""},
		{"call, nothing known: the work stream", StreamAsk{Entry: EntryCall, Op: "t.f", Devices: [2]dlpack.Device{cu1}}, w1.Handle(), 1, false, ""},
		{"call without CUDA tensors: a stream object's device", StreamAsk{Entry: EntryCall, Op: "t.f", Given: given(s1.Handle(), 1)}, s1.Handle(), 1, false, ""},
		{"call without CUDA tensors, a bare handle: nothing to run on", StreamAsk{Entry: EntryCall, Op: "t.f", Given: given(s1.Handle(), -1)}, 0, -1, false, ""},
		{"call, a bare handle of another device", StreamAsk{Entry: EntryCall, Op: "t.axpy", DevFrom: "x", Given: given(s1.Handle(), -1), Devices: [2]dlpack.Device{cu0}}, 0, 0, false,
			"t.axpy: stream= is a stream of cuda:1, but argument x is on cuda:0: pass a stream of cuda:0 (or none for the tensors' current stream)"},
		{"call, a stream object of another device", StreamAsk{Entry: EntryCall, Op: "t.axpy", DevFrom: "x", Given: given(s0.Handle(), 3), Devices: [2]dlpack.Device{cu0}}, 0, 0, false,
			"t.axpy: stream= is a stream of cuda:3, but argument x is on cuda:0: pass a stream of cuda:0 (or none for the tensors' current stream)"},
		{"send, none given: after the pending write", StreamAsk{Entry: EntrySend, Op: "send", Devices: [2]dlpack.Device{cu0}}, 0, -1, false, ""},
		{"send, a bare handle of another device", StreamAsk{Entry: EntrySend, Op: "send", Given: given(s1.Handle(), -1), Devices: [2]dlpack.Device{cu0}}, 0, 0, false,
			"dlbridge: stream= is a stream of cuda:1, but this send runs on cuda:0: pass a stream of cuda:0 (or None to send after the tensor's pending write)"},
		{"collective, none given: the tensors' pending stream", StreamAsk{Entry: EntryCollective, Op: "dlbridge.nccl.all_reduce", Devices: [2]dlpack.Device{cu0}, Current: s0.Handle()}, s0.Handle(), 0, true, ""},
		{"collective, nothing pending: the work stream", StreamAsk{Entry: EntryCollective, Op: "dlbridge.nccl.all_reduce", Devices: [2]dlpack.Device{cu1}}, w1.Handle(), 1, true, ""},
		{"collective, handle 0 is the legacy stream", StreamAsk{Entry: EntryCollective, Op: "dlbridge.nccl.all_reduce", Given: given(0, -1), Devices: [2]dlpack.Device{cu0}, Current: s0.Handle()}, 1, 0, true, ""},
		{"collective, a bare handle of another device", StreamAsk{Entry: EntryCollective, Op: "dlbridge.nccl.send", Given: given(s1.Handle(), -1), Devices: [2]dlpack.Device{cu0}}, 0, 0, false,
			"dlbridge: stream= is a stream of cuda:1, but this dlbridge.nccl.send runs on cuda:0: pass a stream of cuda:0 (or None for the tensors' current stream)"},
		{"from_dlpack asks for the producer's own stream", StreamAsk{Entry: EntryDLPackStream, Devices: [2]dlpack.Device{cu0}, Current: s0.Handle()}, s0.Handle(), 0, false, ""},
		{"from_dlpack asks for the work stream", StreamAsk{Entry: EntryDLPackStream, Devices: [2]dlpack.Device{cu1}}, w1.Handle(), 1, false, ""},
		{"export, stream=None: the legacy stream", StreamAsk{Entry: EntryExport, Devices: [2]dlpack.Device{cu0}}, 1, 0, false, ""},
		{"export, the consumer's stream", StreamAsk{Entry: EntryExport, Devices: [2]dlpack.Device{cu0}, Given: given(s0.Handle(), -1)}, s0.Handle(), 0, false, ""},
		{"export, stream=-1: no order", StreamAsk{Entry: EntryExport, Devices: [2]dlpack.Device{cu0}, Given: given(^uintptr(0), -1)}, 0, 0, false, ""},
		{"export to a C exchange API consumer: the work stream", StreamAsk{Entry: EntryExport, Devices: [2]dlpack.Device{cu1}, Exchange: true}, w1.Handle(), 1, false, ""},
		{"import: the producer's stream", StreamAsk{Entry: EntryImport, Current: s0.Handle()}, s0.Handle(), -1, false, ""},
		{"import: the producer's NULL stream is the legacy stream", StreamAsk{Entry: EntryImport}, 1, -1, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p StreamPlan
			err := PlanStream(&c.ask, &p)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr || CodeOf(err) != ValueError {
					t.Fatalf("PlanStream: %v (%v); want ValueError %q", err, CodeOf(err), c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Handle != c.handle || p.Device != c.dev || p.InFlight != c.inFlight {
				t.Errorf("PlanStream = handle %#x on %d, in flight %v; want %#x on %d, %v", p.Handle, p.Device, p.InFlight, c.handle, c.dev, c.inFlight)
			}
			if p.Stream != nil && p.Stream.Handle() != p.Handle {
				t.Errorf("Stream %#x, Handle %#x", p.Stream.Handle(), p.Handle)
			}
		})
	}
}
