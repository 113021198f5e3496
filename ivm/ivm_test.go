package ivm_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

// flakyPublisher refuses the next down publishes: a broker outage, measured in publishes rather
// than in time, so that it refuses as many on a slow machine as on a fast one.
type flakyPublisher struct {
	message.Publisher
	down    atomic.Int64
	refused atomic.Int64
}

func (f *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	for {
		n := f.down.Load()
		if n <= 0 {
			break
		}
		if f.down.CompareAndSwap(n, n-1) {
			f.refused.Add(1)
			return errors.New("broker unavailable")
		}
	}
	return f.Publisher.Publish(topic, msgs...)
}

type world struct {
	db     *pgtest.DB
	broker *gochannel.GoChannel
	pub    *flakyPublisher
	reader *cdc.Reader
	view   *ivm.View
	plane  *producer.Plane
	store  *checkpoint.Store
}

func (w *world) newReader(t testing.TB) *cdc.Reader {
	t.Helper()
	// Bodies past 40 bytes are left out of events, so the random workloads below cover both a
	// body the event carries and one a view reads back from the row.
	r, err := cdc.New(cdc.Config{ConnString: w.db.URL, Slot: w.db.Slot(), Publisher: w.pub, StatusInterval: 50 * time.Millisecond,
		MaxBodyBytes: 40, OnPublishErrorFunc: func(error, *cdc.Tx, int) {}})
	require.NoError(t, err)
	return r
}

func (w *world) newView(t testing.TB, maxEntries int) *ivm.View {
	t.Helper()
	v, err := ivm.New(ivm.Config{Subscriber: w.broker, Pool: w.db.Pool, MaxEntries: maxEntries})
	require.NoError(t, err)
	require.NoError(t, v.Start(t.Context()))
	return v
}

func setup(t testing.TB) *world {
	t.Helper()
	w := &world{db: pgtest.NewDB(t)}
	w.broker = gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	w.pub = &flakyPublisher{Publisher: w.broker}
	// The view subscribes before the reader publishes anything.
	w.view = w.newView(t, 0)
	w.reader = w.newReader(t)
	require.NoError(t, w.reader.Start(t.Context()))
	var err error
	w.store, err = checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(w.db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	w.plane, err = producer.New(producer.Config{
		Committer:             w.store,
		Authorize:             func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CheckpointChars:       32,
		CheckpointInterval:    20 * time.Millisecond,
		OnCheckpointErrorFunc: func(error, producer.CheckpointInfo) {},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.plane.Close()
		w.reader.Stop()
		w.view.Stop()
		_ = w.broker.Close()
		require.NoError(t, w.reader.DropSlot(context.Background()))
	})
	return w
}

// converge waits until the view equals the database for every id.
func (w *world) converge(t *testing.T, ids []string) {
	t.Helper()
	late := eventually.Late(t)
	for _, id := range ids {
		want, status := w.db.DurableText(t, id)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			m, err := w.view.Wait(ctx, id, producer.Len16(want)-1)
			cancel()
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				if m.Text == want && string(m.Status) == status {
					break
				}
			}
			select {
			case <-late:
				t.Fatalf("message %s: the view has %q (%s), the database %q (%s): %v", id, m.Text, m.Status, want, status, err)
			default:
			}
			want, status = w.db.DurableText(t, id)
		}
	}
}

