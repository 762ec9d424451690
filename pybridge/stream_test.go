package pybridge

import (
	"sync"
	"testing"

	"github.com/dlbridge/dlbridge/cuda"
)

// The stream and event tests run against the fake driver that
// gpu_fake_test.go's init chose (or the real one with DLBRIDGE_GPU=1).

func needDriver(t *testing.T) int {
	t.Helper()
	if fakeErr != nil {
		t.Skipf("no fake CUDA driver: %v", fakeErr)
	}
	n, err := cuda.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no CUDA driver or device: %v", err)
	}
	return n
}

func TestStreamLifecycle(t *testing.T) {
	needDriver(t)
	before := LiveStreams()
	h, raw, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if raw <= cuda.StreamHandlePerThread {
		t.Fatalf("raw stream %#x: want a created stream, not an implicit one", raw)
	}
	if LiveStreams() != before+1 {
		t.Fatalf("LiveStreams = %d, want %d", LiveStreams(), before+1)
	}
	if ready, err := StreamQuery(h); err != nil || !ready {
		t.Fatalf("StreamQuery of an idle stream = %v, %v", ready, err)
	}
	if err := StreamSynchronize(h); err != nil {
		t.Fatal(err)
	}
	if _, err := StreamPriority(h); err != nil {
		t.Fatal(err)
	}
	if err := CloseStream(h); err != nil {
		t.Fatal(err)
	}
	if err := CloseStream(h); CodeOf(err) != ValueError {
		t.Fatalf("second CloseStream: %v, want ValueError", err)
	}
	if err := StreamSynchronize(h); CodeOf(err) != ValueError {
		t.Fatalf("StreamSynchronize after close: %v, want ValueError", err)
	}
	if LiveStreams() != before {
		t.Fatalf("LiveStreams = %d after close, want %d", LiveStreams(), before)
	}
}

func TestStreamBadDevice(t *testing.T) {
	n := needDriver(t)
	for _, dev := range []int32{-1, int32(n), 1 << 20} {
		if _, _, err := NewStream(dev, 0); CodeOf(err) != ValueError {
			t.Errorf("NewStream(%d): %v, want ValueError", dev, err)
		}
		if err := SynchronizeDevice(dev); CodeOf(err) != ValueError {
			t.Errorf("SynchronizeDevice(%d): %v, want ValueError", dev, err)
		}
	}
}

func TestEventLifecycle(t *testing.T) {
	n := needDriver(t)
	h := NewEvent(true)
	if dev, err := EventDevice(h); err != nil || dev != -1 {
		t.Fatalf("EventDevice before record = %d, %v; want -1", dev, err)
	}
	if ready, err := EventQuery(h); err != nil || !ready {
		t.Fatalf("EventQuery before record = %v, %v; want true", ready, err)
	}
	if err := EventWait(h, 0, 0); err != nil {
		t.Fatalf("EventWait before record: %v (want nothing to do)", err)
	}
	s, raw, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseStream(s)
	if err := EventRecord(h, raw, 0); err != nil {
		t.Fatal(err)
	}
	if err := EventSynchronize(h); err != nil {
		t.Fatal(err)
	}
	if ms, err := EventElapsedMS(h, h); err != nil || ms != 0 {
		t.Fatalf("EventElapsedMS(h, h) = %v, %v", ms, err)
	}
	plain := NewEvent(false)
	defer CloseEvent(plain)
	if err := EventRecord(plain, 0, -1); err != nil { // our work stream of cuda:0
		t.Fatal(err)
	}
	if _, err := EventElapsedMS(h, plain); CodeOf(err) != ValueError {
		t.Fatalf("EventElapsedMS without timing: %v, want ValueError", err)
	}
	if n > 1 {
		if err := EventRecord(h, 0, 1); CodeOf(err) != ValueError {
			t.Fatalf("EventRecord on another device: %v, want ValueError", err)
		}
	}
	if err := CloseEvent(h); err != nil {
		t.Fatal(err)
	}
	if err := CloseEvent(h); CodeOf(err) != ValueError {
		t.Fatalf("second CloseEvent: %v, want ValueError", err)
	}
}

func TestWaitStream(t *testing.T) {
	n := needDriver(t)
	a, ra, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseStream(a)
	tests := []struct {
		name               string
		consumer, producer uintptr
		cdev, pdev         int32
	}{
		{"ours waits for the work stream", ra, 0, 0, 0},
		{"work stream waits for ours", 0, ra, 0, 0},
		{"itself", ra, ra, 0, 0},
		{"legacy waits for ours", cuda.StreamHandleLegacy, ra, 0, 0},
	}
	if n > 1 {
		tests = append(tests, struct {
			name               string
			consumer, producer uintptr
			cdev, pdev         int32
		}{"across devices", 0, ra, 1, 0})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := WaitStream(tc.consumer, tc.cdev, tc.producer, tc.pdev); err != nil {
				t.Fatal(err)
			}
		})
	}
	if err := WaitStream(ra, 0, 0, int32(n)); CodeOf(err) != ValueError {
		t.Fatalf("WaitStream on a device that does not exist: %v, want ValueError", err)
	}
}

// Closing a stream while other goroutines use it: each use either works or
// reports a closed handle; nothing panics or races (run with -race).
func TestStreamCloseWhileInUse(t *testing.T) {
	needDriver(t)
	for i := 0; i < 20; i++ {
		h, _, err := NewStream(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 10; k++ {
					if err := StreamSynchronize(h); err != nil && CodeOf(err) != ValueError {
						t.Errorf("StreamSynchronize: %v", err)
					}
				}
			}()
		}
		if err := CloseStream(h); err != nil {
			t.Error(err)
		}
		wg.Wait()
	}
}
