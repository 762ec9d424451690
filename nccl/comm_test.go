package nccl_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/nccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// oneRank is a communicator of one rank on device 0.
func oneRank(t *testing.T) *nccl.Comm {
	t.Helper()
	id, err := nccl.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nccl.InitRank(id, 1, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Finalize() })
	return c
}

// Views are checked before NCCL sees them, and the error names what is wrong.
func TestChecksBeforeNCCL(t *testing.T) {
	ranks(t, 2) // a view on device 1
	c := oneRank(t)
	dev := func(dt dlpack.DataType, shape ...int64) *zerocopy.View {
		v, err := zerocopy.AllocCUDA(0, dt, shape...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	host, _ := zerocopy.FromSlice([]float32{1, 2, 3, 4})
	other := func() *zerocopy.View {
		v, err := zerocopy.AllocCUDA(1, dlpack.Float32Type, 4)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}()
	f4 := dev(dlpack.Float32Type, 4)
	strided, err := dev(dlpack.Float32Type, 8).Slice(0, 0, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"host view", func() error { return c.AllReduce(f4, host, nccl.Sum, nil) }, "device"},
		{"other device", func() error { return c.AllReduce(f4, other, nccl.Sum, nil) }, "cuda:1"},
		{"dtype mismatch", func() error { return c.AllReduce(dev(dlpack.Int32Type, 4), f4, nccl.Sum, nil) }, "dtype"},
		{"length mismatch", func() error { return c.AllReduce(dev(dlpack.Float32Type, 3), f4, nccl.Sum, nil) }, "3 elements"},
		{"strided", func() error { return c.AllReduce(f4, strided, nccl.Sum, nil) }, "strided cuda:0 writable: order"},
		{"complex", func() error { return c.AllReduce(f4, dev(dlpack.Complex64Type, 4), nccl.Sum, nil) }, "NCCL has"},
		{"bad op", func() error { return c.AllReduce(f4, f4, nccl.Op(9), nil) }, "reduction"},
		{"root", func() error { return c.Broadcast(f4, f4, 1, nil) }, "root 1"},
		{"peer", func() error { return c.Send(f4, 2, nil) }, "peer 2"},
		{"all_gather size", func() error { return c.AllGather(dev(dlpack.Float32Type, 5), f4, nil) }, "needs"},
		{"nil", func() error { return c.AllReduce(nil, f4, nccl.Sum, nil) }, "nil view"},
		{"all_to_all blocks", func() error { return c.AllToAll(f4, dev(dlpack.Float32Type, 2, 2), nil) }, "match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The communicator is still usable after refused arguments.
	if err := c.AllReduce(f4, f4, nccl.Sum, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
}

// One process drives two devices: a communicator per device, operations
// launched together in one group (Batch), blocking and nonblocking.
func TestInitDevicesBatch(t *testing.T) {
	ranks(t, 2)
	for _, tc := range []struct {
		name string
		cfg  *nccl.Config
	}{
		{"default", nil},
		{"blocking", &nccl.Config{Timeout: 20 * time.Second}},
		{"nonblocking", &nccl.Config{Timeout: 20 * time.Second, Nonblocking: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { initDevicesBatch(t, tc.cfg) })
	}
	if _, err := nccl.InitDevices([]int{0, 0}, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a device listed twice: got %v", err)
	}
}

func initDevicesBatch(t *testing.T, cfg *nccl.Config) {
	comms, err := nccl.InitDevices([]int{0, 1}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var vs []*zerocopy.View
	var b nccl.Batch
	for i, c := range comms {
		if c.Rank() != i || c.Size() != 2 || c.Device() != i {
			t.Fatalf("comm %d: %v", i, c)
		}
		v, err := toDevice(c.Device(), nil, []float32{float32(i + 1), 10})
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
		b.AllReduce(c, v, v, nccl.Sum, nil)
	}
	if err := b.Launch(); err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		got, err := toHost[float32](v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := check("device "+string(rune('0'+i)), got, []float32{3, 20}); err != nil {
			t.Error(err)
		}
	}
	for _, c := range comms {
		if err := c.Finalize(); err != nil {
			t.Error(err)
		}
	}
}

// A rank that never comes to initialization: a blocking InitRank waits in
// NCCL, and the watchdog's abort ends it at the deadline; a nonblocking
// one polls until the deadline. Both fail the same way.
func TestInitDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, nonblocking := range []bool{false, true} {
		id, err := nccl.NewUniqueID()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c, err := nccl.InitRank(id, 2, 0, 0, &nccl.Config{Timeout: timeout, Nonblocking: nonblocking})
		took := time.Since(start)
		var oe *nccl.OpError
		if c != nil || !errors.As(err, &oe) || !errors.Is(err, nccl.ErrTimeout) {
			t.Fatalf("nonblocking=%v: rank 1 never comes: got %v, %v; want an OpError with ErrTimeout", nonblocking, c, err)
		}
		want := nccl.OpError{Op: "init", Rank: 0, Size: 2, Timeout: timeout, Err: oe.Err}
		if diff := cmp.Diff(want, *oe, cmpopts.EquateErrors()); diff != "" {
			t.Errorf("nonblocking=%v: error (-want +got):\n%s", nonblocking, diff)
		}
		if took < timeout || took > timeout+5*time.Second {
			t.Errorf("nonblocking=%v: failed after %v, want just after the %v deadline", nonblocking, took, timeout)
		}
	}
}

func TestAbortRefusesLaterOperations(t *testing.T) {
	c := oneRank(t)
	v, _ := zerocopy.AllocCUDA(0, dlpack.Int32Type, 2)
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(v, v, nccl.Sum, nil); !errors.Is(err, nccl.ErrAborted) {
		t.Fatalf("after Abort: got %v, want ErrAborted", err)
	}
}

func TestFromEnvNamesWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"MASTER_ADDR": ""}, "MASTER_ADDR is not set"},
		{map[string]string{"MASTER_PORT": "x"}, `MASTER_PORT="x"`},
		{map[string]string{"RANK": ""}, "RANK is not set"},
		{map[string]string{"WORLD_SIZE": "0"}, "WORLD_SIZE"},
		{map[string]string{"RANK": "4"}, "rank 4 of 2"},
		{map[string]string{nccl.EnvTimeout: "soon"}, nccl.EnvTimeout},
		{map[string]string{"TORCHELASTIC_USE_AGENT_STORE": "True"}, "started by torchrun, whose agent's store listens at MASTER_PORT=1"},
		{map[string]string{nccl.EnvPort: "x"}, nccl.EnvPort + `="x"`},
	} {
		base := map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "2",
			nccl.EnvTimeout: "", nccl.EnvPort: "", "TORCHELASTIC_USE_AGENT_STORE": ""}
		for k, v := range tc.env {
			base[k] = v
		}
		for k, v := range base {
			t.Setenv(k, v)
		}
		_, err := nccl.FromEnv(nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: got %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
}

// DLBRIDGE_NCCL_PORT gives the rendezvous its port, beside the MASTER_PORT
// that torchrun's agent store (or torch.distributed's) holds.
func TestEnvPort(t *testing.T) {
	env := map[string]string{"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2",
		"TORCHELASTIC_USE_AGENT_STORE": "True", nccl.EnvPort: "29501"}
	o, err := nccl.EnvOptions(func(k string) string { return env[k] }, nil)
	if err != nil || o.Addr != "10.0.0.7:29501" {
		t.Fatalf("EnvOptions: %+v, %v; want the address 10.0.0.7:29501", o, err)
	}
}

// A port another server holds is named with the way out, on rank 0 (the
// port is taken) and on the others, at once, not at the deadline: whether
// the server there hangs up on their hello (torch 1's TCPStore) or reads it
// and says nothing (torch 2's waits for the rest of a request).
func TestRendezvousPortOfAnother(t *testing.T) {
	for _, tc := range []struct {
		server string
		hangUp bool
		want   []string
	}{
		{"hangs up", true, []string{"closed the connection without an answer", "not dlbridge's rank 0", nccl.EnvPort}},
		{"silent", false, []string{"did not answer the hello within 5s", "not dlbridge's rank 0", nccl.EnvPort}},
	} {
		t.Run(tc.server, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					_, _ = c.Read(make([]byte, 64))
					if tc.hangUp {
						c.Close()
					} else {
						defer c.Close()
					}
				}
			}()
			for rank := range 2 {
				start := time.Now()
				_, err := nccl.Join(nccl.Options{Addr: ln.Addr().String(), Rank: rank, Size: 2, Device: 0,
					Config: nccl.Config{Timeout: time.Minute}})
				want := []string{"cannot listen", "address already in use", nccl.EnvPort}
				if rank == 1 {
					want = tc.want
				}
				for _, w := range want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: got %v, want an error containing %q", rank, err, w)
					}
				}
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("rank %d: the error took %v", rank, took)
				}
			}
		})
	}
}

