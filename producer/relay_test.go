package producer_test

import (
	"context"
	"errors"
	"io"
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

// pipeSource is a relayed frame source fed by the test.
type pipeSource struct {
	frames chan producer.Frame
	err    error // returned once frames is closed and drained; io.EOF by default
	closed atomic.Bool
}

func newPipe(frames ...producer.Frame) *pipeSource {
	p := &pipeSource{frames: make(chan producer.Frame, len(frames)+1024)}
	for _, f := range frames {
		p.frames <- f
	}
	return p
}

func (p *pipeSource) Next(ctx context.Context) (producer.Frame, error) {
	select {
	case f, ok := <-p.frames:
		if !ok {
			if p.err != nil {
				return producer.Frame{}, p.err
			}
			return producer.Frame{}, io.EOF
		}
		return f, nil
	case <-ctx.Done():
		return producer.Frame{}, ctx.Err()
	}
}

func (p *pipeSource) Close() error {
	p.closed.Store(true)
	return nil
}

type relayErr struct {
	phase producer.RelayPhase
	err   error
}

type relayWorld struct {
	*world
	mu   sync.Mutex
	errs []relayErr
}

func (r *relayWorld) relayErrors() []relayErr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]relayErr(nil), r.errs...)
}

func newRelayWorld(t *testing.T, relay *producer.Relay, change func(*producer.Config)) *relayWorld {
	t.Helper()
	r := &relayWorld{}
	r.world = newWorld(t, func(c *producer.Config) {
		c.Relay = relay
		c.RelayAttachTimeout = 200 * time.Millisecond
		c.OnRelayErrorFunc = func(err error, _ string, phase producer.RelayPhase) {
			r.mu.Lock()
			r.errs = append(r.errs, relayErr{phase, err})
			r.mu.Unlock()
		}
		if change != nil {
			change(c)
		}
	})
	return r
}

func attaching(src producer.FrameSource, err error) *producer.Relay {
	return &producer.Relay{Attach: func(context.Context, string, producer.Seq) (producer.FrameSource, error) { return src, err }}
}

func TestRelayPublishMirrorsEveryFrameInOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []producer.Frame
	w := newRelayWorld(t, &producer.Relay{Publish: func(_ string, f producer.Frame) error {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
		return nil
	}}, nil)
	s := w.open(t, "m")
	require.NoError(t, s.Push("ab"))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
	open := producer.Frame{Type: producer.FrameOpen, StreamID: "m"}
	want := []producer.Frame{open, chunk(0, 2, "ab"), durable(2), end(2)}
	// Publish runs in the plane's relay goroutine, after the fact.
	eventually.True(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, got, "an open at 0, then what readers get")
}

// A broker that stops answering blocks Publish. The producer never waits for it: the outbox
// fills, the overflow is dropped and reported, and every push and the seal go through.
func TestBlockedRelayNeverStallsTheProducer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var published atomic.Int64
	w := newRelayWorld(t, &producer.Relay{Publish: func(string, producer.Frame) error {
		<-release
		published.Add(1)
		return nil
	}}, func(c *producer.Config) { c.RelayQueue = 16 })
	defer close(release)
	s := w.open(t, "m")
	done := make(chan error, 1)
	go func() {
		for range 1000 {
			if err := s.Push("x"); err != nil {
				done <- err
				return
			}
		}
		done <- s.Close(t.Context())
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-eventually.Late(t):
		t.Fatal("the producer stalled behind a blocked relay")
	}
	text, status := w.store.get("m")
	require.Equal(t, strings.Repeat("x", 1000), text)
	require.Equal(t, producer.StatusComplete, status)
	errs := w.relayErrors()
	require.NotEmpty(t, errs, "the drops are reported")
	require.ErrorContains(t, errs[0].err, "dropped")
	require.Zero(t, published.Load())
}

func TestRelayPublishFailuresNeverReachTheProducer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	w := newRelayWorld(t, &producer.Relay{Publish: func(string, producer.Frame) error {
		if calls.Add(1)%2 == 0 {
			panic("adapter bug")
		}
		return errors.New("broker down")
	}}, nil)
	s := w.open(t, "m")
	require.NoError(t, s.Push("abcd"))
	require.NoError(t, s.Push("efgh"))
	require.NoError(t, s.Close(t.Context()))
	text, status := w.store.get("m")
	require.Equal(t, "abcdefgh", text)
	require.Equal(t, producer.StatusComplete, status)
	eventually.True(t, func() bool { return len(w.relayErrors()) >= 4 })
	errs := w.relayErrors()
	for _, e := range errs {
		require.Equal(t, producer.RelayPublish, e.phase)
	}
}

