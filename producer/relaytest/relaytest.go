// Package relaytest holds the conformance suite of the relay seam (producer.Relay) and Hub, an
// in-memory broadcast relay between planes of one process.
//
// Run checks what the plane relies on from a broadcast relay (one that implements both Publish
// and Attach): a stream nobody published is absent; a published stream becomes attachable
// eventually (Publish may hand the frame to a broker that captures it later, so the suite waits
// for an attach to find it rather than expecting it at once); a source yields the stream's
// frames in publication order, from its first, and then what is published live; streams never
// mix, whatever their ids; Next honours its context; Close releases the source. Each adapter runs
// it: the NATS relay in broker, Hub here. The plane's own defences (the conform pass, stale on
// a gap) are tested in producer; this suite pins the adapter's half.
//
// It does not own the relay's wiring into a plane (producer) or any broker (broker).
package relaytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// frameTimeout bounds one Next in the suite: generous, for a loaded CI machine and a broker on
// loopback. It is a failure bound, not a performance assertion.
const frameTimeout = 15 * time.Second

// Run runs the relay conformance suite. newRelay returns a fresh relay (Publish and Attach both
// set) for each subtest; stream ids are unique per subtest, so one shared broker is fine.
func Run(t *testing.T, newRelay func(t *testing.T) *producer.Relay) {
	t.Helper()
	seq := 0
	id := func(t *testing.T, name string) string {
		seq++
		return fmt.Sprintf("%s-%d-%s", t.Name(), seq, name)
	}

	t.Run("AStreamNobodyPublishedIsAbsent", func(t *testing.T) {
		r := relay(t, newRelay)
		src, err := r.Attach(t.Context(), id(t, "never"), 0)
		require.NoError(t, err)
		require.Nil(t, src, "absent is a nil source")
	})

	t.Run("FramesArriveInPublicationOrderFromTheFirst", func(t *testing.T) {
		r := relay(t, newRelay)
		s := id(t, "m")
		frames := answer(s, "héllo 😀 wörld", 1)
		for _, f := range frames {
			require.NoError(t, r.Publish(s, f))
		}
		src := attach(t, r, s)
		require.Equal(t, frames, next(t, src, len(frames)))
	})

	t.Run("FramesPublishedAfterTheAttachArriveLive", func(t *testing.T) {
		r := relay(t, newRelay)
		s := id(t, "m")
		frames := answer(s, "abcdefgh", 2)
		require.NoError(t, r.Publish(s, frames[0]))
		src := attach(t, r, s)
		require.Equal(t, frames[:1], next(t, src, 1))
		for _, f := range frames[1:] {
			require.NoError(t, r.Publish(s, f))
			require.Equal(t, []producer.Frame{f}, next(t, src, 1), "one frame at a time, as it is published")
		}
	})

	t.Run("StreamsNeverMixWhateverTheirIDs", func(t *testing.T) {
		r := relay(t, newRelay)
		base := id(t, "")
		names := []string{"a", "a.b", "a.*", "a.>", "a/b", "a:b", "a b", "ünï😀", "a\x00b", base}
		for i, n := range names {
			require.NoError(t, r.Publish(base+n, producer.Frame{Type: producer.FrameOpen, StreamID: base + n}))
			require.NoError(t, r.Publish(base+n, producer.Frame{Type: producer.FrameChunk, From: 0, Seq: 1, Text: fmt.Sprint(i % 10)}))
		}
		for i, n := range names {
			src := attach(t, r, base+n)
			got := next(t, src, 2)
			require.Equal(t, base+n, got[0].StreamID, "%q", n)
			require.Equal(t, fmt.Sprint(i%10), got[1].Text, "%q got another stream's frame", n)
		}
	})

	t.Run("ConcurrentStreamsKeepTheirOwnOrder", func(t *testing.T) {
		r := relay(t, newRelay)
		var wg sync.WaitGroup
		streams := map[string][]producer.Frame{}
		for i := range 4 {
			s := id(t, fmt.Sprint(i))
			streams[s] = answer(s, fmt.Sprintf("stream %d: %s", i, "ça va? 👍 "+fmt.Sprint(i)), 1)
		}
		for s, frames := range streams {
			wg.Go(func() {
				for _, f := range frames {
					if err := r.Publish(s, f); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		for s, frames := range streams {
			require.Equal(t, frames, next(t, attach(t, r, s), len(frames)))
		}
	})

	t.Run("NextHonoursItsContext", func(t *testing.T) {
		r := relay(t, newRelay)
		s := id(t, "m")
		require.NoError(t, r.Publish(s, producer.Frame{Type: producer.FrameOpen, StreamID: s}))
		src := attach(t, r, s)
		next(t, src, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := src.Next(ctx); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err, "nothing was published: Next ends with its context")
			require.NotErrorIs(t, err, io.EOF, "the source did not end; the wait did")
		case <-time.After(frameTimeout):
			t.Fatal("Next ignored its context")
		}
	})

	t.Run("ASourceKeepsGoingAcrossANextThatTimedOut", func(t *testing.T) {
		r := relay(t, newRelay)
		s := id(t, "m")
		require.NoError(t, r.Publish(s, producer.Frame{Type: producer.FrameOpen, StreamID: s}))
		src := attach(t, r, s)
		next(t, src, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		_, err := src.Next(ctx)
		cancel()
		require.Error(t, err)
		f := producer.Frame{Type: producer.FrameChunk, From: 0, Seq: 2, Text: "ok"}
		require.NoError(t, r.Publish(s, f))
		require.Equal(t, []producer.Frame{f}, next(t, src, 1), "the reader polls with short deadlines and loses nothing")
	})

	t.Run("CloseReleasesTheSource", func(t *testing.T) {
		r := relay(t, newRelay)
		s := id(t, "m")
		require.NoError(t, r.Publish(s, producer.Frame{Type: producer.FrameOpen, StreamID: s}))
		src := eventuallyAttach(t, r, s)
		require.NoError(t, src.Close())
		// Another attach is unaffected.
		require.Len(t, next(t, attach(t, r, s), 1), 1)
	})
}

func relay(t *testing.T, newRelay func(t *testing.T) *producer.Relay) *producer.Relay {
	t.Helper()
	r := newRelay(t)
	require.NotNil(t, r.Publish, "the suite is for broadcast relays: Publish is required")
	require.NotNil(t, r.Attach, "the suite is for broadcast relays: Attach is required")
	return r
}

// attach attaches to a stream the test published, once it is visible, and closes the source
// when the test ends.
func attach(t *testing.T, r *producer.Relay, streamID string) producer.FrameSource {
	t.Helper()
	src := eventuallyAttach(t, r, streamID)
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// eventuallyAttach waits until an attach to a published stream finds it. What a relay promises
// after Publish returns is that the frame becomes visible, not that it already is: the NATS
// relay's publish is buffered by the client and captured by the server afterwards. The wait is
// on that condition; the bound only ends a relay that never shows the stream.
func eventuallyAttach(t *testing.T, r *producer.Relay, streamID string) producer.FrameSource {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), frameTimeout)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		src, err := r.Attach(ctx, streamID, 0)
		require.NoError(t, err)
		if src != nil {
			return src
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "published frames: the stream stayed absent", "%s", streamID)
		case <-time.After(wait):
		}
	}
}

// next reads n frames, each within frameTimeout.
func next(t *testing.T, src producer.FrameSource, n int) []producer.Frame {
	t.Helper()
	out := make([]producer.Frame, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), frameTimeout)
		f, err := src.Next(ctx)
		cancel()
		require.NoError(t, err, "after %d of %d frames", len(out), n)
		out = append(out, f)
	}
	return out
}

