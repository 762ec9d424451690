package dlpack

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// A counting deleter for tensors built in Go memory: a purego callback
// (made once: purego never frees one) that counts calls per tensor address.
// It works with and without cgo.
var (
	countingOnce sync.Once
	countingFn   uintptr
	countingMu   sync.Mutex
	countingN    = map[uintptr]int{}
)

func countingDeleter() uintptr {
	countingOnce.Do(func() {
		countingFn = purego.NewCallback(func(p uintptr) uintptr {
			countingMu.Lock()
			countingN[p]++
			countingMu.Unlock()
			return 0
		})
	})
	return countingFn
}

// resetCalls zeroes the count of a new tensor: the GC reuses the address of
// an earlier one.
func resetCalls(p unsafe.Pointer) unsafe.Pointer {
	countingMu.Lock()
	delete(countingN, uintptr(p))
	countingMu.Unlock()
	return p
}

func deleterCalls(p unsafe.Pointer) int {
	countingMu.Lock()
	defer countingMu.Unlock()
	return countingN[uintptr(p)]
}

// tspec describes a tensor built in Go memory, with every field under the
// test's control. Nil shape or strides store NULL.
type tspec struct {
	major, minor uint32
	flags        Flags
	ndim         int32
	shape        []int64
	strides      []int64
	dtype        DataType
	device       Device
	data         uintptr
	offset       uint64
	nullDeleter  bool
}

// goodSpec is a valid float32[2,3] C-contiguous CPU tensor of DLPack 1.3.
func goodSpec() tspec {
	return tspec{major: 1, minor: 3, ndim: 2, shape: []int64{2, 3}, strides: []int64{3, 1},
		dtype: Float32Type, device: CPUDevice, data: 0x10000}
}

// goTensor keeps a Go-memory tensor and its arrays alive for a test.
type goTensor struct {
	ver     DLManagedTensorVersioned
	leg     DLManagedTensor
	shape   []int64
	strides []int64
}

func (s tspec) dltensor(g *goTensor) DLTensor {
	t := DLTensor{Data: ptrOf(s.data), Device: s.device, NDim: s.ndim, DType: s.dtype, ByteOffset: s.offset}
	if s.shape != nil {
		g.shape = append(make([]int64, 0, len(s.shape)+1), s.shape...)
		t.Shape = unsafe.SliceData(g.shape[:1])
	}
	if s.strides != nil {
		g.strides = append(make([]int64, 0, len(s.strides)+1), s.strides...)
		t.Strides = unsafe.SliceData(g.strides[:1])
	}
	return t
}

func (s tspec) versioned() (*goTensor, unsafe.Pointer) {
	g := new(goTensor)
	g.ver = DLManagedTensorVersioned{Version: Version{s.major, s.minor}, Flags: s.flags, DLTensor: s.dltensor(g)}
	if !s.nullDeleter {
		g.ver.Deleter = countingDeleter()
	}
	return g, resetCalls(unsafe.Pointer(&g.ver))
}

func (s tspec) legacy() (*goTensor, unsafe.Pointer) {
	g := new(goTensor)
	g.leg = DLManagedTensor{DLTensor: s.dltensor(g)}
	if !s.nullDeleter {
		g.leg.Deleter = countingDeleter()
	}
	return g, resetCalls(unsafe.Pointer(&g.leg))
}

// countRel is a Releaser that counts its releases.
type countRel struct {
	mu sync.Mutex
	n  int
}

func (c *countRel) Release() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *countRel) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func mustNoLive(t testing.TB, before int) {
	t.Helper()
	if got := LiveExports(); got != before {
		t.Errorf("LiveExports = %d, want %d", got, before)
	}
}

// deleterOf reads the deleter of one of our exports, versioned or
// legacy, from the table.
func deleterOf(p unsafe.Pointer) uintptr {
	s := shardOf(uintptr(p))
	s.mu.Lock()
	e := s.m[uintptr(p)]
	s.mu.Unlock()
	if e.legacy {
		return (*DLManagedTensor)(p).Deleter
	}
	return (*DLManagedTensorVersioned)(p).Deleter
}
