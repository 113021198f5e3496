//go:build unix

package producer

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// socketPair is a connected loopback TCP pair: the server's end, as a DirectWriter gets it, and
// the client's.
func socketPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return server, client
}

func nonblockingOn(t *testing.T, c net.Conn) *nonblockingWriter {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	w := &nonblockingWriter{}
	w.init(raw)
	return w
}

// A fast-path write allocates nothing: at K = 1000 readers × 100 frames/s, a closure per
// write(2) was 81% of rindled's allocation and a GC cycle every ~350 ms.
func TestNonblockingWriteAllocatesNothing(t *testing.T) {
	server, client := socketPair(t)
	w := nonblockingOn(t, server)
	frame := []byte("id: 3\ndata: {\"type\":\"chunk\",\"from\":0,\"seq\":3,\"text\":\"12;\"}\n\n")
	const writes = 200
	allocs := testing.AllocsPerRun(writes, func() {
		n, err := w.Write(frame)
		if err != nil || n != len(frame) {
			t.Fatalf("wrote %d of %d: %v", n, len(frame), err)
		}
	})
	require.Zero(t, allocs, "allocations per non-blocking write")
	// AllocsPerRun ran the func writes+1 times: every byte reached the client, in order.
	got := make([]byte, (writes+1)*len(frame))
	_, err := io.ReadFull(client, got)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat(frame, writes+1), got)
}

// Against a socket that would block, a write says exactly what it took, and the bytes it took
// are the prefix the client reads; a closed socket is an error.
func TestNonblockingWriteStopsWhereTheSocketWouldBlock(t *testing.T) {
	server, client := socketPair(t)
	w := nonblockingOn(t, server)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	var sent bytes.Buffer
	for i := 0; ; i++ {
		require.Less(t, i, 4096, "a loopback socket took 256 MiB without blocking")
		chunk[0] = byte('A' + i%26) // each chunk distinct, so a lost or repeated one shows
		n, err := w.Write(chunk)
		require.NoError(t, err)
		sent.Write(chunk[:n])
		if n < len(chunk) {
			break
		}
	}
	got := make([]byte, sent.Len())
	_, err := io.ReadFull(client, got)
	require.NoError(t, err)
	require.True(t, bytes.Equal(sent.Bytes(), got), "the client read exactly what the writes reported taking")

	require.NoError(t, client.Close())
	require.NoError(t, server.Close())
	_, err = w.Write(chunk)
	require.Error(t, err, "a write to a closed connection")
}
