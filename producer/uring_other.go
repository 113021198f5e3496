//go:build !linux

package producer

import "errors"

// sendRing is an io_uring of socket sends, which only Linux has: elsewhere the direct writer
// writes each reader with write(2).
type sendRing struct{}

var errNoRing = errors.New("producer: io_uring is not available")

const uringDefaultEntries = 256

func newSendRing(uint32) (*sendRing, error)                 { return nil, errNoRing }
func (*sendRing) free() int                                 { return 0 }
func (*sendRing) send(int, []byte, uint64)                  {}
func (*sendRing) submit(func(user uint64, res int32)) error { return errNoRing }
func (*sendRing) close()                                    {}
