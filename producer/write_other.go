//go:build !unix

package producer

import "syscall"

// nonblockingWriter takes nothing where the socket's descriptor cannot be written with
// syscall.Write: every frame goes out from the reader's own goroutine, with blocking writes.
type nonblockingWriter struct{}

func (*nonblockingWriter) init(syscall.RawConn) {}

func (*nonblockingWriter) Write([]byte) (int, error) { return 0, nil }
