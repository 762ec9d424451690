package pybridge

import (
	"errors"
	"sync"
	"testing"
)

func TestTableAddGetDelete(t *testing.T) {
	var tab Table[string]
	a := tab.Add("a")
	b := tab.Add("b")
	if a == 0 || b == 0 || a == b {
		t.Fatalf("handles %#x %#x: want distinct non-zero", a, b)
	}
	if v, err := tab.Get(a); err != nil || v != "a" {
		t.Fatalf("Get(a) = %q, %v", v, err)
	}
	if n := tab.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	if v, err := tab.Delete(a); err != nil || v != "a" {
		t.Fatalf("Delete(a) = %q, %v", v, err)
	}
	if _, err := tab.Get(a); CodeOf(err) != ValueError {
		t.Fatalf("Get after Delete: err %v, want ValueError", err)
	}
	if _, err := tab.Delete(a); CodeOf(err) != ValueError {
		t.Fatalf("second Delete: err %v, want ValueError", err)
	}
	// The slot is reused with a new generation: the old handle stays dead.
	c := tab.Add("c")
	if uint32(c) != uint32(a) {
		t.Fatalf("slot not reused: %#x vs %#x", c, a)
	}
	if c == a {
		t.Fatalf("reused slot kept its generation: %#x", c)
	}
	if _, err := tab.Get(a); err == nil {
		t.Fatalf("stale handle %#x resolves after reuse", a)
	}
	if v, _ := tab.Get(c); v != "c" {
		t.Fatalf("Get(c) = %q", v)
	}
}

func TestTableBadHandles(t *testing.T) {
	var tab Table[int]
	tab.Add(1)
	for _, h := range []Handle{0, 1 << 32, Handle(^uint64(0)), 99} {
		_, err := tab.Get(h)
		var e *Error
		if !errors.As(err, &e) || e.Class != ValueError {
			t.Errorf("Get(%#x): err %v, want a ValueError", h, err)
		}
	}
}

func TestTableGenerationWrapSkipsZero(t *testing.T) {
	var tab Table[int]
	h := tab.Add(1)
	tab.slots[0].gen = ^uint32(0) // as after 2^32-1 reuses
	h = makeHandle(0, ^uint32(0))
	if _, err := tab.Delete(h); err != nil {
		t.Fatal(err)
	}
	if g := tab.slots[0].gen; g != 1 {
		t.Fatalf("generation after wrap = %d, want 1", g)
	}
}

func TestTableRange(t *testing.T) {
	var tab Table[int]
	for i := 0; i < 5; i++ {
		tab.Add(i)
	}
	sum := 0
	tab.Range(func(h Handle, v int) bool { sum += v; return true })
	if sum != 10 {
		t.Fatalf("Range sum = %d, want 10", sum)
	}
}

func TestTableConcurrent(t *testing.T) {
	var tab Table[int]
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				h := tab.Add(g*1000 + i)
				if v, err := tab.Get(h); err != nil || v != g*1000+i {
					t.Errorf("Get = %d, %v", v, err)
					return
				}
				if _, err := tab.Delete(h); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if n := tab.Len(); n != 0 {
		t.Fatalf("Len = %d after all deletes", n)
	}
}

func BenchmarkTableGet(b *testing.B) {
	var tab Table[*int]
	x := 1
	h := tab.Add(&x)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := tab.Get(h); err != nil {
			b.Fatal(err)
		}
	}
}
