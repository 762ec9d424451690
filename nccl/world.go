package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// World is this process's place in a job started as torchrun starts one:
// its rank among Size processes, the communicator of all of them, and the
// control plane of the rendezvous. Rank 0 listens at MASTER_ADDR:MASTER_PORT,
// makes the unique id and hands it to the others over TCP; the connections
// stay open, so that every rank learns at once when a process of the job
// exits (its socket closes), which names the lost rank in the errors of
// the survivors and lets them build a communicator without it (Rebuild).
// No tensor data goes over these connections: NCCL carries all of it.
type World struct {
	Rank, Size, LocalRank int

	cfg     Config
	dev     int
	mu      sync.Mutex
	comm    *Comm
	members []int           // world rank of each rank of comm
	subs    map[*Comm][]int // communicators split from comm (and from them): world rank of each of their ranks
	dead    map[int]string
	left    map[int]bool  // ranks whose Close said they leave (their end is no failure)
	changed chan struct{} // closed and replaced when dead changes
	ln      net.Listener
	conns   map[int]net.Conn // rank 0: one per other rank; others: {0: rank 0}
	wmu     sync.Mutex       // serializes writes
	epoch   uint32
	asks    map[int]uint32         // rank 0: ranks that asked to rebuild, by epoch
	answers chan []byte            // others: rebuild answers from rank 0
	queries map[uint32]chan []byte // progress requests waiting for their replies, by id
	nextQ   uint32
	closed  bool
}

// Options of Join. FromEnv fills them from the environment.
type Options struct {
	Addr      string // host:port of rank 0's listener (MASTER_ADDR:MASTER_PORT)
	Rank      int    // RANK
	Size      int    // WORLD_SIZE
	LocalRank int    // LOCAL_RANK: the device, unless Device says otherwise
	Device    int    // CUDA device; -1: LocalRank
	Config    Config // Config.Timeout also bounds the rendezvous
}

// EnvTimeout names the variable FromEnv reads the timeout from (a Go
// duration such as "30s"; default DefaultTimeout).
const EnvTimeout = "DLBRIDGE_NCCL_TIMEOUT"

// EnvPort names the variable that gives dlbridge's rendezvous a port of its
// own at MASTER_ADDR, for jobs where another server holds MASTER_PORT:
// torchrun's agent store (torchrun says so with
// TORCHELASTIC_USE_AGENT_STORE=True, and FromEnv then requires EnvPort), or
// the TCPStore of a torch.distributed job's rank 0. Every rank sets the
// same value.
const EnvPort = "DLBRIDGE_NCCL_PORT"

// FromEnv joins the job described by MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE and LOCAL_RANK (LOCAL_RANK defaults to 0; the device is
// LOCAL_RANK), with the timeout of DLBRIDGE_NCCL_TIMEOUT. cfg, when not
// nil, overrides the timeout and gives the rest of the configuration.
func FromEnv(cfg *Config) (*World, error) {
	o, err := EnvOptions(os.Getenv, cfg)
	if err != nil {
		return nil, err
	}
	return Join(o)
}

