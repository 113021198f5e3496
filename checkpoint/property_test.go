package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/clocktest"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
	"github.com/rindle-sh/rindle-go/producer/relaytest"
)

// TestRandomSchedules drives random interleavings of push, tick, flush, subscribe (here, or on
// another plane through a hostile relay that drops, duplicates, reorders and truncates its
// frames), read, reader close, injected store faults and store latency, reader cancel, the
// three seals (close, fail, drain), and the lease's life (lost, held again, and another host's
// sweeper sealing the row while it was lost) against real Postgres. After every step it checks
// P on the store and honesty of the plane; at quiescence it checks every reader's frames, S,
// and that every end frame says what the row holds.
func TestRandomSchedules(t *testing.T) {
	t.Parallel()
	runs := 200
	if testing.Short() {
		runs = 40
	}
	b := setup(t)
	st := scheduleStats{seals: map[string]int{}}
	for run := range runs {
		runSchedule(t, b, uint64(run), &st)
	}
	t.Logf("%d runs, %d steps: %d readers ended, %d dropped stale; %d seals failed; %d flushes failed; %d checkpoint failures; %d streams fenced; %d pushes refused while suspended",
		runs, st.steps, st.ends, st.stales, st.failedSeals, st.failedFlushes, st.checkpointFailures.Load(), st.fenced, st.suspendedPushes)
	t.Logf("relayed readers: %d ended, %d stale, %d relay perturbations; seals: %v", st.relayedEnds, st.relayedStales, st.perturbed, st.seals)
	// The schedules must actually reach the interesting cases, or they prove little.
	require.Positive(t, st.stales)
	require.Positive(t, st.failedSeals)
	require.Positive(t, st.failedFlushes)
	require.Positive(t, st.ends)
	require.Positive(t, st.fenced)
	require.Positive(t, st.suspendedPushes)
	require.Positive(t, st.relayedEnds, "a relayed reader reached the end")
	require.Positive(t, st.relayedStales, "a perturbation turned a relayed reader stale")
	require.Positive(t, st.perturbed)
	for _, k := range []string{"close", "fail", "drain"} {
		require.Positive(t, st.seals[k], "no %s seal", k)
	}
}

// scheduleStats counts what the schedules exercised.
type scheduleStats struct {
	steps, ends, stales, failedSeals, failedFlushes int
	fenced, suspendedPushes                         int
	relayedEnds, relayedStales                      int
	perturbed                                       int64
	seals                                           map[string]int
	checkpointFailures                              atomic.Int64
}

type schedReader struct {
	held    string // what the reader had at its join: a prefix of the produced text
	sub     *producer.Subscription
	frames  []producer.Frame
	closed  bool
	relayed bool // joined on the other plane, through the hostile relay
}

// poll takes whatever frames are queued, without waiting.
func (r *schedReader) poll(t *testing.T, max int) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range max {
		f, err := r.sub.Next(ctx)
		if err != nil {
			return
		}
		r.frames = append(r.frames, f)
	}
}

