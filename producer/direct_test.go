package producer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// directServer serves a plane's streams through a DirectWriter, as httpapi does for an HTTP/1.x
// reader: it reads the request, subscribes, and hands the connection to Start with the
// response head; the goroutine that accepted it ends there. wrap, if set, wraps each accepted
// connection. served receives each reader's result (its done).
func directServer(t *testing.T, plane *producer.Plane, d *producer.DirectWriter, wrap func(net.Conn) net.Conn) (url string, served chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	served = make(chan error, 1024)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					_ = conn.Close()
					return
				}
				from, _ := producer.ResumeFromRequest(req)
				sub, err := plane.Subscribe(context.Background(), producer.SubscribeInput{StreamID: req.URL.Query().Get("id"), From: from})
				if err != nil {
					_ = conn.Close()
					return
				}
				if wrap != nil {
					conn = wrap(conn)
				}
				head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
				d.Start(conn, sub, from, []byte(head), func(err error) { served <- err })
			}()
		}
	}()
	return "http://" + ln.Addr().String(), served
}

// readAll reads SSE frames until the terminal one, returning them and the comments seen.
func readFrames(t *testing.T, r *bufio.Reader) (frames []producer.Frame, comments int) {
	t.Helper()
	for {
		ev, err := streamtest.ReadSSE(r)
		require.NoError(t, err)
		if ev.Comment != "" {
			comments++
			continue
		}
		var f producer.Frame
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &f))
		frames = append(frames, f)
		if f.Terminal() {
			return frames, comments
		}
	}
}

func newDirect(t *testing.T, cfg producer.DirectConfig) *producer.DirectWriter {
	t.Helper()
	d := producer.NewDirectWriter(cfg)
	t.Cleanup(d.Close)
	return d
}

// Every reader gets every frame, in order, from the writers' non-blocking writes, and the
// stream's end closes each connection after its end frame.
func TestDirectWriterDeliversEveryFrameInOrder(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("PlainWrites=%v", plain), func(t *testing.T) {
			t.Parallel()
			deliversEveryFrameInOrder(t, plain)
		})
	}
}

func deliversEveryFrameInOrder(t *testing.T, plain bool) {
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	// No keep-alive falls in the test (a ping is a write(2) even with the ring).
	d := newDirect(t, producer.DirectConfig{Writers: 2, PlainWrites: plain, KeepAlive: time.Hour})
	url, served := directServer(t, w.plane, d, nil)
	// More readers than a writer takes in one part of a fan-out's batch (readyBatchLen): a
	// fan-out puts each writer's readers on its list in parts, and the last part at its end.
	const readers, pushes = 150, 300
	require.Greater(t, readers/2, producer.ReadyBatchLen)
	bodies := make([]*bufio.Reader, readers)
	for i := range readers {
		resp, err := http.Get(url + "/?id=m")
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		bodies[i] = bufio.NewReader(resp.Body)
	}
	eventually.True(t, func() bool { return d.Stats().Readers == readers })
	var want strings.Builder
	for i := range pushes {
		piece := fmt.Sprintf("δ%d😀 ", i)
		want.WriteString(piece)
		require.NoError(t, s.Push(piece))
	}
	require.NoError(t, s.Close(t.Context()))
	for _, b := range bodies {
		frames, _ := readFrames(t, b)
		text, last := streamtest.Replay(t, "", frames)
		require.Equal(t, want.String(), text)
		require.Equal(t, producer.FrameEnd, last.Type)
		_, err := b.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the connection closes after the end frame")
	}
	for range readers {
		require.NoError(t, <-served)
	}
	st := d.Stats()
	require.Zero(t, st.Readers)
	require.Positive(t, st.FastWrites, "the writers wrote frames straight to the sockets")
	switch err := d.RingError(); {
	case plain:
		require.ErrorContains(t, err, "PlainWrites")
		require.Zero(t, st.RingSends)
	case err != nil:
		t.Logf("no send ring on this kernel (%v): the frames went by write(2)", err)
		require.Zero(t, st.RingSends)
	default:
		require.Positive(t, st.RingSends, "the writers sent through the ring")
		require.LessOrEqual(t, st.FastWrites, st.RingSends, "every fast write went through the ring")
	}
}

