// Package ipc shares CUDA tensors between processes on one node by handle,
// without copies, ordered on the GPU both ways, with leases.
//
// The producer allocates from a Pool: a stream-ordered memory pool of one
// device created for POSIX file-descriptor handles, separate from the
// device's default pool, with a size limit. Conn.Send exports a view of
// that memory as a small Descriptor (pool, the allocation's export data,
// offset, layout, a "ready" interprocess event recorded after the
// producer's pending work) and sends it over a Unix domain socket
// (SOCK_SEQPACKET); the pool's file descriptor goes along once per peer
// (SCM_RIGHTS). The consumer's Conn.Recv maps the allocation (once per
// allocation) and returns a zerocopy.View whose pending stream waits for
// the ready event: DLPack and CopyCUDA consumers order after it, the host
// never waits.
//
// Closing a received view gives its lease back: the consumer records a
// "done" interprocess event on its stream, and the producer ends the lease
// once that event completed (found on the host: a stream of the pool that
// waited for one consumer would hold back all the others), so the memory
// is reused or freed only after the consumer's work. The consumer keeps
// the allocation mapped: once the producer's own views are
// closed and every lease ended, the pool caches the allocation, and the
// next Alloc of the same size takes it again, which the consumer receives
// without a new mapping. To free a cached allocation (Pool.Trim, the
// limit, Pool.Close) the producer retires it: each consumer that maps it
// unmaps it in stream order and answers with a done event, and the
// producer frees it (cuMemFreeAsync) after those events. A peer that
// closes the connection or dies gives all its leases and mappings back at
// once (the socket's end is how death is noticed); each side unmaps what
// it maps of the other's before its end, so that the exporter's free comes
// after, as the driver requires. Every wait on a peer has a deadline
// (Conn.SetTimeout, Conn.SetRecvTimeout, Pool.SetTimeout), and each
// descriptor is checked against the range the driver really mapped. A
// consumer whose producer died keeps its views valid (its mappings hold the memory) until
// it closes them.
//
// Everything works in a CGO_ENABLED=0 build: the driver is reached through
// purego, the socket through package net and syscall.
//
//	// producer
//	pool, _ := ipc.NewPool(0, 1<<30)
//	ln, _ := ipc.Listen("/tmp/tensors.sock")
//	peer, _ := ln.Accept()
//	v, _ := pool.Alloc(nil, dlpack.Float32Type, 1024, 1024)
//	// ... queue work writing v on pool.Stream() ...
//	peer.Send(pool, v, nil)
//	v.Close() // the peer's lease keeps the memory
//
//	// consumer
//	c, _ := ipc.Dial("/tmp/tensors.sock")
//	t, _ := c.Recv()
//	// ... use t (ToDLPack, CopyCUDA) ...
//	t.Close()
//
// docs/ipc.md has the design: the wire format, ordering, leases, what the
// fake driver emulates, and fabric handles for multi-node NVLink domains.
package ipc
