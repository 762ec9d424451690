package zerocopy_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// orderLog reads the fake driver's log of event records and stream waits
// since the last reset, one string per entry: "r S" (an event recorded on
// stream S) or "w S<-R" (stream S waits for a record made on stream R),
// streams named by names (unknown handles as hex).
func orderLog(t testing.TB, names map[uintptr]string) []string {
	t.Helper()
	buf := orderBuf // heap memory that stays put while the fake writes it (a stack may move)
	n := int(int32(fakeCall(t, "fakecuda_order_log", uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)/3))))
	name := func(h uint64) string {
		if s, ok := names[uintptr(h)]; ok {
			return s
		}
		return fmt.Sprintf("%#x", h)
	}
	var out []string
	for i := 0; i < n && i < len(buf)/3; i++ {
		switch buf[3*i] {
		case 'r':
			out = append(out, "r "+name(buf[3*i+1]))
		case 'w':
			out = append(out, "w "+name(buf[3*i+1])+"<-"+name(buf[3*i+2]))
		}
	}
	return out
}

var orderBuf = make([]uint64, 3*256)

func resetOrderLog(t testing.TB) { fakeCall(t, "fakecuda_reset_calls") }

// slowWrite queues on s a kernel that spins, then writes value into every
// uint32 of v (the fake does not spin: its queues run only when waited for,
// so a reader that is not ordered after s sees the old data).
func slowWrite(t testing.TB, k *cuda.Kernels, s *cuda.Stream, v *zerocopy.View, value uint32) {
	t.Helper()
	if err := k.SpinThenWrite(s, cuda.DevicePtr(v.Ptr()), v.Len(), value, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	v.SetStream(s.Handle())
}

// readOn copies a C-contiguous uint32 device view to the host on stream s
// with the driver directly (a consumer that knows nothing of zerocopy) and
// returns the distinct values it saw.
func readOn(t testing.TB, s *cuda.Stream, v *zerocopy.View) []uint32 {
	t.Helper()
	out := make([]byte, 4*v.Len())
	if err := s.MemcpyDtoHAsync(out, cuda.DevicePtr(v.Ptr())); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	var seen []uint32
	for i := 0; i < len(out); i += 4 {
		x := binary.LittleEndian.Uint32(out[i:])
		if len(seen) == 0 || seen[len(seen)-1] != x {
			seen = append(seen, x)
		}
	}
	return seen
}

func loadKernels(t testing.TB, ctx *cuda.Context) *cuda.Kernels {
	t.Helper()
	k, err := ctx.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Unload() })
	return k
}

