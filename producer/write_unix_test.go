//go:build unix

package producer_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// A fast-path write allocates nothing: at K = 1000 readers × 100 frames/s, a closure per
// write(2) was 81% of rindled's allocation and a GC cycle every ~350 ms.
func TestNonblockingWriteAllocatesNothing(t *testing.T) {
	server, client := socketPair(t)
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	write, err := producer.NonblockingWrite(server)
	require.NoError(t, err)
	frame := []byte("id: 3\ndata: {\"type\":\"chunk\",\"from\":0,\"seq\":3,\"text\":\"12;\"}\n\n")
	const writes = 200
	allocs := testing.AllocsPerRun(writes, func() {
		n, err := write(frame)
		if err != nil || n != len(frame) {
			t.Fatalf("wrote %d of %d: %v", n, len(frame), err)
		}
	})
	require.Zero(t, allocs, "allocations per non-blocking write")
	// AllocsPerRun ran the func writes+1 times: every byte reached the client, in order.
	got := make([]byte, (writes+1)*len(frame))
	_, err = io.ReadFull(client, got)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat(frame, writes+1), got)
}

// Against a socket that would block, a write says exactly what it took, and the bytes it took
// are the prefix the client reads; a closed socket is an error.
func TestNonblockingWriteStopsWhereTheSocketWouldBlock(t *testing.T) {
	server, client := socketPair(t)
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	write, err := producer.NonblockingWrite(server)
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	var sent bytes.Buffer
	for i := 0; ; i++ {
		require.Less(t, i, 4096, "a socket took 256 MiB without blocking")
		chunk[0] = byte('A' + i%26) // each chunk distinct, so a lost or repeated one shows
		n, err := write(chunk)
		require.NoError(t, err)
		sent.Write(chunk[:n])
		if n < len(chunk) {
			break
		}
	}
	got := make([]byte, sent.Len())
	_, err = io.ReadFull(client, got)
	require.NoError(t, err)
	require.True(t, bytes.Equal(sent.Bytes(), got), "the client read exactly what the writes reported taking")

	require.NoError(t, client.Close())
	require.NoError(t, server.Close())
	_, err = write(chunk)
	require.Error(t, err, "a write to a closed connection")
}
