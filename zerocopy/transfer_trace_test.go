package zerocopy

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// uploadViews allocates size bytes on CUDA device 0 and wraps as many of
// Go memory, for the staged-upload benchmarks below; both are closed when
// b ends. It skips b without a CUDA driver.
func uploadViews(b *testing.B, size int64) (d, h *View) {
	if !cuda.Available() {
		b.Skip("no CUDA driver")
	}
	d, err := AllocCUDA(0, dlpack.Uint8Type, size)
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { d.Close() })
	// Written, as a user's data is: a slice never written maps the kernel's
	// zero page, whose reads hit the cache.
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8*13)
	}
	h, err = Wrap(Spec{Ptr: uintptr(unsafe.Pointer(&buf[0])), Device: dlpack.CPUDevice, DType: dlpack.Uint8Type, Shape: []int64{size}},
		NewOwner(nil, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(); runtime.KeepAlive(buf) })
	return d, h
}

// timeStaged times staged uploads of h into d with Copier c, after one to
// warm its ring.
func timeStaged(b *testing.B, c *Copier, d, h *View) { timeUploads(b, c, d, h, PathStaged) }

// timeUploads times uploads of h into d by path with Copier c, after one
// to warm it.
func timeUploads(b *testing.B, c *Copier, d, h *View, path TransferPath) {
	upload := func() {
		if _, err := c.CopyVia(d, h, nil, path); err != nil {
			b.Fatal(err)
		}
		d.Synchronize()
	}
	upload()
	b.SetBytes(h.Len())
	for b.Loop() {
		upload()
	}
}

// BenchmarkStagedTimeline prints when each step of a staged 64 MiB upload
// happens (microseconds from its start), three transfers for the default
// knobs and one for 12 workers: where the fixed part of a mid-size
// transfer's time goes. The steps are recorded without a lock (a record
// taken under a mutex parked the workers that met there in the Go
// scheduler, and the timeline then showed the scheduler's wake-ups).
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench StagedTimeline -test.benchtime 1x
func BenchmarkStagedTimeline(b *testing.B) {
	d, h := uploadViews(b, 64<<20)
	type step struct {
		at    time.Duration
		what  string
		piece int
	}
	for _, w := range []int{0, 0, 0, 12} {
		c := NewCopier(CopierOptions{Workers: w})
		for range 3 { // warm: the ring, the threads
			if _, err := c.CopyVia(d, h, nil, PathStaged); err != nil {
				b.Fatal(err)
			}
			d.Synchronize()
		}
		steps := make([]step, 4096)
		var n atomic.Int64
		var t0 time.Time
		stagedTrace = func(what string, piece int) {
			if i := n.Add(1) - 1; i < int64(len(steps)) {
				steps[i] = step{time.Since(t0), what, piece}
			}
		}
		t0 = time.Now()
		_, err := c.CopyVia(d, h, nil, PathStaged)
		returned := time.Since(t0)
		d.Synchronize()
		synced := time.Since(t0)
		stagedTrace = nil
		if err != nil {
			b.Fatal(err)
		}
		steps = steps[:min(n.Load(), int64(len(steps)))]
		// Records are taken in the order of n, not of time: sort.
		slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
		var out strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&out, "%8.1f %-16s %d\n", float64(s.at.Nanoseconds())/1e3, s.what, s.piece)
		}
		fmt.Printf("staged 64 MiB, %d workers: returned %.1f us, synchronized %.1f us\n%s\n", c.Options().Workers,
			float64(returned.Nanoseconds())/1e3, float64(synced.Nanoseconds())/1e3, out.String())
		c.Close()
	}
	for b.Loop() {
	}
}

// BenchmarkStagedMinPart times staged 64 MiB uploads with host tasks of at
// least 256 KiB, 1 MiB and 2 MiB (Go's memmove writes around the cache
// from 1 MiB on), and 8 or 12 workers.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench StagedMinPart -test.benchtime 20x
func BenchmarkStagedMinPart(b *testing.B) {
	d, h := uploadViews(b, 64<<20)
	defer func(m int64) { minPart = m }(minPart)
	for _, part := range []int64{256 << 10, 1 << 20, 2 << 20} {
		for _, w := range []int{8, 12} {
			b.Run(fmt.Sprintf("part%dKiB/w%d", part>>10, w), func(b *testing.B) {
				minPart = part
				c := NewCopier(CopierOptions{Workers: w})
				defer c.Close()
				timeStaged(b, c, d, h)
			})
		}
	}
}

