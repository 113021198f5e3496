// Package faultnet is a TCP proxy that injects network faults between a program under test and
// a real server (PostgreSQL on its Unix socket, NATS on loopback): a server that goes down (Cut:
// every connection reset, new ones refused) and a server that stops answering (Blackhole:
// connections stay open and nothing flows either way until Restore). It is for tests only.
//
// It owns its listener, one goroutine per direction of each proxied connection, and nothing
// else; Close stops them all. Toxiproxy does the same over TCP, but cannot dial the Unix socket
// the test clusters listen on, and brings its own HTTP and metrics server along.
package faultnet

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// Mode is what the proxy does with traffic.
type Mode int

// The modes.
const (
	Pass      Mode = iota // forward everything
	Down                  // reset every connection, refuse new ones
	Blackhole             // accept, hold, forward nothing until Restore
)

// Proxy forwards connections from a loopback listener to an upstream.
type Proxy struct {
	ln   net.Listener
	dial func(ctx context.Context) (net.Conn, error)

	mu    sync.Mutex
	mode  Mode
	gate  chan struct{} // closed while traffic may flow; replaced by Blackhole
	links map[*link]struct{}
	wg    sync.WaitGroup
	done  chan struct{}
}

type link struct{ a, b net.Conn }

func (l *link) close() {
	_ = l.a.Close()
	_ = l.b.Close()
}

// Unix dials a Unix socket.
func Unix(path string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// TCP dials a TCP address.
func TCP(addr string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// New listens on a free loopback port and forwards to what dial reaches.
func New(dial func(ctx context.Context) (net.Conn, error)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{ln: ln, dial: dial, gate: gate, links: map[*link]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut is a server going down: every proxied connection is closed, and new ones are accepted
// and closed at once, until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.setModeLocked(Down)
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		l.close()
	}
}

// Blackhole is a server that stops answering: connections stay open, new ones are accepted,
// and no byte moves in either direction until Restore, when the held bytes flow on.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setModeLocked(Blackhole)
}

// Restore passes traffic again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setModeLocked(Pass)
}

func (p *Proxy) setModeLocked(m Mode) {
	if m == p.mode {
		return
	}
	if p.mode == Blackhole {
		close(p.gate)
	}
	if m == Blackhole {
		p.gate = make(chan struct{})
	}
	p.mode = m
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	close(p.done)
	p.setModeLocked(Pass) // release held copies
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for l := range links {
		l.close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == Down {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	// While blackholed, even the upstream dial waits: the server "does not answer".
	if !p.wait(ctx) {
		cancel()
		_ = c.Close()
		return
	}
	up, err := p.dial(ctx)
	cancel()
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{a: c, b: up}
	p.mu.Lock()
	if p.mode == Down {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(up, c); l.close() })
	wg.Go(func() { p.pump(c, up); l.close() })
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// wait blocks while the proxy is blackholed; false once it is closed.
func (p *Proxy) wait(ctx context.Context) bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-ctx.Done():
		return false
	}
}

// pump copies src to dst, holding each read at the gate while blackholed.
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for {
				p.mu.Lock()
				gate := p.gate
				p.mu.Unlock()
				select {
				case <-gate:
				case <-p.done:
					return
				}
				p.mu.Lock()
				still := p.gate == gate
				p.mu.Unlock()
				if still {
					break
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
