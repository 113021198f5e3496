//go:build !unix

package producer

import "syscall"

// writeNonblocking takes nothing where the socket's descriptor cannot be written with
// syscall.Write: every frame goes out from the reader's own goroutine, with blocking writes.
func writeNonblocking(syscall.RawConn, []byte) (int, error) { return 0, nil }
