package nccl_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/internal/fakenccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Every test runs against the fake driver (4 devices) and the fake NCCL,
// unless DLBRIDGE_GPU=1 (the GPU machine); test processes started as ranks
// (envScenario set) run a scenario of rank_test.go instead of the tests.
const envScenario = "NCCL_TEST_SCENARIO"

func init() {
	if _, err := fakenccl.Use(4); err != nil {
		fmt.Fprintln(os.Stderr, "nccl tests:", err)
		os.Exit(2)
	}
}

func TestMain(m *testing.M) {
	if sc := os.Getenv(envScenario); sc != "" {
		os.Exit(runScenario(sc))
	}
	os.Exit(m.Run())
}

// ranks is how many rank processes a test starts: NCCL_TEST_RANKS (default
// 4, the fake's devices), at most one per GPU on the GPU machine (NCCL
// refuses two ranks of a communicator on one device); a test that needs
// more than the machine has is skipped, saying why.
func ranks(t *testing.T, want int) int {
	t.Helper()
	if v, err := strconv.Atoi(os.Getenv("NCCL_TEST_RANKS")); err == nil && v > 0 {
		want = v
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if want > n {
		want = n
	}
	if want < 2 {
		t.Skipf("needs 2 devices, this machine has %d", n)
	}
	return want
}

// rankResult is what one rank process did.
type rankResult struct {
	rank   int
	code   int
	output string
}

// spawn runs size rank processes of scenario (this test binary, joined by
// the environment as torchrun would start them) and waits at most limit
// for all of them: a hang fails the test instead of hanging it.
func spawn(t *testing.T, scenario string, size int, limit time.Duration, env ...string) []rankResult {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	res := make([]rankResult, size)
	var wg sync.WaitGroup
	cmds := make([]*exec.Cmd, size)
	outs := make([]*strings.Builder, size)
	for r := 0; r < size; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envScenario+"="+scenario,
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(size), "LOCAL_RANK="+strconv.Itoa(r))
		cmd.Env = append(cmd.Env, env...)
		outs[r] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	done := make(chan struct{})
	for r := range cmds {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			err := cmds[r].Wait()
			res[r] = rankResult{rank: r}
			if ee, ok := err.(*exec.ExitError); ok {
				res[r].code = ee.ExitCode()
			} else if err != nil {
				res[r].code = -1
			}
		}(r)
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		for _, c := range cmds {
			_ = c.Process.Kill()
		}
		<-done
		for r := range res {
			t.Logf("rank %d output:\n%s", r, outs[r].String())
		}
		t.Fatalf("scenario %s: the ranks did not finish within %v (a hang)", scenario, limit)
	}
	for r := range res {
		res[r].output = outs[r].String()
	}
	return res
}

// toDevice uploads xs to a new array on device dev, queued on s.
func toDevice[T zerocopy.Elem](dev int, s *cuda.Stream, xs []T, shape ...int64) (*zerocopy.View, error) {
	if len(shape) == 0 {
		shape = []int64{int64(len(xs))}
	}
	h, err := zerocopy.FromSlice(xs, shape...)
	if err != nil {
		return nil, err
	}
	d, err := zerocopy.AllocCUDA(dev, h.DType(), shape...)
	if err != nil {
		return nil, err
	}
	if err := zerocopy.CopyCUDA(d, h, s); err != nil {
		return nil, err
	}
	return d, nil
}

// toHost downloads v (ordered after its pending write on s: CopyCUDA
// waits for it) into a new slice.
func toHost[T zerocopy.Elem](v *zerocopy.View, s *cuda.Stream) ([]T, error) {
	out := make([]T, v.Len())
	h, err := zerocopy.FromSlice(out, v.Shape()...)
	if err != nil {
		return nil, err
	}
	if err := zerocopy.CopyCUDA(h, v, s); err != nil {
		return nil, err
	}
	return out, nil
}
