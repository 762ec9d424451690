package nccl_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/nccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The scenarios a rank process runs (spawn starts them). Each prints what
// went wrong and answers its exit code: 0 for success.
var scenarios = map[string]func(w *nccl.World) error{
	"ops":       scenarioOps,
	"kill":      scenarioKill,
	"hang":      scenarioHang,
	"burst":     scenarioBurst,
	"leave":     scenarioLeave,
	"splitkill": scenarioSplitKill,
}

func runScenario(name string) int {
	f := scenarios[name]
	if f == nil {
		fmt.Fprintln(os.Stderr, "unknown scenario", name)
		return 2
	}
	w, err := nccl.FromEnv(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank", os.Getenv("RANK"), "FromEnv:", err)
		return 1
	}
	if err := f(w); err != nil {
		fmt.Fprintln(os.Stderr, "rank", w.Rank, name+":", err)
		return 1 // no Close: the others learn of this end as of a crash, at once
	}
	w.Close() // a departure, not a failure, for ranks still finishing what this one joined
	fmt.Println("rank", w.Rank, "ok")
	return 0
}

// check compares what came back with what each operation must give.
func check[T comparable](what string, got []T, want []T) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

// halfSum is the sum of the job ranks of rank r's half (the ranks of its
// parity among n) when a split by parity all-reduces them.
func halfSum(r, n int) int32 {
	sum := int32(0)
	for q := r % 2; q < n; q += 2 {
		sum += int32(q)
	}
	return sum
}

