package pybridge

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

// This file: the glue of dlbridge.ipc (zerocopy/ipc for Python). Pools,
// listeners, servers and connections live in one handle table; tensors
// received are ordinary tensor handles.

var ipcObjects Table[any]

func ipcGet[T any](h Handle, what string) (T, error) {
	return objectOf[T](&ipcObjects, h, "dlbridge.ipc", what)
}

func ipcErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ipc.ErrNotIPCMemory):
		return WithCode(BufferError, err)
	case errors.Is(err, ipc.ErrBadDescriptor):
		return WithCode(ValueError, err)
	case errors.Is(err, ipc.ErrTimeout):
		return WithCode(TimeoutError, fmt.Errorf("%w: %v", ErrIPCTimeout, err))
	}
	return engineErr(err)
}

// IPCPoolNew creates an IPC pool on CUDA device dev with a limit in bytes.
func IPCPoolNew(dev int32, limit int64) (Handle, error) {
	p, err := ipc.NewPool(int(dev), limit)
	if err != nil {
		return 0, ipcErr(err)
	}
	return ipcObjects.Add(p), nil
}

// IPCPoolEmpty allocates a C-contiguous tensor from the pool, in stream
// order on the device's work stream (zeroed when zero is set).
func IPCPoolEmpty(h Handle, dt dlpack.DataType, shape []int64, zero bool) (*zerocopy.View, error) {
	p, err := ipcGet[*ipc.Pool](h, "pool")
	if err != nil {
		return nil, err
	}
	if _, err := checkShape(dt, shape); err != nil {
		return nil, err
	}
	s, err := zerocopy.WorkStream(p.Device())
	if err != nil {
		return nil, engineErr(err)
	}
	v, err := p.Alloc(s, dt, shape...)
	if err != nil {
		return nil, ipcErr(err)
	}
	if zero {
		if err := zerocopy.Fill(v, zerocopy.Int(0), s); err != nil {
			v.Close()
			return nil, engineErr(err)
		}
	}
	return v, nil
}

// IPCPoolCopyIn copies a tensor into a new allocation of the pool.
func IPCPoolCopyIn(h Handle, t *Tensor) (*zerocopy.View, error) {
	p, err := ipcGet[*ipc.Pool](h, "pool")
	if err != nil {
		return nil, err
	}
	s, err := zerocopy.WorkStream(p.Device())
	if err != nil {
		return nil, engineErr(err)
	}
	v, err := p.CopyIn(t.View, s)
	return v, ipcErr(err)
}

// IPCPoolUsage reports the pool's reserved and used bytes and its live
// allocations.
func IPCPoolUsage(h Handle) (reserved, used uint64, live int, err error) {
	p, err := ipcGet[*ipc.Pool](h, "pool")
	if err != nil {
		return 0, 0, 0, err
	}
	reserved, used, err = p.Usage()
	return reserved, used, p.Live(), ipcErr(err)
}

// IPCPoolTrim frees the pool's cached allocations (their peers unmap them
// first) and returns once they are freed.
func IPCPoolTrim(h Handle) error {
	p, err := ipcGet[*ipc.Pool](h, "pool")
	if err != nil {
		return err
	}
	return ipcErr(p.Trim())
}

// IPCPoolSetTimeout sets how long the pool's Trim, Close and an allocation
// at its limit wait for peers to answer retires (0: the default, 2 s).
func IPCPoolSetTimeout(h Handle, d time.Duration) error {
	p, err := ipcGet[*ipc.Pool](h, "pool")
	if err != nil {
		return err
	}
	p.SetTimeout(d)
	return nil
}

// IPCPoolCached reports the pool's cached allocations and their bytes.
func IPCPoolCached(h Handle) (n int, bytes int64, err error) {
	p, err := ipcGet[*ipc.Pool](h, "pool")
	if err != nil {
		return 0, 0, err
	}
	n, bytes = p.Cached()
	return n, bytes, nil
}

// IPCMapped reports the allocations of the peer a connection keeps mapped
// and the mappings it made so far.
func IPCMapped(h Handle) (mapped, imports int, err error) {
	c, err := ipcGet[*ipc.Conn](h, "connection")
	if err != nil {
		return 0, 0, err
	}
	return c.Mapped(), c.Imports(), nil
}

// IPCListen listens on a Unix socket path.
func IPCListen(path string) (Handle, error) {
	l, err := ipc.Listen(path)
	if err != nil {
		return 0, WithCode(ValueError, err)
	}
	return ipcObjects.Add(l), nil
}

// IPCAccept waits for a peer on a listener.
func IPCAccept(h Handle) (Handle, error) {
	l, err := ipcGet[*ipc.Listener](h, "listener")
	if err != nil {
		return 0, err
	}
	c, err := l.Accept()
	if err != nil {
		return 0, WithCode(RuntimeError, err)
	}
	return ipcObjects.Add(c), nil
}

// IPCDial connects to a listener's or server's socket path.
func IPCDial(path string) (Handle, error) {
	c, err := ipc.Dial(path)
	if err != nil {
		return 0, WithCode(ValueError, err)
	}
	return ipcObjects.Add(c), nil
}

