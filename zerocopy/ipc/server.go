package ipc

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/dlbridge/dlbridge/zerocopy"
)

// Server offers tensors to whoever connects and claims them by token: what
// pickling a tensor for another process on the node needs (the pickle
// carries the socket path and the token, the unpickler claims). Each
// claim is a lease of its own; an offer may be claimed any number of times
// until it expires.
type Server struct {
	ln *Listener

	mu     sync.Mutex
	offers map[uint64]*offer
	conns  []*Conn
	closed bool
}

type offer struct {
	pool    *Pool
	v       *zerocopy.View // a reference of the offer's own
	expires time.Time
	uses    int // claims left (0: any number until it expires)
}

// Serve listens on path and answers claims until Close.
func Serve(path string) (*Server, error) {
	ln, err := Listen(path)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, offers: map[uint64]*offer{}}
	go s.accept()
	return s, nil
}

// Addr is the socket path.
func (s *Server) Addr() string { return s.ln.Addr() }

func (s *Server) accept() {
	var pause time.Duration
	for {
		uc, err := s.ln.ul.AcceptUnix()
		if err != nil {
			if !temporary(err) {
				return
			}
			// Out of file descriptors (or a peer gone before its accept):
			// wait and accept again, growing the pause up to 1 s; peers
			// that end free descriptors (their sockets close at once).
			reportError(fmt.Errorf("ipc: Server on %s: accept: %w; retrying in %v", s.ln.path, err, pause))
			if pause == 0 {
				pause = 5 * time.Millisecond
			} else if pause *= 2; pause > time.Second {
				pause = time.Second
			}
			time.Sleep(pause)
			continue
		}
		pause = 0
		c := newConnWith(uc, s.claim, s.ln.path)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		kept := s.conns[:0]
		for _, o := range s.conns {
			if !o.isEnded() {
				kept = append(kept, o)
			}
		}
		s.conns = append(kept, c)
		s.mu.Unlock()
	}
}

// Offer makes v (memory of pool) claimable for ttl, uses times (0: any
// number), and returns its token. The offer holds a reference on v's
// memory until it expires or its last use was claimed.
func (s *Server) Offer(pool *Pool, v *zerocopy.View, ttl time.Duration, uses int) (uint64, error) {
	if uses < 0 {
		return 0, fmt.Errorf("ipc: Offer: %d uses", uses)
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("ipc: Offer: ttl %v: must be > 0", ttl)
	}
	if b := pool.find(v.Ptr(), v.Ptr()); b == nil {
		return 0, fmt.Errorf("ipc: Offer: %w", ErrNotIPCMemory)
	}
	r, err := v.Retain()
	if err != nil {
		return 0, fmt.Errorf("ipc: Offer: %w", err)
	}
	var tb [8]byte
	for {
		if _, err := rand.Read(tb[:]); err != nil {
			r.Close()
			return 0, err
		}
		if binary.LittleEndian.Uint64(tb[:]) != 0 {
			break
		}
	}
	token := binary.LittleEndian.Uint64(tb[:])
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		r.Close()
		return 0, fmt.Errorf("ipc: Offer: %w", ErrClosed)
	}
	s.expireLocked(now)
	s.offers[token] = &offer{pool: pool, v: r, expires: now.Add(ttl), uses: uses}
	return token, nil
}

// Offers is the number of offers not yet expired.
func (s *Server) Offers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(time.Now())
	return len(s.offers)
}

func (s *Server) expireLocked(now time.Time) {
	for t, o := range s.offers {
		if now.After(o.expires) {
			o.v.Close()
			delete(s.offers, t)
		}
	}
}

// Withdraw ends an offer before it expires (claims made stay leased).
func (s *Server) Withdraw(token uint64) {
	s.mu.Lock()
	o := s.offers[token]
	delete(s.offers, token)
	s.mu.Unlock()
	if o != nil {
		o.v.Close()
	}
}

func (s *Server) claim(c *Conn, token uint64) {
	s.mu.Lock()
	s.expireLocked(time.Now())
	o := s.offers[token]
	var v *zerocopy.View
	if o != nil {
		v, _ = o.v.Retain()
		if o.uses == 1 {
			delete(s.offers, token)
			o.v.Close() // v holds the memory for the claim
		} else if o.uses > 1 {
			o.uses--
		}
	}
	s.mu.Unlock()
	if v == nil {
		c.refuse(token, "no such offer (expired, withdrawn, or another process's)")
		return
	}
	defer v.Close()
	if err := c.send(o.pool, v, nil, token); err != nil {
		c.refuse(token, err.Error())
	}
}

// Close stops serving: offers end, connections close (Conn.Close: a peer's
// Recv returns io.EOF; the tensors a peer still holds keep their memory
// until it gives them back or goes away).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	offers, conns := s.offers, s.conns
	s.offers, s.conns = map[uint64]*offer{}, nil
	s.mu.Unlock()
	err := s.ln.Close()
	for _, o := range offers {
		o.v.Close()
	}
	// Side by side: each Close may wait for its peer's answers to retires.
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
	return err
}