// EnvOptions are the Options FromEnv joins with, read through getenv: a
// caller whose environment is not the Go runtime's (a Python process, whose
// os.environ changes after the library started are not seen by os.Getenv)
// passes its own.
func EnvOptions(getenv func(string) string, cfg *Config) (Options, error) {
	var o Options
	get := func(name string, required bool) (string, error) {
		v := getenv(name)
		if v == "" && required {
			return "", fmt.Errorf("nccl: FromEnv: %s is not set (MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE describe the job, as torchrun sets them)", name)
		}
		return v, nil
	}
	num := func(name string, required bool, min int) (int, error) {
		v, err := get(name, required)
		if err != nil || v == "" {
			return 0, err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			return 0, fmt.Errorf("nccl: FromEnv: %s=%q: want an integer >= %d", name, v, min)
		}
		return n, nil
	}
	addr, err := get("MASTER_ADDR", true)
	if err != nil {
		return o, err
	}
	port, err := num(EnvPort, false, 1)
	if err != nil {
		return o, err
	}
	if port == 0 {
		if getenv("TORCHELASTIC_USE_AGENT_STORE") == "True" {
			return o, fmt.Errorf("nccl: FromEnv: started by torchrun, whose agent's store listens at MASTER_PORT=%s "+
				"(TORCHELASTIC_USE_AGENT_STORE=True), where dlbridge's rank 0 would: give dlbridge's rendezvous a port "+
				"of its own in %s, the same for every rank (torchrun passes the environment on: %s=29501 torchrun ...)",
				getenv("MASTER_PORT"), EnvPort, EnvPort)
		}
		if port, err = num("MASTER_PORT", true, 1); err != nil {
			return o, err
		}
	}
	if o.Rank, err = num("RANK", true, 0); err != nil {
		return o, err
	}
	if o.Size, err = num("WORLD_SIZE", true, 1); err != nil {
		return o, err
	}
	if o.LocalRank, err = num("LOCAL_RANK", false, 0); err != nil {
		return o, err
	}
	o.Addr = net.JoinHostPort(addr, strconv.Itoa(port))
	o.Device = -1
	if cfg != nil {
		o.Config = *cfg
	}
	if v := getenv(EnvTimeout); v != "" && (cfg == nil || cfg.Timeout == 0) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("nccl: FromEnv: %s=%q: want a positive duration such as 30s", EnvTimeout, v)
		}
		o.Config.Timeout = d
	}
	return o, nil
}

// Frame types of the control plane (docs/nccl.md gives the wire format:
// one type byte, a little-endian uint32 payload length, the payload).
const (
	msgHello   = 'H' // rank -> 0: "DLBNCCL1", rank, size, pid (uint32 each)
	msgWelcome = 'W' // 0 -> rank: its hello is taken (at once; the id follows once every rank came)
	msgID      = 'I' // 0 -> rank: the 128-byte unique id
	msgDead    = 'D' // 0 -> rank: a rank (uint32) whose process is gone
	msgRebuild = 'R' // rank -> 0: epoch
	msgAnswer  = 'B' // 0 -> rank: epoch, new rank, new size, id, members
	msgRefuse  = 'E' // 0 -> rank: why its hello is refused (text)
	msgQuery   = 'Q' // rank -> 0 -> every rank: query id, key length, key, then for 0 -> rank nothing more
	msgIssued  = 'A' // rank -> 0: query id, operations issued on that communicator (uint64; all ones: none)
	msgStatus  = 'S' // 0 -> asking rank: query id, then (rank, issued uint64) per rank that answered
	msgLeave   = 'L' // rank -> 0, 0 -> every rank: the sender's World.Close; its connection's end is no failure
)

const helloMagic = "DLBNCCL1"

