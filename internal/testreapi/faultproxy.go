package testreapi

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// FaultProxy is a TCP proxy on 127.0.0.1 in front of a server, for fault tests:
// Cut closes every connection it carries at that moment, as a network that drops
// them; new connections are carried again. It stops when the test ends.
type FaultProxy struct {
	Addr string // host:port the clients dial

	target string
	l      net.Listener
	mu     sync.Mutex
	live   map[net.Conn]net.Conn // client side → server side
	conns  int                   // accepted so far
	wg     sync.WaitGroup
}

// StartFaultProxy listens on a free port of 127.0.0.1 and forwards each connection
// to target (host:port).
func StartFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy: listening on 127.0.0.1: %v", err)
	}
	p := &FaultProxy{Addr: l.Addr().String(), target: target, l: l, live: map[net.Conn]net.Conn{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = l.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's address as gantry's remote options take it.
func (p *FaultProxy) URL() string { return "grpc://" + p.Addr }

// Cut closes every connection the proxy carries now, both sides, and returns how
// many it closed.
func (p *FaultProxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.live)
	for c, s := range p.live {
		_ = c.Close()
		_ = s.Close()
		delete(p.live, c)
	}
	return n
}

// Conns is how many connections the proxy accepted so far.
func (p *FaultProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// Live is how many connections the proxy carries now.
func (p *FaultProxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live)
}

func (p *FaultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns++
		p.live[c] = s
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, c)
		go p.pipe(c, c, s)
	}
}

// pipe copies from src to dst until either side ends, then closes both and
// forgets the connection client.
func (p *FaultProxy) pipe(client, dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.live, client)
	p.mu.Unlock()
}
