package pybridge

import (
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The operations on memory Python asks for. Each is a zerocopy call; this
// file only picks devices and maps errors to Python's; PlanStream
// (policy.go) picks the stream.
//
// Writes into existing memory (copy_, fill_) are complete when they return
// unless PlanStream lets them stay in flight (non_blocking, or memory only
// dlbridge can reach): the memory may be read by others through handles of
// their own that no stream orders. New tensors (to, clone, empty, zeros, arange) may still be in flight on the
// stream: every reader through dlbridge, and every consumer through
// DLPack's or CAI's stream, is ordered after them. Host memory that
// receives data always holds it on return (host readers have no stream),
// and host memory a copy reads is done with on return.

// valued checks dt has values (fill, sum, arange, converting copies).
func valued(dt dlpack.DataType, op string) error {
	if _, err := zerocopy.Encode(dt, zerocopy.Int(0)); err != nil {
		return Errorf(TypeError, "dlbridge: %s: Go-side arithmetic does not support dtype %s (only bool, int8..64, uint8..64, float16/32/64, bfloat16, complex64/128); exchange still works", op, dt)
	}
	return nil
}

// fit checks that v, the tensor whose method op is, meets w: the error is
// zerocopy's, naming op and every mismatch ("dlbridge: copy_: argument
// self: want [4] writable; got float32 [3] C/F cpu read-only: shape[0] (3
// != 4), read-only"), as a call's check does; a closed tensor is the
// engine's error.
func fit(op string, w zerocopy.Want, v *zerocopy.View) error {
	return engineErr(w.CheckArg(op, "self", v))
}

// usable checks the device of v has a driver behind it.
func usable(v *zerocopy.View) error {
	if d := v.Device(); isCUDA(d) && !CUDAAvailable() {
		return noGPU(d)
	}
	return nil
}

// orderAfterLegacy orders s after the work queued so far on legacy, a
// device's legacy default stream. An idle legacy stream (the common case:
// PyTorch and CuPy work there, and most callers synchronized) has nothing
// to order after: one query then replaces an event record and a stream
// wait, and the copy does not wait on the GPU for that event. A failed
// query falls back to the event.
func orderAfterLegacy(s, legacy *cuda.Stream) error {
	if idle, err := legacy.Query(); err == nil && idle {
		return nil
	}
	return engineErr(zerocopy.OrderAfter(s, legacy))
}

// complete waits for the write pending on v, unless nonBlocking leaves it
// in flight on a device.
func complete(v *zerocopy.View, nonBlocking bool) error {
	if nonBlocking && isCUDA(v.Device()) {
		return nil
	}
	return engineErr(v.Synchronize())
}

// Fill writes x into every element of t (converted as C casts do).
func Fill(t *Tensor, x zerocopy.Value) error {
	v := t.View
	if err := fit("dlbridge: fill_", zerocopy.Want{Writable: true}, v); err != nil {
		return err
	}
	if err := valued(v.DType(), "fill_"); err != nil {
		return err
	}
	if err := usable(v); err != nil {
		return err
	}
	var p StreamPlan
	if err := PlanStream(&StreamAsk{Entry: EntryOp, Op: "fill_", Devices: [2]dlpack.Device{v.Device()}}, &p); err != nil {
		return err
	}
	if err := zerocopy.Fill(v, x, p.Stream); err != nil {
		return engineErr(err)
	}
	return complete(v, false)
}

// Sum adds the elements of t (integers exactly, floats in float64).
func Sum(t *Tensor) (zerocopy.Value, error) {
	v := t.View
	if err := valued(v.DType(), "sum"); err != nil {
		return zerocopy.Value{}, err
	}
	if err := usable(v); err != nil {
		return zerocopy.Value{}, err
	}
	var p StreamPlan
	if err := PlanStream(&StreamAsk{Entry: EntryOp, Op: "sum", Devices: [2]dlpack.Device{v.Device()}}, &p); err != nil {
		return zerocopy.Value{}, err
	}
	x, err := zerocopy.Sum(v, p.Stream)
	if err != nil {
		return zerocopy.Value{}, engineErr(err)
	}
	return x, nil
}

// CopyOptions are what the caller of copy_ and to gave and knows, for
// PlanStream.
type CopyOptions struct {
	Stream      StreamArg
	NonBlocking bool
	// Private: the memory of the tensors is reachable only through
	// dlbridge (capi's alone: allocated here, its address never given
	// out), so no other library's work can touch it: a blocking copy may
	// stay in flight, and one between such device tensors is not ordered
	// after the legacy default stream (one query of it, 0.9-1.8 us on the
	// H100, per copy).
	Private bool
}

// planCopy is PlanStream for a copy from sd to dd.
func planCopy(op string, dd, sd dlpack.Device, opts CopyOptions) (StreamPlan, error) {
	var p StreamPlan
	err := PlanStream(&StreamAsk{Entry: EntryCopy, Op: op, Given: opts.Stream, Devices: [2]dlpack.Device{dd, sd},
		NonBlocking: opts.NonBlocking, Private: opts.Private}, &p)
	return p, err
}

// CopyInto copies src's elements into dst (same shape; dtypes may differ:
// converted as C casts do) on opts.Stream; see the file comment for when it
// is complete.
func CopyInto(dst, src *Tensor, opts CopyOptions) error {
	dv, sv := dst.View, src.View
	// The destination: writable, with the source's shape.
	if err := fit("dlbridge: copy_", zerocopy.Want{Shape: zerocopy.Extents(sv.Shape()...), Writable: true}, dv); err != nil {
		return err
	}
	p, err := planCopy("copy", dv.Device(), sv.Device(), opts)
	if err != nil {
		return err
	}
	if err := copyComplete(dv, sv, p.Stream, p.InFlight); err != nil {
		return err
	}
	return orderWorkStream(dv)
}

// orderWorkStream orders a write left pending on a stream other than the
// work stream before the work stream too (with the event that marks it:
// later readers reuse it). Consumers through the C exchange API order
// themselves after the producer's current work stream only.
func orderWorkStream(v *zerocopy.View) error {
	h := v.Stream()
	if h == 0 || !isCUDA(v.Device()) {
		return nil
	}
	w := WorkStream(v.Device().ID)
	if h == w {
		return nil
	}
	return engineErr(v.OrderBefore(w))
}

// copyComplete copies (converting) src into dst on stream s and waits for
// it as the file comment says.
func copyComplete(dst, src *zerocopy.View, s *cuda.Stream, nonBlocking bool) error {
	if dst.DType() != src.DType() {
		if err := valued(dst.DType(), "copy_"); err != nil {
			return err
		}
		if err := valued(src.DType(), "copy_"); err != nil {
			return err
		}
	}
	if err := zerocopy.Convert(dst, src, s); err != nil {
		return engineErr(err)
	}
	return complete(dst, nonBlocking)
}

// CopyToDevice returns a new C-contiguous copy of v on d (Tensor.to): on a
// device from its pool, pending on the stream; on the host in pinned memory
// from the pool when the data comes from a device, complete on return.
func CopyToDevice(v *zerocopy.View, d dlpack.Device, opts CopyOptions) (*zerocopy.View, error) {
	if err := checkDevice(d); err != nil {
		return nil, WithCode(BufferError, err) // as from_dlpack(device=) reports it
	}
	if err := usable(v); err != nil {
		return nil, err
	}
	p, err := planCopy("copy", d, v.Device(), opts)
	if err != nil {
		return nil, err
	}
	s := p.Stream
	var out *zerocopy.View
	switch {
	case isCUDA(d):
		if out, err = zerocopy.AllocCUDAAsync(s, v.DType(), v.Shape()...); err != nil {
			return nil, engineErr(err)
		}
	case d.Type == dlpack.CUDAHost:
		out, err = pinnedHost(dlpack.CUDAHost, v.DType(), v.Shape())
	case isCUDA(v.Device()):
		out, err = hostDestination(v.DType(), v.Shape())
	default:
		out, err = Allocate(d, v.DType(), v.Shape(), false)
	}
	if err != nil {
		return nil, err
	}
	if err := copyComplete(out, v, s, true); err != nil {
		out.Close()
		return nil, err
	}
	if !isCUDA(d) { // host memory holds the data on return
		err = out.Synchronize()
	} else {
		err = orderWorkStream(out)
	}
	if err != nil {
		out.Close()
		return nil, engineErr(err)
	}
	return out, nil
}

// copyTo returns a new C-contiguous copy of t's view on d, for exports.
func copyTo(t *Tensor, d dlpack.Device) (*zerocopy.View, error) {
	if d.Type != dlpack.CPU && d.Type != dlpack.CUDA && d.Type != dlpack.CUDAHost {
		return nil, Errorf(BufferError, "dlbridge: copies to %s are not supported (cpu, cuda and cuda_host only)", d)
	}
	v, err := CopyToDevice(t.View, d, CopyOptions{})
	if err != nil {
		return nil, WithCode(BufferError, err)
	}
	return v, nil
}

// WorkStream is the CUDA stream dlbridge's own work on device id runs on
// (a non-blocking stream of its own); 1, the legacy default stream, when
// the device cannot be used.
func WorkStream(id int32) uintptr {
	s, err := zerocopy.WorkStream(int(id))
	if err != nil {
		return uintptr(StreamLegacy)
	}
	return s.Handle()
}

// PointerDevice is the CUDA device that owns memory p (for the CUDA Array
// Interface, which names no device).
func PointerDevice(p uintptr) (int32, error) {
	if !CUDAAvailable() {
		return 0, noGPU(dlpack.CUDADevice(0))
	}
	// One attribute (one cuPointerGetAttribute), not the eleven of
	// zerocopy.ClassifyPointer: this runs on every CUDA Array Interface
	// import, and the batch cost about 0.4 us more there on the H100. The
	// driver fails the query for an address it does not know (pageable
	// host memory, freed memory), as the batch reports PointerUnknown.
	v, err := cuda.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, cuda.DevicePtr(p))
	if err != nil {
		return 0, Errorf(BufferError, "dlbridge: %#x is not CUDA memory the driver knows (%v)", p, err)
	}
	return int32(uint32(v)), nil
}

