//go:build unix

package producer_test

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/rindle-sh/rindle-go/producer"
)

// BenchmarkFanoutDirect is the fan-out with wake-up as rindled serves SSE readers: each of K
// readers is a DirectWriter reader on a socket of its own, and every push wakes the writer
// goroutines (GOMAXPROCS of them), which take each woken reader's frame from its queue and
// write it. The writes go to a sink instead of write(2) (SetDirectSink), so ns/frame (per
// reader-frame) is the in-process work: the wake-ups, the writers' lists, the queues and the
// shared encoding, beside BenchmarkFanout's and BenchmarkFanoutWake's figures.
func BenchmarkFanoutDirect(b *testing.B) {
	for _, k := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			plane, s := benchPlane(b, 1<<20)
			d := producer.NewDirectWriter(producer.DirectConfig{})
			b.Cleanup(d.Close)
			var got sync.WaitGroup
			producer.SetDirectSink(d, func(p []byte) (int, error) {
				got.Done()
				return len(p), nil
			})
			for _, sub := range benchReaders(b, plane, k) {
				conn, peer := socketPair(b)
				b.Cleanup(func() { _ = peer.Close() })
				d.Start(conn, sub, 0, nil, func(error) {})
			}
			b.ReportAllocs()
			for b.Loop() {
				got.Add(k)
				if err := s.Push("tok "); err != nil {
					b.Fatal(err)
				}
				got.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/frame")
		})
	}
}

// socketPair is a connected pair of Unix stream sockets.
func socketPair(b *testing.B) (net.Conn, net.Conn) {
	b.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		b.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}
