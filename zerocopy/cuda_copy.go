package zerocopy

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// This file: CopyCUDA and the Copier, which copy between any two views
// (host, pinned, device, managed memory; any strides) with the driver's DMA
// engines, and the executor that turns byte plans into driver calls.

// memKind is where one side of a copy lives, as far as a copy cares.
type memKind int

const (
	memPageable memKind = iota // host memory the driver does not know (Go, C heap)
	memPinned                  // page-locked host memory (cuda_host, or registered)
	memDevice                  // device memory
	memManaged                 // managed memory (the DMA engines treat it as device memory)
)

func (k memKind) host() bool { return k == memPageable || k == memPinned }

func (k memKind) String() string {
	return [...]string{"pageable host", "pinned host", "device", "managed"}[k]
}

// sideOf classifies one view of a copy. CPU views count as pinned when
// their whole span is page-locked (registered here, or known to the driver
// as pinned); that query is skipped for pageable-only callers.
func sideOf(v *View, ask bool) (memKind, int, error) {
	switch v.device.Type {
	case dlpack.CPU:
		lo, hi := v.ByteSpan()
		if registeredSpan(v.Ptr()+uintptr(lo), v.Ptr()+uintptr(hi)) {
			return memPinned, -1, nil
		}
		if ask && hi > lo {
			a, err := cuda.PointerGetAttributes(cuda.DevicePtr(v.Ptr() + uintptr(lo)))
			if err == nil && a.Kind() == cuda.KindPinnedHost && a.RangeSize > 0 &&
				uint64(a.RangeStart) <= uint64(v.Ptr()+uintptr(lo)) &&
				uint64(v.Ptr()+uintptr(hi)) <= uint64(a.RangeStart)+a.RangeSize {
				return memPinned, -1, nil
			}
		}
		return memPageable, -1, nil
	case dlpack.CUDAHost:
		return memPinned, -1, nil
	case dlpack.CUDA:
		return memDevice, int(v.device.ID), nil
	case dlpack.CUDAManaged:
		return memManaged, int(v.device.ID), nil
	}
	return 0, 0, fmt.Errorf("zerocopy: CopyCUDA: %v: %v memory is neither host nor CUDA memory", v, v.device.Type)
}

// smallRun reports whether a copy between dst and src is one contiguous run
// of fewer bytes than go direct (CopierOptions.StagedMin).
func (c *Copier) smallRun(dst, src *View) bool {
	n, ok := dst.lay.dtype.StorageBytes(dst.Len(), dst.lay.padded)
	return ok && n < c.opts.StagedMin && dst.IsCContiguous() && src.IsCContiguous()
}

// CopyCUDA copies src into dst with the default Copier: see Copier.Copy.
func CopyCUDA(dst, src *View, s *cuda.Stream) error {
	_, err := DefaultCopier().CopyVia(dst, src, s, PathAuto)
	return err
}

// Copy copies the elements of src into dst, which must have the same dtype
// and shape, between any two of: pageable host memory (Go or C), pinned host
// memory, device memory and managed memory, any strides on either side
// (negative, and stride-0 broadcasts on the source side, included).
//
// Host-to-host copies are Copy's. Everything else runs on stream s (nil:
// an internal non-blocking stream of the device involved; for a copy
// between devices, s may belong to either device). The copy first makes s
// wait, with an event (never a device-wide synchronize), for the writes
// pending on dst and src (View.Stream); afterwards dst's pending stream is
// s. When Copy returns, pageable host memory on either side is done with:
// a pageable source may be changed at once, a pageable destination holds
// the data. Device, pinned and managed destinations may still be in flight:
// wait for dst.Stream() (or call dst.Synchronize()) before the host reads
// them.
//
// Layouts that the DMA engines can walk (a run of contiguous bytes
// repeated at positive pitches: a block of columns of a row-major matrix, a
// sub-volume) go as 2D/3D pitched copies; other layouts are packed by the
// host (host side) or by a strided-copy kernel (device side). The transfer
// path for pageable memory is chosen by size and history unless the Copier
// forces one (see TransferPath).
func (c *Copier) Copy(dst, src *View, s *cuda.Stream) error {
	_, err := c.CopyVia(dst, src, s, c.opts.Path)
	return err
}