// DebugSpinWrite queues, on the work stream, a kernel that busy-waits for
// spin and then writes value into every element of a contiguous CUDA tensor
// of a 4-byte dtype (its bits: 0x3f800000 is float32 1.0). It returns at
// once, leaving the write pending on the tensor, so tests can check that
// consumers are ordered after it.
func DebugSpinWrite(t *Tensor, value uint32, spin time.Duration) error {
	v := t.View
	d := v.Device()
	if !isCUDA(d) || !CUDAAvailable() {
		return Errorf(ValueError, "dlbridge: spin write needs a CUDA tensor, not one on %s", d)
	}
	if v.DType().ItemSize() != 4 {
		return Errorf(ValueError, "dlbridge: spin write needs a tensor of a 4-byte dtype, not %s", v.DType())
	}
	if err := fit("dlbridge: spin write", zerocopy.Want{Order: zerocopy.COrder, Writable: true}, v); err != nil {
		return err
	}
	s, err := zerocopy.WorkStream(int(d.ID))
	if err != nil {
		return engineErr(err)
	}
	// Order after what is pending on the tensor, then become its write.
	if err := v.OrderBefore(s.Handle()); err != nil {
		return engineErr(err)
	}
	k, err := zerocopy.Kernels(int(d.ID))
	if err != nil {
		return engineErr(err)
	}
	if n := v.Len(); n > 0 {
		if err := k.SpinThenWrite(s, cuda.DevicePtr(v.Ptr()), n, value, spin); err != nil {
			return engineErr(err)
		}
	}
	v.SetStream(s.Handle())
	return nil
}