// A reader that stops reading fills its socket: the rest goes out from its Serve goroutine,
// blocking, and once it reads again it gets everything, in order, and returns to the fast
// path. One that never reads again is ended with stale when its bounded queue overflows.
func TestDirectWriterSlowReaderCatchesUpOrGoesStale(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.MaxQueuedFrames = 64; c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 1})
	url, _ := directServer(t, w.plane, d, nil)
	slow, err := http.Get(url + "/?id=m")
	require.NoError(t, err)
	defer slow.Body.Close()
	stuck, err := http.Get(url + "/?id=m")
	require.NoError(t, err)
	defer stuck.Body.Close()
	eventually.True(t, func() bool { return d.Stats().Readers == 2 })

	// Frames of 16 KiB, one at a time, each pushed once the last went to both readers (a fast
	// write, or a write that would block and hands the reader to its own goroutine), until a
	// socket would block; then 32 more: within the queue's 64, since both queues were empty
	// then. Pushing without waiting raced the writer: a queue could overflow before its socket
	// filled (the reader went stale), and with both readers gone the loop pushed until memory
	// ran out.
	big := strings.Repeat("x", 16<<10)
	var want strings.Builder
	for pushes := 0; d.Stats().Handoffs == 0; pushes++ {
		require.Less(t, pushes, 4096, "64 MiB pushed, and no socket would block")
		before := d.Stats()
		require.NoError(t, s.Push(big))
		want.WriteString(big)
		eventually.True(t, func() bool {
			now := d.Stats()
			return (now.FastWrites-before.FastWrites)+(now.Handoffs-before.Handoffs) >= 2
		}, "push %d went to both readers", pushes)
	}
	for range 32 {
		require.NoError(t, s.Push(big))
		want.WriteString(big)
	}
	r := bufio.NewReader(slow.Body)
	var frames []producer.Frame
	for got := producer.Seq(0); got < producer.Seq(want.Len()); {
		ev, err := streamtest.ReadSSE(r)
		require.NoError(t, err)
		if ev.Comment != "" {
			continue
		}
		var f producer.Frame
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &f))
		require.False(t, f.Terminal(), "the slow reader caught up within its queue: %+v", f)
		frames = append(frames, f)
		if f.Type == producer.FrameChunk {
			got = f.Seq
		}
	}
	fast := d.Stats().FastWrites
	require.NoError(t, s.Push("tail"))
	want.WriteString("tail")
	ev, err := streamtest.ReadSSE(r)
	require.NoError(t, err)
	var f producer.Frame
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &f))
	frames = append(frames, f, producer.Frame{Type: producer.FrameEnd})
	text, _ := streamtest.Replay(t, "", frames)
	require.Equal(t, want.String(), text, "every frame, in order")
	eventually.True(t, func() bool { return d.Stats().FastWrites > fast }, "back on the fast path")

	// The stuck reader never read: its queue overflowed, and it ends with stale.
	for range 200 {
		require.NoError(t, s.Push(big))
	}
	frames, _ = readFrames(t, bufio.NewReader(stuck.Body))
	require.Equal(t, producer.FrameStale, frames[len(frames)-1].Type)
}

// An idle reader gets a keep-alive comment from the writers.
func TestDirectWriterKeepsAnIdleReaderAlive(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 1, KeepAlive: 20 * time.Millisecond})
	url, _ := directServer(t, w.plane, d, nil)
	resp, err := http.Get(url + "/?id=m")
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		ev, err := streamtest.ReadSSE(r)
		require.NoError(t, err)
		if ev.Comment == ": ping" {
			return
		}
	}
}