// CopyVia is Copy with the transfer path for pageable host memory forced
// (PathAuto: the Copier's choice). It returns the path taken: PathHost for
// host-to-host copies, PathDevice for device-to-device ones, PathDirect for
// copies from or to pinned memory.
func (c *Copier) CopyVia(dst, src *View, s *cuda.Stream, path TransferPath) (TransferPath, error) {
	if err := copyArgs("CopyCUDA", dst, src); err != nil {
		return 0, err
	}
	if path < PathAuto || path > PathRegistered {
		return 0, fmt.Errorf("zerocopy: CopyCUDA: transfer path %d is not one a caller may force", int(path))
	}
	// Two host views never ask the driver what their memory is; nor does a
	// small download of one contiguous run into host memory, where pinned
	// and pageable memory take the same path (one DMA call, then a wait
	// for it) and the question would cost 0.4-0.6 us of a 10 us copy
	// (SmallCopyParts). An upload asks: from pageable memory it need not
	// wait.
	ask := (dst.device.Type != dlpack.CPU || src.device.Type != dlpack.CPU) &&
		!(path == PathAuto && dst.device.Type == dlpack.CPU && c.smallRun(dst, src))
	dk, dord, err := sideOf(dst, ask)
	if err != nil {
		return 0, err
	}
	sk, sord, err := sideOf(src, ask)
	if err != nil {
		return 0, err
	}
	if dk.host() && sk.host() {
		return PathHost, c.hostToHost(dst, src)
	}

	// The layout as elements: packed sub-byte tensors only as whole bytes.
	shape, ds, ss, is := dst.lay.shape(), dst.lay.strides(), src.lay.strides(), int64(dst.lay.dtype.ItemSize())
	if dst.lay.dtype.IsSubByte() && !dst.lay.padded { // C-contiguous: copyArgs checked
		nb, _ := dst.lay.dtype.StorageBytes(dst.Len(), false)
		shape, ds, ss, is = []int64{nb}, []int64{1}, []int64{1}, 1
	}

	// The device whose context runs the copy, and the stream.
	ord := dord
	if !(dk == memDevice || dk == memManaged) {
		ord = sord
	}
	d, err := device(ord)
	if err != nil {
		return 0, fmt.Errorf("zerocopy: CopyCUDA: %w", err)
	}
	if s == nil {
		if s, err = d.defaultStream(); err != nil {
			return 0, fmt.Errorf("zerocopy: CopyCUDA: %w", err)
		}
	}
	sdev := s.Context().Device().Ordinal()
	crossDevice := !dk.host() && !sk.host() && dord != sord
	if sdev != ord && !(crossDevice && sdev == sord) {
		return 0, fmt.Errorf("zerocopy: CopyCUDA: stream %v is on cuda:%d, the copy %v <- %v needs a stream of cuda:%d", s, sdev, dst.device, src.device, ord)
	}
	if crossDevice {
		if d, err = device(sdev); err != nil {
			return 0, fmt.Errorf("zerocopy: CopyCUDA: %w", err)
		}
	}
	noteStream(s)

	// Order the copy after the writes pending on both views.
	if err := src.waitOn(s); err != nil {
		return 0, err
	}
	if err := dst.waitOn(s); err != nil {
		return 0, err
	}
	x := xfer{c: c, d: d, s: s, shape: shape, is: is,
		dst: side{base: dst.Ptr(), strides: ds, kind: dk}, src: side{base: src.Ptr(), strides: ss, kind: sk}}
	var used TransferPath
	switch {
	case !dk.host() && !sk.host():
		used = PathDevice
		if crossDevice {
			err = x.peer(dord, sord)
		} else {
			err = x.deviceToDevice()
		}
	default:
		host := src
		if dk.host() {
			host = dst
		}
		used, err = x.hostDevice(host, path)
	}
	// After the copy is queued (even a failed one may have queued part):
	// the memory's free waits for it.
	noteUse(src, s)
	noteUse(dst, s)
	if err != nil {
		return used, fmt.Errorf("zerocopy: CopyCUDA %v <- %v: %w", dst, src, err)
	}
	if dk == memPageable || x.synced {
		dst.setPending(nil) // the data is there: the copy waited for it
	} else {
		dst.setPending(s)
	}
	return used, nil
}

