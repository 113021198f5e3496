package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/clocktest"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// memStore is an app's commit callback over memory: it applies only the unseen suffix of an
// append and reports the applied length, as the CommitFunc contract asks. failFunc, if set, can
// refuse any input.
type memStore struct {
	mu       sync.Mutex
	text     map[string]string
	status   map[string]producer.Status
	inputs   []producer.CommitInput
	cancel   map[string]bool
	failFunc func(producer.CommitInput) error
}

func newMemStore() *memStore {
	return &memStore{text: map[string]string{}, status: map[string]producer.Status{}, cancel: map[string]bool{}}
}

func (m *memStore) commit(_ context.Context, in producer.CommitInput) (producer.AppendResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inputs = append(m.inputs, in)
	if m.failFunc != nil {
		if err := m.failFunc(in); err != nil {
			return producer.AppendResult{}, err
		}
	}
	switch in.Kind {
	case producer.CommitOpen:
		m.status[in.Open.StreamID] = producer.StatusStreaming
	case producer.CommitAppend:
		a := in.Append
		have := m.text[a.StreamID]
		if n := producer.Len16(have); n >= a.From && n < a.Seq {
			m.text[a.StreamID] = have + producer.Slice16(a.Text, n-a.From, a.Seq-a.From)
		}
		return producer.AppendResult{Durable: producer.Len16(m.text[a.StreamID]), ReadBack: true, CancelRequested: m.cancel[a.StreamID]}, nil
	case producer.CommitClose:
		c := in.Close
		have := m.text[c.StreamID]
		m.text[c.StreamID] = producer.Slice16(have, 0, c.From) + producer.Slice16(c.Body, c.From-c.BodyFrom, c.Seq-c.BodyFrom)
		m.status[c.StreamID] = c.Status
	}
	return producer.AppendResult{}, nil
}

func (m *memStore) get(id string) (string, producer.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.text[id], m.status[id]
}

func (m *memStore) closes() []producer.CloseInput {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []producer.CloseInput
	for _, in := range m.inputs {
		if in.Kind == producer.CommitClose {
			out = append(out, in.Close)
		}
	}
	return out
}

func allow(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }

type world struct {
	store *memStore
	clock *clocktest.Clock
	plane *producer.Plane
}

func newWorld(t *testing.T, change func(*producer.Config)) *world {
	t.Helper()
	w := &world{store: newMemStore(), clock: clocktest.New()}
	cfg := producer.Config{
		Committer:             producer.CommitFunc(w.store.commit),
		Authorize:             allow,
		CheckpointChars:       4,
		RetryBackoff:          time.Millisecond,
		Clock:                 w.clock,
		OnCheckpointErrorFunc: func(error, producer.CheckpointInfo) {},
	}
	if change != nil {
		change(&cfg)
	}
	var err error
	w.plane, err = producer.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.plane.Close)
	return w
}

func (w *world) open(t *testing.T, id string) *producer.LiveStream {
	t.Helper()
	s, err := w.plane.Open(t.Context(), producer.OpenStreamInput{StreamID: id})
	require.NoError(t, err)
	return s
}

func (w *world) subscribe(t *testing.T, id string, from producer.Seq) *producer.Subscription {
	t.Helper()
	sub, err := w.plane.Subscribe(t.Context(), producer.SubscribeInput{StreamID: id, From: from})
	require.NoError(t, err)
	return sub
}

func TestCommitModeTrimsAndSealsWithBodyFrom(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.RetainChars = 4 })
	s := w.open(t, "m")
	for _, piece := range []string{"abcd", "efgh", "ij😀"} {
		require.NoError(t, s.Push(piece))
		_, err := s.Flush(t.Context())
		require.NoError(t, err)
	}
	require.NoError(t, s.Push("tail"))
	require.NoError(t, s.Close(t.Context()))
	closes := w.store.closes()
	require.Len(t, closes, 1)
	c := closes[0]
	require.Equal(t, producer.Seq(12), c.From)
	require.Equal(t, producer.Seq(8), c.BodyFrom, "everything below durable-4 was trimmed")
	require.Equal(t, "ij😀tail", c.Body)
	require.Equal(t, c.BodyFrom+producer.Len16(c.Body), c.Seq)
	text, status := w.store.get("m")
	require.Equal(t, "abcdefghij😀tail", text)
	require.Equal(t, producer.StatusComplete, status)
}

