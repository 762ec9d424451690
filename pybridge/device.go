package pybridge

/*
#include "pyapi.h"
*/
import "C"

import (
	"math"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// gpu is the CUDA side of the Go operations (cuda_backend.go; a fake in
// tests). It loads the driver on first use: without one, DeviceCount is 0.
var gpu gpuBackend

// gpuBackend is what pybridge needs from the CUDA driver. Copies and
// memsets are queued on stream; host buffers may be pageable (the driver
// has read them when a host-to-device call returns, and written them when
// a device-to-host call returns).
type gpuBackend interface {
	DeviceCount() int
	// Unavailable says why there is no usable device (nil when there is).
	Unavailable() error
	// WorkStream is the stream Go-side operations on device id use.
	WorkStream(id int32) uintptr
	Alloc(id int32, n int64) (uintptr, error)
	Free(id int32, p uintptr)
	CopyHtoD(id int32, dst uintptr, src []byte, stream uintptr) error
	CopyDtoH(id int32, dst []byte, src uintptr, stream uintptr) error
	CopyDtoD(id int32, dst, src uintptr, n int64, stream uintptr) error
	Memset8(id int32, dst uintptr, b byte, n int64, stream uintptr) error
	Sync(id int32, stream uintptr) error
	// Wait makes consumer wait for the work queued on producer so far
	// (event record + stream wait).
	Wait(id int32, producer, consumer uintptr) error
	// PointerDevice is the ordinal of the device that owns CUDA memory p.
	PointerDevice(p uintptr) (int32, error)
}

// CUDAAvailable reports whether a CUDA driver with at least one device was found.
func CUDAAvailable() bool { return CUDADeviceCount() > 0 }

// CUDADeviceCount is the number of CUDA devices (0 without a driver).
func CUDADeviceCount() int {
	if gpu == nil {
		return 0
	}
	return gpu.DeviceCount()
}

// noGPU is the error for CUDA work without a usable device.
func noGPU(d dlpack.Device) error {
	why := "no CUDA support in this build"
	if gpu != nil {
		if err := gpu.Unavailable(); err != nil {
			why = err.Error()
		}
	}
	return Errorf(RuntimeError, "dlbridge: %s: no CUDA driver or device available (%s)", d, why)
}

func isCUDA(d dlpack.Device) bool { return d.Type == dlpack.CUDA }

func checkDevice(d dlpack.Device) error {
	switch {
	case d.Type == dlpack.CPU:
		if d.ID != 0 {
			return Errorf(ValueError, "dlbridge: device %s: the host is device cpu (id 0)", d)
		}
		return nil
	case isCUDA(d):
		n := CUDADeviceCount()
		if n == 0 {
			return noGPU(d)
		}
		if int(d.ID) >= n || d.ID < 0 {
			return Errorf(ValueError, "dlbridge: device %s: there are %d CUDA devices", d, n)
		}
		return nil
	}
	return Errorf(ValueError, "dlbridge: device %s: only cpu and cuda[:N] tensors can be created here", d)
}

// Allocate returns a new C-contiguous tensor view on d, zeroed when zero is
// set. Host memory comes from the C heap (64-byte aligned), so it never
// moves and C may hold its address; CUDA memory from cuMemAlloc.
func Allocate(d dlpack.Device, dt dlpack.DataType, shape []int64, zero bool) (*zerocopy.View, error) {
	if err := checkDevice(d); err != nil {
		return nil, err
	}
	if err := dt.Validate(); err != nil {
		return nil, WithCode(TypeError, err)
	}
	if len(shape) > dlpack.MaxNDim {
		return nil, Errorf(ValueError, "dlbridge: %d dimensions, at most %d", len(shape), dlpack.MaxNDim)
	}
	n, err := dlpack.NumElements(shape)
	if err != nil {
		return nil, Errorf(ValueError, "dlbridge: shape %v: %v", shape, err)
	}
	nbytes, ok := dt.StorageBytes(n, false)
	if !ok || nbytes > math.MaxInt64/2 {
		return nil, Errorf(MemoryError, "dlbridge: shape %v of %s: size overflows", shape, dt)
	}
	var ptr uintptr
	var rel zerocopy.ReleaseFunc
	if isCUDA(d) {
		dev := d.ID
		if ptr, err = gpu.Alloc(dev, nbytes); err != nil {
			return nil, WithCode(MemoryError, err)
		}
		if zero && nbytes > 0 {
			s := gpu.WorkStream(dev)
			if err := gpu.Memset8(dev, ptr, 0, nbytes, s); err != nil {
				gpu.Free(dev, ptr)
				return nil, err
			}
			if err := gpu.Sync(dev, s); err != nil {
				gpu.Free(dev, ptr)
				return nil, err
			}
		}
		rel = func() { gpu.Free(dev, ptr) }
	} else {
		p := C.dlb_alloc_host(C.size_t(nbytes), boolInt(zero))
		if p == nil {
			return nil, Errorf(MemoryError, "dlbridge: cannot allocate %d bytes for %s%v", nbytes, dt, shape)
		}
		ptr = uintptr(p)
		rel = func() { C.dlb_free_host(at(ptr, 0)) }
	}
	return zerocopy.Wrap(zerocopy.Spec{Ptr: ptr, Device: d, DType: dt, Shape: shape},
		zerocopy.NewOwner(rel, "dlbridge "+d.String()+" allocation"))
}

// Arange returns 0, 1, ..., n-1 as a 1-d tensor of dt on d.
func Arange(n int64, dt dlpack.DataType, d dlpack.Device) (*zerocopy.View, error) {
	if n < 0 {
		return nil, Errorf(ValueError, "dlbridge: arange(%d): n must be >= 0", n)
	}
	c, err := codecOf(dt)
	if err != nil {
		return nil, err
	}
	host, err := Allocate(dlpack.CPUDevice, dt, []int64{n}, false)
	if err != nil {
		return nil, err
	}
	base := host.Ptr()
	var elem [16]byte
	for i := int64(0); i < n; i++ {
		e := elem[:c.size]
		c.encode(e, Int(i))
		copy(bytesAt(base, i*c.size, c.size), e)
	}
	if d.Type == dlpack.CPU && d.ID == 0 {
		return host, nil
	}
	defer host.Close()
	return CopyToDevice(host, d)
}

// bytesAt is the n bytes at addr+off of memory an owner keeps alive.
func bytesAt(addr uintptr, off, n int64) []byte {
	return unsafeBytes(at(addr, off), n)
}

// Fill writes s into every element of t.
func Fill(t *Tensor, s Scalar) error {
	v := t.View
	if !isCUDA(v.Device()) {
		return hostFill(v, s)
	}
	return gpuFill(t, s)
}

// Sum adds the elements of t (see hostSum for the arithmetic).
func Sum(t *Tensor) (Scalar, error) {
	v := t.View
	if !isCUDA(v.Device()) {
		return hostSum(v)
	}
	h, err := stageToHost(t)
	if err != nil {
		return Scalar{}, err
	}
	defer h.Close()
	return hostSum(h)
}

// CopyInto copies src's elements into dst (same shape; dtypes may differ).
func CopyInto(dst, src *Tensor) error {
	if !isCUDA(dst.View.Device()) && !isCUDA(src.View.Device()) {
		return hostCopy(dst.View, src.View)
	}
	return gpuCopy(dst, src)
}

// CopyToDevice returns a new C-contiguous copy of v on d.
func CopyToDevice(v *zerocopy.View, d dlpack.Device) (*zerocopy.View, error) {
	t := &Tensor{View: v}
	t.stream.Store(v.Stream())
	return copyTo(t, d)
}

// copyTo returns a new C-contiguous copy of t's view on d.
func copyTo(t *Tensor, d dlpack.Device) (*zerocopy.View, error) {
	if d.Type == dlpack.CUDAHost || d.Type == dlpack.CUDAManaged {
		return nil, Errorf(BufferError, "dlbridge: copies to %s are not supported (cpu and cuda only)", d)
	}
	if err := checkDevice(d); err != nil {
		return nil, WithCode(BufferError, err)
	}
	v := t.View
	out, err := Allocate(d, v.DType(), v.Shape(), false)
	if err != nil {
		return nil, err
	}
	dst := &Tensor{View: out}
	if err := CopyInto(dst, t); err != nil {
		out.Close()
		return nil, err
	}
	if s := dst.Stream(); s != 0 {
		// Complete the copy before the new view leaves this function: its
		// consumer knows nothing of our stream.
		if err := gpu.Sync(d.ID, s); err != nil {
			out.Close()
			return nil, err
		}
	}
	return out, nil
}

// WorkStream is the CUDA stream Go-side operations on device id are queued
// on; 1 (the legacy default stream) without a driver.
func WorkStream(id int32) uintptr {
	if !CUDAAvailable() {
		return uintptr(StreamLegacy)
	}
	return gpu.WorkStream(id)
}

// WaitForProducer makes our work stream on d wait for the work queued so far
// on producer (a CAI v3 stream), by event, not by synchronizing the device.
func WaitForProducer(d dlpack.Device, producer uintptr) error {
	if !CUDAAvailable() {
		return noGPU(d)
	}
	ws := gpu.WorkStream(d.ID)
	if producer == ws {
		return nil
	}
	return gpu.Wait(d.ID, producer, ws)
}

// PointerDevice is the CUDA device that owns memory p (for the CUDA Array
// Interface, which names no device).
func PointerDevice(p uintptr) (int32, error) {
	if !CUDAAvailable() {
		return 0, noGPU(dlpack.CUDADevice(0))
	}
	return gpu.PointerDevice(p)
}
