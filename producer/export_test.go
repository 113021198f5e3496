package producer

import (
	"net"
	"syscall"
)

// SetDirectSink makes d's fast writes go to sink instead of the sockets (BenchmarkFanoutDirect).
// writer is the index of the writer goroutine writing (0 to Writers-1): each calls sink from
// its own goroutine only.
func SetDirectSink(d *DirectWriter, sink func(writer int, p []byte) (int, error)) { d.sink = sink }

// DirectWriterOf is the writer (as SetDirectSink numbers them) that the n-th reader started on
// d (counting from 1) goes to.
func DirectWriterOf(d *DirectWriter, n int) int { return d.shardOf(n) }

// NonblockingWrite is the direct writer's non-blocking write to c's socket, set up once as a
// reader's is: each call writes until the socket would block and says what it took.
func NonblockingWrite(c net.Conn) (func([]byte) (int, error), error) {
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	w := &nonblockingWriter{}
	w.init(raw)
	return w.Write, nil
}

// SetRingFault makes d's ring submissions ask fault first: an error fails the submission as a
// failed io_uring_enter would, before any of its sends reach the kernel.
func SetRingFault(d *DirectWriter, fault func() error) { d.ringFault = fault }

// ErrRingFailed ends a reader whose send was in a ring submission that failed.
var ErrRingFailed = errRingFailed

// Draining reports whether s has a checkpoint drain running (or about to).
func Draining(s *LiveStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// ReadyBatchLen is how many readers of one fan-out a writer's list gets at a time.
const ReadyBatchLen = readyBatchLen