func writeFrame(c net.Conn, t byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	b[0] = t
	binary.LittleEndian.PutUint32(b[1:], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := c.Write(b)
	return err
}

func readFrame(c net.Conn) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > 1<<16 {
		return 0, nil, fmt.Errorf("control frame of %d bytes (limit 65536)", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c, p); err != nil {
		return 0, nil, err
	}
	return h[0], p, nil
}

func u32s(vs ...int) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// Join joins a job as o describes it and builds the communicator of all
// its ranks (World.Comm).
func Join(o Options) (*World, error) {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return nil, fmt.Errorf("nccl: Join: rank %d of %d: want 0 <= rank < size", o.Rank, o.Size)
	}
	w := &World{Rank: o.Rank, Size: o.Size, LocalRank: o.LocalRank, cfg: o.Config, dev: o.Device,
		dead: map[int]string{}, left: map[int]bool{}, changed: make(chan struct{}), conns: map[int]net.Conn{},
		asks: map[int]uint32{}, answers: make(chan []byte, 4), queries: map[uint32]chan []byte{}, subs: map[*Comm][]int{}}
	if w.dev < 0 {
		w.dev = o.LocalRank
	}
	deadline := time.Now().Add(o.Config.timeout())
	var id UniqueID
	var err error
	if o.Rank == 0 {
		id, err = w.host(o.Addr, deadline)
	} else {
		id, err = w.dial(o.Addr, deadline)
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	c, err := InitRank(id, o.Size, o.Rank, w.dev, &w.cfg)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.setComm(c, jobRanks(o.Size))
	return w, nil
}

// jobRanks is the members of a communicator of the whole job: job rank i
// is its rank i.
func jobRanks(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// helloWait bounds how long rank 0 waits for a new connection's hello and a
// rank waits for rank 0's welcome. dlbridge's ranks send and answer both at
// once, so a peer silent that long is not one of them: torch 2's TCPStore,
// for one, reads a hello and waits for the rest of a request that never comes.
const helloWait = 5 * time.Second

// arrival is a connection whose hello was read: the rank and world size it says.
type arrival struct {
	c          net.Conn
	rank, size int
}

// host is rank 0's side: listen, welcome every other rank as it says hello,
// and once all came (by the deadline) hand out the id.
func (w *World) host(addr string, deadline time.Time) (UniqueID, error) {
	var id UniqueID
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return id, fmt.Errorf("nccl: rank 0 cannot listen at %s (MASTER_ADDR:MASTER_PORT, or %s): %w; "+
			"if another rendezvous holds the port (torch.distributed's TCPStore, torchrun's agent), give dlbridge's "+
			"a port of its own in %s, the same for every rank", addr, EnvPort, err, EnvPort)
	}
	if err != nil {
		return id, fmt.Errorf("nccl: rank 0 cannot listen at %s (MASTER_ADDR:MASTER_PORT, or %s): %w", addr, EnvPort, err)
	}
	w.ln = ln
	if id, err = NewUniqueID(); err != nil {
		return id, err
	}
	arrivals := make(chan arrival)
	formed := make(chan struct{})
	defer close(formed)
	go w.greet(ln, arrivals, formed)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for len(w.conns) < w.Size-1 {
		var a arrival
		select {
		case a = <-arrivals:
		case <-timer.C:
			var missing []int
			for r := 1; r < w.Size; r++ {
				if w.conns[r] == nil {
					missing = append(missing, r)
				}
			}
			return id, fmt.Errorf("nccl: rendezvous at %s: rank(s) %v did not come within %v", addr, missing, w.cfg.timeout())
		}
		why := ""
		switch {
		case a.size != w.Size:
			why = fmt.Sprintf("rank %d says WORLD_SIZE=%d, rank 0 has %d", a.rank, a.size, w.Size)
		case a.rank <= 0 || a.rank >= w.Size:
			why = fmt.Sprintf("rank %d outside [1, %d)", a.rank, w.Size)
		case w.conns[a.rank] != nil:
			why = fmt.Sprintf("rank %d joined twice", a.rank)
		}
		_ = a.c.SetDeadline(deadline)
		if why != "" {
			_ = writeFrame(a.c, msgRefuse, []byte(why))
			a.c.Close()
			continue
		}
		if err := writeFrame(a.c, msgWelcome, nil); err != nil {
			a.c.Close() // gone already: it may come again
			continue
		}
		w.conns[a.rank] = a.c
	}
	for r, c := range w.conns {
		if err := writeFrame(c, msgID, id[:]); err != nil {
			return id, fmt.Errorf("nccl: rendezvous: sending the id to rank %d: %w", r, err)
		}
		_ = c.SetDeadline(time.Time{})
		go w.serve(r, c)
	}
	return id, nil
}

// greet accepts connections until the listener closes (World.Close) and
// reads each one's hello in a goroutine of its own, so that a silent or slow
// peer holds up no rank. host takes the arrivals while the job forms; after
// that, a hello is refused with the reason.
func (w *World) greet(ln net.Listener, arrivals chan<- arrival, formed <-chan struct{}) {
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: try again
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			_ = c.SetDeadline(time.Now().Add(helloWait))
			t, p, err := readFrame(c)
			if err != nil || t != msgHello || len(p) != 20 || string(p[:8]) != helloMagic {
				c.Close() // not one of ours (a port scanner, a torch TCPStore client)
				return
			}
			a := arrival{c: c, rank: int(binary.LittleEndian.Uint32(p[8:])), size: int(binary.LittleEndian.Uint32(p[12:]))}
			select {
			case arrivals <- a:
			case <-formed:
				_ = writeFrame(c, msgRefuse, []byte(fmt.Sprintf("rank %d came after the job formed (its %d ranks had joined, or the rendezvous had failed)", a.rank, w.Size)))
				c.Close()
			}
		}()
	}
}

