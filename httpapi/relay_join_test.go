package httpapi_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// hub is an in-memory relay between two planes of one test: it keeps every stream's frames and
// can break a stream's sources, as a broker outage does.
type hub struct {
	mu     sync.Mutex
	cond   *sync.Cond
	frames map[string][]producer.Frame
	broken map[string]bool
	gen    int // cut ends every source attached before it
}

func newHub() *hub {
	h := &hub{frames: map[string][]producer.Frame{}, broken: map[string]bool{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *hub) publish(id string, f producer.Frame) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frames[id] = append(h.frames[id], f)
	h.cond.Broadcast()
	return nil
}

func (h *hub) fail(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broken[id] = true
	h.cond.Broadcast()
}

func (h *hub) attach(_ context.Context, id string, _ producer.Seq) (producer.FrameSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &hubSource{h: h, id: id, gen: h.gen}, nil
}

// cut ends the sources attached so far without a terminal (a dropped broker connection); new
// attaches work, and replay from the first frame.
func (h *hub) cut() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	h.cond.Broadcast()
}

type hubSource struct {
	h   *hub
	id  string
	i   int
	gen int
}

func (s *hubSource) Next(ctx context.Context) (producer.Frame, error) {
	stop := context.AfterFunc(ctx, func() { s.h.mu.Lock(); s.h.cond.Broadcast(); s.h.mu.Unlock() })
	defer stop()
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	for {
		switch {
		case s.h.broken[s.id]:
			return producer.Frame{}, errors.New("broker down")
		case s.gen != s.h.gen:
			return producer.Frame{}, io.EOF
		case ctx.Err() != nil:
			return producer.Frame{}, ctx.Err()
		case s.i < len(s.h.frames[s.id]):
			s.i++
			return s.h.frames[s.id][s.i-1], nil
		}
		s.h.cond.Wait()
	}
}

func (s *hubSource) Close() error { return nil }

// relayedPlanes are a producing plane (publishing to h) and a reading plane (attaching to h)
// on w's database: two instances.
func relayedPlanes(t *testing.T, w *world, h *hub, checkpointChars int) (prod, read *producer.Plane) {
	t.Helper()
	var err error
	prod, err = producer.New(producer.Config{Committer: w.store, Authorize: allow, CheckpointChars: checkpointChars,
		CheckpointInterval: time.Hour, Relay: &producer.Relay{Publish: h.publish}})
	require.NoError(t, err)
	read, err = producer.New(producer.Config{Committer: w.store, Authorize: allow, Relay: &producer.Relay{Attach: h.attach}})
	require.NoError(t, err)
	t.Cleanup(func() { prod.Close(); read.Close() })
	return prod, read
}

// openOn writes message id and opens its stream on plane.
func openOn(t *testing.T, w *world, plane *producer.Plane, id string) *producer.LiveStream {
	t.Helper()
	_, err := w.db.Pool.Exec(t.Context(), "INSERT INTO messages (id) VALUES ($1)", id)
	require.NoError(t, err)
	s, err := plane.Open(t.Context(), producer.OpenStreamInput{StreamID: id})
	require.NoError(t, err)
	return s
}

func readN(t *testing.T, j *httpapi.Joined, n int) []producer.Frame {
	t.Helper()
	var out []producer.Frame
	for range n {
		f, err := j.Next(t.Context())
		require.NoError(t, err)
		out = append(out, f)
	}
	return out
}

// TestRelayedJoinFallsBackToTheViewWhenTheRelayBreaks: a broker outage mid-answer costs the
// reader smoothness only: the join follows the view to the same text and end.
func TestRelayedJoinFallsBackToTheViewWhenTheRelayBreaks(t *testing.T) {
	t.Parallel()
	w := setup(t)
	h := newHub()
	prod, read := relayedPlanes(t, w, h, 8)
	s := openOn(t, w, prod, "m")
	require.NoError(t, s.Push("héllo 😀 "))

	j, err := httpapi.Join(t.Context(), w.view, read, nil, "m", 0)
	require.NoError(t, err)
	defer j.Close()
	frames := readN(t, j, 2) // open, then the relayed chunk
	require.Equal(t, producer.FrameChunk, frames[1].Type)
	require.Equal(t, "héllo 😀 ", frames[1].Text, "served live through the relay")

	h.fail("m")
	require.NoError(t, s.Push("wörld, still here"))
	require.NoError(t, s.Close(t.Context()))
	frames = append(frames, streamtest.Collect(t, j)...)
	text, end := streamtest.Replay(t, "", frames)
	require.Equal(t, producer.FrameEnd, end.Type, "no stale: the view took over")
	require.Equal(t, producer.StatusComplete, end.Status)
	require.Equal(t, "héllo 😀 wörld, still here", text)
}