// zeroedU32 is a device view of n uint32 zeros, nothing pending.
func zeroedU32(t testing.TB, n int64) *zerocopy.View {
	t.Helper()
	v := devWith(t, 0, make([]byte, 4*n), dlpack.Uint32Type, n)
	if err := v.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestChainOrdering passes a tensor that a slow producer writes on its own
// stream through two importers (DLPack with a stream handshake, then the
// CUDA Array Interface) to consumers on other streams, and checks that every
// consumer reads the producer's data, with exactly the waits that needs:
// one event per pending write, recorded when a reader first needs it.
func TestChainOrdering(t *testing.T) {
	needCUDA(t)
	ctx := retain(t, 0)
	k := loadKernels(t, ctx)
	prod, work, cons, cons2 := newStream(t, ctx), newStream(t, ctx), newStream(t, ctx), newStream(t, ctx)
	names := map[uintptr]string{prod.Handle(): "prod", work.Handle(): "work", cons.Handle(): "cons", cons2.Handle(): "cons2"}
	src := zeroedU32(t, 1<<16)
	if fakeLib != "" {
		resetOrderLog(t)
	}
	slowWrite(t, k, prod, src, 7)

	// Hop 1, DLPack: the importer asks the producer to order its write
	// before the importer's work stream (__dlpack__(stream=work)).
	if err := src.OrderBefore(work.Handle()); err != nil {
		t.Fatal(err)
	}
	p, err := src.ToDLPack()
	if err != nil {
		t.Fatal(err)
	}
	hop1, err := zerocopy.FromDLPackVersioned(p, zerocopy.PendingOn(work.Handle()))
	hop1 = mustView(t, hop1, err)
	if hop1.Stream() != work.Handle() {
		t.Fatalf("DLPack import pending stream %#x, want the work stream %#x", hop1.Stream(), work.Handle())
	}

	// Hop 2, CAI: the dictionary names the pending stream; the import waits
	// for nothing, the view carries the producer's stream.
	iface, err := hop1.CUDAArrayInterface()
	if err != nil {
		t.Fatal(err)
	}
	if err := hop1.Owner().Retain(); err != nil {
		t.Fatal(err)
	}
	hop2, err := zerocopy.FromCAI(iface, hop1.Device(), hop1.Owner())
	hop2 = mustView(t, hop2, err)
	if hop2.Stream() != work.Handle() {
		t.Fatalf("CAI import pending stream %#x, want %#x", hop2.Stream(), work.Handle())
	}
	var afterImports []string
	if fakeLib != "" {
		afterImports = orderLog(t, names)
	}

	// Consumers on their own streams, through DLPack's handshake; a view
	// derived from hop2 shares its pending write and its event.
	for _, c := range []*cuda.Stream{cons, cons2} {
		if err := hop2.OrderBefore(c.Handle()); err != nil {
			t.Fatal(err)
		}
	}
	half, err := hop2.Slice(0, 0, 1<<15, 1)
	half = mustView(t, half, err)
	if err := half.OrderBefore(cons2.Handle()); err != nil {
		t.Fatal(err)
	}
	if err := hop2.OrderBefore(work.Handle()); err != nil { // the pending stream itself: nothing
		t.Fatal(err)
	}
	for _, c := range []*cuda.Stream{cons, cons2} {
		if got := readOn(t, c, hop2); !cmp.Equal(got, []uint32{7}) {
			t.Fatalf("consumer on %s read %v, want [7]: not ordered after the producer", names[c.Handle()], got)
		}
	}
	if fakeLib == "" {
		return
	}
	want := []string{"r prod", "w work<-prod"}
	if diff := cmp.Diff(want, afterImports); diff != "" {
		t.Errorf("records and waits up to the imports (-want +got):\n%s", diff)
	}
	// One record for hop2's write; one wait per consumer stream, the derived
	// view's reader on cons2 already ordered.
	want = append(want, "r work", "w cons<-work", "w cons2<-work")
	if diff := cmp.Diff(want, orderLog(t, names)); diff != "" {
		t.Errorf("records and waits of the chain (-want +got):\n%s", diff)
	}
}

// TestCopyOrdersAfterPendingWrites: a copy from a view with a pending write
// waits for it on the copy's stream, records the write's event once, and
// leaves the destination pending on the copy's stream; a second copy on the
// same stream needs no new wait.
func TestCopyOrdersAfterPendingWrites(t *testing.T) {
	needFake(t)
	ctx := retain(t, 0)
	k := loadKernels(t, ctx)
	prod, a := newStream(t, ctx), newStream(t, ctx)
	names := map[uintptr]string{prod.Handle(): "prod", a.Handle(): "a"}
	src := zeroedU32(t, 1024)
	dst := zeroedU32(t, 1024)
	resetOrderLog(t)
	slowWrite(t, k, prod, src, 5)
	for range 2 {
		if err := zerocopy.CopyCUDA(dst, src, a); err != nil {
			t.Fatal(err)
		}
	}
	if dst.Stream() != a.Handle() {
		t.Fatalf("dst pending %#x, want the copy's stream", dst.Stream())
	}
	if got := readOn(t, a, dst); !cmp.Equal(got, []uint32{5}) {
		t.Fatalf("copy read %v, want [5]", got)
	}
	want := []string{"r prod", "w a<-prod"} // the second copy on a is ordered already
	if diff := cmp.Diff(want, orderLog(t, names)); diff != "" {
		t.Errorf("records and waits (-want +got):\n%s", diff)
	}
}

// TestSynchronizeClearsPending: Synchronize waits for the write (on its
// event when one was recorded) and every view sharing it sees nothing
// pending; OrderBefore then issues nothing.
func TestSynchronizeClearsPending(t *testing.T) {
	needFake(t)
	ctx := retain(t, 0)
	k := loadKernels(t, ctx)
	prod, c := newStream(t, ctx), newStream(t, ctx)
	v := zeroedU32(t, 256)
	slowWrite(t, k, prod, v, 3)
	d, err := v.Slice(0, 0, 128, 1)
	d = mustView(t, d, err)
	if err := v.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if v.Stream() != 0 || d.Stream() != 0 {
		t.Fatalf("pending after Synchronize: view %#x, derived %#x", v.Stream(), d.Stream())
	}
	resetOrderLog(t)
	if err := d.OrderBefore(c.Handle()); err != nil {
		t.Fatal(err)
	}
	if log := orderLog(t, nil); len(log) != 0 {
		t.Fatalf("OrderBefore after Synchronize issued %v", log)
	}
	if got := readOn(t, c, d); !cmp.Equal(got, []uint32{3}) {
		t.Fatalf("read %v, want [3]", got)
	}
}

func TestOrderBeforeErrors(t *testing.T) {
	needCUDA(t)
	v := zeroedU32(t, 4)
	v.SetStream(0x1234)
	if err := v.OrderBefore(0); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("stream 0: %v", err)
	}
	v.SetStream(0)
	c, _ := v.Slice(0, 0, 2, 1)
	v.Close()
	if err := c.OrderBefore(1); err == nil {
		t.Fatal("OrderBefore on a view derived from a closed one succeeded")
	}
}