// Rank 0 reads every hello in a goroutine of its own: a connection that
// never says hello (a port scanner, a hostile peer) holds up no rank, and a
// rank that comes after the job formed is refused with the reason.
func TestRendezvousSilentPeerAndLateRank(t *testing.T) {
	ranks(t, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	type joined struct {
		w   *nccl.World
		err error
	}
	done := make(chan joined, 2)
	for rank := range 2 {
		go func() {
			w, err := nccl.Join(nccl.Options{Addr: addr, Rank: rank, Size: 2, Device: rank,
				Config: nccl.Config{Timeout: 30 * time.Second}})
			done <- joined{w, err}
		}()
		if rank == 0 { // rank 0 listens; three silent connections come before rank 1
			for len(silent) < 3 {
				if c, err := net.Dial("tcp", addr); err == nil {
					silent = append(silent, c)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
	}
	start := time.Now()
	var worlds []*nccl.World
	for range 2 {
		j := <-done
		if j.err != nil {
			t.Fatalf("Join: %v", j.err)
		}
		worlds = append(worlds, j.w)
	}
	defer func() {
		for _, w := range worlds {
			w.Close()
		}
	}()
	if took := time.Since(start); took > 12*time.Second { // held up: 30 s (the deadline) before, 15 s if hellos were read one by one
		t.Errorf("the job formed after %v: silent connections held it up", took)
	}
	_, err = nccl.Join(nccl.Options{Addr: addr, Rank: 1, Size: 2, Device: 1, Config: nccl.Config{Timeout: 10 * time.Second}})
	if err == nil || !strings.Contains(err.Error(), "rank 0 refused rank 1") || !strings.Contains(err.Error(), "after the job formed") {
		t.Errorf("a rank after the job formed: got %v, want a refusal saying the job formed", err)
	}
}

// A rank that comes to a rendezvous nobody hosts gives up at the deadline.
func TestRendezvousDeadline(t *testing.T) {
	_, err := nccl.Join(nccl.Options{Addr: "127.0.0.1:1", Rank: 1, Size: 2, Device: 0,
		Config: nccl.Config{Timeout: 300e6}})
	if err == nil || !strings.Contains(err.Error(), "cannot reach rank 0") {
		t.Fatalf("got %v", err)
	}
}

func TestLibraryPath(t *testing.T) {
	p := nccl.LibraryPath()
	if want := os.Getenv(nccl.EnvLibrary); want != "" && p != want {
		t.Fatalf("LibraryPath %q, want %q", p, want)
	}
	if v, err := nccl.Version(); err != nil || v < 22300 {
		t.Fatalf("Version: %d, %v", v, err)
	}
}
