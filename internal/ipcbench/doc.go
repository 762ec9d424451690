// Command ipcbench times the hand-over of a tensor between two processes
// with package zerocopy/ipc against the driver's own import, for the GPU
// figures of docs/ipc.md. It runs itself a second time as the producer.
//
//	ipcbench [-rounds 30] [-sizes 1M,16M,256M,1G,4G]
//
// Per size it prints one line:
//
//	size BYTES claim NS import NS driver NS ratio R
//
// claim: the median round trip of Conn.Claim after the first contact (ask,
// the producer exports and records its ready event, the descriptor comes
// back, the view is made); import: the median of Conn.LastImport, the
// consumer's share of it (descriptor to view); driver: the median of
// cuMemPoolImportPointer plus cuStreamWaitEvent on an opened interprocess
// event, timed alone on the same allocation sizes of the producer's own
// raw pool in the same run; ratio: import / driver.
package main