func runSchedule(t *testing.T, b *bundle, seed uint64, st *scheduleStats) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	id := fmt.Sprintf("run%d", seed)
	clock := clocktest.New()
	hub := relaytest.NewHub()
	hostile := &hostileRelay{inner: hub.Relay(), seed: seed}
	plane, err := producer.New(producer.Config{
		Relay:                 &producer.Relay{Publish: hub.Relay().Publish},
		Committer:             b.store,
		Authorize:             func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CheckpointChars:       1 + rng.IntN(24),
		CheckpointRetries:     rng.IntN(3),
		RetryBackoff:          time.Millisecond,
		MaxQueuedFrames:       4 + rng.IntN(40),
		Clock:                 clock,
		OnCheckpointErrorFunc: func(error, producer.CheckpointInfo) { st.checkpointFailures.Add(1) },
	})
	require.NoError(t, err)
	defer plane.Close()
	// Another instance: it hosts nothing, and its readers of the stream are relayed.
	remote, err := producer.New(producer.Config{
		Committer:          b.store,
		Authorize:          func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		Relay:              &producer.Relay{Attach: hostile.attach},
		RelayAttachTimeout: 5 * time.Second,
		MaxQueuedFrames:    4 + rng.IntN(400),
		OnRelayErrorFunc:   func(error, string, producer.RelayPhase) {},
	})
	require.NoError(t, err)
	defer remote.Close()
	defer func() { st.perturbed += hostile.perturbed.Load() }()
	b.fdb.reset()
	b.insert(t, id)
	s, err := plane.Open(t.Context(), producer.OpenStreamInput{StreamID: id})
	require.NoError(t, err)

	alphabet := []string{"a", "b", " ", "é", "日", "😀", "👋🏽", "e\u0301", "\n"}
	var produced strings.Builder
	var readers []*schedReader
	type flushResult struct {
		at  producer.Seq
		got producer.Seq
		err error
	}
	flushes := make(chan flushResult, 256)
	pendingFlushes := 0
	sealed := false
	sealKind := "close" // how it was sealed: close, fail or drain
	var sealErr error
	var lastDB, lastPlane producer.Seq
	suspended, swept, cancelAsked := false, false, false
	foreign, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables(), HostID: "another-host"})
	require.NoError(t, err)

	checkP := func(step int, op string) {
		t.Helper()
		planeDurable := s.DurableSeq()
		r := b.durable(t, id)
		text := produced.String()
		require.True(t, strings.HasPrefix(text, r.text), "seed %d step %d (%s): P broken: the store's text is not a prefix of the produced text", seed, step, op)
		require.GreaterOrEqual(t, r.seq, lastDB, "seed %d step %d (%s): the store's length went backwards", seed, step, op)
		require.GreaterOrEqual(t, planeDurable, lastPlane, "seed %d step %d (%s): durableSeq went backwards", seed, step, op)
		require.LessOrEqual(t, planeDurable, s.Seq(), "seed %d step %d (%s): durableSeq past seq", seed, step, op)
		require.LessOrEqual(t, planeDurable, r.seq, "seed %d step %d (%s): the plane claims more than the store holds", seed, step, op)
		lastDB, lastPlane = r.seq, planeDurable
	}

	steps := 30 + rng.IntN(50)
	st.steps += steps
	for step := range steps {
		op := ""
		switch k := rng.IntN(100); {
		case k < 35:
			op = "push"
			var d strings.Builder
			for range 1 + rng.IntN(6) {
				d.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			err := s.Push(d.String())
			switch {
			case err == nil:
				require.False(t, sealed || suspended || swept, "seed %d: a push was taken while sealed, suspended or swept", seed)
				produced.WriteString(d.String())
			case errors.Is(err, producer.ErrSuspended):
				require.True(t, suspended, "seed %d: suspended without a lost lease", seed)
				st.suspendedPushes++
			case errors.Is(err, producer.ErrFenced):
				require.True(t, swept, "seed %d: fenced without another writer", seed)
			case errors.Is(err, producer.ErrCancelled):
				require.True(t, cancelAsked, "seed %d: cancelled without a reader's request", seed)
			default:
				require.ErrorIs(t, err, producer.ErrClosed)
				require.True(t, sealed, "seed %d", seed)
			}
		case k < 45:
			op = "tick"
			clock.Advance(producer.DefaultCheckpointInterval)
		case k < 52:
			op = "flush"
			at := s.Seq()
			pendingFlushes++
			go func() {
				got, err := s.Flush(t.Context())
				flushes <- flushResult{at: at, got: got, err: err}
			}()
		case k < 62:
			op = "subscribe"
			text := produced.String()
			from := producer.Seq(rng.IntN(int(producer.Len16(text)) + 3))
			on, relayed := plane, rng.IntN(3) == 0
			if relayed {
				// A relayed open is at the reader's offset (the other plane cannot clamp it to
				// a length, or floor it to a character, it has not seen yet), so it claims what
				// a real reader holds: whole characters, no more than was produced.
				op, on = "subscribe-relayed", remote
				from = producer.Len16(producer.Slice16(text, 0, from))
			}
			sub, err := on.Subscribe(t.Context(), producer.SubscribeInput{StreamID: id, From: from})
			require.NoError(t, err)
			readers = append(readers, &schedReader{held: producer.Slice16(text, 0, from), sub: sub, relayed: relayed})
		case k < 77:
			op = "read"
			if len(readers) > 0 {
				readers[rng.IntN(len(readers))].poll(t, 1+rng.IntN(8))
			}
		case k < 80:
			op = "close-reader"
			if len(readers) > 0 {
				r := readers[rng.IntN(len(readers))]
				r.sub.Close()
				r.closed = true
			}
		case k < 87:
			op = "fault"
			switch rng.IntN(7) {
			case 0:
				b.fdb.set(func(f *faultDB) { f.failBatch++ })
			case 1:
				b.fdb.set(func(f *faultDB) { f.loseAck++ })
			case 2:
				b.fdb.set(func(f *faultDB) { f.failQuery++ })
			case 3:
				b.fdb.set(func(f *faultDB) { f.down = true })
			case 4:
				b.fdb.set(func(f *faultDB) { f.down = false })
			case 5:
				// A blind lost ack: the append lands, and neither the store's read-back nor the
				// plane's resync can see it, so the next slice starts from a stale offset.
				b.fdb.set(func(f *faultDB) { f.loseAck++; f.failQuery += 2 })
			case 6:
				// A slow store: every write waits, and the producer must not.
				lat := time.Duration(rng.IntN(4)) * time.Millisecond
				b.fdb.set(func(f *faultDB) { f.latency = lat })
			}
		case k < 90:
			switch {
			case !suspended:
				op = "lease-lost"
				plane.Suspend(errors.New("lease lost"))
				suspended = true
			case rng.IntN(3) == 0 && !swept:
				// The lease lapsed: another host's sweeper seals the row (a no-op once sealed). It
				// claims rows FOR UPDATE SKIP LOCKED, so a sweep that meets a checkpoint holding the
				// row passes it over: the row is swept only when the sweep says it sealed one (the
				// model took every successful sweep as sealing it, and a busy machine, with longer
				// checkpoint transactions, made that race: a push then taken "after a sweep").
				op = "foreign-sweep"
				if n, err := foreign.SweepOnce(t.Context()); err == nil && n > 0 {
					swept = true
				}
			default:
				op = "lease-held"
				if plane.Resume(t.Context()) == nil {
					suspended = false
				}
			}
		case k < 93:
			op = "cancel"
			_, err := b.db.Pool.Exec(t.Context(), "UPDATE messages SET cancel_requested = true WHERE id = $1", id)
			require.NoError(t, err)
			cancelAsked = true
		default:
			op = "seal"
			if !sealed {
				sealed = true
				switch sealKind = []string{"close", "fail", "drain"}[rng.IntN(3)]; sealKind {
				case "close":
					sealErr = s.Close(t.Context())
				case "fail":
					sealErr = s.Fail(t.Context(), errors.New("model crashed"))
				case "drain":
					// SIGTERM: every live stream sealed interrupted with all it produced.
					sealErr = plane.Drain(t.Context())
				}
			}
		}
		checkP(step, op)
	}

	// Quiescence: the store comes back and the lease is held again (a swept stream ends there,
	// fenced); every flush answers; the stream seals. A seal that failed during the faults is
	// retried by its host on the interval until it commits.
	b.fdb.reset()
	eventually.True(t, func() bool { return plane.Resume(t.Context()) == nil }, "seed %d: reclaim", seed)
	if !sealed {
		sealErr = s.Close(t.Context())
	}
	if sealErr != nil && !swept {
		st.failedSeals++
		require.ErrorIs(t, sealErr, producer.ErrNotDurable)
		eventually.True(t, func() bool {
			clock.Advance(producer.DefaultCheckpointInterval)
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			return s.Close(ctx) == nil
		}, "seed %d: the failed seal was never retried to a commit", seed)
	}
	if swept {
		// Another writer may have sealed it first, or this host's seal won the race: either
		// way it is settled.
		eventually.True(t, func() bool {
			clock.Advance(producer.DefaultCheckpointInterval)
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			err := s.Close(ctx)
			return err == nil || errors.Is(err, producer.ErrFenced)
		}, "seed %d: the swept stream never settled", seed)
	}
	checkP(steps, "quiescence")
	for range pendingFlushes {
		r := <-flushes
		if r.err != nil {
			st.failedFlushes++
		}
		if r.err == nil {
			require.GreaterOrEqual(t, r.got, r.at, "seed %d: a flush resolved short of its offset", seed)
			require.LessOrEqual(t, r.got, lastDB, "seed %d: a flush claimed more than the store holds", seed)
		} else {
			require.ErrorIs(t, r.err, producer.ErrNotDurable, "seed %d", seed)
		}
	}
	text := produced.String()
	final := b.durable(t, id)
	st.seals[sealKind]++
	require.Zero(t, final.chunks, "seed %d: chunks left behind a %s row (swept %v)", seed, final.status, swept)
	want := map[string][]string{"close": {"complete", "cancelled"}, "fail": {"error"}, "drain": {"interrupted"}}[sealKind]
	if swept && final.status == "interrupted" && (sealKind != "drain" || final.text != text) {
		// Another host's sweeper sealed it first: body ++ chunks, a prefix.
		require.True(t, strings.HasPrefix(text, final.text), "seed %d: the swept body is a prefix", seed)
		st.fenced++
	} else {
		require.Equal(t, text, final.text, "seed %d: a committed %s seal holds the whole text", seed, sealKind)
		require.Contains(t, want, final.status, "seed %d: sealed by %s", seed, sealKind)
	}
	for i, r := range readers {
		if r.closed {
			continue
		}
		r.frames = append(r.frames, streamtest.Collect(t, r.sub)...)
		got, last := streamtest.Replay(t, r.held, r.frames)
		require.True(t, strings.HasPrefix(text, got), "seed %d reader %d: delivered text is not a prefix of the produced text", seed, i)
		switch last.Type {
		case producer.FrameEnd:
			st.ends++
			if r.relayed {
				st.relayedEnds++
			}
			require.Equal(t, final.text, producer.Slice16(got, 0, last.Seq), "seed %d reader %d: S broken", seed, i)
			require.Equal(t, final.seq, last.Seq, "seed %d reader %d: the end says what the store holds", seed, i)
			require.Equal(t, final.status, string(last.Status), "seed %d reader %d: the end says what the store holds", seed, i)
		case producer.FrameStale:
			st.stales++
			if r.relayed {
				st.relayedStales++
			}
			// Dropped: the reader falls back to the durable plane, which P keeps a prefix.
		case producer.FrameAbsent:
			// Only a relayed reader: it attached before the open had reached the relay (the
			// outbox publishes asynchronously); it reads the durable plane instead.
			require.True(t, r.relayed, "seed %d reader %d: a local reader of a hosted stream got absent", seed, i)
		default:
			t.Fatalf("seed %d reader %d: ended with %s", seed, i, last.Type)
		}
	}
}

