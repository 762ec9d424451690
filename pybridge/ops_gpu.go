package pybridge

import (
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"time"
)

// Go-side operations on CUDA memory. Without kernels of our own, they move
// data with the driver's copy and memset functions on the device's work
// stream, staging through host memory when the layout is strided. Queued
// writes are recorded on the Tensor (SetStream) so exports can order them
// before the consumer's stream.

// streamWait makes consumer wait for producer on device d.
func streamWait(d dlpack.Device, producer, consumer uintptr) error {
	if !CUDAAvailable() {
		return noGPU(d)
	}
	return gpu.Wait(d.ID, producer, consumer)
}

// spanOf returns the byte range [lo, hi) of v relative to its pointer.
func spanOf(v *zerocopy.View) (lo, hi int64) { return v.ByteSpan() }

// stageToHost copies the bytes t's view spans into fresh host memory and
// returns a host view with the same layout over them. The copy is complete
// when it returns.
func stageToHost(t *Tensor) (*zerocopy.View, error) {
	v := t.View
	d := v.Device()
	if !CUDAAvailable() {
		return nil, noGPU(d)
	}
	lo, hi := spanOf(v)
	host, err := Allocate(dlpack.CPUDevice, dlpack.Uint8Type, []int64{hi - lo}, false)
	if err != nil {
		return nil, err
	}
	s := gpu.WorkStream(d.ID)
	if hi > lo {
		if err := gpu.CopyDtoH(d.ID, bytesAt(host.Ptr(), 0, hi-lo), v.Ptr()+uintptr(lo), s); err == nil {
			err = gpu.Sync(d.ID, s)
		}
		if err != nil {
			host.Close()
			return nil, err
		}
	}
	o := host.Owner()
	if err := o.Retain(); err != nil {
		host.Close()
		return nil, err
	}
	hv, err := zerocopy.Wrap(zerocopy.Spec{Ptr: host.Ptr() - uintptr(lo), Device: dlpack.CPUDevice,
		DType: v.DType(), Shape: v.Shape(), Strides: v.Strides(), Padded: v.Padded()}, o)
	host.Close() // hv holds the memory now
	return hv, err
}

// unstage writes the bytes of a staged host view back over t's span.
func unstage(t *Tensor, hv *zerocopy.View) error {
	v := t.View
	d := v.Device()
	lo, hi := spanOf(v)
	if hi <= lo {
		return nil
	}
	s := gpu.WorkStream(d.ID)
	if err := gpu.CopyHtoD(d.ID, v.Ptr()+uintptr(lo), bytesAt(hv.Ptr(), lo, hi-lo), s); err != nil {
		return err
	}
	t.SetStream(s)
	return nil
}

func gpuFill(t *Tensor, s Scalar) error {
	v := t.View
	d := v.Device()
	if !CUDAAvailable() {
		return noGPU(d)
	}
	if err := needWritable(v, "fill_"); err != nil {
		return err
	}
	c, err := codecOf(v.DType())
	if err != nil {
		return err
	}
	ws := gpu.WorkStream(d.ID)
	if v.IsCContiguous() {
		n := v.Len() * c.size
		if n == 0 {
			return nil
		}
		var elem [16]byte
		e := elem[:c.size]
		c.encode(e, s)
		same := true
		for _, b := range e {
			same = same && b == e[0]
		}
		if same {
			if err := gpu.Memset8(d.ID, v.Ptr(), e[0], n, ws); err != nil {
				return err
			}
		} else {
			buf := make([]byte, n)
			copy(buf, e)
			for filled := c.size; filled < n; filled *= 2 {
				copy(buf[filled:], buf[:filled])
			}
			// Copies from pageable memory return once the source was read.
			if err := gpu.CopyHtoD(d.ID, v.Ptr(), buf, ws); err != nil {
				return err
			}
		}
		t.SetStream(ws)
		return nil
	}
	hv, err := stageToHost(t)
	if err != nil {
		return err
	}
	defer hv.Close()
	if err := hostFill(hv, s); err != nil {
		return err
	}
	return unstage(t, hv)
}

func gpuCopy(dst, src *Tensor) error {
	dv, sv := dst.View, src.View
	if !CUDAAvailable() {
		if isCUDA(dv.Device()) {
			return noGPU(dv.Device())
		}
		return noGPU(sv.Device())
	}
	if err := needWritable(dv, "copy_"); err != nil {
		return err
	}
	if !sameShape(dv.Shape(), sv.Shape()) {
		return Errorf(ValueError, "dlbridge: copy_: shapes differ: destination %v, source %v", dv.Shape(), sv.Shape())
	}
	if dv.DType() == sv.DType() && dv.IsCContiguous() && sv.IsCContiguous() {
		n := dv.Len() * int64(dv.DType().ItemSize())
		if n == 0 {
			return nil
		}
		dev := dv.Device()
		if !isCUDA(dev) {
			dev = sv.Device()
		}
		ws := gpu.WorkStream(dev.ID)
		if isCUDA(sv.Device()) && sv.Device() != dev {
			// A peer copy: finish the source device's pending writes first.
			if p := src.Stream(); p != 0 {
				if err := gpu.Sync(sv.Device().ID, p); err != nil {
					return err
				}
			}
		}
		var err error
		switch {
		case isCUDA(dv.Device()) && isCUDA(sv.Device()):
			err = gpu.CopyDtoD(dev.ID, dv.Ptr(), sv.Ptr(), n, ws)
		case isCUDA(dv.Device()):
			err = gpu.CopyHtoD(dev.ID, dv.Ptr(), bytesAt(sv.Ptr(), 0, n), ws)
		default:
			err = gpu.CopyDtoH(dev.ID, bytesAt(dv.Ptr(), 0, n), sv.Ptr(), ws)
		}
		if err != nil {
			return err
		}
		if isCUDA(dv.Device()) {
			dst.SetStream(ws)
			return nil
		}
		return gpu.Sync(dev.ID, ws) // host memory must hold the data on return
	}
	// Strided or converting: go through host memory.
	var sh *zerocopy.View
	if isCUDA(sv.Device()) {
		var err error
		if sh, err = stageToHost(src); err != nil {
			return err
		}
		defer sh.Close()
	} else {
		sh = sv
	}
	if !isCUDA(dv.Device()) {
		return hostCopy(dv, sh)
	}
	dh, err := stageToHost(dst)
	if err != nil {
		return err
	}
	defer dh.Close()
	if err := hostCopy(dh, sh); err != nil {
		return err
	}
	return unstage(dst, dh)
}

// spinWriter is the optional backend method behind DebugSpinWrite.
type spinWriter interface {
	SpinWrite(id int32, p uintptr, n int64, value uint32, spin time.Duration, stream uintptr) error
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
	if v.DType().ItemSize() != 4 || !v.IsCContiguous() || v.ReadOnly() {
		return Errorf(ValueError, "dlbridge: spin write needs a writable, contiguous tensor of a 4-byte dtype, not %s%v", v.DType(), v.Shape())
	}
	sw, ok := gpu.(spinWriter)
	if !ok {
		return Errorf(RuntimeError, "dlbridge: spin write is not supported by this CUDA backend")
	}
	ws := gpu.WorkStream(d.ID)
	if n := v.Len(); n > 0 {
		if err := sw.SpinWrite(d.ID, v.Ptr(), n, value, spin, ws); err != nil {
			return err
		}
	}
	t.SetStream(ws)
	return nil
}
