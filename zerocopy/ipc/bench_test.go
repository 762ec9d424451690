package ipc_test

import (
	"testing"
	"time"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy/ipc"
)

// BenchmarkHandOver: one allocation sent and given back, both ends in this
// process (the fake driver imports a pool into the process that made it;
// the real one does not: internal/ipcbench times it across processes).
// import-ns/op is the receiving side's share (Conn.LastImport).
func BenchmarkHandOver(b *testing.B) {
	needFake(b)
	pool, err := ipc.NewPool(0, 16<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	sock := b.TempDir() + "/s"
	ln, err := ipc.Listen(sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := ipc.Dial(sock)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	peer, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer peer.Close()
	v, err := pool.Alloc(nil, dlpack.Float32Type, 1024)
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	var imp time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := peer.Send(pool, v, nil); err != nil {
			b.Fatal(err)
		}
		r, err := c.Recv()
		if err != nil {
			b.Fatal(err)
		}
		imp += c.LastImport()
		r.Close()
		for peer.Leases() > 0 {
		}
	}
	b.ReportMetric(float64(imp.Nanoseconds())/float64(b.N), "import-ns/op")
}