// dial is the side of every other rank: connect (retrying until the
// deadline: rank 0 may start last), say hello, get rank 0's welcome at once
// and the id once every rank came.
func (w *World) dial(addr string, deadline time.Time) (UniqueID, error) {
	var id UniqueID
	var c net.Conn
	var err error
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		d := net.Dialer{Deadline: deadline}
		if c, err = d.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().Add(pause).After(deadline) {
			return id, fmt.Errorf("nccl: rendezvous: rank %d cannot reach rank 0 at %s within %v: %w", w.Rank, addr, w.cfg.timeout(), err)
		}
		time.Sleep(pause)
	}
	w.conns[0] = c
	welcomeBy := time.Now().Add(helloWait)
	if welcomeBy.After(deadline) {
		welcomeBy = deadline
	}
	_ = c.SetDeadline(welcomeBy)
	hello := append([]byte(helloMagic), u32s(w.Rank, w.Size, os.Getpid())...)
	if err := writeFrame(c, msgHello, hello); err != nil {
		return id, fmt.Errorf("nccl: rendezvous: hello to rank 0 at %s: %w", addr, err)
	}
	notOurs := fmt.Sprintf("it is not dlbridge's rank 0 (torch.distributed's TCPStore? give dlbridge's rendezvous a port of its "+
		"own in %s, the same for every rank)", EnvPort)
	t, p, err := readFrame(c)
	if hungUp(err) {
		// dlbridge's rank 0 answers every hello (welcome, or why it refuses
		// the rank): a server that hangs up without a word is someone
		// else's, or a rank 0 that died.
		return id, fmt.Errorf("nccl: rendezvous: rank %d: the server at %s closed the connection without an answer: "+
			"%s, or rank 0 exited: %w", w.Rank, addr, notOurs, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && welcomeBy.Before(deadline) {
		return id, fmt.Errorf("nccl: rendezvous: rank %d: the server at %s did not answer the hello within %v, "+
			"as dlbridge's rank 0 does at once: %s", w.Rank, addr, helloWait, notOurs)
	}
	if err == nil && t == msgWelcome {
		_ = c.SetDeadline(deadline)
		t, p, err = readFrame(c)
		if hungUp(err) {
			return id, fmt.Errorf("nccl: rendezvous: rank %d: rank 0 at %s closed the connection before handing out the id (it exited?): %w", w.Rank, addr, err)
		}
	}
	if err != nil {
		return id, fmt.Errorf("nccl: rendezvous: rank %d waiting for the id from rank 0 at %s (rank 0 hands it out once every rank came): %w", w.Rank, addr, err)
	}
	if t == msgRefuse {
		return id, fmt.Errorf("nccl: rendezvous: rank 0 refused rank %d: %s", w.Rank, p)
	}
	if t != msgID || len(p) != len(id) {
		return id, fmt.Errorf("nccl: rendezvous: unexpected frame %q of %d bytes from rank 0", t, len(p))
	}
	copy(id[:], p)
	_ = c.SetDeadline(time.Time{})
	go w.serve(0, c)
	return id, nil
}

// hungUp reports whether a read ended because the other end closed the
// connection (rather than a deadline).
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// serve reads one connection until it closes: then the rank at its other
// end is gone (rank 0 tells the others).
func (w *World) serve(peer int, c net.Conn) {
	for {
		t, p, err := readFrame(c)
		if err != nil {
			w.mu.Lock()
			left := w.left[peer]
			w.mu.Unlock()
			if !left {
				w.lost(peer, "its connection closed (process exited?)")
			}
			return
		}
		switch {
		case t == msgLeave:
			// A rank that closes its World has finalized its communicators
			// (their operations it took part in are done): others still in
			// an operation it joined finish it. One it never joins ends at
			// the deadline, as for a rank alive and behind.
			w.mu.Lock()
			w.left[peer] = true
			w.mu.Unlock()
		// Frames that only rank 0 sends are taken only from it: another
		// rank (a buggy one) cannot have rank 0 believe a live rank gone,
		// nor fill the rebuild answers rank 0 never reads and stop this
		// reader (and with it the news of that rank's end).
		case t == msgDead && len(p) == 4 && peer == 0:
			w.lost(int(binary.LittleEndian.Uint32(p)), "rank 0 saw its connection close")
		case t == msgRebuild && len(p) == 4 && w.Rank == 0:
			w.mu.Lock()
			w.asks[peer] = binary.LittleEndian.Uint32(p)
			w.notify()
			w.mu.Unlock()
		case t == msgAnswer && peer == 0:
			w.answers <- p
		case t == msgQuery && len(p) >= 8 && w.Rank == 0:
			go w.answerQuery(peer, p)
		case t == msgQuery && len(p) >= 8 && peer == 0:
			w.send(0, msgIssued, append(p[:4:4], u64(w.issued(string(p[8:])))...))
		case (t == msgIssued || t == msgStatus) && len(p) >= 4:
			w.mu.Lock()
			ch := w.queries[binary.LittleEndian.Uint32(p)]
			w.mu.Unlock()
			if ch != nil {
				select {
				case ch <- append(u32s(peer), p[4:]...):
				default:
				}
			}
		}
	}
}

// send writes one frame to rank r (rank 0's connection to it, or the
// connection to rank 0); a closed connection is reported by serve.
func (w *World) send(r int, t byte, p []byte) {
	w.mu.Lock()
	c := w.conns[r]
	w.mu.Unlock()
	if c == nil {
		return
	}
	w.wmu.Lock()
	_ = writeFrame(c, t, p)
	w.wmu.Unlock()
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// noComm is the count of a rank without the communicator asked about.
const noComm = ^uint64(0)

// issued is the number of operations this rank issued on its communicator
// with the given key.
func (w *World) issued(key string) uint64 {
	w.mu.Lock()
	c, _ := w.byKeyLocked(key)
	w.mu.Unlock()
	if c == nil {
		return noComm
	}
	return c.Issued()
}

// byKeyLocked is the communicator of this World with the given key (its
// own or one split from it) and the world rank of each of its ranks, or
// nil. Called with w.mu held.
func (w *World) byKeyLocked(key string) (*Comm, []int) {
	if c := w.comm; c != nil && c.Key() == key {
		return c, w.membersLocked(c)
	}
	for c, m := range w.subs {
		if c.Key() == key {
			return c, m
		}
	}
	return nil, nil
}

// membersLocked is the world rank of each rank of c, a communicator of
// this World, or nil for another. Called with w.mu held.
func (w *World) membersLocked(c *Comm) []int {
	if c == w.comm {
		return w.members // setComm sets both
	}
	return w.subs[c]
}

// adoptSplit learns the members of child, split from parent, when parent
// is a communicator of this World: every rank of child contributes its
// world rank (an all_gather of one int32 on child, on the device's work
// stream), so that a rank's exit is told at once to the split
// communicators it belongs to (PeerGone) and their failures name the
// ranks missing, as for the World's own communicator. Comm.Split calls it
// on every rank of the split, as a Missing that can.
func (w *World) adoptSplit(parent, child *Comm) error {
	w.mu.Lock()
	pm := w.membersLocked(parent)
	w.mu.Unlock()
	if pm == nil {
		return nil // not one of ours (an earlier communicator, since rebuilt)
	}
	got := make([]int32, child.Size())
	if err := gatherInt32(child, int32(w.Rank), got); err != nil {
		return fmt.Errorf("learning the members of the split: %w", err)
	}
	members := make([]int, len(got))
	for i, r := range got {
		if !slices.Contains(pm, int(r)) {
			return fmt.Errorf("learning the members of the split: its rank %d says it is job rank %d, which is no rank of the communicator split", i, r)
		}
		members[i] = int(r)
	}
	child.SetMissing(w)
	var gone []int
	var why string
	w.mu.Lock()
	if !w.closed {
		w.subs[child] = members
		gone, why = w.goneAmongLocked(members)
	}
	w.mu.Unlock()
	if len(gone) > 0 { // a rank exited while the split was made
		go child.PeerGone(gone, why)
	}
	return nil
}

// goneAmongLocked is which of members are known gone, and why, as
// PeerGone takes them: what a communicator made while they exited must be
// told at once. Called with w.mu held.
func (w *World) goneAmongLocked(members []int) ([]int, string) {
	var gone []int
	var whys []string
	for _, r := range members {
		if why, ok := w.dead[r]; ok {
			gone = append(gone, r)
			whys = append(whys, goneWhy(r, why))
		}
	}
	return gone, strings.Join(whys, "; ")
}

// goneWhy is PeerGone's account of job rank r's end.
func goneWhy(r int, why string) string { return fmt.Sprintf("job rank %d: %s", r, why) }

// gatherInt32 all-gathers x over c into out (one per rank) and waits for it
// (the communicator's deadline bounds the wait).
func gatherInt32(c *Comm, x int32, out []int32) error {
	in, err := zerocopy.FromSlice([]int32{x})
	if err != nil {
		return err
	}
	host, err := zerocopy.FromSlice(out)
	if err != nil {
		return err
	}
	src, err := zerocopy.AllocCUDA(c.Device(), dlpack.Int32Type, 1)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := zerocopy.AllocCUDA(c.Device(), dlpack.Int32Type, int64(len(out)))
	if err != nil {
		return err
	}
	defer dst.Close()
	if err := zerocopy.CopyCUDA(src, in, nil); err != nil {
		return err
	}
	if err := c.AllGather(dst, src, nil); err != nil {
		return err
	}
	if err := c.Wait(); err != nil {
		return err
	}
	return zerocopy.CopyCUDA(host, dst, nil)
}

// queryTimeout bounds a progress query: ranks that have not answered by
// then are counted as not having come.
const queryTimeout = time.Second

// progress asks every live rank (through rank 0) how many operations it
// issued on the communicator with this key: job rank -> count.
func (w *World) progress(key string) map[int]uint64 {
	w.mu.Lock()
	w.nextQ++
	id := w.nextQ
	ch := make(chan []byte, 2*w.Size)
	w.queries[id] = ch
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.queries, id)
		w.mu.Unlock()
	}()
	q := append(u32s(int(id), len(key)), key...)
	if w.Rank == 0 {
		return w.collect(id, ch, key)
	}
	w.send(0, msgQuery, q)
	t := time.NewTimer(2 * queryTimeout)
	defer t.Stop()
	select {
	case p := <-ch:
		out := map[int]uint64{}
		for p = p[4:]; len(p) >= 12; p = p[12:] {
			out[int(binary.LittleEndian.Uint32(p))] = binary.LittleEndian.Uint64(p[4:])
		}
		return out
	case <-t.C:
		return nil
	}
}