// noteUse tells stream-ordered memory that s has queued work on it (call
// it after queuing), so its free waits for that work.
func noteUse(v *View, s *cuda.Stream) { noteUseHandle(v, s.Handle()) }

// noteUseHandle is noteUse for a stream handle (1 and 2 included: the
// default streams of the memory's device).
func noteUseHandle(v *View, h uintptr) {
	if m, ok := v.owner.rel.(*cudaMemory); ok {
		m.noteUse(h, v.device)
	}
}

// hostToHost copies between two host-accessible views after waiting for
// their pending writes.
func (c *Copier) hostToHost(dst, src *View) error {
	for _, v := range [...]*View{src, dst} {
		if p := v.owner.pend.Load(); p != nil {
			if err := p.wait(v.device); err != nil {
				return fmt.Errorf("zerocopy: CopyCUDA: %w", err)
			}
		}
	}
	if err := Copy(dst, src); err != nil {
		return err
	}
	dst.setPending(nil)
	return nil
}

// side is one operand of a copy as raw memory: the address of element
// [0,...], its strides in elements and its kind.
type side struct {
	base    uintptr
	strides []int64
	kind    memKind
}

// xfer is one copy in progress.
type xfer struct {
	c        *Copier
	d        *devState // the device whose context runs the copy
	s        *cuda.Stream
	shape    []int64
	is       int64
	dst, src side
	synced   bool // the copy synchronized s after its last write: nothing is pending
}

// maxDMACalls bounds the driver calls one copy may issue for a layout the
// pitched copies cannot walk in a few calls; past it, a kernel or the host
// packs the data.
const maxDMACalls = 1024

// minDMARun is the narrowest run (row) a pitched DMA copy is used for:
// the copy engines move narrow rows one small transfer at a time, far
// slower than a kernel that packs them.
const minDMARun = 512

// dmaFriendly reports whether the DMA engines should run plan p: one
// linear copy, or pitched copies of rows at least minDMARun wide in at
// most maxDMACalls calls.
func (p *bytePlan) dmaFriendly() bool {
	if p.empty || p.nd == 0 {
		return true
	}
	_, calls, ok := p.blocks()
	return ok && calls <= maxDMACalls && p.run >= minDMARun
}

// memType is the CUmemorytype of a side for 2D/3D copies.
func memType(k memKind) cuda.MemoryType {
	switch k {
	case memDevice:
		return cuda.MemoryTypeDevice
	case memManaged:
		return cuda.MemoryTypeUnified
	}
	return cuda.MemoryTypeHost
}

// dma issues the copies of plan p between dst and src bases (byte plans
// carry byte offsets) on s: one linear copy, 2D/3D pitched copies, or, for
// a layout they cannot walk, a loop of linear copies of each run (callers
// keep that loop short). It never blocks the host.
func dma(s *cuda.Stream, p *bytePlan, dst, src uintptr, dk, sk memKind) error {
	if p.empty {
		return nil
	}
	b, _, ok := p.blocks()
	if !ok {
		b = pitchedBlock{width: p.run, height: 1, depth: 1, outer: p.nd,
			loopShape: p.shape[:p.nd], loopDs: p.ds[:p.nd], loopSs: p.ss[:p.nd], doff: p.doff, soff: p.soff}
	}
	return b.each(func(doff, soff int64) error {
		d, sp := dst+uintptr(doff), src+uintptr(soff)
		if b.height == 1 && b.depth == 1 {
			return linear(s, d, sp, b.width, dk, sk)
		}
		if b.depth == 1 {
			m := cuda.Memcpy2D{WidthInBytes: uint64(b.width), Height: uint64(b.height),
				DstPitch: uint64(b.dpitch), SrcPitch: uint64(b.spitch)}
			setSide2D(&m.DstMemoryType, &m.DstHost, &m.DstDevice, d, dk)
			setSide2D(&m.SrcMemoryType, &m.SrcHost, &m.SrcDevice, sp, sk)
			return s.Memcpy2DAsync(&m)
		}
		m := cuda.Memcpy3D{WidthInBytes: uint64(b.width), Height: uint64(b.height), Depth: uint64(b.depth),
			DstPitch: uint64(b.dpitch), SrcPitch: uint64(b.spitch),
			DstHeight: uint64(b.dheight), SrcHeight: uint64(b.sheight)}
		setSide2D(&m.DstMemoryType, &m.DstHost, &m.DstDevice, d, dk)
		setSide2D(&m.SrcMemoryType, &m.SrcHost, &m.SrcDevice, sp, sk)
		return s.Memcpy3DAsync(&m)
	})
}

