package faultnet_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rindle-sh/rindle-go/internal/faultnet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves lines back until the listener closes.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return line, err
}

func TestProxyFaults(t *testing.T) {
	p, err := faultnet.New(faultnet.TCP(echo(t)))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	got, err := roundTrip(c, r, "one", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "one\n", got)

	// Blackhole: nothing comes back, then the held bytes flow on after Restore.
	p.Blackhole()
	_, err = roundTrip(c, r, "two", 200*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a blackholed server does not answer")
	p.Restore()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "two\n", got)

	// Down: the connection is reset, and a new one is closed at once.
	p.Cut()
	_, err = roundTrip(c, r, "three", 5*time.Second)
	require.Error(t, err)
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = roundTrip(c2, bufio.NewReader(c2), "four", 5*time.Second)
	require.Error(t, err, "refused while down")
	_ = c2.Close()

	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	got, err = roundTrip(c3, bufio.NewReader(c3), "five", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "five\n", got)
}
