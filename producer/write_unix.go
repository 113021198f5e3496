//go:build unix

package producer

import (
	"errors"
	"syscall"
)

// nonblockingWriter writes to a socket's descriptor until it would block. It is made once per
// reader: raw.Write takes a func, and a closure (or a method value) made per write would be a
// heap allocation per reader-frame, which at a thousand readers is most of the server's garbage
// and so most of its GC cycles.
type nonblockingWriter struct {
	raw syscall.RawConn
	fn  func(fd uintptr) bool // w.write, bound once
	b   []byte                // the write in progress: what is left of it
	n   int                   // what the write in progress took so far
	err error                 // its error, if any
}

func (w *nonblockingWriter) init(raw syscall.RawConn) {
	w.raw = raw
	w.fn = w.write
}

// Write writes b until the socket would block: n is what it took. One goroutine at a time (the
// reader's owner).
func (w *nonblockingWriter) Write(b []byte) (n int, err error) {
	w.b, w.n, w.err = b, 0, nil
	cerr := w.raw.Write(w.fn)
	n, err = w.n, w.err
	w.b, w.err = nil, nil
	if err != nil {
		return n, err
	}
	return n, cerr
}

func (w *nonblockingWriter) write(fd uintptr) bool {
	for len(w.b) > 0 {
		m, e := syscall.Write(int(fd), w.b)
		if m > 0 {
			w.n += m
			w.b = w.b[m:]
		}
		switch {
		case errors.Is(e, syscall.EINTR):
			continue
		case errors.Is(e, syscall.EAGAIN):
			return true
		case e != nil:
			w.err = e
			return true
		case m <= 0:
			return true
		}
	}
	return true
}