// A client that goes away is noticed at the next write: Serve returns and the subscription
// detaches. Close ends every reader still served.
func TestDirectWriterLetsGoOfGoneClientsAndCloses(t *testing.T) {
	t.Parallel()
	var subscribers atomic.Int64
	w := newWorld(t, func(c *producer.Config) {
		c.CheckpointChars = 1 << 30
		c.MaxQueuedFrames = 1 << 20 // no reader here goes stale, however far the pushes run ahead
		c.OnSubscriberFunc = func(d int, _ bool) { subscribers.Add(int64(d)) }
	})
	s := w.open(t, "m")
	d := producer.NewDirectWriter(producer.DirectConfig{Writers: 1})
	defer d.Close()
	url, served := directServer(t, w.plane, d, nil)
	gone, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	_, err = gone.Write([]byte("GET /?id=m HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	kept, err := http.Get(url + "/?id=m")
	require.NoError(t, err)
	defer kept.Body.Close()
	eventually.True(t, func() bool { return d.Stats().Readers == 2 })
	require.NoError(t, gone.Close())
	var result error
	for pushed := 0; ; pushed++ {
		require.NoError(t, s.Push("x"))
		select {
		case result = <-served:
		default:
			continue
		}
		break
	}
	require.Error(t, result, "the gone client's write failed")
	eventually.True(t, func() bool { return subscribers.Load() == 1 }, "its subscription detached")

	d.Close()
	require.Error(t, <-served)
	_, err = io.ReadAll(kept.Body)
	require.NoError(t, err, "the kept reader's response ends at the close")
	eventually.True(t, func() bool { return subscribers.Load() == 0 })
}

// noSyscall hides a connection's descriptor, as a wrapping listener would.
type noSyscall struct{ net.Conn }

// Property: any number of readers, each pausing its reads at random counts of frames (seeded,
// so a failure replays), some behind a connection without a descriptor, get exactly the pushed
// text, in order, ending with end, whatever the writers and the blocking path did.
func TestDirectWriterRandomSchedules(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 99))
			w := newWorld(t, func(c *producer.Config) { c.MaxQueuedFrames = 1 << 16; c.CheckpointChars = 1 << 30 })
			s := w.open(t, "m")
			d := newDirect(t, producer.DirectConfig{Writers: 1 + rng.IntN(3), PlainWrites: seed%2 == 1})
			wrapped := rng.IntN(2) == 0
			url, served := directServer(t, w.plane, d, func(c net.Conn) net.Conn {
				if wrapped {
					return noSyscall{c}
				}
				return c
			})
			readers := 2 + rng.IntN(6)
			var wg sync.WaitGroup
			texts := make([]string, readers)
			errs := make([]error, readers)
			for i := range readers {
				resp, err := http.Get(url + "/?id=m")
				require.NoError(t, err)
				pauseEvery := 1 + rng.IntN(50)
				wg.Go(func() {
					defer resp.Body.Close()
					texts[i], errs[i] = readText(bufio.NewReader(resp.Body), func(n int) bool {
						if n%pauseEvery == 0 {
							// A pause: the reader takes nothing until the pusher moved on.
							runtimeYield(pauseEvery)
						}
						return true
					})
				})
			}
			eventually.True(t, func() bool { return d.Stats().Readers == int64(readers) })
			var want strings.Builder
			for range 200 + rng.IntN(300) {
				piece := strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(2000)) + "😀"
				want.WriteString(piece)
				require.NoError(t, s.Push(piece))
			}
			require.NoError(t, s.Close(t.Context()))
			wg.Wait()
			for i := range readers {
				require.NoError(t, errs[i], "reader %d", i)
				require.Equal(t, want.String(), texts[i], "reader %d", i)
				require.NoError(t, <-served)
			}
		})
	}
}

// runtimeYield lets other goroutines run n times (a pause counted in scheduling turns, not
// time).
func runtimeYield(n int) {
	for range n {
		runtime.Gosched()
	}
}

// readText reads frames from r up to the end frame and returns the text they carry (for reader
// goroutines: no testing.TB). before(n) runs before frame n is read; false stops the reading
// there, with the text so far and no error. A terminal frame other than end is an error.
func readText(r *bufio.Reader, before func(n int) bool) (string, error) {
	var frames []producer.Frame
	for n := 0; ; n++ {
		if !before(n) {
			return replayQuiet(frames)
		}
		f, err := streamtest.ReadFrame(r)
		if err != nil {
			return "", err
		}
		frames = append(frames, f)
		if f.Terminal() {
			if f.Type != producer.FrameEnd {
				return "", errors.New("ended with " + string(f.Type))
			}
			return replayQuiet(frames)
		}
	}
}

