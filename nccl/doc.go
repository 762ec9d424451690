// Package nccl puts Go ranks in NCCL communicators, beside PyTorch and
// CuPy ranks, without cgo: libnccl.so.2 is loaded at run time through
// purego, as package cuda loads the driver. It is found through
// DLBRIDGE_LIBNCCL, the dynamic loader's path, or a Python install's
// nvidia/nccl/lib (where PyTorch's wheels put it); when none is found the
// error lists every place tried.
//
// A process started as torchrun starts ranks (MASTER_ADDR, MASTER_PORT,
// RANK, WORLD_SIZE, LOCAL_RANK) joins with FromEnv: rank 0 hands the unique
// id to the others over TCP, with a deadline. NCCL carries every byte of
// tensor data; the rendezvous connections only tell the ranks when one of
// them exits. Under torchrun itself, whose agent's store holds MASTER_PORT,
// DLBRIDGE_NCCL_PORT (EnvPort) gives the rendezvous a port of its own.
//
//	w, err := nccl.FromEnv(nil)
//	if err != nil { ... }
//	c := w.Comm()
//	err = c.AllReduce(grad, grad, nccl.Sum, stream) // queued on stream, nothing waits
//
// Operations take *zerocopy.View, checked (zerocopy.Want: dtype, shape,
// device, contiguity) before NCCL sees them. The caller's stream carries
// the work: the views' pending writes are ordered before it with events,
// results are left pending on it (View.Stream), the host never waits.
//
// Communicators are blocking, as torch.distributed's (Config.Nonblocking
// makes them nonblocking): an operation returns once NCCL queued it.
// Every wait has a deadline (Config.Timeout, DLBRIDGE_NCCL_TIMEOUT for
// FromEnv), and the calls of a communicator are serialized, as NCCL
// requires. A watchdog follows the operations in flight with an event
// each and ncclCommGetAsyncError, and the calls waiting in NCCL (an
// initialization, a connection); when one has not completed by its
// deadline, NCCL reports an error, or a rank of the communicator exited
// (a World's control plane sees that at once; NCCL over NVLink never
// does), the communicator is aborted and the next call returns an
// *OpError naming the operation and the ranks that did not come. The survivors build a communicator without
// the lost rank with World.Rebuild.
//
// Tests run against testdata/fakenccl (internal/fakenccl builds it): the
// NCCL C API across real processes over the fake driver. docs/nccl.md
// covers multi-node use.
package nccl