func setSide2D(t *cuda.MemoryType, host *unsafe.Pointer, dev *cuda.DevicePtr, p uintptr, k memKind) {
	*t = memType(k)
	if k.host() {
		*host = hostPointer(p)
	} else {
		*dev = cuda.DevicePtr(p)
	}
}

// linear queues one copy of n contiguous bytes.
func linear(s *cuda.Stream, dst, src uintptr, n int64, dk, sk memKind) error {
	switch {
	case dk.host() && !sk.host():
		return s.MemcpyDtoHAsync(unsafe.Slice((*byte)(hostPointer(dst)), n), cuda.DevicePtr(src))
	case !dk.host() && sk.host():
		return s.MemcpyHtoDAsync(cuda.DevicePtr(dst), unsafe.Slice((*byte)(hostPointer(src)), n))
	case !dk.host() && !sk.host():
		return s.MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), n)
	}
	memmove(hostPointer(dst), hostPointer(src), n)
	return nil
}

// deviceToDevice copies between two views on the same device: pitched
// copies where the layout allows, the strided-copy kernel otherwise.
func (x *xfer) deviceToDevice() error {
	p := planBytes(x.shape, x.dst.strides, x.src.strides, x.is)
	if p.dmaFriendly() {
		return dma(x.s, &p, x.dst.base, x.src.base, x.dst.kind, x.src.kind)
	}
	return x.d.kernelCopy(x.s, &p, x.dst.base, x.src.base)
}

// Kernels returns CUDA device dev's built-in kernels (package cuda's PTX:
// fills, strided copies, the test spin-write), loaded once per process on
// first use and shared by everything that launches them.
func Kernels(dev int) (*cuda.Kernels, error) {
	d, err := device(dev)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: Kernels(%d): %w", dev, err)
	}
	k, err := d.kernels()
	if err != nil {
		return nil, fmt.Errorf("zerocopy: Kernels(%d): %w", dev, err)
	}
	return k, nil
}

// kernels returns the device's built-in kernels, loading them on first use.
func (d *devState) kernels() (*cuda.Kernels, error) {
	d.kmu.Lock()
	defer d.kmu.Unlock()
	if d.k == nil && d.kerr == nil {
		d.k, d.kerr = d.ctx.LoadKernels()
	}
	return d.k, d.kerr
}

