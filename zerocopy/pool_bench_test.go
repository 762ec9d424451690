package zerocopy

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// BenchmarkDevicePool compares, in one run, allocation and free of device
// tensors (AllocCUDAAsync's whole path: its checks, the driver's
// allocation, the view, the stream-ordered free at Close) from the
// device's default pool (cuMemAllocAsync, how device tensors were
// allocated before the pool of our own) and from the exportable pool
// AllocCUDAAsync uses now, which other processes can map. The two alternate in rounds of 64 so that drift
// of the machine falls on both; each b.Loop iteration is one round of
// each. Patterns: "pairs" frees each tensor before the next is made (the
// loop of a temporary), "batch" makes 64 and then frees them. Metrics:
// ns per allocation and free for each pool, and exportable/default, the
// ratio the pool of our own must keep within 1.05. Run it on the GPU
// machine with DLBRIDGE_GPU=1; on the fake driver it measures the host
// side only.
func BenchmarkDevicePool(b *testing.B) {
	if !cuda.Available() {
		b.Skip("no CUDA driver")
	}
	d, err := device(0)
	if err != nil {
		b.Fatal(err)
	}
	s, err := d.defaultStream()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.memPool(); err != nil {
		b.Fatal(err)
	}
	if !d.exportable {
		b.Skip("the driver gave device 0 no exportable pool")
	}
	def, err := d.ctx.Device().DefaultMemPool()
	if err != nil {
		b.Fatal(err)
	}
	// The default pool keeps what it reserved, as it did when
	// AllocCUDAAsync allocated from it.
	total, err := d.ctx.Device().TotalMem()
	if err == nil {
		err = def.SetReleaseThreshold(total / poolKeepFraction)
	}
	if err != nil {
		b.Fatal(err)
	}
	const round = 64
	for _, size := range []int64{4 << 10, 1 << 20, 64 << 20} {
		for _, pattern := range []string{"pairs", "batch"} {
			b.Run(fmt.Sprintf("%s/%dKiB", pattern, size>>10), func(b *testing.B) {
				if uint64(size*round) > total/2 {
					b.Skipf("a round of %d bytes needs more than half of the device's %d", size*round, total)
				}
				views := make([]*View, round)
				run := func(exportable bool) time.Duration {
					t0 := time.Now()
					for i := range views {
						v, err := allocCUDAAsync(s, exportable, dlpack.Uint8Type, []int64{size})
						if err != nil {
							b.Fatal(err)
						}
						if pattern == "pairs" {
							v.Close()
						} else {
							views[i] = v
						}
					}
					if pattern == "batch" {
						for _, v := range views {
							v.Close()
						}
					}
					return time.Since(t0)
				}
				// Warm-up: both pools reserve what the rounds use.
				run(false)
				run(true)
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
				var tDef, tExp time.Duration
				n := 0
				for b.Loop() {
					if n%2 == 0 { // alternate which goes first
						tDef += run(false)
						tExp += run(true)
					} else {
						tExp += run(true)
						tDef += run(false)
					}
					n++
					// Outside the timing: the GPU runs what the rounds
					// queued, so that the stream's queue (and the fake
					// driver's account of pending frees) stays short.
					b.StopTimer()
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(tDef.Nanoseconds())/float64(n*round), "default-ns/alloc")
				b.ReportMetric(float64(tExp.Nanoseconds())/float64(n*round), "exportable-ns/alloc")
				b.ReportMetric(float64(tExp)/float64(tDef), "exportable/default")
			})
		}
	}
}