// TestRelayedJoinEndsWithTheDurableLengthWhenTheProducerDies: a producer that dies sends no end;
// once the sweeper's seal reaches the view, the reader gets an end that claims only the durable
// text, although the relay had shown it more.
func TestRelayedJoinEndsWithTheDurableLengthWhenTheProducerDies(t *testing.T) {
	t.Parallel()
	w := setup(t)
	h := newHub()
	prod, read := relayedPlanes(t, w, h, 1<<20) // checkpoints only on flush
	s := openOn(t, w, prod, "m")
	require.NoError(t, s.Push("durable "))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Push("never durable"))

	j, err := httpapi.Join(t.Context(), w.view, read, nil, "m", 0)
	require.NoError(t, err)
	defer j.Close()
	var frames []producer.Frame
	for pos := producer.Seq(0); pos < producer.Len16("durable never durable"); {
		f := readN(t, j, 1)[0]
		frames = append(frames, f)
		if f.Type == producer.FrameChunk {
			pos = f.Seq
		}
	}
	// The producer's instance dies (nothing more is relayed); the sweeper seals the row.
	_, err = w.db.Pool.Exec(t.Context(), "UPDATE messages SET status = 'interrupted' WHERE id = 'm'")
	require.NoError(t, err)
	frames = append(frames, streamtest.Collect(t, j)...)
	text, end := streamtest.Replay(t, "", frames)
	require.Equal(t, "durable never durable", text, "what the reader was shown")
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Equal(t, producer.StatusInterrupted, end.Status)
	require.Equal(t, producer.Len16("durable "), end.Seq, "the end claims only the durable text")
	_, err = j.Next(t.Context())
	require.ErrorIs(t, err, io.EOF)
}

