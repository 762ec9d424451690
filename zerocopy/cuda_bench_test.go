package zerocopy_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// BenchmarkCopyCUDA times host<->device copies per path and direction (on
// the fake driver here, where it measures the host side: memcpy, the
// pipeline's bookkeeping; on the GPU machine with DLBRIDGE_GPU=1, the real
// thing). MB/s is bytes of the tensor per second.
func BenchmarkCopyCUDA(b *testing.B) {
	needCUDA(b)
	for _, size := range []int{1 << 20, 64 << 20} {
		for _, dir := range []string{"h2d", "d2h"} {
			for _, path := range []string{"pinned", "direct", "staged", "registered"} {
				b.Run(fmt.Sprintf("%s/%s/%dMiB", dir, path, size>>20), func(b *testing.B) {
					benchCopy(b, size, dir, path)
				})
			}
		}
	}
}

func benchCopy(b *testing.B, size int, dir, path string) {
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, int64(size))
	d = mustView(b, d, err)
	var h *zerocopy.View
	forced := zerocopy.PathDirect
	if path == "pinned" {
		h, err = zerocopy.AllocPinned(dlpack.Uint8Type, int64(size))
		h = mustView(b, h, err)
	} else {
		h = goView(b, pattern(size, 1), dlpack.Uint8Type)
		forced, _ = zerocopy.ParseTransferPath(path)
	}
	c := newCopier(b, zerocopy.CopierOptions{})
	dst, src := d, h
	if dir == "d2h" {
		dst, src = h, d
	}
	if _, err := c.CopyVia(dst, src, nil, forced); err != nil { // warm-up: rings, registration
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.CopyVia(dst, src, nil, forced); err != nil {
			b.Fatal(err)
		}
		if err := dst.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	zerocopy.UnregisterHost(h)
}