// replayQuiet is streamtest.Replay without a testing.TB (for reader goroutines): the text the
// frames carry, checking that chunks are contiguous.
func replayQuiet(frames []producer.Frame) (string, error) {
	var b strings.Builder
	var at producer.Seq
	for _, f := range frames {
		switch f.Type {
		case producer.FrameOpen:
			at = f.From
		case producer.FrameChunk:
			if f.From != at {
				return b.String(), fmt.Errorf("chunk from %d, expected %d", f.From, at)
			}
			b.WriteString(f.Text)
			at = f.Seq
		}
	}
	return b.String(), nil
}

// directGoroutines counts the goroutines that serve direct readers: the reader's own (a slow
// reader's blocking writes, or a read waiting for the hang-up) and Serve's callers.
func directGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "producer.(*directReader)") || strings.Contains(g, "producer.(*DirectWriter).Serve") {
			count++
		}
	}
	return count
}

// Readers waiting for frames hold no goroutine each (on Linux the hang-up watch is one epoll
// set for all of them): with 200 readers attached and idle, no goroutine serves any one of
// them, and frames still reach every reader from the writers. Not parallel: it counts the
// process's goroutines.
func TestDirectWriterHoldsNoGoroutinePerWaitingReader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the hang-up watch without a goroutine per reader is Linux's epoll")
	}
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 2})
	url, _ := directServer(t, w.plane, d, nil)
	const readers = 200
	conns := make([]*bufio.Reader, readers)
	for i := range readers {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.Write([]byte("GET /?id=m HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		conns[i] = bufio.NewReader(c)
	}
	eventually.True(t, func() bool { return d.Stats().Readers == readers })
	eventually.True(t, func() bool { return directGoroutines() == 0 },
		"no goroutine per waiting reader (%d found)", directGoroutines())
	require.NoError(t, s.Push("hello"))
	for i, r := range conns {
		resp, err := http.ReadResponse(r, nil) //nolint:bodyclose // the body is the event stream, read from r; the connection closes in cleanup
		require.NoError(t, err, "reader %d", i)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var got []producer.Frame
		for len(got) < 2 {
			f, err := streamtest.ReadFrame(r)
			require.NoError(t, err, "reader %d", i)
			got = append(got, f)
		}
		require.Equal(t, producer.FrameOpen, got[0].Type)
		require.Equal(t, "hello", got[1].Text, "reader %d", i)
	}
}

// A client that goes away while nothing is pushed is let go at once: its reader ends with the
// client's hang-up and its subscription detaches, with no write to fail. Many come and go; the
// writer keeps none of them.
func TestDirectWriterLetsGoOfAClientThatHangsUpWhileIdle(t *testing.T) {
	t.Parallel()
	var subscribers atomic.Int64
	w := newWorld(t, func(c *producer.Config) {
		c.OnSubscriberFunc = func(d int, _ bool) { subscribers.Add(int64(d)) }
	})
	w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 1})
	url, served := directServer(t, w.plane, d, nil)
	for range 50 {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		require.NoError(t, err)
		_, err = c.Write([]byte("GET /?id=m HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		r := bufio.NewReader(c)
		_, err = http.ReadResponse(r, nil) //nolint:bodyclose // the body is the event stream, read from r; the connection closes below
		require.NoError(t, err)
		f, err := streamtest.ReadFrame(r)
		require.NoError(t, err)
		require.Equal(t, producer.FrameOpen, f.Type)
		require.NoError(t, c.Close())
		err = <-served
		require.Error(t, err)
		require.Contains(t, err.Error(), "the client went away")
	}
	require.Zero(t, d.Stats().Readers)
	eventually.True(t, func() bool { return subscribers.Load() == 0 }, "every subscription detached")
}

// Serve is Start that waits: it returns when ctx ends, having closed the connection.
func TestDirectWriterServeEndsWithItsContext(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 1})
	server, client := net.Pipe()
	defer client.Close()
	ctx, cancel := context.WithCancelCause(t.Context())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, server, w.subscribe(t, "m", 0), 0, nil) }()
	r := bufio.NewReader(client)
	f, err := streamtest.ReadFrame(r)
	require.NoError(t, err)
	require.Equal(t, producer.FrameOpen, f.Type)
	stop := errors.New("stop")
	cancel(stop)
	require.ErrorIs(t, <-served, stop)
	_, err = io.ReadAll(r)
	require.NoError(t, err, "the connection closed")
}

