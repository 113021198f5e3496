//go:build unix

package producer_test

import (
	"fmt"
	"net"
	"os"
	"runtime"
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
//
// The benchmark waits for every reader's write of each push. Each writer counts its own writes
// (a counter no other goroutine touches) and says once that it has written all its readers'
// frames, as a socket would not make every write meet the others on one counter. The
// SharedCounter variant counts every write on one sync.WaitGroup, as this benchmark did
// before: its atomic add, bouncing between the writers' cores, is the harness's cost, not the
// writer's.
func BenchmarkFanoutDirect(b *testing.B) {
	for _, k := range []int{1, 100, 1000} {
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("K=%d", k)
			if shared {
				name += "/SharedCounter"
			}
			b.Run(name, func(b *testing.B) { benchFanoutDirect(b, k, shared) })
		}
	}
}

func benchFanoutDirect(b *testing.B, k int, shared bool) {
	plane, s := benchPlane(b, 1<<20)
	writers := runtime.GOMAXPROCS(0)
	d := producer.NewDirectWriter(producer.DirectConfig{Writers: writers})
	b.Cleanup(d.Close)
	// per[w] is how many of the K readers writer w serves; count[w] its writes of this push,
	// padded so that no two writers' counters share a cache line.
	per := make([]int, writers)
	for n := 1; n <= k; n++ {
		per[producer.DirectWriterOf(d, n)]++
	}
	count := make([]struct {
		n int
		_ [56]byte
	}, writers)
	var got sync.WaitGroup
	producer.SetDirectSink(d, func(w int, p []byte) (int, error) {
		if shared {
			got.Done()
			return len(p), nil
		}
		if count[w].n++; count[w].n == per[w] {
			count[w].n = 0
			got.Done()
		}
		return len(p), nil
	})
	for _, sub := range benchReaders(b, plane, k) {
		conn, peer := socketPair(b)
		b.Cleanup(func() { _ = peer.Close() })
		d.Start(conn, sub, 0, nil, func(error) {})
	}
	waits := k
	if !shared {
		waits = 0
		for _, n := range per {
			if n > 0 {
				waits++
			}
		}
	}
	pushAndWait(b, s, &got, waits, k)
}

// socketPair is a connected pair of Unix stream sockets.
func socketPair(b testing.TB) (net.Conn, net.Conn) {
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
