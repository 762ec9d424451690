// Package fakenccl builds the fake NCCL of testdata/fakenccl (a C library
// over the fake CUDA driver of testdata/fakecuda, running the NCCL C API
// across real processes through shared memory) and points package nccl at
// it, so that communicators, every operation, the rendezvous and failures
// are tested without a GPU.
package fakenccl
