package pybridge

/*
#include "pyapi.h"
*/
import "C"

import (
	"errors"
	"math"
	"sync/atomic"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Devices and new tensors. Memory comes from zerocopy's allocators: device
// memory from each device's stream-ordered pool, page-locked host memory
// from the pinned pool, plain host memory from the C heap (it never moves,
// so C may keep its address).

// CUDAAvailable reports whether a CUDA driver with at least one device was found.
func CUDAAvailable() bool { return CUDADeviceCount() > 0 }

// deviceCount caches a successful count: the driver fixes the set of
// devices at cuInit (CUDA_VISIBLE_DEVICES included), and every copy asks.
var deviceCount atomic.Int32

// CUDADeviceCount is the number of CUDA devices (0 without a driver).
func CUDADeviceCount() int {
	if n := deviceCount.Load(); n > 0 {
		return int(n)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0
	}
	deviceCount.Store(int32(n))
	return n
}

// noGPU is the error for CUDA work without a usable device.
func noGPU(d dlpack.Device) error {
	why := "the CUDA driver sees no device"
	if _, err := cuda.DeviceCount(); err != nil {
		why = err.Error()
	}
	return Errorf(RuntimeError, "dlbridge: %s: no CUDA driver or device available (%s)", d, why)
}

func isCUDA(d dlpack.Device) bool { return d.Type == dlpack.CUDA }

// checkDevice accepts the devices tensors can be made on: cpu, cuda:N and
// cuda_host (page-locked host memory).
func checkDevice(d dlpack.Device) error {
	switch d.Type {
	case dlpack.CPU, dlpack.CUDAHost:
		if d.ID != 0 {
			return Errorf(ValueError, "dlbridge: device %s: host memory is device id 0", d)
		}
		if d.Type == dlpack.CUDAHost && !CUDAAvailable() {
			return noGPU(d)
		}
		return nil
	case dlpack.CUDA:
		n := CUDADeviceCount()
		if n == 0 {
			return noGPU(d)
		}
		if int(d.ID) >= n || d.ID < 0 {
			return Errorf(ValueError, "dlbridge: device %s: there are %d CUDA devices (valid ids 0..%d)", d, n, n-1)
		}
		return nil
	}
	return Errorf(ValueError, "dlbridge: device %s: only cpu, cuda[:N] and cuda_host tensors can be made here", d)
}

// Allocate returns a new C-contiguous tensor view on d, zeroed when zero is
// set: CUDA memory from the device's stream-ordered pool (pending on the
// work stream), cuda_host memory from the pinned pool, cpu memory from the
// C heap (64-byte aligned).
func Allocate(d dlpack.Device, dt dlpack.DataType, shape []int64, zero bool) (*zerocopy.View, error) {
	if err := checkDevice(d); err != nil {
		return nil, err
	}
	nbytes, err := checkShape(dt, shape)
	if err != nil {
		return nil, err
	}
	var v *zerocopy.View
	switch d.Type {
	case dlpack.CUDA:
		s, err := zerocopy.WorkStream(int(d.ID))
		if err != nil {
			return nil, engineErr(err)
		}
		if v, err = zerocopy.AllocCUDAAsync(s, dt, shape...); err != nil {
			return nil, engineErr(err)
		}
		if zero {
			err = zerocopy.Fill(v, zerocopy.Int(0), s) // a memset
		}
		if err != nil {
			v.Close()
			return nil, engineErr(err)
		}
		return v, nil
	case dlpack.CUDAHost:
		if v, err = pinnedHost(dlpack.CUDAHost, dt, shape); err != nil {
			return nil, err
		}
		if zero {
			if err := zerocopy.Fill(v, zerocopy.Int(0), nil); err != nil {
				v.Close()
				return nil, engineErr(err)
			}
		}
		return v, nil
	}
	return hostAlloc(dt, shape, nbytes, zero)
}

// checkShape checks a shape and dtype for a new tensor and returns its bytes.
func checkShape(dt dlpack.DataType, shape []int64) (int64, error) {
	if err := dt.Validate(); err != nil {
		return 0, WithCode(TypeError, err)
	}
	if len(shape) > dlpack.MaxNDim {
		return 0, Errorf(ValueError, "dlbridge: %d dimensions, at most %d", len(shape), dlpack.MaxNDim)
	}
	n, err := dlpack.NumElements(shape)
	if err != nil {
		return 0, Errorf(ValueError, "dlbridge: shape %s: %v", zerocopy.FormatShape(shape), err)
	}
	nbytes, ok := dt.StorageBytes(n, false)
	if !ok || nbytes > math.MaxInt64/2 {
		return 0, Errorf(MemoryError, "dlbridge: shape %s of %s: size overflows", zerocopy.FormatShape(shape), dt)
	}
	return nbytes, nil
}

// hostAlloc is a C-heap tensor.
func hostAlloc(dt dlpack.DataType, shape []int64, nbytes int64, zero bool) (*zerocopy.View, error) {
	p := C.dlb_alloc_host(C.size_t(nbytes), boolInt(zero))
	if p == nil {
		return nil, Errorf(MemoryError, "dlbridge: cannot allocate %d bytes for %s%s", nbytes, dt, zerocopy.FormatShape(shape))
	}
	ptr := uintptr(p)
	rel := zerocopy.ReleaseFunc(func() { C.dlb_free_host(at(ptr, 0)) })
	return zerocopy.Wrap(zerocopy.Spec{Ptr: ptr, Device: dlpack.CPUDevice, DType: dt, Shape: shape},
		zerocopy.NewOwner(rel, "dlbridge cpu allocation"))
}

// pinnedHost is page-locked memory asked for by name (device cuda_host,
// Tensor.pin_memory): from the pinned pool, or allocated apart when the
// pool's limit leaves no room (the limit bounds what the pool holds for
// automatic destinations, not what a user pins).
func pinnedHost(typ dlpack.DeviceType, dt dlpack.DataType, shape []int64) (*zerocopy.View, error) {
	v, err := zerocopy.AllocPinnedPooled(typ, dt, shape...)
	if errors.Is(err, zerocopy.ErrPinnedPoolFull) {
		v, err = zerocopy.AllocPinned(dt, shape...) // device cuda_host
	}
	if err != nil {
		return nil, engineErr(err)
	}
	return v, nil
}

// hostDestination is a new cpu tensor that receives device data: pinned
// memory from the pool when it has room (the copy runs at the full bus
// rate; NumPy and torch take it as cpu memory), else the C heap.
func hostDestination(dt dlpack.DataType, shape []int64) (*zerocopy.View, error) {
	v, err := zerocopy.AllocPinnedPooled(dlpack.CPU, dt, shape...)
	if err == nil {
		return v, nil
	}
	nbytes, err := checkShape(dt, shape)
	if err != nil {
		return nil, err
	}
	return hostAlloc(dt, shape, nbytes, false)
}

// Arange returns 0, 1, ..., n-1 as a 1-d tensor of dt on d.
func Arange(n int64, dt dlpack.DataType, d dlpack.Device) (*zerocopy.View, error) {
	if n < 0 {
		return nil, Errorf(ValueError, "dlbridge: arange(%d): n must be >= 0", n)
	}
	if err := valued(dt, "arange"); err != nil {
		return nil, err
	}
	if n > math.MaxInt32*8 {
		return nil, Errorf(MemoryError, "dlbridge: arange(%d): too many elements", n)
	}
	out, err := Allocate(d, dt, []int64{n}, false)
	if err != nil {
		return nil, err
	}
	ints := make([]int64, n)
	for i := range ints {
		ints[i] = int64(i)
	}
	src, err := zerocopy.FromSlice(ints)
	if err == nil {
		err = zerocopy.Convert(out, src, nil)
		src.Close()
	}
	if err != nil {
		out.Close()
		return nil, engineErr(err)
	}
	return out, nil
}

// PinMemory returns a copy of t's elements in page-locked host memory, a
// cpu tensor (PyTorch's Tensor.pin_memory).
func PinMemory(t *Tensor) (*zerocopy.View, error) {
	v := t.View
	out, err := pinnedHost(dlpack.CPU, v.DType(), v.Shape())
	if err != nil {
		return nil, err
	}
	p, err := planCopy("copy", out.Device(), v.Device(), CopyOptions{})
	if err == nil {
		err = copyComplete(out, v, p.Stream, false)
	}
	if err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// IsPinned reports whether t's memory is page-locked host memory: a
// cuda_host tensor, or cpu memory the driver knows as pinned (ours from the
// pinned pool, torch's pin_memory, registered memory).
func IsPinned(t *Tensor) bool {
	v := t.View
	switch v.Device().Type {
	case dlpack.CUDAHost:
		return true
	case dlpack.CPU:
		if !CUDAAvailable() {
			return false
		}
		k, _, err := zerocopy.ClassifyPointer(v.Ptr())
		return err == nil && (k == zerocopy.PointerHost || k == zerocopy.PointerRegistered)
	}
	return false
}

// PoolStats is what debug_stats shows of the memory pools.
type PoolStats struct {
	PinnedCached, PinnedInUse, PinnedLimit int64
	// DeviceReserved and DeviceUsed are the stream-ordered pool of the
	// device asked about, -1 when unknown (no driver, no such device).
	DeviceReserved, DeviceUsed int64
}

// Pools reports the pinned pool and the stream-ordered pool of CUDA device dev.
func Pools(dev int) PoolStats {
	var p PoolStats
	p.PinnedCached, p.PinnedInUse, p.PinnedLimit = zerocopy.PinnedPoolStats()
	p.DeviceReserved, p.DeviceUsed = -1, -1
	if dev >= 0 && dev < CUDADeviceCount() {
		if r, u, err := zerocopy.DevicePoolUsage(dev); err == nil {
			p.DeviceReserved, p.DeviceUsed = int64(r), int64(u)
		}
	}
	return p
}

// SetPinnedPoolLimit sets the bytes of page-locked host memory the pinned
// pool may hold (in use and cached).
func SetPinnedPoolLimit(n int64) error {
	if err := zerocopy.SetPinnedPoolLimit(n); err != nil {
		return WithCode(ValueError, err)
	}
	return nil
}