// Property: readers that hang up at a random frame (some mid-write, some behind a socket that
// would block) are let go, each exactly once, while the others still get exactly the pushed
// text, in order; afterwards the writer serves nobody and every subscription has detached.
// Seeded, so a failure replays.
func TestDirectWriterRandomHangUps(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			var subscribers atomic.Int64
			w := newWorld(t, func(c *producer.Config) {
				c.MaxQueuedFrames = 1 << 16
				c.CheckpointChars = 1 << 30
				c.OnSubscriberFunc = func(d int, _ bool) { subscribers.Add(int64(d)) }
			})
			s := w.open(t, "m")
			d := newDirect(t, producer.DirectConfig{Writers: 1 + rng.IntN(3), PlainWrites: seed%2 == 1})
			url, served := directServer(t, w.plane, d, nil)
			readers := 4 + rng.IntN(8)
			leaveAt := make([]int, readers) // frames read before hanging up; -1 stays to the end
			for i := range leaveAt {
				leaveAt[i] = -1
				if rng.IntN(2) == 0 {
					leaveAt[i] = rng.IntN(40)
				}
			}
			var wg sync.WaitGroup
			texts := make([]string, readers)
			errs := make([]error, readers)
			for i := range readers {
				c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
				require.NoError(t, err)
				_, err = c.Write([]byte("GET /?id=m HTTP/1.1\r\nHost: x\r\n\r\n"))
				require.NoError(t, err)
				wg.Go(func() {
					defer c.Close()
					r := bufio.NewReader(c)
					if _, err := http.ReadResponse(r, nil); err != nil { //nolint:bodyclose // the body is the event stream, read from r
						errs[i] = err
						return
					}
					// Hangs up (the deferred Close) before frame leaveAt[i].
					texts[i], errs[i] = readText(r, func(n int) bool { return n != leaveAt[i] })
				})
			}
			eventually.True(t, func() bool { return d.Stats().Readers+int64(len(served)) == int64(readers) })
			var want strings.Builder
			for range 100 + rng.IntN(200) {
				piece := strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(3000))
				want.WriteString(piece)
				require.NoError(t, s.Push(piece))
			}
			require.NoError(t, s.Close(t.Context()))
			wg.Wait()
			for i := range readers {
				if leaveAt[i] >= 0 {
					continue
				}
				require.NoError(t, errs[i], "reader %d", i)
				require.Equal(t, want.String(), texts[i], "reader %d", i)
			}
			ended, stayers := 0, 0
			for i := range readers {
				if leaveAt[i] < 0 {
					stayers++
				}
				if <-served == nil { // each reader's done, once: nil after its end frame
					ended++
				}
			}
			require.GreaterOrEqual(t, ended, stayers, "every reader that stayed ended with its end frame")
			eventually.True(t, func() bool { return d.Stats().Readers == 0 && subscribers.Load() == 0 })
			require.Empty(t, served, "no reader ended twice")
		})
	}
}

// A client that reads its end frame and hangs up at once has had everything: its reader ends
// with nil, never with the hang-up the watch may see before the writer finishes the reader.
func TestDirectWriterAnEndReadThenAHangUpIsAnEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 30 })
	d := newDirect(t, producer.DirectConfig{Writers: 2})
	url, served := directServer(t, w.plane, d, nil)
	for round := range 20 {
		id := fmt.Sprintf("m%d", round)
		s := w.open(t, id)
		const readers = 20
		var wg sync.WaitGroup
		for range readers {
			c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			require.NoError(t, err)
			_, err = c.Write([]byte("GET /?id=" + id + " HTTP/1.1\r\nHost: x\r\n\r\n"))
			require.NoError(t, err)
			wg.Go(func() {
				defer c.Close() // at once after the end frame
				r := bufio.NewReader(c)
				if _, err := http.ReadResponse(r, nil); err != nil { //nolint:bodyclose // the body is the event stream, read from r
					return
				}
				for {
					f, err := streamtest.ReadFrame(r)
					if err != nil || f.Terminal() {
						return
					}
				}
			})
		}
		eventually.True(t, func() bool { return d.Stats().Readers == readers })
		require.NoError(t, s.Push("x"))
		require.NoError(t, s.Close(t.Context()))
		wg.Wait()
		for i := range readers {
			require.NoError(t, <-served, "round %d, reader %d: it read its end frame", round, i)
		}
	}
}

