//go:build !linux

package producer

import "errors"

// hangups is the Linux epoll watch of direct readers' sockets; elsewhere each reader's own
// goroutine waits in a read instead.
type hangups struct{}

func newHangups() (*hangups, error)         { return nil, errors.ErrUnsupported }
func (h *hangups) watch(*directReader) bool { return false }
func (h *hangups) forget(*directReader)     {}
func (h *hangups) run()                     {}
func (h *hangups) close()                   {}
