package nccl_test

import (
	"fmt"

	"github.com/dlbridge/dlbridge/nccl"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// A communicator of one rank: the calls are those of every rank of a
// larger one (FromEnv builds that from the environment).
func ExampleComm_AllReduce() {
	id, err := nccl.NewUniqueID()
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := nccl.InitRank(id, 1, 0, 0, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	host, _ := zerocopy.FromSlice([]float32{1, 2, 3})
	x, _ := zerocopy.AllocCUDA(0, host.DType(), 3)
	_ = zerocopy.CopyCUDA(x, host, nil)
	// Queued on the device's work stream after the upload; nothing waits.
	if err := c.AllReduce(x, x, nccl.Sum, nil); err != nil {
		fmt.Println(err)
		return
	}
	_ = zerocopy.CopyCUDA(host, x, nil) // ordered after the all-reduce
	got, _ := zerocopy.HostSlice[float32](host)
	fmt.Println(got, c.Finalize())
	// Output: [1 2 3] <nil>
}

func ExampleParseOp() {
	op, err := nccl.ParseOp("SUM")
	fmt.Println(op, err)
	_, err = nccl.ParseOp("xor")
	fmt.Println(err)
	// Output:
	// sum <nil>
	// nccl: reduction "xor": want sum, prod, max, min or avg
}
