package zerocopy

import (
	"fmt"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// Fill writes x, converted to v's dtype as a C cast would (see Encode),
// into every element of v, and only there: the bytes between the elements
// of a strided view are never touched, whoever else writes them.
//
// Host-accessible views are filled on the host, after their pending write;
// device views on stream s (nil: the device's work stream), ordered after
// their pending write, with a memset when the view is one contiguous run of
// a byte or 32-bit pattern, else with the strided-copy kernel from one
// element; v is then pending on s. A view whose dimensions share elements
// (stride 0, a broadcast) is refused.
func Fill(v *View, x Value, s *cuda.Stream) error {
	elem, err := Encode(v.lay.dtype, x)
	if err != nil {
		return fmt.Errorf("zerocopy: Fill: %w", err)
	}
	if err := writable(v, "Fill"); err != nil {
		return err
	}
	if v.Len() == 0 {
		return nil
	}
	if onHost(v) {
		if p := v.owner.pend.Load(); p != nil {
			if err := p.wait(v.device); err != nil {
				return fmt.Errorf("zerocopy: Fill: %w", err)
			}
			v.setPending(nil)
		}
		fillHost(v, elem)
		return nil
	}
	if v.device.Type != dlpack.CUDA {
		return fmt.Errorf("zerocopy: Fill: memory on %s is neither host-accessible nor CUDA device memory", v.device)
	}
	if err := fillDevice(v, elem, s); err != nil {
		return fmt.Errorf("zerocopy: Fill %v: %w", v, err)
	}
	return nil
}

// writable checks v may be written through: open, not read-only, no
// dimension whose positions share an element.
func writable(v *View, op string) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("zerocopy: %s: %w", op, err)
	}
	if v.readOnly {
		return fmt.Errorf("zerocopy: %s: %v is read-only (%s)", op, v, v.owner.label)
	}
	if d, ok := v.lay.sharesElements(); ok {
		return fmt.Errorf("zerocopy: %s: dim %d has stride 0 and extent %d: its positions share one element", op, d, v.lay.shape()[d])
	}
	return nil
}

// fillHost writes elem into every element of a host view.
func fillHost(v *View, elem []byte) {
	is := int64(len(elem))
	var buf [2]uint64 // the element, 8-aligned for the widest load
	src := unsafe.Pointer(&buf[0])
	copy(unsafe.Slice((*byte)(src), is), elem)
	d := hostPointer(v.Ptr())
	var p pair
	p.simplify(v.lay.shape(), v.lay.strides(), v.lay.strides(), 1, 1, true)
	if p.nd == 0 || p.nd == 1 && p.ds[0] == 1 {
		// One contiguous run: write the element once, then double.
		// Sound: the run lies inside the view's validated span.
		n := int64(1)
		if p.nd == 1 {
			n = p.shape[0]
		}
		run := unsafe.Slice((*byte)(unsafe.Add(d, p.doff*is)), n*is)
		copy(run, elem)
		for done := is; done < n*is; done *= 2 {
			copy(run[done:], run[:done])
		}
		return
	}
	// The same walk with a source that stays on the one element.
	clear(p.ss[:p.nd])
	p.soff = 0
	p.run(d, src, is)
}

// fillDevice fills a device view on s.
func fillDevice(v *View, elem []byte, s *cuda.Stream) error {
	d, err := device(int(v.device.ID))
	if err != nil {
		return err
	}
	if s == nil {
		if s, err = d.defaultStream(); err != nil {
			return err
		}
	} else if o := s.Context().Device().Ordinal(); o != int(v.device.ID) {
		return fmt.Errorf("stream %v is on cuda:%d, the view on %v", s, o, v.device)
	}
	noteStream(s)
	if err := v.waitOn(s); err != nil {
		return err
	}
	is := int64(len(elem))
	p := planBytes(v.lay.shape(), v.lay.strides(), v.lay.strides(), is)
	if p.nd == 0 {
		dst := cuda.DevicePtr(v.Ptr() + uintptr(p.doff))
		if same(elem) {
			err = s.MemsetD8Async(dst, elem[0], p.run)
		} else if is == 4 && dst%4 == 0 {
			err = s.MemsetD32Async(dst, le32(elem), p.run/4)
		} else {
			err = fillKernel(d, s, v, elem)
		}
	} else {
		err = fillKernel(d, s, v, elem)
	}
	noteUse(v, s) // after queuing: the memory's free waits for the fill
	if err != nil {
		return err
	}
	v.setPending(s)
	return nil
}

// fillKernel copies one element, written into a scratch device buffer with
// memsets (no host memory is involved), to every element of v with the
// strided-copy kernel.
func fillKernel(d *devState, s *cuda.Stream, v *View, elem []byte) error {
	is := int64(len(elem))
	tmp, err := s.MemAllocAsync(16)
	if err != nil {
		return err
	}
	defer s.MemFreeAsync(tmp) // in stream order: after the kernel
	if is%4 == 0 {
		for i := int64(0); i < is; i += 4 {
			if err := s.MemsetD32Async(tmp.Add(i), le32(elem[i:]), 1); err != nil {
				return err
			}
		}
	} else {
		for i, b := range elem {
			if err := s.MemsetD8Async(tmp.Add(int64(i)), b, 1); err != nil {
				return err
			}
		}
	}
	p := planBytes(v.lay.shape(), v.lay.strides(), nil, is) // the source stays on the one element
	return d.kernelCopy(s, &p, v.Ptr(), uintptr(tmp))
}

func same(b []byte) bool {
	for _, x := range b {
		if x != b[0] {
			return false
		}
	}
	return true
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
