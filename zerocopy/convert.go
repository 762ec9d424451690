package zerocopy

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
)

// Convert copies the elements of src into dst, which must have the same
// shape, converting each to dst's dtype as a C cast would (Encode): the
// converting copy_ of PyTorch and NumPy. Either side may be on the host or
// a CUDA device, with any strides; views of one dtype are copied as they
// are (Copier.Copy). The conversion runs on the host: device operands are
// staged through pinned memory from the pool, on stream s (nil: the work
// stream), and only dst's elements are written. As with Copy, a device
// destination may still be in flight on s when Convert returns (dst is
// pending on s); a host destination holds the data.
func (c *Copier) Convert(dst, src *View, s *cuda.Stream) error {
	if dst == nil || src == nil {
		return fmt.Errorf("zerocopy: Convert: nil view (dst %v, src %v)", dst != nil, src != nil)
	}
	if dst.lay.dtype == src.lay.dtype {
		if onHost(dst) && onHost(src) {
			if err := waitHost(dst, src); err != nil {
				return err
			}
			return Copy(dst, src)
		}
		return c.Copy(dst, src, s)
	}
	if err := src.check(); err != nil {
		return fmt.Errorf("zerocopy: Convert: src: %w", err)
	}
	if err := writable(dst, "Convert"); err != nil {
		return err
	}
	if !slices.Equal(dst.lay.shape(), src.lay.shape()) {
		return fmt.Errorf("zerocopy: Convert: dst shape %s != src shape %s", FormatShape(dst.lay.shape()), FormatShape(src.lay.shape()))
	}
	dc, err := codecOf("Convert", dst.lay.dtype)
	if err != nil {
		return err
	}
	sc, err := codecOf("Convert", src.lay.dtype)
	if err != nil {
		return err
	}
	if dst.Len() == 0 {
		return nil
	}
	hs := src
	if !onHost(src) {
		if hs, err = hostStaging(src.lay.dtype, src.lay.shape()); err != nil {
			return fmt.Errorf("zerocopy: Convert: %w", err)
		}
		defer hs.Close()
		if _, err := c.CopyVia(hs, src, s, PathAuto); err != nil {
			return fmt.Errorf("zerocopy: Convert: %w", err)
		}
	}
	hd := dst
	if !onHost(dst) {
		if hd, err = hostStaging(dst.lay.dtype, dst.lay.shape()); err != nil {
			return fmt.Errorf("zerocopy: Convert: %w", err)
		}
		defer hd.Close()
	}
	if err := waitHost(hd, hs); err != nil {
		return err
	}
	if overlaps(hd, hs) {
		cl, err := Clone(hs)
		if err != nil {
			return fmt.Errorf("zerocopy: Convert: %w", err)
		}
		defer cl.Close()
		hs = cl
	}
	convertHost(hd, hs, dc, sc)
	if hd != dst {
		if _, err := c.CopyVia(dst, hd, s, PathAuto); err != nil {
			return fmt.Errorf("zerocopy: Convert: %w", err)
		}
	}
	return nil
}

// Convert is Copier.Convert with the default Copier.
func Convert(dst, src *View, s *cuda.Stream) error { return DefaultCopier().Convert(dst, src, s) }

// waitHost waits for the writes pending on host views before the host
// touches them.
func waitHost(vs ...*View) error {
	for _, v := range vs {
		if p := v.owner.pend.Load(); p != nil {
			if err := p.wait(v.device); err != nil {
				return fmt.Errorf("zerocopy: %w", err)
			}
			v.owner.pend.CompareAndSwap(p, nil)
		}
	}
	return nil
}

// convertHost converts the elements of host view src into host view dst
// (no overlap), walking both in byte strides: their item sizes differ.
func convertHost(dst, src *View, dc, sc elemCodec) {
	var p pair
	p.simplify(dst.lay.shape(), dst.lay.strides(), src.lay.strides(), int64(dst.lay.dtype.ItemSize()), int64(src.lay.dtype.ItemSize()), true)
	p.walk(hostPointer(dst.Ptr()), hostPointer(src.Ptr()), 1, func(_, _ int64) blockFunc {
		return func(d, s unsafe.Pointer, _, na, nb, dk, sk, dl, sl int64) {
			for a := range na {
				for b := range nb {
					// Sound: both offsets are elements of live views.
					dc.store(unsafe.Add(d, a*dk+b*dl), sc.load(unsafe.Add(s, a*sk+b*sl)))
				}
			}
		}
	})
}
