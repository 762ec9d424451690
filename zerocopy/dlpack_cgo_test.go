//go:build cgo

package zerocopy_test

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/dlpack/dlpacktest"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
	"github.com/google/go-cmp/cmp"
)

// A tensor from a C producer, viewed, sliced and handed on to a C consumer
// that finishes on a thread Go did not create: the producer's deleter runs
// exactly once, after the last of the views and the export is gone, in
// either order.
func TestDLPackCProducerToForeignThreadConsumer(t *testing.T) {
	for _, consumerLast := range []bool{false, true} {
		live := dlpack.LiveExports()
		p, rec := dlpacktest.NewVersioned(dlpacktest.Spec{NDim: 2, Shape: []int64{4, 5}, Strides: []int64{5, 1},
			Code: uint8(dlpack.Float), Bits: 64, Lanes: 1, DeviceType: int32(dlpack.CPU),
			Major: 1, Minor: 3, DataBytes: 160, Flags: uint64(dlpack.FlagIsCopied)})
		v, err := zerocopy.FromDLPackVersioned(p)
		if err != nil {
			t.Fatal(err)
		}
		if v.Ptr() != rec.Data() || !v.Copied() || !v.Foreign() {
			t.Errorf("view ptr %#x copied %v foreign %v; producer data %#x", v.Ptr(), v.Copied(), v.Foreign(), rec.Data())
		}
		// Writable C memory: write through the view, read it back from C's data.
		if err := zerocopy.Set[float64](v, 2.5, 3, 4); err != nil {
			t.Fatal(err)
		}
		if got := unsafe.Slice((*float64)(rec.DataPointer()), 20)[19]; got != 2.5 {
			t.Errorf("C memory holds %v after Set, want 2.5", got)
		}
		rows, err := v.Slice(0, 1, 3, 1)
		if err != nil {
			t.Fatal(err)
		}
		q, err := rows.ToDLPack()
		if err != nil {
			t.Fatal(err)
		}
		m := (*dlpack.DLManagedTensorVersioned)(q)
		if got := unsafe.Slice(m.DLTensor.Shape, 2); !cmp.Equal([]int64{2, 5}, got) || uintptr(m.DLTensor.Data) != rec.Data()+40 {
			t.Errorf("export shape %v data %#x", got, m.DLTensor.Data)
		}
		release := func() {
			if err := dlpacktest.DeleteOnNewThread(q, false); err != nil {
				t.Fatal(err)
			}
		}
		if !consumerLast {
			release()
		}
		rows.Close()
		v.Close()
		if consumerLast {
			if rec.Calls() != 0 {
				t.Fatal("producer's deleter ran while a C consumer holds the memory")
			}
			release()
		}
		if rec.Calls() != 1 {
			t.Errorf("producer's deleter ran %d times, want 1", rec.Calls())
		}
		if dlpack.LiveExports() != live {
			t.Errorf("LiveExports = %d, want %d", dlpack.LiveExports(), live)
		}
		rec.Free()
	}
}

// Legacy tensors from C with NULL strides, and rejected ones.
func TestDLPackCProducerLegacy(t *testing.T) {
	p, rec := dlpacktest.NewLegacy(dlpacktest.Spec{NDim: 3, Shape: []int64{2, 3, 4},
		Code: uint8(dlpack.Int), Bits: 16, Lanes: 1, DeviceType: int32(dlpack.CUDA), DeviceID: 2, DataBytes: 48})
	defer rec.Free()
	v, err := zerocopy.FromDLPackLegacy(p)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(v.Strides(), []int64{12, 4, 1}) || v.Device() != dlpack.CUDADevice(2) || v.ReadOnly() {
		t.Errorf("legacy view %v", v)
	}
	v.Close()
	if rec.Calls() != 1 {
		t.Errorf("deleter ran %d times", rec.Calls())
	}
	p, rec2 := dlpacktest.NewVersioned(dlpacktest.Spec{NDim: 1, Shape: []int64{2},
		Code: uint8(dlpack.Int), Bits: 16, Lanes: 1, DeviceType: int32(dlpack.CPU), Major: 3, DataBytes: 4})
	defer rec2.Free()
	if _, err := zerocopy.FromDLPackVersioned(p); err == nil {
		t.Error("major 3 accepted")
	}
	if rec2.Calls() != 1 {
		t.Errorf("rejected tensor's deleter ran %d times", rec2.Calls())
	}
}

// Many exports of fake device memory, released by C consumers on foreign
// threads at once: one free after the last.
func TestDLPackForeignThreadsRelease(t *testing.T) {
	mem := fakemem.New(fakemem.Options{})
	v, err := mem.View(dlpack.CUDADevice(0), dlpack.Float32Type, 32)
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	ptrs := make([]unsafe.Pointer, n)
	for i := range ptrs {
		legacy := i%2 == 1
		if legacy {
			ptrs[i], err = v.ToDLPackLegacy()
		} else {
			ptrs[i], err = v.ToDLPack()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	v.Close()
	var wg sync.WaitGroup
	for i, p := range ptrs {
		wg.Go(func() {
			if err := dlpacktest.DeleteOnNewThread(p, i%2 == 1); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := mem.Stats(); st.Frees != 1 || st.FreeCalls != 1 || st.Live != 0 {
		t.Errorf("stats %+v, want one free", st)
	}
}