// A ring submission that fails leaves its sends in doubt: each reader in it is ended (its
// client holds a prefix without a gap and resumes from its end), and the writers go on with
// write(2), so the other readers, and later ones, get every frame. The fault is the second
// submission's after the readers have their response heads, by count.
func TestDirectWriterRingFailureEndsTheReadersInDoubt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 1})
	if err := d.RingError(); err != nil {
		t.Skip("no send ring on this kernel:", err)
	}
	var submissions, failAt atomic.Int64
	failAt.Store(-1)
	producer.SetRingFault(d, func() error {
		if submissions.Add(1) == failAt.Load() {
			return errors.New("injected: io_uring_enter failed")
		}
		return nil
	})
	url, served := directServer(t, w.plane, d, nil)
	var want strings.Builder
	push := func(piece string) {
		want.WriteString(piece)
		require.NoError(t, s.Push(piece))
	}
	type result struct {
		text string
		err  error
	}
	read := func(n int) chan result {
		out := make(chan result, n)
		for range n {
			resp, err := http.Get(url + "/?id=m") //nolint:bodyclose // closed by the goroutine that reads it
			require.NoError(t, err)
			go func() {
				defer resp.Body.Close()
				r := bufio.NewReader(resp.Body)
				var frames []producer.Frame
				for {
					f, err := streamtest.ReadFrame(r)
					if err != nil {
						text, gap := replayQuiet(frames)
						out <- result{text, errors.Join(err, gap)}
						return
					}
					frames = append(frames, f)
					if f.Terminal() {
						text, gap := replayQuiet(frames)
						out <- result{text, gap}
						return
					}
				}
			}()
		}
		return out
	}
	first := read(3) // returns once the three have their response heads
	eventually.True(t, func() bool { return d.Stats().Readers == 3 })
	failAt.Store(submissions.Load() + 2)
	for i := 0; submissions.Load() < failAt.Load(); i++ {
		before := submissions.Load()
		push(fmt.Sprintf("δ%d ", i))
		eventually.True(t, func() bool { return submissions.Load() > before || d.Stats().Readers < 3 })
	}
	ringSends := d.Stats().RingSends
	later := read(2)
	eventually.True(t, func() bool { return d.Stats().Readers+int64(len(served)) == 5 })
	for i := range 50 {
		push(fmt.Sprintf("ε%d ", i))
	}
	require.NoError(t, s.Close(t.Context()))

	inDoubt := 0
	for range 5 {
		if err := <-served; err != nil {
			require.ErrorIs(t, err, producer.ErrRingFailed)
			inDoubt++
		}
	}
	require.Positive(t, inDoubt, "the failed submission's readers ended")
	for range 3 {
		got := <-first
		require.True(t, strings.HasPrefix(want.String(), got.text), "a reader holds a prefix of the text: %q", got.text)
		if got.err != nil {
			require.NotContains(t, got.err.Error(), "expected", "no gap in what a reader in doubt got")
			continue
		}
		require.Equal(t, want.String(), got.text, "a reader outside the failed submission got everything")
	}
	for range 2 {
		got := <-later
		require.NoError(t, got.err)
		require.Equal(t, want.String(), got.text, "a reader after the failure got everything, by write(2)")
	}
	st := d.Stats()
	require.Equal(t, ringSends, st.RingSends, "no send went through the broken ring")
	require.Equal(t, failAt.Load(), submissions.Load(), "the ring was not used again")
}