// IPCServe starts a server of offers on a socket path.
func IPCServe(path string) (Handle, error) {
	s, err := ipc.Serve(path)
	if err != nil {
		return 0, WithCode(ValueError, err)
	}
	return ipcObjects.Add(s), nil
}

// ipcPoolOf returns the pool handle h names, or, for h == 0, the pool
// that owns t's memory: an IPC pool of this process, or for any other
// tensor the engine allocated on a device (Allocate, results, copies) its
// device's pool, which shares it in place (ipc.DevicePool). BufferError
// for memory no pool can share (another library's).
func ipcPoolOf(h Handle, t *Tensor) (*ipc.Pool, error) {
	if h != 0 {
		return ipcGet[*ipc.Pool](h, "pool")
	}
	var found *ipc.Pool
	ipcObjects.Range(func(_ Handle, o any) bool {
		if p, ok := o.(*ipc.Pool); ok && p.Owns(t.View) {
			found = p
			return false
		}
		return true
	})
	if found != nil {
		return found, nil
	}
	why := "no pool of this process holds it"
	if d := t.View.Device(); isCUDA(d) {
		p, err := ipc.DevicePool(int(d.ID))
		if err == nil && p.Owns(t.View) {
			return p, nil
		}
		if err != nil {
			why += "; " + err.Error()
		}
	}
	return nil, WithCode(BufferError, fmt.Errorf("%w (%s)", ipc.ErrNotIPCMemory, why))
}

// IPCOffer offers a tensor of the pool (0: the pool that holds it) on the
// server for ttl, uses times
// (0: any number).
func IPCOffer(srv, pool Handle, t *Tensor, ttl time.Duration, uses int) (uint64, error) {
	s, err := ipcGet[*ipc.Server](srv, "server")
	if err != nil {
		return 0, err
	}
	p, err := ipcPoolOf(pool, t)
	if err != nil {
		return 0, err
	}
	tok, err := s.Offer(p, t.View, ttl, uses)
	return tok, ipcErr(err)
}

// IPCClaim claims an offer over a connection.
func IPCClaim(h Handle, token uint64) (*zerocopy.View, error) {
	c, err := ipcGet[*ipc.Conn](h, "connection")
	if err != nil {
		return nil, err
	}
	v, err := c.Claim(token)
	return v, ipcErr(err)
}

// IPCSend sends a tensor of the pool (0: the pool that holds it) over a
// connection, after the work queued on stream (not given: the tensor's
// pending write; PlanStream decides).
func IPCSend(h, pool Handle, t *Tensor, stream StreamArg) error {
	c, err := ipcGet[*ipc.Conn](h, "connection")
	if err != nil {
		return err
	}
	p, err := ipcPoolOf(pool, t)
	if err != nil {
		return err
	}
	var plan StreamPlan
	if err := PlanStream(&StreamAsk{Entry: EntrySend, Op: "send", Given: stream, Devices: [2]dlpack.Device{dlpack.CUDADevice(p.Device())}}, &plan); err != nil {
		return err
	}
	return ipcErr(c.Send(p, t.View, plan.Stream))
}

// ErrIPCTimeout prefixes the errors of waits on a peer past their deadline.
var ErrIPCTimeout = errors.New("dlbridge.ipc: timed out")

// ErrIPCEnded is matched by IPCRecv's error once the peer is gone.
var ErrIPCEnded = errors.New("dlbridge.ipc: the connection ended")

// IPCRecv waits for the next tensor from the peer.
func IPCRecv(h Handle) (*zerocopy.View, error) {
	c, err := ipcGet[*ipc.Conn](h, "connection")
	if err != nil {
		return nil, err
	}
	v, err := c.Recv()
	if (errors.Is(err, io.EOF) || errors.Is(err, ipc.ErrClosed)) && !errors.Is(err, ipc.ErrTimeout) {
		return nil, WithCode(BufferError, fmt.Errorf("%w: %v", ErrIPCEnded, err))
	}
	return v, ipcErr(err)
}

// IPCSetTimeout sets a connection's deadlines: how long each write to the
// peer and each wait for its answer may take (answer), and how long recv
// waits for a tensor (recv); 0: none, below 0: unchanged.
func IPCSetTimeout(h Handle, answer, recv time.Duration) error {
	c, err := ipcGet[*ipc.Conn](h, "connection")
	if err != nil {
		return err
	}
	if answer >= 0 {
		c.SetTimeout(answer)
	}
	if recv >= 0 {
		c.SetRecvTimeout(recv)
	}
	return nil
}

// IPCLeases is the number of tensors sent over a connection that the peer
// still holds.
func IPCLeases(h Handle) (int, error) {
	c, err := ipcGet[*ipc.Conn](h, "connection")
	if err != nil {
		return 0, err
	}
	return c.Leases(), nil
}

// IPCClose closes a pool, listener, server or connection and forgets its
// handle.
func IPCClose(h Handle) error {
	o, err := ipcObjects.Delete(h)
	if err != nil {
		return err
	}
	switch o := o.(type) {
	case *ipc.Pool:
		return ipcErr(o.Close())
	case *ipc.Listener:
		return ipcErr(o.Close())
	case *ipc.Server:
		return ipcErr(o.Close())
	case *ipc.Conn:
		return ipcErr(o.Close())
	}
	return nil
}