func TestJoinBelowTheRetainedFloorIsStale(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.RetainChars = 2 })
	s := w.open(t, "m")
	require.NoError(t, s.Push("abcdefgh"))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.Equal(t, []producer.Frame{stale(6, 8)}, streamtest.Collect(t, w.subscribe(t, "m", 5)))
	sub := w.subscribe(t, "m", 6)
	f, err := sub.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.FrameOpen, f.Type)
	f, err = sub.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, chunk(6, 8, "gh"), f)
	sub.Close()
}

func TestRetainNoneKeepsNothingBelowTheDurableOffset(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.RetainChars = producer.RetainNone })
	s := w.open(t, "m")
	require.NoError(t, s.Push("abcdefgh"))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Push("ij"))
	// Durable at 8: a join at 7 is below the floor, a join at 8 gets the undurable tail live.
	require.Equal(t, []producer.Frame{stale(8, 8)}, streamtest.Collect(t, w.subscribe(t, "m", 7)))
	sub := w.subscribe(t, "m", 8)
	f, err := sub.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.FrameOpen, f.Type)
	f, err = sub.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, chunk(8, 10, "ij"), f)
	sub.Close()
	require.NoError(t, s.Close(t.Context()))
	c := w.store.closes()[0]
	require.Equal(t, producer.Seq(8), c.BodyFrom, "the seal carries only what was retained")
	require.Equal(t, "ij", c.Body)
}

func TestCommitFuncResynchronizesFromItsReportedLength(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	// The app already holds more than the plane knows (an earlier append whose ack was lost):
	// the plane adopts the reported length instead of claiming its own.
	w.store.mu.Lock()
	w.store.text["m"] = "ab"
	w.store.mu.Unlock()
	require.NoError(t, s.Push("abcdef"))
	d, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.Seq(6), d)
	text, _ := w.store.get("m")
	require.Equal(t, "abcdef", text)
}

func TestCommitFuncCanRequestCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	w.store.mu.Lock()
	w.store.cancel["m"] = true
	w.store.mu.Unlock()
	require.NoError(t, s.Push("abcd"))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.True(t, s.Cancelled())
	require.NoError(t, s.Close(t.Context()))
	_, status := w.store.get("m")
	require.Equal(t, producer.StatusCancelled, status)
}

func TestLingerKeepsASealedStreamJoinable(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	require.NoError(t, s.Push("ab"))
	require.NoError(t, s.Fail(t.Context(), errors.New("model crashed")))
	frames := streamtest.Collect(t, w.subscribe(t, "m", 1))
	require.Equal(t, []producer.Frame{
		{Type: producer.FrameOpen, StreamID: "m", From: 1, Seq: 2, DurableSeq: 2, Ended: true},
		chunk(1, 2, "b"),
		durable(2),
		{Type: producer.FrameEnd, Seq: 2, Status: producer.StatusError, Error: "model crashed"},
	}, frames)
	w.clock.Advance(producer.DefaultLinger - time.Millisecond)
	_, ok := w.plane.Stream("m")
	require.True(t, ok)
	w.clock.Advance(time.Millisecond)
	_, ok = w.plane.Stream("m")
	require.False(t, ok)
	require.Equal(t, []producer.Frame{{Type: producer.FrameAbsent}}, streamtest.Collect(t, w.subscribe(t, "m", 0)))
}