// BenchmarkCopyCUDAStrided compares a column block of a row-major matrix
// copied device->host (a 2D pitched copy) with a contiguous copy of the
// same bytes, into pinned memory.
func BenchmarkCopyCUDAStrided(b *testing.B) {
	needCUDA(b)
	const rows, cols = 4096, 4096 // float32: 64 MiB, the block half of it
	m, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, rows, cols)
	m = mustView(b, m, err)
	block, err := m.Slice(1, 1024, 3072, 1)
	block = mustView(b, block, err)
	flat, err := m.Slice(0, 0, rows/2, 1)
	flat = mustView(b, flat, err)
	for _, c := range []struct {
		name string
		src  *zerocopy.View
	}{{"contiguous", flat}, {"column-block", block}} {
		b.Run(c.name, func(b *testing.B) {
			h, err := zerocopy.AllocPinned(dlpack.Float32Type, c.src.Shape()...)
			h = mustView(b, h, err)
			b.SetBytes(int64(h.Len()) * 4)
			for b.Loop() {
				if err := zerocopy.CopyCUDA(h, c.src, nil); err != nil {
					b.Fatal(err)
				}
				if err := h.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCopyCUDASmall is the fixed cost of a small copy (4 KiB) from
// Go memory to the device: checks, event waits, one driver copy.
func BenchmarkCopyCUDASmall(b *testing.B) {
	needCUDA(b)
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, 4096)
	d = mustView(b, d, err)
	h := goView(b, make([]byte, 4096), dlpack.Uint8Type)
	b.SetBytes(4096)
	for b.Loop() {
		if err := zerocopy.CopyCUDA(d, h, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyCUDAStagedSweep times staged pageable->device copies of mid
// sizes over the Copier's tuning knobs (staging chunk size and host
// workers), to choose the defaults on the GPU machine:
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench CopyCUDAStagedSweep -test.benchtime 20x
func BenchmarkCopyCUDAStagedSweep(b *testing.B) {
	needCUDA(b)
	type knobs struct {
		chunk   int64 // 0: the default
		workers int   // 0: the default
	}
	for _, size := range []int{16 << 20, 64 << 20, 256 << 20} {
		for _, k := range []knobs{{0, 0}, {1 << 20, 4}, {2 << 20, 4}, {4 << 20, 4}, {4 << 20, 8}, {8 << 20, 4}, {8 << 20, 12}} {
			name := fmt.Sprintf("h2d/%dMiB/chunk%dMiB/w%d", size>>20, k.chunk>>20, k.workers)
			if k.chunk == 0 {
				name = fmt.Sprintf("h2d/%dMiB/defaults", size>>20)
			}
			b.Run(name, func(b *testing.B) {
				d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, int64(size))
				d = mustView(b, d, err)
				h := goView(b, pattern(size, 1), dlpack.Uint8Type)
				c := newCopier(b, zerocopy.CopierOptions{ChunkBytes: k.chunk, Workers: k.workers})
				if _, err := c.CopyVia(d, h, nil, zerocopy.PathStaged); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for b.Loop() {
					if _, err := c.CopyVia(d, h, nil, zerocopy.PathStaged); err != nil {
						b.Fatal(err)
					}
					if err := d.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStagedParts splits a staged pageable->device copy of 64 MiB
// into what it is made of, to find where its time goes on the GPU machine:
// the host copies into pinned memory alone (pieces of 8 MiB cut into
// shares, as the pipeline does, by w goroutines), the DMA of pinned memory
// alone, and the staged copy with several chunk sizes and worker counts.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench StagedParts -test.benchtime 30x
func BenchmarkStagedParts(b *testing.B) {
	needCUDA(b)
	const size = 64 << 20
	d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, size)
	d = mustView(b, d, err)
	p, err := zerocopy.AllocPinned(dlpack.Uint8Type, size)
	p = mustView(b, p, err)
	h := goView(b, pattern(size, 1), dlpack.Uint8Type)
	settle := func(b *testing.B) {
		if err := d.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	for _, w := range []int{1, 4, 8, 12} {
		b.Run(fmt.Sprintf("memcpy-to-pinned/w%d", w), func(b *testing.B) {
			const share = 8 << 20 / 12
			b.SetBytes(size)
			for b.Loop() {
				next := make(chan int64, size/share+1)
				for off := int64(0); off < size; off += share {
					next <- off
				}
				close(next)
				var wg sync.WaitGroup
				for range w {
					wg.Go(func() {
						for off := range next {
							end := min(off+share, size)
							dv, err := p.Slice(0, off, end, 1)
							if err != nil {
								b.Error(err)
								return
							}
							sv, err := h.Slice(0, off, end, 1)
							if err != nil {
								b.Error(err)
								return
							}
							if err := zerocopy.Copy(dv, sv); err != nil {
								b.Error(err)
							}
							dv.Close()
							sv.Close()
						}
					})
				}
				wg.Wait()
			}
		})
	}
	b.Run("dma-pinned", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if err := zerocopy.CopyCUDA(d, p, nil); err != nil {
				b.Fatal(err)
			}
			settle(b)
		}
	})
	type knobs struct {
		chunk   int64
		workers int
	}
	for _, k := range []knobs{{0, 0}, {2 << 20, 8}, {4 << 20, 4}, {4 << 20, 8}, {4 << 20, 12}, {8 << 20, 4}, {8 << 20, 8}, {16 << 20, 12}} {
		b.Run(fmt.Sprintf("staged/chunk%dMiB/w%d", k.chunk>>20, k.workers), func(b *testing.B) {
			c := newCopier(b, zerocopy.CopierOptions{ChunkBytes: k.chunk, Workers: k.workers})
			if _, err := c.CopyVia(d, h, nil, zerocopy.PathStaged); err != nil {
				b.Fatal(err)
			}
			settle(b)
			b.SetBytes(size)
			for b.Loop() {
				if _, err := c.CopyVia(d, h, nil, zerocopy.PathStaged); err != nil {
					b.Fatal(err)
				}
				settle(b)
			}
		})
	}
}