func TestViewFollowsAStream(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := w.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	require.NoError(t, s.Push("hello 😀"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	m, err := w.view.Wait(ctx, "m", 0) // a long-poll: returns once seq passes 0
	require.NoError(t, err)
	require.Equal(t, "hello 😀", m.Text)
	require.Equal(t, producer.Seq(8), m.Seq)
	require.Equal(t, producer.StatusStreaming, m.Status)

	require.NoError(t, s.Push(" world"))
	require.NoError(t, s.Close(ctx))
	m, err = w.view.Wait(ctx, "m", 8)
	require.NoError(t, err)
	for m.Status != producer.StatusComplete {
		m, err = w.view.Wait(ctx, "m", m.Seq)
		require.NoError(t, err)
	}
	require.Equal(t, "hello 😀 world", m.Text)

	_, err = w.view.Get(ctx, "nope")
	require.ErrorIs(t, err, ivm.ErrNotFound)
}

func TestViewKeepsAToastedBodyOnAStatusOnlyUpdate(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	raw := make([]byte, 6000)
	_, _ = rand.Read(raw)
	big := base64.StdEncoding.EncodeToString(raw)
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id, body, seq, status) VALUES ('m', $1, $2, 'streaming')", big, len(big))
	require.NoError(t, err)
	m, err := w.view.Wait(ctx, "m", 0)
	require.NoError(t, err)
	require.Equal(t, big, m.Text)
	_, err = w.db.Pool.Exec(ctx, "UPDATE messages SET status = 'complete' WHERE id = 'm'")
	require.NoError(t, err)
	m, err = w.view.Wait(ctx, "m", producer.Seq(len(big)))
	require.NoError(t, err)
	require.Equal(t, producer.StatusComplete, m.Status)
	require.Equal(t, big, m.Text, "the body survives an update that sent it as unchanged TOAST")
}

func TestViewEvictsSettledMessagesAndRereadsThem(t *testing.T) {
	t.Parallel()
	w := setup(t)
	w.view.Stop()
	w.view = w.newView(t, 3)
	ctx := t.Context()
	for i := range 10 {
		_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id, body, seq, status) VALUES ($1, $2, $3, 'complete')", fmt.Sprint("m", i), fmt.Sprint("text ", i), len(fmt.Sprint("text ", i)))
		require.NoError(t, err)
	}
	for i := range 10 {
		m, err := w.view.Get(ctx, fmt.Sprint("m", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("text ", i), m.Text)
	}
	require.LessOrEqual(t, w.view.Len(), 3, "settled messages beyond MaxEntries are evicted")
}

// Memory is bounded in bytes, not only in messages: a few long answers evict the least recently
// used as many short ones do (issue 19: a 96 MiB stream stayed in the view for good).
func TestViewEvictsByBytes(t *testing.T) {
	t.Parallel()
	w := setup(t)
	w.view.Stop()
	v, err := ivm.New(ivm.Config{Subscriber: w.broker, Pool: w.db.Pool, MaxBytes: 64 << 10})
	require.NoError(t, err)
	require.NoError(t, v.Start(t.Context()))
	t.Cleanup(v.Stop)
	ctx := t.Context()
	long := strings.Repeat("é", 20<<10) // 40 KiB of text, held once: the exposed text shares the body's bytes
	for i := range 4 {
		_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id, body, seq, status) VALUES ($1, $2, $3, 'complete')", fmt.Sprint("m", i), long, producer.Len16(long))
		require.NoError(t, err)
	}
	for i := range 4 {
		m, err := v.Get(ctx, fmt.Sprint("m", i))
		require.NoError(t, err)
		require.Equal(t, long, m.Text)
		require.LessOrEqual(t, v.Len(), 1, "after %d: only what fits in 64 KiB stays", i)
	}
	m, err := v.Get(ctx, "m0")
	require.NoError(t, err)
	require.Equal(t, long, m.Text, "an evicted message is read again")
}

