// Package natstest runs a real NATS server with JetStream, embedded in the test process, on
// loopback: the broker of the scale-out tests. It owns the server's lifetime only.
package natstest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an embedded NATS server whose store survives Restart.
type Server struct {
	t     testing.TB
	dir   string
	port  int
	inner *server.Server
}

// Start runs a server with a fresh store; Cleanup shuts it down.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), port: -1}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: s.port, JetStream: true, StoreDir: s.dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatal("natstest: the server did not become ready")
	}
	s.inner = srv
	s.port = srv.Addr().(*net.TCPAddr).Port
}

// URL is the server's client URL; it stays the same across Restart.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Stop shuts the server down and waits for it. Idempotent.
func (s *Server) Stop() {
	if s.inner != nil {
		s.inner.Shutdown()
		s.inner.WaitForShutdown()
		s.inner = nil
	}
}

// Restart stops the server and starts it again on the same port and store, as an operator's
// restart does: clients see a disconnect, then reconnect.
func (s *Server) Restart(down time.Duration) {
	s.t.Helper()
	s.Stop()
	time.Sleep(down)
	s.start()
}

// OutMsgs is how many messages the server has sent the connections named name (nats.Name):
// what a client pulled from the broker, replies to its requests included.
func (s *Server) OutMsgs(name string) int64 {
	s.t.Helper()
	cz, err := s.inner.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		s.t.Fatalf("natstest: connz: %v", err)
	}
	var n int64
	for _, c := range cz.Conns {
		if c.Name == name {
			n += c.OutMsgs
		}
	}
	return n
}