// TestWorkStreamIsNonBlocking: the work stream is a stream of its own that
// does not synchronize with the legacy default stream.
func TestWorkStreamIsNonBlocking(t *testing.T) {
	needCUDA(t)
	s, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	if h := s.Handle(); h <= cuda.StreamHandlePerThread {
		t.Fatalf("work stream handle %#x is an implicit stream", h)
	}
	f, err := s.Flags()
	if err != nil || f != cuda.StreamNonBlocking {
		t.Fatalf("work stream flags %#x, %v; want StreamNonBlocking", f, err)
	}
	again, _ := zerocopy.WorkStream(0)
	if again != s {
		t.Fatal("WorkStream made a second stream")
	}
}

// TestWaitStream: the consumer waits for the producer's current work with
// one record and one wait.
func TestWaitStream(t *testing.T) {
	needFake(t)
	ctx := retain(t, 0)
	k := loadKernels(t, ctx)
	prod := newStream(t, ctx)
	work, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[uintptr]string{prod.Handle(): "prod", work.Handle(): "work"}
	v := zeroedU32(t, 64)
	slowWrite(t, k, prod, v, 9)
	resetOrderLog(t)
	if err := zerocopy.WaitStream(work, prod.Handle()); err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.WaitStream(work, work.Handle()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"r prod", "w work<-prod"}, orderLog(t, names)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := readOn(t, work, v); !cmp.Equal(got, []uint32{9}) {
		t.Fatalf("read %v, want [9]", got)
	}
}

// TestPendingWriteBelongsToTheMemory: a write left in flight through one
// view (here a slice) is the pending write of every view of that memory,
// whenever it was made: a reader through any of them is ordered after it.
func TestPendingWriteBelongsToTheMemory(t *testing.T) {
	needCUDA(t)
	s, err := zerocopy.WorkStream(0)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 8)
	whole = mustView(t, whole, err)
	src, err := zerocopy.AllocCUDA(0, dlpack.Float32Type, 4)
	src = mustView(t, src, err)
	for _, v := range []*zerocopy.View{whole, src} {
		if err := v.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	retained, err := whole.Retain()
	retained = mustView(t, retained, err)
	head, err := whole.Slice(0, 0, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := zerocopy.Convert(head, src, s); err != nil {
		t.Fatal(err)
	}
	tail, err := whole.Slice(0, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*zerocopy.View{"the slice written": head, "the parent": whole,
		"a Retain made before": retained, "a slice made after": tail} {
		if got := v.Stream(); got != s.Handle() {
			t.Errorf("%s: Stream() = %#x, want the write's stream %#x", name, got, s.Handle())
		}
	}
	if err := retained.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := head.Stream(); got != 0 {
		t.Errorf("after Synchronize through another view, the slice's Stream() = %#x, want 0", got)
	}
}