func TestSlowReaderIsDroppedWithStale(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.MaxQueuedFrames = 4; c.CheckpointChars = 1000 })
	s := w.open(t, "m")
	require.NoError(t, s.Push("x"))
	slow := w.subscribe(t, "m", 0)
	fast := w.subscribe(t, "m", 0)
	var fastFrames []producer.Frame
	for i := range 10 {
		require.NoError(t, s.Push(fmt.Sprint(i)))
		for {
			f, err := fast.Next(t.Context())
			require.NoError(t, err)
			fastFrames = append(fastFrames, f)
			if f.Type == producer.FrameChunk && f.Seq == s.Seq() {
				break
			}
		}
	}
	frames := streamtest.Collect(t, slow)
	// The join snapshot (open + replay) is queued whatever the cap, and counts toward it, as in
	// the seed: two live chunks fill the queue of 4, the third overflows it.
	require.Len(t, frames, 4+1)
	require.Equal(t, stale(0, 0), frames[len(frames)-1])
	got, last := streamtest.Replay(t, "", frames)
	require.Equal(t, "x01", got)
	require.Equal(t, producer.FrameStale, last.Type)
	// The fast reader is unaffected.
	require.NoError(t, s.Close(t.Context()))
	fastFrames = append(fastFrames, streamtest.Collect(t, fast)...)
	got, last = streamtest.Replay(t, "", fastFrames)
	require.Equal(t, "x0123456789", got)
	require.Equal(t, producer.FrameEnd, last.Type)
}

func TestForbiddenIsTheSameForExistingAndMissingStreams(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []producer.AuthorizeInput
	w := newWorld(t, func(c *producer.Config) {
		c.Authorize = func(_ context.Context, in producer.AuthorizeInput) (bool, error) {
			mu.Lock()
			seen = append(seen, in)
			mu.Unlock()
			return in.User == "owner", nil
		}
	})
	_, err := w.plane.Open(t.Context(), producer.OpenStreamInput{StreamID: "real", Meta: "meta"})
	require.NoError(t, err)
	errReal := func() error {
		_, err := w.plane.Subscribe(t.Context(), producer.SubscribeInput{User: "mallory", StreamID: "real"})
		return err
	}()
	errMissing := func() error {
		_, err := w.plane.Subscribe(t.Context(), producer.SubscribeInput{User: "mallory", StreamID: "ghost"})
		return err
	}()
	for id, err := range map[string]error{"real": errReal, "ghost": errMissing} {
		var fe *producer.ForbiddenError
		require.ErrorAs(t, err, &fe)
		require.ErrorIs(t, err, producer.ErrForbidden)
		require.Equal(t, "stream "+id+": forbidden", err.Error(), "nothing about existence leaks")
	}
	require.Len(t, seen, 2, "authorize ran for both, before any lookup answered")
	require.Equal(t, "meta", seen[0].Meta)
	require.Nil(t, seen[1].Meta)
	// An authorizer failure is returned as such.
	w2 := newWorld(t, func(c *producer.Config) {
		c.Authorize = func(context.Context, producer.AuthorizeInput) (bool, error) { return false, errors.New("auth db down") }
	})
	_, err = w2.plane.Subscribe(t.Context(), producer.SubscribeInput{StreamID: "x"})
	require.ErrorContains(t, err, "auth db down")
	require.NotErrorIs(t, err, producer.ErrForbidden)
}

func TestAbsentWhenTheStreamIsNotHosted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	require.Equal(t, []producer.Frame{{Type: producer.FrameAbsent}}, streamtest.Collect(t, w.subscribe(t, "nowhere", 0)))
}

func TestPushRefusesInvalidUTF8AndTakesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	require.NoError(t, s.Push("ok"))
	require.ErrorIs(t, s.Push("bad\xff"), producer.ErrInvalidText)
	require.ErrorIs(t, s.Push("\xed\xa0\x80"), producer.ErrInvalidText, "an encoded lone surrogate is not UTF-8")
	require.Equal(t, producer.Seq(2), s.Seq())
	require.NoError(t, s.Push(""))
	require.Equal(t, producer.Seq(2), s.Seq())
}

func TestFlushHonoursItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	w := newWorld(t, nil)
	w.store.failFunc = func(in producer.CommitInput) error {
		if in.Kind == producer.CommitAppend {
			<-release
		}
		return nil
	}
	defer close(release)
	s := w.open(t, "m")
	require.NoError(t, s.Push("ab"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Flush(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestPlaneCloseTearsDownWithoutWriting(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1000 })
	s := w.open(t, "m")
	require.NoError(t, s.Push("ab"))
	sub := w.subscribe(t, "m", 0)
	w.plane.Close()
	w.plane.Close()
	for _, f := range streamtest.Collect(t, sub) {
		require.False(t, f.Terminal(), "teardown detaches readers without a terminal")
	}
	require.Empty(t, w.store.closes(), "teardown writes nothing")
	require.ErrorIs(t, s.Push("x"), producer.ErrClosed)
	_, err := s.Flush(t.Context())
	require.ErrorIs(t, err, producer.ErrNotDurable)
	require.ErrorIs(t, s.Close(t.Context()), producer.ErrClosed)
	_, err = w.plane.Open(t.Context(), producer.OpenStreamInput{StreamID: "n"})
	require.ErrorIs(t, err, producer.ErrClosed)
}

func TestRetriesExhaustedThenTheIntervalRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	failing := true
	w := newWorld(t, func(c *producer.Config) { c.CheckpointRetries = 2 })
	w.store.failFunc = func(in producer.CommitInput) error {
		mu.Lock()
		defer mu.Unlock()
		if failing && in.Kind == producer.CommitAppend {
			return errors.New("store down")
		}
		return nil
	}
	s := w.open(t, "m")
	require.NoError(t, s.Push("ab"))
	_, err := s.Flush(t.Context())
	require.ErrorIs(t, err, producer.ErrNotDurable)
	require.ErrorContains(t, err, "store down")
	appends := 0
	for _, in := range w.store.inputs {
		if in.Kind == producer.CommitAppend {
			appends++
		}
	}
	require.Equal(t, 3, appends, "one attempt and two retries")
	mu.Lock()
	failing = false
	mu.Unlock()
	d, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.Seq(2), d)
}

func TestConfigRefusals(t *testing.T) {
	t.Parallel()
	store := producer.CommitFunc(newMemStore().commit)
	base := func() producer.Config { return producer.Config{Committer: store, Authorize: allow} }
	for _, tc := range []struct {
		name   string
		change func(*producer.Config)
		field  string
	}{
		{"NoCommitter", func(c *producer.Config) { c.Committer = nil }, "Committer"},
		{"NoAuthorize", func(c *producer.Config) { c.Authorize = nil }, "Authorize"},
		{"NegativeChars", func(c *producer.Config) { c.CheckpointChars = -1 }, "CheckpointChars"},
		{"NegativeInterval", func(c *producer.Config) { c.CheckpointInterval = -time.Second }, "CheckpointInterval"},
		{"BadRetries", func(c *producer.Config) { c.CheckpointRetries = -7 }, "CheckpointRetries"},
		{"NegativeLinger", func(c *producer.Config) { c.Linger = -1 }, "Linger"},
		{"NegativeQueue", func(c *producer.Config) { c.MaxQueuedFrames = -1 }, "MaxQueuedFrames"},
		{"NegativeRetain", func(c *producer.Config) { c.RetainChars = -2 }, "RetainChars"},
		{"EmptyRelay", func(c *producer.Config) { c.Relay = &producer.Relay{} }, "Relay"},
		{"AttachTimeoutWithoutRelay", func(c *producer.Config) { c.RelayAttachTimeout = time.Second }, "RelayAttachTimeout"},
		{"FirstFrameWithoutRelay", func(c *producer.Config) { c.RelayFirstFrame = time.Second }, "RelayFirstFrame"},
		{"RelayErrorHookWithoutRelay", func(c *producer.Config) { c.OnRelayErrorFunc = func(error, string, producer.RelayPhase) {} }, "OnRelayErrorFunc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.change(&cfg)
			_, err := producer.New(cfg)
			var ce *producer.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
		})
	}
	t.Run("DefaultsAccepted", func(t *testing.T) {
		p, err := producer.New(base())
		require.NoError(t, err)
		p.Close()
	})
}