// TestRandomWorkloadWithFaults runs many streams through checkpoints, compactions, app-side
// status updates and cancels while the walsender is killed, the reader restarted, the view
// restarted from its snapshot and the broker refusing publishes. Everything the view shows along
// the way is a prefix of the final text, and at quiescence the view equals the database.
func TestRandomWorkloadWithFaults(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	rng := mrand.New(mrand.NewPCG(7, 7))
	const streams = 12
	ids := make([]string, streams)
	handles := make([]*producer.LiveStream, streams)
	for i := range ids {
		ids[i] = fmt.Sprintf("chat:%d:msg", i)
		_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ($1)", ids[i])
		require.NoError(t, err)
	}

	// A watcher samples the view continuously; every sample must prove a prefix at the end, and
	// within one view instance a message's seq never goes backwards (long-polls rely on it).
	var seenMu sync.Mutex
	seen := map[string][]string{}
	type key struct {
		view *ivm.View
		id   string
	}
	last := map[key]producer.Seq{}
	var regressions []string
	stopWatch := make(chan struct{})
	var watchWG sync.WaitGroup
	watchWG.Go(func() {
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			id := ids[mrand.IntN(len(ids))]
			seenMu.Lock()
			view := w.view
			seenMu.Unlock()
			if m, err := view.Get(context.Background(), id); err == nil {
				seenMu.Lock()
				seen[id] = append(seen[id], m.Text)
				k := key{view, id}
				if prev, ok := last[k]; ok && m.Seq < prev {
					regressions = append(regressions, fmt.Sprintf("%s: %d after %d", id, m.Seq, prev))
				}
				last[k] = m.Seq
				seenMu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	})

	faults := map[string]int{}
	alphabet := []string{"a", "é", "日", "😀", " ", "tok"}
	for step := range 400 {
		i := rng.IntN(streams)
		switch k := rng.IntN(100); {
		case k < 55:
			if handles[i] == nil {
				var err error
				handles[i], err = w.plane.Open(ctx, producer.OpenStreamInput{StreamID: ids[i]})
				if errors.Is(err, producer.ErrOpenRefused) {
					continue // sealed already: a message is never reopened
				}
				require.NoError(t, err)
			}
			var d strings.Builder
			for range 1 + rng.IntN(8) {
				d.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			if err := handles[i].Push(d.String()); err != nil && !errors.Is(err, producer.ErrCancelled) {
				require.ErrorIs(t, err, producer.ErrClosed)
			}
		case k < 65:
			if handles[i] != nil {
				fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, _ = handles[i].Flush(fctx)
				cancel()
			}
		case k < 72:
			if handles[i] != nil {
				require.NoError(t, handles[i].Close(ctx))
			}
		case k < 76:
			// App-side status update on a message the plane is not streaming.
			_, err := w.db.Pool.Exec(ctx, "UPDATE messages SET status = 'error', error = 'app gave up' WHERE id = $1 AND status = 'pending'", ids[i])
			require.NoError(t, err)
		case k < 80:
			_, err := w.db.Pool.Exec(ctx, "UPDATE messages SET cancel_requested = true WHERE id = $1", ids[i])
			require.NoError(t, err)
		case k < 83:
			faults["walsender killed"]++
			_, err := w.db.Pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", w.db.Slot())
			require.NoError(t, err)
		case k < 86:
			faults["reader restarted"]++
			w.reader.Stop()
			w.reader = w.newReader(t)
			require.NoError(t, w.reader.Start(ctx))
		case k < 89:
			faults["view restarted"]++
			w.view.Stop()
			v := w.newView(t, 0)
			seenMu.Lock()
			w.view = v
			seenMu.Unlock()
		case k < 92:
			faults["broker down"]++
			w.pub.down.Store(int64(1 + rng.IntN(2))) // the next 1 or 2 publishes are refused
		}
		if step%50 == 0 {
			time.Sleep(10 * time.Millisecond) // let the pipeline interleave with the workload
		}
	}
	for _, s := range handles {
		if s != nil {
			require.NoError(t, s.Close(ctx))
		}
	}
	// The last reader publishes everything through the broker (including what the last outage
	// refuses): its acknowledged position passes the end of the workload's WAL. A view could
	// converge without CDC by reading missed messages from the database, so this pins the path.
	var end pglogrepl.LSN
	require.NoError(t, w.db.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end))
	eventually.True(t, func() bool { return w.reader.Stats().Acked >= end },
		"the reader acknowledges the workload's last transaction")
	w.converge(t, ids)
	close(stopWatch)
	watchWG.Wait()

	seenMu.Lock()
	defer seenMu.Unlock()
	samples := 0
	for _, id := range ids {
		final, _ := w.db.DurableText(t, id)
		m, err := w.view.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, final, m.Text)
		for _, s := range seen[id] {
			require.True(t, strings.HasPrefix(final, s), "message %s: the view once showed %q, not a prefix of %q", id, s, final)
			samples++
		}
	}
	require.Empty(t, regressions, "a view went backwards")
	st := w.reader.Stats()
	t.Logf("faults %v; broker refused %d publishes (%d refusals left); %d view samples checked; last reader published %d transactions",
		faults, w.pub.refused.Load(), w.pub.down.Load(), samples, st.Published)
	for _, f := range []string{"walsender killed", "reader restarted", "view restarted", "broker down"} {
		require.Positive(t, faults[f], "the schedule never injected %q", f)
	}
	require.Positive(t, w.pub.refused.Load())
}

func TestNewRefusesABadConfigByField(t *testing.T) {
	t.Parallel()
	var ce *ivm.ConfigError
	_, err := ivm.New(ivm.Config{})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Subscriber", ce.Field)
	require.EqualError(t, err, "ivm: Config.Subscriber: is required")
}