// A reader on another instance that joins before the producer opens: the relay has nothing yet
// (absent), so it follows the view; once the view shows the stream streaming, it moves onto the
// relayed live tail: one chunk per delta, not the view's checkpoints.
func TestRelayedReaderInBeforeTheOpenGetsTheLiveTail(t *testing.T) {
	t.Parallel()
	w := setup(t)
	h := newHub()
	prod, err := producer.New(producer.Config{Committer: w.store, Authorize: allow, CheckpointChars: 1 << 20,
		CheckpointInterval: time.Hour, Relay: &producer.Relay{Publish: h.publish}})
	require.NoError(t, err)
	absentUntilPublished := func(ctx context.Context, id string, from producer.Seq) (producer.FrameSource, error) {
		h.mu.Lock()
		n := len(h.frames[id])
		h.mu.Unlock()
		if n == 0 {
			return nil, nil
		}
		return h.attach(ctx, id, from)
	}
	read, err := producer.New(producer.Config{Committer: w.store, Authorize: allow, Relay: &producer.Relay{Attach: absentUntilPublished}})
	require.NoError(t, err)
	t.Cleanup(func() { prod.Close(); read.Close() })
	_, err = w.db.Pool.Exec(t.Context(), "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	eventually.True(t, func() bool { _, err := w.view.Get(t.Context(), "m"); return err == nil })

	j, err := httpapi.Join(t.Context(), w.view, read, nil, "m", 0)
	require.NoError(t, err)
	defer j.Close()
	require.Equal(t, producer.FrameOpen, readN(t, j, 1)[0].Type)

	s, err := prod.Open(t.Context(), producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	const deltas = 30
	for i := range deltas {
		require.NoError(t, s.Push(string(rune('a'+i%26))+"é"))
	}
	// Nothing is durable yet (no checkpoint before the close): only the relay can serve these.
	text := ""
	for _, f := range readN(t, j, deltas) {
		require.Equal(t, producer.FrameChunk, f.Type)
		require.Equal(t, producer.Len16(text), f.From, "contiguous")
		text += f.Text
	}
	require.Equal(t, producer.Seq(2*deltas), producer.Len16(text), "a chunk per delta")
	require.NoError(t, s.Close(t.Context()))
	rest := streamtest.Collect(t, j)
	require.Equal(t, producer.FrameEnd, rest[len(rest)-1].Type)
	require.Equal(t, producer.Seq(2*deltas), rest[len(rest)-1].Seq)
}

// TestRelayedJoinReattachesWithoutGoingBack: the reader's relayed tail is cut (a dropped broker
// connection), the view serves what was durable meanwhile, and the reader attaches to the relay
// again, which replays from its first frame: the reader is sent nothing it already had, and
// durable never goes back.
func TestRelayedJoinReattachesWithoutGoingBack(t *testing.T) {
	t.Parallel()
	w := setup(t)
	h := newHub()
	prod, read := relayedPlanes(t, w, h, 8)
	s := openOn(t, w, prod, "m")
	require.NoError(t, s.Push("héllo 😀 wörld, "))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)

	j, err := httpapi.Join(t.Context(), w.view, read, nil, "m", 0)
	require.NoError(t, err)
	defer j.Close()
	frames := readN(t, j, 3) // open, the relayed chunk, its durable
	require.Equal(t, producer.FrameDurable, frames[2].Type)
	require.NoError(t, s.Push("more, durable too. "))
	_, err = s.Flush(t.Context())
	require.NoError(t, err)
	frames = append(frames, readN(t, j, 2)...) // its chunk and durable: the relay replays lower ones
	require.Equal(t, producer.FrameDurable, frames[4].Type)
	h.cut()
	for range 5 {
		require.NoError(t, s.Push("and then some. "))
	}
	require.NoError(t, s.Close(t.Context()))
	frames = append(frames, streamtest.Collect(t, j)...)
	text, end := streamtest.Replay(t, "", frames) // durable never goes back, chunks continue
	require.Equal(t, producer.FrameEnd, end.Type)
	body, _ := w.db.DurableText(t, "m")
	require.Equal(t, body, text)
}

// TestRelayedJoinNearTheEndOfALongStream: the relay replays from the stream's first frame, and
// a reader joining at 17,988 of 18,000 units (1,800 relayed frames, more than its queue holds)
// is served from its offset on the live tail, not re-sent the whole answer and dropped stale.
func TestRelayedJoinNearTheEndOfALongStream(t *testing.T) {
	t.Parallel()
	w := setup(t)
	h := newHub()
	prod, read := relayedPlanes(t, w, h, 1<<20) // no checkpoint before the close: only the relay serves
	s := openOn(t, w, prod, "m")
	for range 1800 {
		require.NoError(t, s.Push("ten units."))
	}
	j, err := httpapi.Join(t.Context(), w.view, read, nil, "m", 17988)
	require.NoError(t, err)
	defer j.Close()
	require.NoError(t, s.Push(" and more"))
	ctx := t.Context()
	var frames []producer.Frame
	for len(frames) == 0 || frames[len(frames)-1].Type != producer.FrameChunk || frames[len(frames)-1].Seq < 18009 {
		f, err := j.Next(ctx)
		require.NoError(t, err, "the reader was not served live from its offset")
		require.NotEqual(t, producer.FrameStale, f.Type)
		frames = append(frames, f)
	}
	require.Equal(t, producer.FrameOpen, frames[0].Type)
	require.Equal(t, producer.Seq(17988), frames[0].From)
	text := ""
	for _, f := range frames[1:] {
		if f.Type == producer.FrameChunk {
			text += f.Text
		}
	}
	require.Equal(t, "s.ten units. and more", text, "nothing below the join point was re-sent")
	require.NoError(t, s.Close(t.Context()))
}

// quietSource is a relayed source that never yields: a broker that restarted just after the
// attach, whose consumer delivers nothing.
type quietSource struct{}

func (quietSource) Next(ctx context.Context) (producer.Frame, error) {
	<-ctx.Done()
	return producer.Frame{}, ctx.Err()
}

func (quietSource) Close() error { return nil }

// TestRelayedJoinFromZeroFollowsTheViewWhenTheSourceIsQuiet: a join from 0 waits for the
// subject's own open, which a quiet source never gives. Past RelayFirstFrame the reading plane
// says stale, and the join follows the view to the same text and end instead of hanging.
func TestRelayedJoinFromZeroFollowsTheViewWhenTheSourceIsQuiet(t *testing.T) {
	t.Parallel()
	w := setup(t)
	h := newHub()
	prod, _ := relayedPlanes(t, w, h, 8)
	read, err := producer.New(producer.Config{Committer: w.store, Authorize: allow, RelayFirstFrame: 20 * time.Millisecond,
		Relay: &producer.Relay{Attach: func(context.Context, string, producer.Seq) (producer.FrameSource, error) { return quietSource{}, nil }}})
	require.NoError(t, err)
	t.Cleanup(read.Close)
	s := openOn(t, w, prod, "m")
	require.NoError(t, s.Push("héllo 😀 "))

	// Without the bound the join never returns: the guard turns that hang into a failure.
	guard, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	j, err := httpapi.Join(guard, w.view, read, nil, "m", 0)
	require.NoError(t, err, "the join is still waiting on the quiet source")
	defer j.Close()
	require.NoError(t, s.Push("wörld"))
	require.NoError(t, s.Close(t.Context()))
	text, end := streamtest.Replay(t, "", streamtest.Collect(t, j))
	require.Equal(t, producer.FrameEnd, end.Type, "no stale: the view served the reader")
	require.Equal(t, "héllo 😀 wörld", text)
}
