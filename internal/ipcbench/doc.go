// Command ipcbench times the hand-over of a tensor between two processes
// with package zerocopy/ipc against the driver doing the same work alone,
// in one run, for the GPU figures of docs/ipc.md. It runs itself a second
// time as the producer.
//
//	ipcbench [-rounds 30] [-sizes 1M,64M,1G,4G] [-fill device|host]
//
// Both sides start from the same state: the producer's pool already
// imported by the consumer and its ready event already opened (the first
// contact, untimed), and in every round a fresh allocation of the size that
// the consumer has never mapped (the one before it was freed and
// synchronized on both sides). Per size it prints the medians, in
// nanoseconds:
//
//	size  dlbridge  send  import  driver  ratio  recycled  rratio
//
// dlbridge: from just before the producer's Conn.Send (the pointer's
// export, the ready event's record, the descriptor on the socket) to the
// consumer's Conn.Recv returning a view ready to use (the descriptor read
// and checked, the pointer imported, the import stream's wait for the
// ready event queued), on the wall clock both processes read; import:
// Conn.LastImport, the consumer's share of it; driver: the driver alone,
// cuMemPoolImportPointer of a fresh pointer of the producer's raw pool
// (imported once) plus cuStreamWaitEvent on an interprocess event opened
// once, timed around the two calls; ratio: dlbridge / driver. The rounds
// of the two ways alternate. recycled: the dlbridge hand-over timed the
// same way in the steady state, a tensor of the same size sent again
// after the consumer closed the previous one, so that the pool takes its
// cached allocation again and the consumer's mapping is reused (no
// import); rratio: recycled / driver.
package main