// BenchmarkStagedMin times uploads of 2 to 16 MiB from Go memory direct
// (the driver stages them) and staged, alternated: where StagedMin, the
// size from which PathAuto stages, should be.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench 'StagedMin$' -test.benchtime 20x
func BenchmarkStagedMin(b *testing.B) {
	for _, size := range []int64{2 << 20, 4 << 20, 8 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			d, h := uploadViews(b, size)
			c := NewCopier(CopierOptions{})
			defer c.Close()
			for round, path := range []TransferPath{PathDirect, PathStaged, PathDirect, PathStaged} {
				b.Run(fmt.Sprintf("%v/round%d", path, round/2+1), func(b *testing.B) {
					timeUploads(b, c, d, h, path)
				})
			}
		})
	}
}

// BenchmarkStagedWorkers times staged uploads of 64 MiB, 256 MiB and 1 GiB
// with 8 and 12 host workers (or the counts listed in
// DLBRIDGE_BENCH_WORKERS, e.g. "4,6,8"), in two rounds, so that a change in
// the machine's speed shows as disagreement between the rounds.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench StagedWorkers -test.benchtime 5x
func BenchmarkStagedWorkers(b *testing.B) {
	counts := []int{8, 12}
	if env := os.Getenv("DLBRIDGE_BENCH_WORKERS"); env != "" {
		counts = counts[:0]
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("DLBRIDGE_BENCH_WORKERS=%q: %q is not a worker count", env, f)
			}
			counts = append(counts, n)
		}
	}
	for _, size := range []int64{64 << 20, 256 << 20, 1 << 30} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			d, h := uploadViews(b, size)
			for round, w := range slices.Concat(counts, counts) {
				b.Run(fmt.Sprintf("w%d/round%d", w, round/len(counts)+1), func(b *testing.B) {
					c := NewCopier(CopierOptions{Workers: w})
					defer c.Close()
					timeStaged(b, c, d, h)
				})
			}
		})
	}
}