// kernelCopy runs plan p with the strided_copy2d kernel: the two innermost
// dimensions of the plan (the contiguous run split into elements counting
// as one) form each launch, the rest loop.
func (d *devState) kernelCopy(s *cuda.Stream, p *bytePlan, dst, src uintptr) error {
	if p.empty {
		return nil
	}
	k, err := d.kernels()
	if err != nil {
		return fmt.Errorf("loading the strided-copy kernel: %w", err)
	}
	dst += uintptr(p.doff)
	src += uintptr(p.soff)
	// Element size: the widest of 8, 4, 2, 1 that divides the run, every
	// stride and both addresses.
	g := uint64(p.run) | uint64(dst) | uint64(src)
	for i := 0; i < p.nd; i++ {
		g |= uint64(p.ds[i]) | uint64(p.ss[i])
	}
	es := int64(8)
	for es > 1 && g%uint64(es) != 0 {
		es /= 2
	}
	// Columns and rows of one launch.
	var rows, cols, drs, dcs, srs, scs int64
	outer := p.nd
	if p.run == es && p.nd >= 1 {
		cols, dcs, scs = p.shape[p.nd-1], p.ds[p.nd-1], p.ss[p.nd-1]
		outer--
	} else {
		cols, dcs, scs = p.run/es, es, es
	}
	rows, drs, srs = 1, 0, 0
	if outer >= 1 {
		rows, drs, srs = p.shape[outer-1], p.ds[outer-1], p.ss[outer-1]
		outer--
	}
	b := pitchedBlock{outer: outer, loopShape: p.shape[:outer], loopDs: p.ds[:outer], loopSs: p.ss[:outer]}
	return b.each(func(doff, soff int64) error {
		return k.StridedCopy2D(s,
			cuda.Strided2D{Ptr: cuda.DevicePtr(dst + uintptr(doff)), RowStride: drs, ColStride: dcs},
			cuda.Strided2D{Ptr: cuda.DevicePtr(src + uintptr(soff)), RowStride: srs, ColStride: scs},
			rows, cols, int(es))
	})
}

// peer copies between views on two devices. Contiguous runs on both sides
// go as one peer copy; other layouts are packed into a compact buffer on
// the source device, copied across and unpacked on the destination device,
// which synchronizes the host.
func (x *xfer) peer(dord, sord int) error {
	p := planBytes(x.shape, x.dst.strides, x.src.strides, x.is)
	if p.empty {
		return nil
	}
	dd, err := device(dord)
	if err != nil {
		return err
	}
	sd, err := device(sord)
	if err != nil {
		return err
	}
	enablePeers(dd, sd)
	if p.nd == 0 {
		return x.s.MemcpyPeerAsync(cuda.DevicePtr(x.dst.base+uintptr(p.doff)), dd.ctx,
			cuda.DevicePtr(x.src.base+uintptr(p.soff)), sd.ctx, p.run)
	}
	// Compact buffers shaped like src (so the pack is src's own runs).
	like, off, n := likeStrides(x.shape, x.src.strides)
	nb := n * x.is
	t1, err := sd.ctx.MemAlloc(nb)
	if err != nil {
		return err
	}
	defer sd.ctx.MemFree(t1)
	t2, err := dd.ctx.MemAlloc(nb)
	if err != nil {
		return err
	}
	defer dd.ctx.MemFree(t2)
	ss, err := sd.defaultStream()
	if err != nil {
		return err
	}
	ds, err := dd.defaultStream()
	if err != nil {
		return err
	}
	// x.s already waited for the pending writes; hand its position over.
	if err := OrderAfter(ss, x.s); err != nil {
		return err
	}
	if err := OrderAfter(ds, x.s); err != nil {
		return err
	}
	pack := xfer{c: x.c, d: sd, s: ss, shape: x.shape, is: x.is,
		dst: side{base: uintptr(t1) + uintptr(off*x.is), strides: like, kind: memDevice}, src: x.src}
	if err := pack.deviceToDevice(); err != nil {
		return err
	}
	if err := OrderAfter(ds, ss); err != nil {
		return err
	}
	if err := ds.MemcpyPeerAsync(cuda.DevicePtr(t2), dd.ctx, cuda.DevicePtr(t1), sd.ctx, nb); err != nil {
		return err
	}
	unpack := xfer{c: x.c, d: dd, s: ds, shape: x.shape, is: x.is,
		dst: x.dst, src: side{base: uintptr(t2) + uintptr(off*x.is), strides: like, kind: memDevice}}
	if err := unpack.deviceToDevice(); err != nil {
		return err
	}
	if err := OrderAfter(x.s, ds); err != nil {
		return err
	}
	// The temporaries are freed on return: wait for the work using them.
	x.synced = true
	return x.s.Synchronize()
}

// kernel state lives with the device.
type kernelState struct {
	kmu  sync.Mutex
	k    *cuda.Kernels
	kerr error
}