// collect is rank 0's half of a query: ask every other live rank, gather
// the answers that come within queryTimeout, add its own.
func (w *World) collect(id uint32, ch chan []byte, key string) map[int]uint64 {
	q := append(u32s(int(id), len(key)), key...)
	w.mu.Lock()
	var ask []int
	for r := range w.conns {
		if _, gone := w.dead[r]; !gone {
			ask = append(ask, r)
		}
	}
	w.mu.Unlock()
	for _, r := range ask {
		w.send(r, msgQuery, q)
	}
	out := map[int]uint64{0: w.issued(key)}
	t := time.NewTimer(queryTimeout)
	defer t.Stop()
	for len(out) < len(ask)+1 {
		select {
		case p := <-ch:
			if len(p) >= 12 {
				out[int(binary.LittleEndian.Uint32(p))] = binary.LittleEndian.Uint64(p[4:])
			}
		case <-t.C:
			return out
		}
	}
	return out
}

// answerQuery is rank 0 serving a query of rank peer.
func (w *World) answerQuery(peer int, p []byte) {
	id := binary.LittleEndian.Uint32(p)
	n := int(binary.LittleEndian.Uint32(p[4:]))
	if 8+n > len(p) {
		return
	}
	w.mu.Lock()
	w.nextQ++
	mine := w.nextQ
	ch := make(chan []byte, 2*w.Size)
	w.queries[mine] = ch
	w.mu.Unlock()
	got := w.collect(mine, ch, string(p[8:8+n]))
	w.mu.Lock()
	delete(w.queries, mine)
	w.mu.Unlock()
	reply := u32s(int(id))
	for r, v := range got {
		reply = append(reply, u32s(r)...)
		reply = append(reply, u64(v)...)
	}
	w.send(peer, msgStatus, reply)
}

