package zerocopy_test

import (
	"testing"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// TestExportableAllocation: AllocCUDAAsync's memory comes from the
// device's exportable pool and says so, whole, on any stream; other memory
// does not; a stream being captured into a graph gets the default pool
// (graph allocations support no IPC), and only a stream other than the
// work stream is asked about capture.
func TestExportableAllocation(t *testing.T) {
	needFake(t)
	ctx := retain(t, 0)
	ws, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	pool, exportable, err := zerocopy.DeviceMemPool(0)
	if err != nil || !exportable {
		t.Fatalf("DeviceMemPool(0) = %v, %v, %v; want the exportable pool", pool, exportable, err)
	}
	caller := newStream(t, ctx)
	captured := newStream(t, ctx)
	if r := fakeCall(t, "fakecuda_set_capturing", captured.Handle(), 1); r != 0 {
		t.Fatalf("fakecuda_set_capturing: %d", r)
	}
	defer fakeCall(t, "fakecuda_set_capturing", captured.Handle(), 0)
	type counts struct{ fromPool, async, queries int }
	count := func() counts {
		return counts{fakeCalls(t, "cuMemAllocFromPoolAsync"), fakeCalls(t, "cuMemAllocAsync"), fakeCalls(t, "cuStreamIsCapturing")}
	}
	for _, tc := range []struct {
		name       string
		alloc      func() (*zerocopy.View, error)
		exportable bool
		calls      counts // driver calls the allocation made
	}{
		{"work stream", func() (*zerocopy.View, error) { return zerocopy.AllocCUDAAsync(ws, dlpack.Float32Type, 3, 5) }, true, counts{1, 0, 0}},
		{"caller's stream", func() (*zerocopy.View, error) { return zerocopy.AllocCUDAAsync(caller, dlpack.Float32Type, 3, 5) }, true, counts{1, 0, 1}},
		{"captured stream", func() (*zerocopy.View, error) { return zerocopy.AllocCUDAAsync(captured, dlpack.Float32Type, 3, 5) }, false, counts{0, 1, 1}},
		{"empty", func() (*zerocopy.View, error) { return zerocopy.AllocCUDAAsync(ws, dlpack.Float32Type, 0) }, false, counts{}},
		{"cuMemAlloc", func() (*zerocopy.View, error) { return zerocopy.AllocCUDA(0, dlpack.Float32Type, 15) }, false, counts{}},
		{"host", func() (*zerocopy.View, error) { return zerocopy.FromSlice(make([]float32, 15)) }, false, counts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := count()
			v, err := tc.alloc()
			v = mustView(t, v, err)
			after := count()
			if got := (counts{after.fromPool - before.fromPool, after.async - before.async, after.queries - before.queries}); got != tc.calls {
				t.Errorf("driver calls %+v, want %+v", got, tc.calls)
			}
			a, ok := zerocopy.ExportableAllocationOf(v)
			if ok != tc.exportable {
				t.Fatalf("ExportableAllocationOf: ok = %v, want %v", ok, tc.exportable)
			}
			if !ok {
				if err := zerocopy.HandOverFree(v, func(*cuda.Stream) {}); err == nil {
					t.Error("HandOverFree of memory no exportable pool holds succeeded")
				}
				return
			}
			want := zerocopy.ExportableAllocation{Ptr: cuda.DevicePtr(v.Ptr()), Size: 60, Device: 0, Pool: pool}
			if a != want {
				t.Errorf("ExportableAllocationOf = %+v, want %+v", a, want)
			}
			sub, err := v.Slice(0, 1, 2, 1)
			sub = mustView(t, sub, err)
			if b, ok := zerocopy.ExportableAllocationOf(sub); !ok || b != want {
				t.Errorf("a slice: %+v, %v; want the whole allocation %+v", b, ok, want)
			}
		})
	}
}

// TestHandOverFree: the free of a handed-over allocation is the taker's:
// it is called once, when the last view goes (not before), with the
// device's work stream (ordered after every stream that used the memory),
// and the memory stays allocated until the taker frees it; a second hand
// over and a nil function are refused.
func TestHandOverFree(t *testing.T) {
	needFake(t)
	ctx := retain(t, 0)
	ws, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	caller := newStream(t, ctx)
	v, err := zerocopy.AllocCUDAAsync(caller, dlpack.Uint8Type, 256)
	if err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.HandOverFree(v, nil); err == nil {
		t.Error("HandOverFree with a nil function succeeded")
	}
	var got []*cuda.Stream
	if err := zerocopy.HandOverFree(v, func(s *cuda.Stream) { got = append(got, s) }); err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.HandOverFree(v, func(*cuda.Stream) {}); err == nil {
		t.Error("a second HandOverFree succeeded")
	}
	r, err := v.Retain()
	if err != nil {
		t.Fatal(err)
	}
	ptr := cuda.DevicePtr(v.Ptr())
	frees := fakeCalls(t, "cuMemFreeAsync") + fakeCalls(t, "cuMemFree_v2")
	v.Close()
	if len(got) != 0 {
		t.Fatal("handed over while a view was open")
	}
	r.Close()
	if len(got) != 1 || got[0] == nil || got[0].Handle() != ws.Handle() {
		t.Fatalf("taker called with %v, want the work stream %v once", got, ws)
	}
	if n := fakeCalls(t, "cuMemFreeAsync") + fakeCalls(t, "cuMemFree_v2") - frees; n != 0 {
		t.Fatalf("%d frees after the hand over, want none: the taker frees", n)
	}
	if err := got[0].MemFreeAsync(ptr); err != nil { // the taker's free
		t.Fatal(err)
	}
	if err := ws.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