func TestDrainWithNothingLive(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	require.NoError(t, w.plane.Drain(t.Context()))
	s := w.open(t, "m")
	require.NoError(t, s.Push(strings.Repeat("z", 3)))
	require.NoError(t, w.plane.Drain(t.Context()))
	text, status := w.store.get("m")
	require.Equal(t, "zzz", text)
	require.Equal(t, producer.StatusInterrupted, status)
}

// CheckpointSpread fires interval checkpoints early by at most the spread, never late.
func TestCheckpointSpreadNeverDelays(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	w := newWorld(t, func(c *producer.Config) {
		c.Clock = clock
		c.CheckpointInterval = time.Second
		c.CheckpointSpread = 400 * time.Millisecond
		c.IdleTimeout = producer.NoIdleTimeout // the clock's pending timers are the checkpoints'
	})
	for i := range 20 {
		s := w.open(t, fmt.Sprintf("m%d", i))
		require.NoError(t, s.Push("x"))
	}
	clock.Advance(599 * time.Millisecond)
	eventually.True(t, func() bool { return clock.Pending() == 20 }, "nothing fires before interval - spread")
	clock.Advance(401 * time.Millisecond)
	for i := range 20 {
		s, _ := w.plane.Stream(fmt.Sprintf("m%d", i))
		eventually.True(t, func() bool { return s.DurableSeq() == 1 }, "every stream checkpointed by the interval")
	}
	_, err := producer.New(producer.Config{Committer: producer.CommitFunc(w.store.commit), Authorize: allow, CheckpointInterval: time.Second, CheckpointSpread: time.Second})
	var ce *producer.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CheckpointSpread", ce.Field)
}

// Issue 13, item 9: a durability stall is visible while it lasts, in characters and in age, and
// a sealed stream lingering for late joins no longer counts as live.
func TestDurabilityShowsAStallWhileItLasts(t *testing.T) {
	t.Parallel()
	var live atomic.Int64
	w := newWorld(t, func(c *producer.Config) {
		c.CheckpointChars = 1 << 20 // commits only on flush
		c.CheckpointRetries = producer.NoRetries
		c.OnStreamFunc = func(d int) { live.Add(int64(d)) }
	})
	s := w.open(t, "m")
	require.Equal(t, int64(1), live.Load())
	require.Equal(t, producer.DurabilityStats{}, w.plane.Durability())

	require.NoError(t, s.Push("abc😀"))
	w.clock.Advance(2 * time.Second)
	require.Equal(t, producer.DurabilityStats{Streams: 1, Chars: 5, Oldest: 2 * time.Second}, w.plane.Durability())

	// The store is away: the flush fails, and the text stays outstanding and ages.
	w.store.mu.Lock()
	w.store.failFunc = func(producer.CommitInput) error { return errors.New("store away") }
	w.store.mu.Unlock()
	_, err := s.Flush(t.Context())
	require.ErrorIs(t, err, producer.ErrNotDurable)
	require.NoError(t, s.Push("de"))
	w.clock.Advance(3 * time.Second)
	require.Equal(t, producer.DurabilityStats{Streams: 1, Chars: 7, Oldest: 5 * time.Second}, w.plane.Durability())

	// It comes back: everything is durable and nothing is outstanding.
	w.store.mu.Lock()
	w.store.failFunc = nil
	w.store.mu.Unlock()
	_, err = s.Flush(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.DurabilityStats{}, w.plane.Durability())

	// Text pushed after a commit began is aged from its own push.
	require.NoError(t, s.Push("f"))
	w.clock.Advance(time.Second)
	require.Equal(t, producer.DurabilityStats{Streams: 1, Chars: 1, Oldest: time.Second}, w.plane.Durability())

	require.NoError(t, s.Close(t.Context()))
	require.Equal(t, int64(0), live.Load(), "sealed: lingering, not live")
	_, still := w.plane.Stream("m")
	require.True(t, still, "it still lingers for late joins")
	require.Equal(t, producer.DurabilityStats{}, w.plane.Durability())
	w.clock.Advance(producer.DefaultLinger + time.Second)
	eventually.True(t, func() bool { _, ok := w.plane.Stream("m"); return !ok })
	require.Equal(t, int64(0), live.Load(), "eviction does not count it out twice")
}

