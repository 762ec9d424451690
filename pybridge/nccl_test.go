package pybridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/nccl"
)

// timeoutErr is a network error past its deadline, as a rendezvous's
// Accept or Dial returns.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestClassifyNCCL(t *testing.T) {
	opTimeout := &nccl.OpError{Op: "all_reduce", Seq: 3, Rank: 1, Size: 4, Missing: []int{3}, Timeout: 2 * time.Second, Err: nccl.ErrTimeout}
	opRemote := &nccl.OpError{Op: "broadcast", Seq: 1, Rank: 0, Size: 2, Missing: []int{1}, Err: &nccl.Error{Op: "ncclCommGetAsyncError", Result: nccl.ErrRemote}}
	for _, tc := range []struct {
		name string
		op   string
		err  error
		want *NCCLFailure
		code Code
	}{
		{"deadline", "all_reduce", opTimeout,
			&NCCLFailure{Op: "all_reduce", Seq: 3, Rank: 1, Size: 4, Missing: []int{3}, Timeout: 2, Message: opTimeout.Error()}, TimeoutError},
		{"peer gone", "broadcast", fmt.Errorf("wrapped: %w", opRemote),
			&NCCLFailure{Op: "broadcast", Seq: 1, Size: 2, Missing: []int{1}, Message: "wrapped: " + opRemote.Error()}, RuntimeError},
		{"aborted", "send", fmt.Errorf("nccl: send: %w", nccl.ErrAborted),
			&NCCLFailure{Op: "send", Rank: -1, Size: -1, Message: "nccl: send: " + nccl.ErrAborted.Error()}, RuntimeError},
		{"rendezvous deadline", "rendezvous", fmt.Errorf("nccl: rendezvous: rank(s) [1] did not come within 1s: %w", timeoutErr{}),
			&NCCLFailure{Op: "rendezvous", Rank: -1, Size: -1, Timeout: -1, Message: "nccl: rendezvous: rank(s) [1] did not come within 1s: i/o timeout"}, TimeoutError},
		{"rendezvous refused", "rendezvous", errors.New("nccl: rendezvous: rank 0 refused rank 2: rank 2 joined twice"),
			&NCCLFailure{Op: "rendezvous", Rank: -1, Size: -1, Message: "nccl: rendezvous: rank 0 refused rank 2: rank 2 joined twice"}, RuntimeError},
		{"argument check", "all_gather", errors.New("nccl: all_gather: dst has 3 elements; it needs src's 2 times the 2 ranks = 4"), nil, ValueError},
		{"classified already", "all_reduce", Errorf(TypeError, "wrong kind"), nil, TypeError},
		{"no library", "init", fmt.Errorf("%w: looked for libnccl.so.2 in: x", nccl.ErrNoLibrary), nil, RuntimeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := classifyNCCL(tc.op, tc.err)
			if diff := cmp.Diff(tc.want, got); diff != "" || code != tc.code {
				t.Errorf("classifyNCCL: code %v, want %v; failure (-want +got):\n%s", code, tc.code, diff)
			}
		})
	}
}

// The failure an entry point reports is what the same thread reads next,
// and a later success clears it.
func TestLastFailurePerThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	op := &nccl.OpError{Op: "all_reduce", Seq: 2, Rank: 0, Size: 2, Missing: []int{1}, Timeout: time.Second, Err: nccl.ErrTimeout}
	if err := ncclDone("all_reduce", op); CodeOf(err) != TimeoutError {
		t.Fatalf("ncclDone: %v (%v), want TimeoutError", err, CodeOf(err))
	}
	s, err := NCCLLastFailure()
	if err != nil {
		t.Fatal(err)
	}
	var got NCCLFailure
	if err := json.Unmarshal([]byte(s), &got); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	want := NCCLFailure{Op: "all_reduce", Seq: 2, Size: 2, Missing: []int{1}, Timeout: 1, Message: op.Error()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("last failure (-want +got):\n%s", diff)
	}
	other := make(chan string)
	go func() {
		runtime.LockOSThread() // a thread of its own, which failed nothing
		s, _ := NCCLLastFailure()
		other <- s
	}()
	if s := <-other; s != "" {
		t.Errorf("another thread reads %q, want nothing", s)
	}
	if err := ncclDone("all_reduce", nil); err != nil {
		t.Fatal(err)
	}
	if s, _ := NCCLLastFailure(); s != "" {
		t.Errorf("after a success: %q, want nothing", s)
	}
}