func TestRelayAttach(t *testing.T) {
	t.Parallel()
	t.Run("NilSourceIsAbsent", func(t *testing.T) {
		t.Parallel()
		w := newRelayWorld(t, attaching(nil, nil), nil)
		require.Equal(t, []producer.Frame{{Type: producer.FrameAbsent}}, streamtest.Collect(t, w.subscribe(t, "far", 0)))
		require.Empty(t, w.relayErrors())
	})
	t.Run("ErrorIsAbsent", func(t *testing.T) {
		t.Parallel()
		w := newRelayWorld(t, attaching(nil, errors.New("dial failed")), nil)
		require.Equal(t, []producer.Frame{{Type: producer.FrameAbsent}}, streamtest.Collect(t, w.subscribe(t, "far", 0)))
		errs := w.relayErrors()
		require.Len(t, errs, 1)
		require.Equal(t, producer.RelayAttach, errs[0].phase)
	})
	t.Run("HungAdapterTimesOutAndTheLateSourceIsClosed", func(t *testing.T) {
		t.Parallel()
		late := newPipe()
		release := make(chan struct{})
		returned := make(chan struct{})
		w := newRelayWorld(t, &producer.Relay{Attach: func(context.Context, string, producer.Seq) (producer.FrameSource, error) {
			<-release // ignores its context: the worst adapter
			defer close(returned)
			return late, nil
		}}, nil)
		require.Equal(t, []producer.Frame{{Type: producer.FrameAbsent}}, streamtest.Collect(t, w.subscribe(t, "far", 0)))
		require.Equal(t, producer.RelayAttach, w.relayErrors()[0].phase)
		close(release)
		<-returned
		eventually.True(t, late.closed.Load)
	})
	t.Run("FramesAreConformed", func(t *testing.T) {
		t.Parallel()
		src := newPipe(chunk(2, 4, "cd"), chunk(3, 6, "def"), durable(9), durable(5), end(6))
		w := newRelayWorld(t, attaching(src, nil), nil)
		frames := streamtest.Collect(t, w.subscribe(t, "far", 2))
		require.Equal(t, []producer.Frame{
			{Type: producer.FrameOpen, StreamID: "far", From: 2, Seq: 2, DurableSeq: 2},
			chunk(2, 4, "cd"), chunk(4, 6, "ef"), durable(5), end(6),
		}, frames)
		eventually.True(t, src.closed.Load)
	})
	t.Run("ViolationIsStale", func(t *testing.T) {
		t.Parallel()
		src := newPipe(chunk(0, 1, "a"), chunk(5, 6, "z"))
		w := newRelayWorld(t, attaching(src, nil), nil)
		frames := streamtest.Collect(t, w.subscribe(t, "far", 0))
		require.Equal(t, stale(1, 0), frames[len(frames)-1])
		require.Equal(t, producer.RelayFrames, w.relayErrors()[0].phase)
		eventually.True(t, src.closed.Load)
	})
	t.Run("TruncatedSourceIsStale", func(t *testing.T) {
		t.Parallel()
		src := newPipe(chunk(0, 1, "a"))
		close(src.frames)
		w := newRelayWorld(t, attaching(src, nil), nil)
		frames := streamtest.Collect(t, w.subscribe(t, "far", 0))
		require.Equal(t, stale(1, 0), frames[len(frames)-1])
	})
	t.Run("BrokenSourceIsStale", func(t *testing.T) {
		t.Parallel()
		src := newPipe(chunk(0, 1, "a"))
		src.err = errors.New("connection reset")
		close(src.frames)
		w := newRelayWorld(t, attaching(src, nil), nil)
		frames := streamtest.Collect(t, w.subscribe(t, "far", 0))
		require.Equal(t, stale(1, 0), frames[len(frames)-1])
		require.ErrorContains(t, w.relayErrors()[0].err, "connection reset")
	})
	t.Run("LocalStreamWins", func(t *testing.T) {
		t.Parallel()
		var attached atomic.Bool
		w := newRelayWorld(t, &producer.Relay{Attach: func(context.Context, string, producer.Seq) (producer.FrameSource, error) {
			attached.Store(true)
			return nil, nil
		}}, nil)
		s := w.open(t, "m")
		require.NoError(t, s.Push("x"))
		sub := w.subscribe(t, "m", 0)
		f, err := sub.Next(t.Context())
		require.NoError(t, err)
		require.Equal(t, producer.FrameOpen, f.Type)
		sub.Close()
		require.False(t, attached.Load())
	})
	t.Run("ForbiddenNeverConsultsTheRelay", func(t *testing.T) {
		t.Parallel()
		var attached atomic.Bool
		w := newRelayWorld(t, &producer.Relay{Attach: func(context.Context, string, producer.Seq) (producer.FrameSource, error) {
			attached.Store(true)
			return nil, nil
		}}, func(c *producer.Config) {
			c.Authorize = func(context.Context, producer.AuthorizeInput) (bool, error) { return false, nil }
		})
		_, err := w.plane.Subscribe(t.Context(), producer.SubscribeInput{StreamID: "far"})
		require.ErrorIs(t, err, producer.ErrForbidden)
		require.False(t, attached.Load())
	})
	t.Run("ReaderCloseClosesTheSource", func(t *testing.T) {
		t.Parallel()
		src := newPipe(chunk(0, 1, "a"))
		w := newRelayWorld(t, attaching(src, nil), nil)
		sub := w.subscribe(t, "far", 0)
		f, err := sub.Next(t.Context())
		require.NoError(t, err)
		require.Equal(t, producer.FrameOpen, f.Type)
		sub.Close()
		eventually.True(t, src.closed.Load)
	})
	t.Run("SlowRelayedReaderIsDropped", func(t *testing.T) {
		t.Parallel()
		src := newPipe()
		for i := range 50 {
			src.frames <- chunk(producer.Seq(i), producer.Seq(i+1), "x")
		}
		w := newRelayWorld(t, attaching(src, nil), func(c *producer.Config) { c.MaxQueuedFrames = 3 })
		sub := w.subscribe(t, "far", 0)
		eventually.True(t, src.closed.Load, "the overflow released the adapter")
		frames := streamtest.Collect(t, sub)
		require.Len(t, frames, 4)
		// As in the seed, the stale sits at the conform position, which already counts the
		// chunk that overflowed; the reader reads the durable plane from its own offset anyway.
		require.Equal(t, stale(3, 0), frames[3])
	})
}