// notify wakes waiters on w.changed (w.mu held).
func (w *World) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *World) lost(r int, why string) {
	w.mu.Lock()
	if _, ok := w.dead[r]; ok || w.closed {
		w.mu.Unlock()
		return
	}
	w.dead[r] = why
	w.notify()
	// The communicator stops waiting for the rank now: NCCL may never
	// notice that it exited (see Comm.PeerGone). In a goroutine: the
	// failure asks the other ranks about their progress, whose answers
	// come through the connection this may be called from.
	if c := w.comm; c != nil && slices.Contains(w.members, r) {
		go c.PeerGone([]int{r}, goneWhy(r, why))
	}
	for c, m := range w.subs {
		if slices.Contains(m, r) {
			go c.PeerGone([]int{r}, goneWhy(r, why))
		}
	}
	var tell []net.Conn
	if w.Rank == 0 {
		for q, c := range w.conns {
			if q != r {
				tell = append(tell, c)
			}
		}
	}
	w.mu.Unlock()
	for _, c := range tell {
		w.wmu.Lock()
		_ = writeFrame(c, msgDead, u32s(r))
		w.wmu.Unlock()
	}
}

// Dead returns the ranks of the job known to be gone, in order.
func (w *World) Dead() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for r := range w.dead {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

// Missing implements Missing for the communicators of w: the job ranks
// (RANK) that did not come to operation seq of the communicator key:
// those whose process is gone (the rendezvous saw their connection
// close), those that did not answer (through rank 0, within a second),
// and, when no member is gone, those that had not issued operation seq
// when asked. With a member gone, a live rank behind is only late (it
// fails the operation when it gets there): the detail says so, but it is
// not named as the cause.
func (w *World) Missing(key string, seq uint64) ([]int, string) {
	got := w.progress(key)
	w.mu.Lock()
	dead := make(map[int]string, len(w.dead))
	for r, why := range w.dead {
		dead[r] = why
	}
	_, members := w.byKeyLocked(key)
	w.mu.Unlock()
	if members == nil {
		members = jobRanks(w.Size)
	}
	return missingOf(w.Rank, members, dead, got, seq)
}

// missingOf is Missing's judgement, apart from how the facts were
// gathered: self is the asking rank, members the communicator's job ranks,
// dead the ranks known gone (and why), got each rank's issued count (nil:
// rank 0 could not be asked).
func missingOf(self int, members []int, dead map[int]string, got map[int]uint64, seq uint64) ([]int, string) {
	anyGone := false
	for _, r := range members {
		if _, gone := dead[r]; gone && r != self {
			anyGone = true
		}
	}
	var ranks []int
	var parts []string
	for _, r := range members {
		if r == self {
			continue
		}
		why, gone := dead[r]
		n, answered := got[r]
		switch {
		case gone:
			parts = append(parts, fmt.Sprintf("rank %d: %s", r, why))
		case got == nil:
			continue // rank 0 unreachable: only the dead are known
		case !answered:
			parts = append(parts, fmt.Sprintf("rank %d: no answer from its process", r))
		case n == noComm:
			continue // it left this communicator (failed, rebuilt): it is not what is waited for
		case n < seq && anyGone:
			parts = append(parts, fmt.Sprintf("rank %d: alive, issued %d operations (late, not the cause)", r, n))
			continue
		case n < seq:
			parts = append(parts, fmt.Sprintf("rank %d: alive, issued %d operations", r, n))
		default:
			continue
		}
		ranks = append(ranks, r)
	}
	if len(ranks) == 0 {
		if got == nil {
			return nil, "rank 0 could not be asked about the others"
		}
		return nil, fmt.Sprintf("every rank is alive and issued operation %d: the failure is in NCCL or the network", seq)
	}
	sort.Ints(ranks)
	return ranks, "job ranks; " + strings.Join(parts, "; ")
}

func (w *World) setComm(c *Comm, members []int) {
	c.SetMissing(w)
	w.mu.Lock()
	w.comm, w.members = c, members
	gone, why := w.goneAmongLocked(members)
	w.mu.Unlock()
	if len(gone) > 0 { // a rank exited while the communicator was made
		go c.PeerGone(gone, why)
	}
}

// Comm is the current communicator of the job's ranks (after Rebuild, of
// the survivors).
func (w *World) Comm() *Comm {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.comm
}

// Members are the job ranks (RANK) of the current communicator's ranks.
func (w *World) Members() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.members...)
}