// A size-triggered checkpoint takes what is pending; the deltas pushed while it is in flight
// wait for the next trigger (the size again, the interval, a flush or the seal), not for an
// immediate round of their own. Pushes used to re-force the drain while a round was in flight
// (the pending count is taken against the durable offset, which that round has not moved yet),
// so every size-triggered checkpoint was followed at once by one carrying the few characters
// that arrived during it: a transaction and a chunk row for each. (The seed does the same.)
func TestPushesDuringACheckpointWaitForTheNextTrigger(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) {
		c.CheckpointInterval = time.Second
		c.IdleTimeout = producer.NoIdleTimeout // the clock's pending timers are the checkpoints'
	})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.store.failFunc = func(in producer.CommitInput) error {
		if in.Kind == producer.CommitAppend {
			once.Do(func() { close(entered); <-release })
		}
		return nil
	}
	s := w.open(t, "m")
	require.NoError(t, s.Push("abcd")) // CheckpointChars is 4: a round starts
	<-entered
	require.NoError(t, s.Push("e"))
	require.NoError(t, s.Push("f"))
	close(release)
	eventually.True(t, func() bool { return s.DurableSeq() == 6 || w.clock.Pending() == 1 },
		"the drain settles: a second round, or the interval armed for what is pending")
	require.Equal(t, producer.Seq(4), s.DurableSeq(), "the two characters that arrived during the round wait")
	require.Equal(t, 1, w.clock.Pending(), "the interval is armed for them")
	w.clock.Advance(time.Second)
	eventually.True(t, func() bool { return s.DurableSeq() == 6 }, "the interval commits them")

	w.store.mu.Lock()
	var appends [][2]producer.Seq
	for _, in := range w.store.inputs {
		if in.Kind == producer.CommitAppend {
			appends = append(appends, [2]producer.Seq{in.Append.From, in.Append.Seq})
		}
	}
	w.store.mu.Unlock()
	require.Equal(t, [][2]producer.Seq{{0, 4}, {4, 6}}, appends)
	require.NoError(t, s.Close(t.Context()))
}

// A stream whose last checkpoint failed waits for its retry timer: a push that meets the size
// does not start a round of its own (during an outage every producing stream would otherwise
// retry at the pace of its model), while the timer, a flush or the seal still do.
func TestAStalledStreamWaitsForItsTimerNotTheNextPush(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	var appends atomic.Int64
	w := newWorld(t, func(c *producer.Config) {
		c.CheckpointInterval = time.Second
		c.CheckpointRetries = producer.NoRetries
		c.IdleTimeout = producer.NoIdleTimeout // the clock's pending timers are the checkpoints'
	})
	w.store.failFunc = func(in producer.CommitInput) error {
		if in.Kind != producer.CommitAppend {
			return nil
		}
		appends.Add(1)
		if failing.Load() {
			return errors.New("store away")
		}
		return nil
	}
	s := w.open(t, "m")
	require.NoError(t, s.Push("abcd")) // the size (4): a round, which fails
	eventually.True(t, func() bool { return w.clock.Pending() == 1 && !producer.Draining(s) },
		"the failed round is over and has armed its retry timer")
	require.Equal(t, int64(1), appends.Load())

	require.NoError(t, s.Push("efgh"))
	require.False(t, producer.Draining(s), "a push that meets the size starts no round while the stream is stalled")
	require.Equal(t, int64(1), appends.Load())

	failing.Store(false)
	w.clock.Advance(time.Second)
	eventually.True(t, func() bool { return s.DurableSeq() == 8 }, "the retry timer commits everything")
	require.Equal(t, int64(2), appends.Load())

	// Recovered: the size triggers again at once.
	require.NoError(t, s.Push("ijkl"))
	eventually.True(t, func() bool { return s.DurableSeq() == 12 })
	require.NoError(t, s.Close(t.Context()))
}