// answer is what a producing plane publishes for text: the open at 0, a chunk per piece of
// size runes, a durable frame halfway, and the end.
func answer(streamID, text string, size int) []producer.Frame {
	frames := []producer.Frame{{Type: producer.FrameOpen, StreamID: streamID}}
	runes := []rune(text)
	var at producer.Seq
	for i := 0; i < len(runes); i += size {
		piece := string(runes[i:min(i+size, len(runes))])
		end := at + producer.Len16(piece)
		frames = append(frames, producer.Frame{Type: producer.FrameChunk, From: at, Seq: end, Text: piece})
		at = end
		if i == len(runes)/2 {
			frames = append(frames, producer.Frame{Type: producer.FrameDurable, Seq: at})
		}
	}
	return append(frames, producer.Frame{Type: producer.FrameEnd, Seq: at, Status: producer.StatusComplete})
}

// Hub is an in-memory broadcast relay between the planes of one process (tests, or an app
// that runs several planes in one binary): Publish appends to the stream's frames, and a
// source replays them from the first and follows. It keeps every frame until Forget.
type Hub struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every publish
	frames  map[string][]producer.Frame
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{changed: make(chan struct{}), frames: map[string][]producer.Frame{}}
}

// Relay is the hub as a plane's relay.
func (h *Hub) Relay() *producer.Relay {
	return &producer.Relay{Publish: h.publish, Attach: h.attach}
}

// Forget drops a stream's frames: attaches find it absent; sources already attached end.
func (h *Hub) Forget(streamID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.frames, streamID)
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *Hub) publish(streamID string, f producer.Frame) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frames[streamID] = append(h.frames[streamID], f)
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

func (h *Hub) attach(_ context.Context, streamID string, _ producer.Seq) (producer.FrameSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.frames[streamID]; !ok {
		return nil, nil
	}
	return &hubSource{h: h, id: streamID}, nil
}

var errClosed = errors.New("relaytest: source closed")

type hubSource struct {
	h      *Hub
	id     string
	i      int
	closed bool
}

func (s *hubSource) Next(ctx context.Context) (producer.Frame, error) {
	for {
		s.h.mu.Lock()
		if s.closed {
			s.h.mu.Unlock()
			return producer.Frame{}, errClosed
		}
		frames, ok := s.h.frames[s.id]
		if !ok {
			s.h.mu.Unlock()
			return producer.Frame{}, io.EOF // forgotten: the source ends without a terminal
		}
		if s.i < len(frames) {
			f := frames[s.i]
			s.i++
			s.h.mu.Unlock()
			return f, nil
		}
		changed := s.h.changed
		s.h.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return producer.Frame{}, ctx.Err()
		}
	}
}

func (s *hubSource) Close() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.closed = true
	return nil
}