func fill[T zerocopy.Elem](n int, f func(i int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// scenarioOps runs every operation with data each rank can verify, on a
// stream of its own (results left pending there, read back after).
func scenarioOps(w *nccl.World) error {
	c := w.Comm()
	r, n := c.Rank(), c.Size()
	ctx, err := zerocopy.DeviceContext(c.Device())
	if err != nil {
		return err
	}
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		return err
	}
	const k = 6

	// all-reduce, sum of float32 and max of int32; then in place, prod of int64.
	src, err := toDevice(c.Device(), s, fill(k, func(i int) float32 { return float32(10*r + i) }))
	if err != nil {
		return err
	}
	dst, err := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, k)
	if err != nil {
		return err
	}
	if err := c.AllReduce(dst, src, nccl.Sum, s); err != nil {
		return err
	}
	if dst.Stream() != s.Handle() {
		return fmt.Errorf("all_reduce: dst pending on stream %#x, want the caller's %#x", dst.Stream(), s.Handle())
	}
	got, err := toHost[float32](dst, s)
	if err != nil {
		return err
	}
	if err := check("all_reduce sum", got, fill(k, func(i int) float32 { return float32(10*n*(n-1)/2 + n*i) })); err != nil {
		return err
	}
	isrc, _ := toDevice(c.Device(), s, fill(k, func(i int) int32 { return int32((r*7 + i) % n) }))
	idst, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Int32Type, k)
	if err := c.AllReduce(idst, isrc, nccl.Max, s); err != nil {
		return err
	}
	gi, err := toHost[int32](idst, s)
	if err != nil {
		return err
	}
	if err := check("all_reduce max", gi, fill(k, func(i int) int32 { return int32(n - 1) })); err != nil {
		return err
	}
	inplace, _ := toDevice(c.Device(), s, fill(k, func(i int) int64 { return int64(r + 1) }))
	if err := c.AllReduce(inplace, inplace, nccl.Prod, s); err != nil {
		return err
	}
	gp, err := toHost[int64](inplace, s)
	if err != nil {
		return err
	}
	fact := int64(1)
	for q := 1; q <= n; q++ {
		fact *= int64(q)
	}
	if err := check("all_reduce prod in place", gp, fill(k, func(int) int64 { return fact })); err != nil {
		return err
	}

	// half precision (sums exact in float16 and bfloat16) and uint8 min.
	hsrc, _ := toDevice(c.Device(), s, fill(k, func(i int) zerocopy.Float16 { return zerocopy.Float16From(float32(r) + 0.5) }))
	if err := c.AllReduce(hsrc, hsrc, nccl.Sum, s); err != nil {
		return err
	}
	gh, err := toHost[zerocopy.Float16](hsrc, s)
	if err != nil {
		return err
	}
	if err := check("all_reduce float16", gh, fill(k, func(int) zerocopy.Float16 { return zerocopy.Float16From(float32(n*n) / 2) })); err != nil {
		return err
	}
	bsrc, _ := toDevice(c.Device(), s, fill(k, func(i int) zerocopy.BFloat16 { return zerocopy.BFloat16From(float32(2 * r)) }))
	if err := c.AllReduce(bsrc, bsrc, nccl.Max, s); err != nil {
		return err
	}
	gb, err := toHost[zerocopy.BFloat16](bsrc, s)
	if err != nil {
		return err
	}
	if err := check("all_reduce bfloat16 max", gb, fill(k, func(int) zerocopy.BFloat16 { return zerocopy.BFloat16From(float32(2 * (n - 1))) })); err != nil {
		return err
	}
	usrc, _ := toDevice(c.Device(), s, fill(k, func(i int) uint8 { return uint8(200 - r + i) }))
	if err := c.AllReduce(usrc, usrc, nccl.Min, s); err != nil {
		return err
	}
	gu, err := toHost[uint8](usrc, s)
	if err != nil {
		return err
	}
	if err := check("all_reduce uint8 min", gu, fill(k, func(i int) uint8 { return uint8(200 - (n - 1) + i) })); err != nil {
		return err
	}

	// broadcast from rank 1.
	b, _ := toDevice(c.Device(), s, fill(k, func(i int) float32 { return float32(100*r + i) }))
	if err := c.Broadcast(b, b, 1, s); err != nil {
		return err
	}
	got, err = toHost[float32](b, s)
	if err != nil {
		return err
	}
	if err := check("broadcast", got, fill(k, func(i int) float32 { return float32(100 + i) })); err != nil {
		return err
	}

	// reduce (avg of float64) to rank 2.
	dsrc, _ := toDevice(c.Device(), s, fill(k, func(i int) float64 { return float64(4 * r) }))
	ddst, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Float64Type, k)
	if err := c.Reduce(ddst, dsrc, nccl.Avg, 2%n, s); err != nil {
		return err
	}
	if r == 2%n {
		gd, err := toHost[float64](ddst, s)
		if err != nil {
			return err
		}
		if err := check("reduce avg", gd, fill(k, func(int) float64 { return float64(4*n*(n-1)/2) / float64(n) })); err != nil {
			return err
		}
	}

	// all-gather and reduce-scatter.
	gsrc, _ := toDevice(c.Device(), s, fill(2, func(i int) int32 { return int32(10*r + i) }))
	gdst, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Int32Type, int64(2*n))
	if err := c.AllGather(gdst, gsrc, s); err != nil {
		return err
	}
	gi, err = toHost[int32](gdst, s)
	if err != nil {
		return err
	}
	if err := check("all_gather", gi, fill(2*n, func(i int) int32 { return int32(10*(i/2) + i%2) })); err != nil {
		return err
	}
	rsrc, _ := toDevice(c.Device(), s, fill(2*n, func(i int) int32 { return int32(i + r) }))
	rdst, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Int32Type, 2)
	if err := c.ReduceScatter(rdst, rsrc, nccl.Sum, s); err != nil {
		return err
	}
	gi, err = toHost[int32](rdst, s)
	if err != nil {
		return err
	}
	if err := check("reduce_scatter", gi, fill(2, func(i int) int32 { return int32(n*(2*r+i) + n*(n-1)/2) })); err != nil {
		return err
	}

	// a ring of sends and receives, grouped.
	next, prev := (r+1)%n, (r+n-1)%n
	out, _ := toDevice(c.Device(), s, fill(3, func(i int) float32 { return float32(1000*r + i) }))
	in, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, 3)
	if err := c.SendRecv(s, nccl.P2P{Peer: next, View: out}, nccl.P2P{Peer: prev, View: in, Recv: true}); err != nil {
		return err
	}
	got, err = toHost[float32](in, s)
	if err != nil {
		return err
	}
	if err := check("send/recv ring", got, fill(3, func(i int) float32 { return float32(1000*prev + i) })); err != nil {
		return err
	}

	// all-to-all: block j of rank r holds 100*r + j.
	asrc, _ := toDevice(c.Device(), s, fill(2*n, func(i int) int64 { return int64(100*r + i/2) }), int64(2*n))
	adst, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Int64Type, int64(2*n))
	if err := c.AllToAll(adst, asrc, s); err != nil {
		return err
	}
	ga, err := toHost[int64](adst, s)
	if err != nil {
		return err
	}
	if err := check("all_to_all", ga, fill(2*n, func(i int) int64 { return int64(100*(i/2) + r) })); err != nil {
		return err
	}

	// split into even and odd ranks; all-reduce within each half.
	sub, err := c.Split(r%2, r)
	if err != nil {
		return err
	}
	one, _ := toDevice(c.Device(), s, []int32{int32(r)})
	if err := sub.AllReduce(one, one, nccl.Sum, s); err != nil {
		return err
	}
	gi, err = toHost[int32](one, s)
	if err != nil {
		return err
	}
	if err := check("split all_reduce", gi, []int32{halfSum(r, n)}); err != nil {
		return err
	}
	if sub.Size() != (n+1-r%2)/2 || sub.Rank() != r/2 {
		return fmt.Errorf("split: rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), r/2, (n+1-r%2)/2)
	}
	if err := sub.Finalize(); err != nil {
		return err
	}
	if err := c.Wait(); err != nil {
		return err
	}
	return c.Finalize()
}

