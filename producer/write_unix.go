//go:build unix

package producer

import (
	"errors"
	"syscall"
)

// writeNonblocking writes b to raw's socket until it would block: n is what it took.
func writeNonblocking(raw syscall.RawConn, b []byte) (n int, err error) {
	var werr error
	cerr := raw.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			m, e := syscall.Write(int(fd), b)
			if m > 0 {
				n += m
				b = b[m:]
			}
			switch {
			case errors.Is(e, syscall.EINTR):
				continue
			case errors.Is(e, syscall.EAGAIN):
				return true
			case e != nil:
				werr = e
				return true
			case m <= 0:
				return true
			}
		}
		return true
	})
	if werr != nil {
		return n, werr
	}
	return n, cerr
}