// A writer lets go of a reader in the same hold of its queue's lock that finds the queue
// empty, before it writes what it gathered. A write that then falls short keeps its bytes
// ahead of every frame queued meanwhile: a reader that a frame made the writer's again has
// them written first on the writer's next turn, one that nothing took goes to its own
// goroutine, and one that ended meanwhile is left ended. The sink writes to the reader's real
// socket, short when the schedule says so, so the client reads exactly what went out.
func TestDirectWriterAShortWriteAfterLettingGo(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	d := newDirect(t, producer.DirectConfig{Writers: 1, KeepAlive: time.Hour})

	// The schedule: each sink call takes the next step (all of p when none is left).
	type step int
	const (
		pushThenHalf step = iota + 1 // a frame is queued during the write, which takes half
		half                         // the write takes half, and nothing is queued meanwhile
		endThenHalf                  // the client hangs up and its reader ends, then a short write
	)
	var (
		mu     sync.Mutex
		steps  []step
		write  func([]byte) (int, error) // the current reader's socket
		client net.Conn
	)
	plan := func(st ...step) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, st...)
	}
	url, served := directServer(t, w.plane, d, func(c net.Conn) net.Conn {
		nb, err := producer.NonblockingWrite(c)
		if err != nil {
			panic(err)
		}
		mu.Lock()
		write = nb
		mu.Unlock()
		return c
	})
	ended := make(chan error, 1)
	producer.SetDirectSink(d, func(_ int, p []byte) (int, error) {
		mu.Lock()
		var st step
		if len(steps) > 0 {
			st, steps = steps[0], steps[1:]
		}
		write, client := write, client
		mu.Unlock()
		switch st {
		case pushThenHalf:
			if err := s.Push("B😀"); err != nil {
				return 0, err
			}
			return write(p[:len(p)/2])
		case half:
			return write(p[:len(p)/2])
		case endThenHalf:
			_ = client.Close()
			ended <- <-served // the hang-up watch ended the reader: nobody owned it
			return len(p) / 2, nil
		}
		return write(p)
	})
	connect := func() func() producer.Frame {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		mu.Lock()
		client = c
		mu.Unlock()
		_, err = c.Write([]byte("GET /?id=m HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		r := bufio.NewReader(c)
		_, err = http.ReadResponse(r, nil) //nolint:bodyclose // the body is the event stream, read from r
		require.NoError(t, err)
		read := func() producer.Frame {
			t.Helper()
			f, err := streamtest.ReadFrame(r)
			require.NoError(t, err)
			return f
		}
		require.Equal(t, producer.FrameOpen, read().Type)
		return read
	}

	read := connect()
	// A frame queued during the short write: the rest of A, then B, on the fast path.
	plan(pushThenHalf)
	require.NoError(t, s.Push("A😀"))
	a, b := read(), read()
	require.Equal(t, []string{"A😀", "B😀"}, []string{a.Text, b.Text})
	require.Zero(t, d.Stats().Handoffs, "a reader on the writer's list stays on the fast path")
	// Nothing queued during the short write: its own goroutine writes the rest.
	plan(half)
	require.NoError(t, s.Push("C😀"))
	require.Equal(t, "C😀", read().Text)
	require.Equal(t, uint64(1), d.Stats().Handoffs)
	mu.Lock()
	require.Empty(t, steps, "every step ran")
	_ = client.Close()
	mu.Unlock()
	require.ErrorContains(t, <-served, "the client went away")

	// The reader ended during the short write: it stays ended, with the hang-up's error, and
	// goes to no goroutine.
	read = connect()
	require.Equal(t, "A😀B😀C😀", read().Text, "the join from 0 catches up in one chunk")
	require.NoError(t, s.Push("D😀"))
	require.Equal(t, "D😀", read().Text)
	plan(endThenHalf)
	require.NoError(t, s.Push("E😀"))
	require.ErrorContains(t, <-ended, "the client went away")
	eventually.True(t, func() bool { return d.Stats().Readers == 0 })
	require.Equal(t, uint64(1), d.Stats().Handoffs, "an ended reader is not handed to a goroutine")
}