// scenarioKill: the last rank exits once the communicator is up; the
// others' next all-reduce fails within the deadline naming it, and they
// go on with a communicator of the survivors.
func scenarioKill(w *nccl.World) error {
	c := w.Comm()
	if w.Rank == w.Size-1 {
		os.Exit(0)
	}
	v, err := toDevice(c.Device(), nil, []float32{1, 2})
	if err != nil {
		return err
	}
	start := time.Now()
	err = c.AllReduce(v, v, nccl.Sum, nil)
	if err == nil {
		err = c.Wait()
	}
	took := time.Since(start)
	var oe *nccl.OpError
	if !errors.As(err, &oe) {
		return fmt.Errorf("all_reduce with a dead rank: got %v, want an *OpError", err)
	}
	// The last rank exits as soon as its own initialization returned: a
	// rank still in its initialization then (a slow one, under qemu) fails
	// that call, and the all-reduce reports it.
	if !slices.Equal(oe.Missing, []int{w.Size - 1}) || oe.Op != "all_reduce" && oe.Op != "init" {
		return fmt.Errorf("all_reduce with a dead rank: %v: want op all_reduce (or init) and missing [%d]", err, w.Size-1)
	}
	fmt.Println("expected failure:", err)
	fmt.Println("it took", took)
	// The fake, as NCCL over NVLink once connected, never sees the rank
	// exit: the control plane must end the wait. (A real NCCL whose first
	// collective still connects to the peer may see the closed socket
	// first: either is right, as long as it is quick.)
	fake := os.Getenv("DLBRIDGE_GPU") != "1" && os.Getenv("FAKENCCL_PEER_CHECK") != "1"
	if fake && !errors.Is(err, nccl.ErrPeerGone) {
		return fmt.Errorf("NCCL does not see the rank exit: the control plane must end the wait: %v", err)
	}
	if limit := c.Timeout() / 2; took > limit {
		return fmt.Errorf("the failure took %v: a rank known gone must end the wait at once, not near the timeout %v", took, c.Timeout())
	}
	if err := c.AllReduce(v, v, nccl.Sum, nil); !errors.Is(err, nccl.ErrAborted) {
		return fmt.Errorf("an operation on the failed communicator: got %v, want ErrAborted", err)
	}
	nc, err := w.Rebuild()
	if err != nil {
		return err
	}
	if nc.Size() != w.Size-1 || nc.Rank() != w.Rank {
		return fmt.Errorf("rebuilt: rank %d of %d, want %d of %d", nc.Rank(), nc.Size(), w.Rank, w.Size-1)
	}
	x, _ := toDevice(nc.Device(), nil, []float32{float32(w.Rank)})
	if err := nc.AllReduce(x, x, nccl.Sum, nil); err != nil {
		return err
	}
	got, err := toHost[float32](x, nil)
	if err != nil {
		return err
	}
	m := w.Size - 1
	if err := check("all_reduce after rebuild", got, []float32{float32(m * (m - 1) / 2)}); err != nil {
		return err
	}
	if err := nc.Finalize(); err != nil {
		return err
	}
	// Stay in the job a while: a survivor that exits at once would be
	// named as gone by one still failing the first communicator.
	time.Sleep(2 * time.Second)
	return nil
}

