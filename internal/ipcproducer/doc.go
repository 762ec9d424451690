// Command ipcproducer is the Go side of the cross-process tests of
// dlbridge.ipc: a producer, built with CGO_ENABLED=0, that serves tensors
// of an IPC pool over a Unix socket to one consumer (a Python process in
// the tests) and reports its pool's usage, so that the tests can check
// that leases come back, also from a consumer that was killed.
//
//	ipcproducer -sock /tmp/s -n 1000 -elems 4096 -window 8 [-spin 2ms] [-bytes N -rounds R]
//
// Tensor i (uint32, elems elements) holds the value i+1, written on the
// device by a kernel that first spins for -spin (a slow producer) before
// the ready event is recorded. Lines it prints: "baseline USED", "sent N",
// "final USED LIVE" when the consumer has given everything back or went
// away.
//
// With -bytes (a tensor size) it instead times the hand-over for the GPU
// figures: one allocation sent -rounds times (the first contact, then each
// hand-over after it), and prints "handover BYTES NS" per round's median.
package main
