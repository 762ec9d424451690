package ipc_test

import (
	"errors"
	"testing"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

// devTensor is a uint32 tensor from the engine's allocator
// (zerocopy.AllocCUDAAsync on the work stream), filled with value.
func devTensor(t *testing.T, n int64, value uint32) *zerocopy.View {
	t.Helper()
	ws, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := zerocopy.AllocCUDAAsync(ws, dlpack.Uint32Type, n)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ws, v, value)
	return v
}

// TestDevicePoolSharesInPlace: memory of the engine's own allocator
// (AllocCUDAAsync) is sent as it is, without a copy: the consumer's write
// is seen by the producer; a tensor the producer closed while the consumer
// held it stays valid (the lease holds it), and its free waits until the
// consumer unmapped it (FAKECUDA_IPC_STRICT=1 aborts an exporter's free of
// memory a live importer maps; violations counts them otherwise); the same
// tensor sent again maps nothing new.
func TestDevicePoolSharesInPlace(t *testing.T) {
	needCUDA(t)
	pool, err := ipc.DevicePool(0)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Synchronize(); err != nil {
		t.Fatal(err)
	}
	base := usedBytes(t, pool)
	before := violations(t)
	sock := sockPath(t)
	ln, err := ipc.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd, lines, peer := acceptChild(t, ln, "writeback", sock, "IPC_TEST_N=3")
	defer peer.Close()

	kept, dropped := devTensor(t, 1024, 5), devTensor(t, 4096, 6)
	defer kept.Close()
	for _, v := range []*zerocopy.View{kept, dropped} {
		if !pool.Owns(v) {
			t.Fatalf("DevicePool does not own %v, an AllocCUDAAsync tensor", v)
		}
	}
	for i, v := range []*zerocopy.View{kept, dropped, kept} {
		if err := peer.Send(pool, v, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if v == dropped {
			dropped.Close() // the lease keeps the memory
		}
	}
	// The third tensor is kept again: the consumer read its own write.
	if got, want := expectLine(t, lines, "wrote"), "5 6 1000 imports 2"; got != want {
		t.Fatalf("consumer: %q, want %q", got, want)
	}
	got, err := read(kept)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range got {
		if x != 1002 {
			t.Fatalf("element %d = %d after the consumer wrote 1002: the producer's memory was not shared in place", i, x)
		}
	}
	// dropped's last lease is back: freed once the consumer unmapped it;
	// kept stays while the producer holds it.
	waitFor(t, "the dropped tensor freed", func() bool { return pool.Live() == 1 })
	kept.Close()
	waitFor(t, "the device pool's baseline", func() bool {
		ws.Synchronize()
		return pool.Live() == 0 && usedBytes(t, pool) == base
	})
	if n := violations(t) - before; n != 0 {
		t.Errorf("%d frees of memory a consumer still mapped", n)
	}
	endChild(t, cmd, "writeback")
	if err := pool.Close(); err == nil {
		t.Error("Close of the shared device pool succeeded")
	}
}

// TestDevicePoolRefuses: the device pool adopts only what the engine
// allocated from it; another pool's memory, cuMemAlloc's, host memory and
// an empty tensor are refused with ErrNotIPCMemory.
func TestDevicePoolRefuses(t *testing.T) {
	needCUDA(t)
	pool, err := ipc.DevicePool(0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ipc.NewPool(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ws, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	peer := localPeer(t)
	mk := map[string]func() (*zerocopy.View, error){
		"another pool": func() (*zerocopy.View, error) { return other.Alloc(nil, dlpack.Float32Type, 16) },
		"cuMemAlloc":   func() (*zerocopy.View, error) { return zerocopy.AllocCUDA(0, dlpack.Float32Type, 16) },
		"host":         func() (*zerocopy.View, error) { return zerocopy.FromSlice([]float32{1, 2}) },
		"empty":        func() (*zerocopy.View, error) { return zerocopy.AllocCUDAAsync(ws, dlpack.Float32Type, 0) },
	}
	for name, f := range mk {
		v, err := f()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if pool.Owns(v) {
			t.Errorf("%s: DevicePool owns it", name)
		}
		if err := peer.Send(pool, v, nil); !errors.Is(err, ipc.ErrNotIPCMemory) {
			t.Errorf("%s: Send: %v, want ErrNotIPCMemory", name, err)
		}
		v.Close()
	}
	// A slice of an allocation is shared as a window of it.
	v := devTensor(t, 64, 3)
	defer v.Close()
	sub, err := v.Slice(0, 8, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if !pool.Owns(sub) {
		t.Error("DevicePool does not own a slice of its allocation")
	}
}