// scenarioBurst: many all-reduces queued back to back on one stream, no
// host wait between them (as a training step or a benchmark issues them),
// then the sum checked.
func scenarioBurst(w *nccl.World) error {
	c := w.Comm()
	ctx, err := zerocopy.DeviceContext(c.Device())
	if err != nil {
		return err
	}
	s, err := ctx.NewStream(cuda.StreamNonBlocking, 0)
	if err != nil {
		return err
	}
	v, err := toDevice(c.Device(), s, []int64{1, 2, 3})
	if err != nil {
		return err
	}
	const n = 300
	for i := 0; i < n; i++ {
		// Every 30th a sum (v times Size()), the others maxima (v
		// unchanged): the values stay small and each operation counts.
		op := nccl.Max
		if i%30 == 0 {
			op = nccl.Sum
		}
		if err := c.AllReduce(v, v, op, s); err != nil {
			return fmt.Errorf("all_reduce %d of %d: %w", i+1, n, err)
		}
	}
	if err := c.Wait(); err != nil {
		return err
	}
	got, err := toHost[int64](v, s)
	if err != nil {
		return err
	}
	k := int64(1)
	for i := 0; i < n; i += 30 {
		k *= int64(c.Size())
	}
	if err := check("back-to-back all_reduce", got, []int64{k, 2 * k, 3 * k}); err != nil {
		return err
	}
	return c.Finalize()
}

// scenarioHang: the last rank stays alive but never comes; the others fail
// by the deadline and name it (asked, it had issued nothing).
func scenarioHang(w *nccl.World) error {
	c := w.Comm()
	if w.Rank == w.Size-1 {
		time.Sleep(3 * c.Timeout())
		return nil
	}
	v, err := toDevice(c.Device(), nil, []int32{1})
	if err != nil {
		return err
	}
	err = c.AllReduce(v, v, nccl.Sum, nil)
	if err == nil {
		err = c.Wait()
	}
	var oe *nccl.OpError
	if !errors.As(err, &oe) || !errors.Is(err, nccl.ErrTimeout) || !slices.Equal(oe.Missing, []int{w.Size - 1}) ||
		!strings.Contains(oe.Detail, "alive, issued 0 operations") {
		return fmt.Errorf("all_reduce with a hung rank: got %v, want a timeout naming rank %d, alive", err, w.Size-1)
	}
	fmt.Println("expected failure:", err)
	// Stay in the job until the other survivors have asked about it: a
	// rank that exits first would be named as gone in their errors.
	time.Sleep(3 * time.Second)
	return nil
}

// scenarioLeave: every rank splits the communicator; the last rank, once
// done, closes its World and exits while rank 0's Split still returns (the
// fake holds it: FAKENCCL_SPLIT_DELAY_MS). A rank that left after taking
// part is a departure, not a failure: rank 0's Split and what follows
// succeed.
func scenarioLeave(w *nccl.World) error {
	c := w.Comm()
	r := c.Rank()
	sub, err := c.Split(r%2, r)
	if err != nil {
		return err
	}
	if err := sub.Finalize(); err != nil {
		return err
	}
	return c.Finalize() // runScenario closes the World next
}

// scenarioSplitKill: the ranks split into even and odd halves; the last
// rank exits after the split. Its half's survivor fails its next
// operation on the split communicator at once, naming the rank, as on
// the World's own communicator; the other half is untouched.
func scenarioSplitKill(w *nccl.World) error {
	c := w.Comm()
	r, n := w.Rank, w.Size
	sub, err := c.Split(r%2, r)
	if err != nil {
		return err
	}
	if r == n-1 {
		os.Exit(0)
	}
	s, err := zerocopy.WorkStream(c.Device())
	if err != nil {
		return err
	}
	one, _ := toDevice(c.Device(), s, []int32{int32(r)})
	start := time.Now()
	err = sub.AllReduce(one, one, nccl.Sum, s)
	if err == nil {
		err = sub.Wait()
	}
	took := time.Since(start)
	if r%2 != (n-1)%2 { // the other half: all its ranks are alive
		if err != nil {
			return fmt.Errorf("all_reduce in the half without the dead rank: %w", err)
		}
		got, err := toHost[int32](one, s)
		if err != nil {
			return err
		}
		if err := check("all_reduce of a half", got, []int32{halfSum(r, n)}); err != nil {
			return err
		}
		// Deaths reach the other ranks through rank 0's control plane:
		// it stays until it has seen the exit (and told the others).
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(w.Dead(), n-1); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("rank %d was not seen to exit within 10 s", n-1)
			}
		}
		time.Sleep(time.Second)
		return nil
	}
	var oe *nccl.OpError
	if !errors.As(err, &oe) || !errors.Is(err, nccl.ErrPeerGone) || !slices.Equal(oe.Missing, []int{n - 1}) {
		return fmt.Errorf("all_reduce on a split communicator with a dead rank: got %v, want an *OpError of ErrPeerGone missing [%d]", err, n-1)
	}
	fmt.Println("expected failure:", err)
	if limit := sub.Timeout() / 2; took > limit {
		return fmt.Errorf("the failure took %v: a rank known gone must end the wait on a split communicator too, not near the timeout %v", took, sub.Timeout())
	}
	return nil
}