// A source that gives no first frame (a broker that restarted just after the attach) ends the
// relayed reader with stale after RelayFirstFrame, reported as a frames failure, instead of
// leaving it waiting; a source that answers in time is followed past that bound.
func TestRelaySourceQuietAtFirstEndsTheReaderStale(t *testing.T) {
	t.Parallel()
	quiet := newPipe() // never yields
	w := newRelayWorld(t, attaching(quiet, nil), func(c *producer.Config) { c.RelayFirstFrame = 20 * time.Millisecond })
	sub, err := w.plane.Subscribe(t.Context(), producer.SubscribeInput{StreamID: "m", From: 0})
	require.NoError(t, err)
	defer sub.Close()
	// Without the bound this Next never returns: the guard turns that hang into a failure.
	guard, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f, err := sub.Next(guard)
	require.NoError(t, err, "the reader is still waiting on the quiet source")
	require.Equal(t, producer.FrameStale, f.Type)
	eventually.True(t, quiet.closed.Load, "the quiet source is closed")
	errs := w.relayErrors()
	require.NotEmpty(t, errs)
	require.Equal(t, producer.RelayFrames, errs[0].phase)
	require.ErrorContains(t, errs[0].err, "gave no frame within")

	// Answering in time: the bound is on the first frame only.
	talks := newPipe(producer.Frame{Type: producer.FrameOpen, StreamID: "n"})
	w2 := newRelayWorld(t, attaching(talks, nil), func(c *producer.Config) { c.RelayFirstFrame = time.Hour })
	sub2, err := w2.plane.Subscribe(t.Context(), producer.SubscribeInput{StreamID: "n", From: 0})
	require.NoError(t, err)
	defer sub2.Close()
	f, err = sub2.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.FrameOpen, f.Type)
	talks.frames <- chunk(0, 2, "ab")
	f, err = sub2.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, chunk(0, 2, "ab"), f)
	require.Empty(t, w2.relayErrors())
}