// BenchmarkDMAUnderLoad times 64 MiB of DMAs of 8 MiB (or 2 MiB: the
// size of ramp's quarters) from four pinned buffers to the device, back
// to back on one stream, while 0, 4 or 8 goroutines copy between Go
// buffers: how much the host copies of a staged transfer slow the DMA
// that reads the staging buffers, and what a smaller DMA costs.
//
//	DLBRIDGE_GPU=1 zerocopy.test -test.run '^$' -test.bench DMAUnderLoad -test.benchtime 20x
func BenchmarkDMAUnderLoad(b *testing.B) {
	const chunk, n = 8 << 20, 8
	d, _ := uploadViews(b, chunk*n)
	dev, err := device(0)
	if err != nil {
		b.Fatal(err)
	}
	s, err := dev.defaultStream()
	if err != nil {
		b.Fatal(err)
	}
	var bufs [4]*cuda.HostMem
	for i := range bufs {
		if bufs[i], err = dev.ctx.MemAllocHost(chunk, 0); err != nil {
			b.Fatal(err)
		}
		defer bufs[i].Free()
	}
	for _, c := range []struct{ dma, load int }{{chunk, 0}, {chunk / 4, 0}, {chunk, 4}, {chunk / 4, 4}, {chunk, 8}, {chunk / 4, 8}} {
		load := c.load
		b.Run(fmt.Sprintf("dma%dMiB/load%d", c.dma>>20, load), func(b *testing.B) {
			var stop atomic.Bool
			var wg sync.WaitGroup
			for range load {
				wg.Go(func() {
					src, dst := make([]byte, chunk), make([]byte, chunk)
					for i := range src {
						src[i] = byte(i)
					}
					for !stop.Load() {
						copy(dst, src)
					}
				})
			}
			b.SetBytes(chunk * n)
			for b.Loop() {
				for i := range chunk * n / c.dma {
					if err := s.MemcpyHtoDAsync(cuda.DevicePtr(d.Ptr()+uintptr(i*c.dma)), bufs[i%4].Bytes()[:c.dma]); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			stop.Store(true)
			wg.Wait()
		})
	}
}

// uploadOrder uploads 8 MiB through a Copier of 1 MiB buffers and the
// given workers (four quarters of the first 1 MiB piece, six whole ones,
// four quarters of the last: 14 pieces, one task each) while hook hears
// the trace, and returns the order in which the pieces' DMAs were queued.
// The device must get the source's bytes.
func uploadOrder(t *testing.T, workers int, hook func(step string, piece int)) []int {
	t.Helper()
	const size = 8 << 20
	d, err := AllocCUDA(0, dlpack.Uint8Type, size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	src, back := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	wrap := func(buf []byte) *View {
		v, err := Wrap(Spec{Ptr: uintptr(unsafe.Pointer(&buf[0])), Device: dlpack.CPUDevice, DType: dlpack.Uint8Type, Shape: []int64{size}},
			NewOwner(nil, "test"))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h, hb := wrap(src), wrap(back)
	defer h.Close()
	defer hb.Close()

	c := NewCopier(CopierOptions{ChunkBytes: 1 << 20, Workers: workers})
	defer c.Close()
	var mu sync.Mutex
	var order []int
	stagedTrace = func(step string, piece int) {
		if step == "dma-queued" {
			mu.Lock()
			order = append(order, piece)
			mu.Unlock()
		}
		hook(step, piece)
	}
	_, err = c.CopyVia(d, h, nil, PathStaged)
	stagedTrace = nil
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 14 {
		t.Errorf("%d DMAs queued (%v), want 14", len(order), order)
	}
	if _, err := c.CopyVia(hb, d, nil, PathDirect); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, src) {
		t.Error("the device did not get the source's bytes")
	}
	runtime.KeepAlive(src)
	runtime.KeepAlive(back)
	return order
}

// waitFor waits until ch is closed, failing the test after 10 s (a hook
// that waits for something the pipeline never does).
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Errorf("gave up waiting for %s", what)
	}
}

// TestUploadDMAsGoInPieceOrder holds the first piece's host copy back
// until the second piece is packed: one piece behind is not late, so the
// second piece's DMA must still wait for the first's (in piece order: a
// buffer's DMA queued behind its successors' holds it longer).
func TestUploadDMAsGoInPieceOrder(t *testing.T) {
	if !cuda.Available() {
		t.Skip("no CUDA driver")
	}
	secondPacked, firstQueued, secondQueued := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once1, once0, onceQ1 sync.Once
	// Two workers: while one holds piece 0, the other packs piece 1 and
	// is then held in piece 2 until the DMAs of pieces 0 and 1 are queued,
	// so that no piece two beyond them is packed meanwhile. (Held only
	// until piece 0's, a worker descheduled between packing piece 1 and
	// queueing its DMA, as under qemu on a loaded machine, let pieces 2-4
	// pass it, which is right for a late piece and not what this tests.)
	order := uploadOrder(t, 2, func(step string, piece int) {
		switch {
		case step == "task-copied" && piece == 0:
			waitFor(t, secondPacked, "piece 1 to be packed")
		case step == "task-copied" && piece == 1:
			once1.Do(func() { close(secondPacked) })
		case step == "task-copied" && piece >= 2:
			waitFor(t, firstQueued, "piece 0's DMA")
			waitFor(t, secondQueued, "piece 1's DMA")
		case step == "dma-queued" && piece == 0:
			once0.Do(func() { close(firstQueued) })
		case step == "dma-queued" && piece == 1:
			onceQ1.Do(func() { close(secondQueued) })
		}
	})
	if len(order) < 2 || order[0] != 0 || order[1] != 1 {
		t.Errorf("DMAs queued in the order %v, want 0 and 1 first", order)
	}
}

// TestUploadDMAsPassALatePiece holds the first piece's host copy back
// until the DMAs of every other piece are queued. A piece two beyond it
// is packed, so it is late: the packed pieces behind it go first (a
// stalled worker does not leave the DMA engine idle), and since buffers
// go to uses as they come free, the pieces after the first four uses take
// the three buffers the held use does not hold (it holds only its own).
// Before buffers were given as they came free, piece 7 waited for piece
// 0's buffer, and so did everything after it.
func TestUploadDMAsPassALatePiece(t *testing.T) {
	if !cuda.Available() {
		t.Skip("no CUDA driver")
	}
	var queued atomic.Int32
	passed := make(chan struct{})
	var once sync.Once
	// Pieces 1-3 share the first use (and buffer) with piece 0.
	order := uploadOrder(t, 4, func(step string, piece int) {
		switch {
		case step == "task-copied" && piece == 0:
			waitFor(t, passed, "the DMAs of pieces 1-13 while piece 0 is held")
		case step == "dma-queued" && piece >= 1:
			if queued.Add(1) == 13 {
				once.Do(func() { close(passed) })
			}
		}
	})
	if len(order) != 14 || order[13] != 0 {
		t.Errorf("DMAs queued in the order %v, want piece 0 last", order)
	}
}