// hostileRelay attaches through inner and perturbs what each source yields: it drops,
// duplicates and swaps frames and truncates the source, never touching a terminal frame's
// delivery except by truncating before it. The plane's conform pass must turn every such
// source into frames that keep S, or into stale.
type hostileRelay struct {
	inner     *producer.Relay
	seed      uint64
	attaches  atomic.Uint64
	perturbed atomic.Int64
}

func (h *hostileRelay) attach(ctx context.Context, streamID string, from producer.Seq) (producer.FrameSource, error) {
	src, err := h.inner.Attach(ctx, streamID, from)
	if src == nil || err != nil {
		return src, err
	}
	n := h.attaches.Add(1)
	return &hostileSource{inner: src, h: h, rng: rand.New(rand.NewPCG(h.seed, n))}, nil
}

type hostileSource struct {
	inner   producer.FrameSource
	h       *hostileRelay
	rng     *rand.Rand // Next is called from one goroutine at a time
	pending []producer.Frame
	last    *producer.Frame
	ended   bool
}

func (s *hostileSource) Next(ctx context.Context) (producer.Frame, error) {
	if len(s.pending) > 0 {
		f := s.pending[0]
		s.pending = s.pending[1:]
		return f, nil
	}
	if s.ended {
		return producer.Frame{}, io.EOF
	}
	f, err := s.inner.Next(ctx)
	if err != nil {
		return f, err
	}
	if f.Terminal() {
		return f, nil
	}
	switch k := s.rng.IntN(100); {
	case k < 3: // the broker lost it
		s.h.perturbed.Add(1)
		return s.Next(ctx)
	case k < 6 && s.last != nil: // delivered twice
		s.h.perturbed.Add(1)
		s.pending = append(s.pending, f)
		return *s.last, nil
	case k < 9: // out of order: the next one first
		s.h.perturbed.Add(1)
		g, err := s.inner.Next(ctx)
		if err != nil {
			return f, nil // the swap failed: deliver f, and the next Next reports the error
		}
		s.pending = append(s.pending, f)
		f = g
	case k < 10: // the connection dropped: the source ends without a terminal
		s.h.perturbed.Add(1)
		s.ended = true
		return producer.Frame{}, io.EOF
	}
	s.last = &f
	return f, nil
}

func (s *hostileSource) Close() error { return s.inner.Close() }
