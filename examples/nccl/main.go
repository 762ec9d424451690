// Command nccl (examples/nccl) joins a communicator from the environment,
// as torchrun starts ranks, and exchanges tensors: an all-reduce every rank
// checks, then a ring of sends and receives. Two ranks on one machine:
//
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 go run ./examples/nccl &
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 go run ./examples/nccl
//
// Without a GPU, point DLBRIDGE_LIBCUDA and DLBRIDGE_LIBNCCL at the fakes
// (internal/fakecuda and internal/fakenccl build them; FAKECUDA_DEVICES=2).
package main

import (
	"fmt"
	"log"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/nccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

func main() {
	w, err := nccl.FromEnv(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	c := w.Comm()
	r, n := c.Rank(), c.Size()

	// Every rank contributes rank+1; the sum is n(n+1)/2 everywhere.
	host, _ := zerocopy.FromSlice([]float32{float32(r + 1), float32(r + 1)})
	x, err := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, 2)
	if err != nil {
		log.Fatal(err)
	}
	if err := zerocopy.CopyCUDA(x, host, nil); err != nil {
		log.Fatal(err)
	}
	if err := c.AllReduce(x, x, nccl.Sum, nil); err != nil { // queued on the work stream
		log.Fatal(err)
	}
	if err := zerocopy.CopyCUDA(host, x, nil); err != nil { // waits for the all-reduce
		log.Fatal(err)
	}
	got, _ := zerocopy.HostSlice[float32](host)
	fmt.Printf("rank %d: all_reduce sum %v (want %d)\n", r, got, n*(n+1)/2)

	// A ring: send to the next rank, receive from the previous one.
	out, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, 2)
	in, _ := zerocopy.AllocCUDA(c.Device(), dlpack.Float32Type, 2)
	src, _ := zerocopy.FromSlice([]float32{float32(100 * r), float32(100*r + 1)})
	if err := zerocopy.CopyCUDA(out, src, nil); err != nil {
		log.Fatal(err)
	}
	if err := c.SendRecv(nil, nccl.P2P{Peer: (r + 1) % n, View: out}, nccl.P2P{Peer: (r + n - 1) % n, View: in, Recv: true}); err != nil {
		log.Fatal(err)
	}
	if err := zerocopy.CopyCUDA(host, in, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rank %d: received %v from rank %d\n", r, got, (r+n-1)%n)
	if err := c.Finalize(); err != nil {
		log.Fatal(err)
	}
}