// Rebuild aborts the current communicator and builds a new one of the
// ranks still alive; every survivor calls it (after an operation failed).
// Rank 0 waits, with the deadline, until each rank it has not seen exit
// asked for it, numbers them in the order of their job ranks and hands out
// a new id. Rank 0 hosts the rendezvous: when it is the rank lost, the
// job cannot go on (as with torchrun's store).
func (w *World) Rebuild() (*Comm, error) {
	old := w.Comm()
	if old != nil {
		old.abort()
	}
	deadline := time.Now().Add(w.cfg.timeout())
	w.mu.Lock()
	w.epoch++
	epoch := w.epoch
	if _, gone := w.dead[0]; gone && w.Rank != 0 {
		w.mu.Unlock()
		return nil, errors.New("nccl: Rebuild: rank 0, which hosts the rendezvous, is gone: the job cannot rebuild its communicator")
	}
	w.mu.Unlock()
	var id UniqueID
	var rank int
	var members []int
	if w.Rank == 0 {
		for {
			w.mu.Lock()
			ch := w.changed
			members = []int{0}
			waiting := false
			for r := 1; r < w.Size; r++ {
				if _, gone := w.dead[r]; gone {
					continue
				}
				if w.asks[r] == epoch {
					members = append(members, r)
				} else {
					waiting = true
				}
			}
			w.mu.Unlock()
			if !waiting {
				break
			}
			left := time.Until(deadline)
			if left <= 0 {
				return nil, fmt.Errorf("nccl: Rebuild: not every live rank asked within %v (have %v)", w.cfg.timeout(), members)
			}
			t := time.NewTimer(left)
			select {
			case <-ch:
			case <-t.C:
			}
			t.Stop()
		}
		var err error
		if id, err = NewUniqueID(); err != nil {
			return nil, err
		}
		for i, r := range members[1:] {
			p := append(u32s(int(epoch), i+1, len(members)), id[:]...)
			p = append(p, u32s(members...)...)
			w.wmu.Lock()
			err := writeFrame(w.conns[r], msgAnswer, p)
			w.wmu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("nccl: Rebuild: answering rank %d: %w", r, err)
			}
		}
	} else {
		w.wmu.Lock()
		err := writeFrame(w.conns[0], msgRebuild, u32s(int(epoch)))
		w.wmu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("nccl: Rebuild: asking rank 0: %w", err)
		}
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		for {
			var p []byte
			select {
			case p = <-w.answers:
			case <-t.C:
				return nil, fmt.Errorf("nccl: Rebuild: rank 0 did not answer within %v", w.cfg.timeout())
			}
			if len(p) < 12+128 || binary.LittleEndian.Uint32(p) != epoch {
				continue // an answer to an older Rebuild
			}
			rank = int(binary.LittleEndian.Uint32(p[4:]))
			n := int(binary.LittleEndian.Uint32(p[8:]))
			copy(id[:], p[12:140])
			if len(p) != 140+4*n {
				return nil, fmt.Errorf("nccl: Rebuild: malformed answer of %d bytes from rank 0", len(p))
			}
			for i := 0; i < n; i++ {
				members = append(members, int(binary.LittleEndian.Uint32(p[140+4*i:])))
			}
			break
		}
	}
	c, err := InitRank(id, len(members), rank, w.dev, &w.cfg)
	if err != nil {
		return nil, err
	}
	w.setComm(c, members)
	return c, nil
}

// Close finalizes nothing (call Comm().Finalize first for a clean end) and
// closes the control plane, saying so first: the other ranks take this
// rank's end as a departure, not a failure (an operation it took part in
// completes; one that still needs it ends at the deadline). A rank that
// ends without Close (killed, crashed) fails the others' operations at
// once.
func (w *World) Close() error {
	w.mu.Lock()
	w.closed = true
	w.subs = map[*Comm][]int{}
	conns := w.conns
	w.mu.Unlock()
	for r := range conns {
		w.send(r, msgLeave, nil)
	}
	for _, c := range conns {
		c.Close()
	}
	if w.ln != nil {
		w.ln.Close()
	}
	return nil
}
