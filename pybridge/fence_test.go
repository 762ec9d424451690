package pybridge

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/zerocopy"
)

func TestFence(t *testing.T) {
	runtime.LockOSThread() // LastError is per OS thread
	defer runtime.UnlockOSThread()
	cases := []struct {
		name string
		fn   func() error
		code Code
		msg  string
	}{
		{"ok", func() error { return nil }, OK, ""},
		{"coded", func() error { return Errorf(BufferError, "cannot export %d", 7) }, BufferError, "cannot export 7"},
		{"wrapped", func() error { return fmt.Errorf("outer: %w", Errorf(TypeError, "bad dtype")) }, TypeError, "outer: bad dtype"},
		{"plain", func() error { return errors.New("boom") }, RuntimeError, "boom"},
		{"released", func() error { return fmt.Errorf("x: %w", zerocopy.ErrReleased) }, ValueError, "owner already released"},
		{"panic", func() error { panic("kaboom") }, RuntimeError, "Go panic: kaboom"},
		{"nil deref", func() error { var p *int; return fmt.Errorf("%d", *p) }, RuntimeError, "nil pointer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			SetLastError(OK, "")
			if got := Fence(c.fn); got != c.code {
				t.Fatalf("Fence = %v, want %v", got, c.code)
			}
			code, msg := LastError()
			if c.code == OK {
				if code != OK || msg != "" {
					t.Fatalf("LastError after success = %v %q", code, msg)
				}
				return
			}
			if code != c.code || !strings.Contains(msg, c.msg) {
				t.Fatalf("LastError = %v %q, want %v containing %q", code, msg, c.code, c.msg)
			}
		})
	}
}

func TestFencePanicNamesTheSite(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	Fence(func() error { var m map[string]int; m["x"] = 1; return nil })
	_, msg := LastError()
	if !strings.Contains(msg, "fence_test.go") {
		t.Fatalf("panic message %q does not name the site", msg)
	}
}

func TestLastErrorIsPerThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	Fence(func() error { return Errorf(ValueError, "mine") })
	done := make(chan string)
	go func() {
		runtime.LockOSThread() // a different OS thread from ours
		defer runtime.UnlockOSThread()
		Fence(func() error { return Errorf(TypeError, "theirs") })
		_, m := LastError()
		done <- m
	}()
	if m := <-done; m != "theirs" {
		t.Fatalf("other thread saw %q", m)
	}
	if code, m := LastError(); code != ValueError || m != "mine" {
		t.Fatalf("this thread sees %v %q, want ValueError mine", code, m)
	}
}

func TestLongMessageIsTruncated(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	long := strings.Repeat("x", 10000)
	Fence(func() error { return errors.New(long) })
	if _, m := LastError(); len(m) != 4095 {
		t.Fatalf("message length %d, want 4095", len(m))
	}
}

func TestCodeNames(t *testing.T) {
	want := map[Code]string{OK: "Unclassified", BufferError: "BufferError", TypeError: "TypeError",
		ValueError: "ValueError", MemoryError: "MemoryError", RuntimeError: "RuntimeError",
		IndexError: "IndexError", Code(42): "Unclassified"}
	for c, n := range want {
		if c.String() != n {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), n)
		}
	}
	if WithCode(TypeError, nil) != nil {
		t.Error("WithCode(nil) != nil")
	}
}

func BenchmarkFence(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Fence(func() error { return nil })
	}
}

func ExampleFence() {
	// In an //export function, the body runs inside Fence; the C caller
	// gets the code and reads the message with dlb_last_error().
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	code := Fence(func() error {
		return Errorf(ValueError, "mylib: scale: factor %v must be positive", -1.0)
	})
	_, msg := LastError()
	fmt.Println(code, msg)
	// Output: ValueError mylib: scale: factor -1 must be positive
}
