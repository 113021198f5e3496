//go:build linux

package producer

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readerEnv makes this test binary the reading side of BenchmarkSendRing: it connects that
// many sockets to the address given and drains them until they close.
const readerEnv = "RINDLE_SENDRING_READER"

// TestSendRingReaderProcess is BenchmarkSendRing's reader, in a process of its own so that the
// benchmark's CPU is the sender's only. Run any other way, it does nothing.
func TestSendRingReaderProcess(t *testing.T) {
	spec := os.Getenv(readerEnv)
	if spec == "" {
		return
	}
	var n int
	var addr string
	if _, err := fmt.Sscanf(spec, "%d %s", &n, &addr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = io.Copy(io.Discard, c)
			done <- struct{}{}
		}()
	}
	for range n {
		<-done
	}
}

// BenchmarkSendRing is the cost the send ring removes: an 80-byte frame to each of 1,000
// loopback TCP sockets, read by another process, by a write(2) per socket (through RawConn, as
// the direct writer's fast path writes) or by one ring submission per 256 sockets. It reports
// the sending process's CPU per frame (user and system, from getrusage), which is what
// ns/op would hide: a round paces itself with a short sleep so the reader keeps up.
//
//	go test ./producer -run '^$' -bench SendRing -benchtime 300x
func BenchmarkSendRing(b *testing.B) {
	const sockets = 1000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSendRingReaderProcess$")
	cmd.Env = append(os.Environ(), readerEnv+"="+strconv.Itoa(sockets)+" "+ln.Addr().String())
	cmd.Stderr = os.Stderr
	require.NoError(b, cmd.Start())
	conns := make([]net.Conn, 0, sockets)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
		_ = cmd.Wait()
	}()
	raws := make([]syscall.RawConn, 0, sockets)
	fds := make([]int, 0, sockets)
	for range sockets {
		c, err := ln.Accept()
		require.NoError(b, err)
		conns = append(conns, c)
		raw, err := c.(*net.TCPConn).SyscallConn()
		require.NoError(b, err)
		raws = append(raws, raw)
		require.NoError(b, raw.Control(func(fd uintptr) { fds = append(fds, int(fd)) }))
	}
	frame := append(bytes.Repeat([]byte("x"), 79), '\n')
	cpu := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.Run("write", func(b *testing.B) {
		writers := make([]nonblockingWriter, sockets)
		for i := range writers {
			writers[i].init(raws[i])
		}
		c0 := cpu()
		for b.Loop() {
			for i := range writers {
				n, err := writers[i].Write(frame)
				require.NoError(b, err)
				require.Equal(b, len(frame), n, "the socket took the frame")
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.ReportMetric(float64((cpu()-c0).Nanoseconds())/float64(b.N*sockets), "cpu-ns/frame")
	})
	b.Run("ring", func(b *testing.B) {
		ring, err := newSendRing(uringDefaultEntries)
		if err != nil {
			b.Skip(err)
		}
		defer ring.close()
		c0 := cpu()
		for b.Loop() {
			for i := 0; i < sockets; {
				for ; i < sockets && ring.free() > 0; i++ {
					ring.send(fds[i], frame, uint64(i))
				}
				require.NoError(b, ring.submit(func(_ uint64, res int32) {
					if int(res) != len(frame) {
						b.Errorf("a send gave %d", res)
					}
				}))
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.ReportMetric(float64((cpu()-c0).Nanoseconds())/float64(b.N*sockets), "cpu-ns/frame")
	})
}
