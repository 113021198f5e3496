package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type world struct {
	db        *pgtest.DB
	view      *ivm.View
	store     *checkpoint.Store // the durable plane every plane of the test commits to
	plane     *producer.Plane   // hosts the streams
	elsewhere *producer.Plane   // another instance: hosts nothing
}

// catalog is the message table in the default mapping, as rindled wires it.
func (w *world) catalog(t testing.TB) *checkpoint.Catalog {
	t.Helper()
	cat, err := checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: checkpoint.PoolDB(w.db.Pool)})
	require.NoError(t, err)
	return cat
}

func allow(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }

func setup(t testing.TB) *world {
	t.Helper()
	w := &world{db: pgtest.NewDB(t)}
	broker := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	var err error
	w.view, err = ivm.New(ivm.Config{Subscriber: broker, Pool: w.db.Pool})
	require.NoError(t, err)
	require.NoError(t, w.view.Start(t.Context()))
	reader, err := cdc.New(cdc.Config{ConnString: w.db.URL, Slot: w.db.Slot(), Publisher: broker, StatusInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, reader.Start(t.Context()))
	w.store, err = checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(w.db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	w.plane, err = producer.New(producer.Config{Committer: w.store, Authorize: allow, CheckpointChars: 24, CheckpointInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	w.elsewhere, err = producer.New(producer.Config{Committer: w.store, Authorize: allow})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.plane.Close()
		w.elsewhere.Close()
		reader.Stop()
		w.view.Stop()
		_ = broker.Close()
		require.NoError(t, reader.DropSlot(context.Background()))
	})
	return w
}

// waitDurable waits until the view holds at least n units of id.
func (w *world) waitDurable(t *testing.T, id string, n producer.Seq) string {
	t.Helper()
	m, err := w.view.Get(t.Context(), id)
	for err == nil && m.Seq < n {
		m, err = w.view.Wait(t.Context(), id, m.Seq)
	}
	require.NoError(t, err)
	return m.Text
}

func TestJoinSplicesTheViewOntoTheLiveTail(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := w.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	var produced strings.Builder
	push := func(n int) {
		for range n {
			d := fmt.Sprintf("tok😀%d ", produced.Len())
			produced.WriteString(d)
			require.NoError(t, s.Push(d))
		}
	}
	push(30)
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	durable := w.waitDurable(t, "m", producer.Len16(produced.String()))
	push(10) // a live tail the view does not have yet
	text := produced.String()
	ivmSeq, seq := producer.Len16(durable), producer.Len16(text)

	type reader struct {
		held string
		j    *httpapi.Joined
	}
	var readers []reader
	for _, from := range []producer.Seq{0, 1, 5, 6, 7, ivmSeq / 2, ivmSeq - 1, ivmSeq, ivmSeq + 3, seq - 1, seq, seq + 10} {
		j, err := httpapi.Join(ctx, w.view, w.plane, nil, "m", from)
		require.NoError(t, err)
		readers = append(readers, reader{held: producer.Slice16(text, 0, from), j: j})
	}
	push(20)
	require.NoError(t, s.Close(ctx))
	final := produced.String()
	for i, r := range readers {
		frames := streamtest.Collect(t, r.j)
		got, last := streamtest.Replay(t, r.held, frames)
		require.Equal(t, producer.FrameEnd, last.Type, "reader %d", i)
		require.Equal(t, final, got, "reader %d: S broken", i)
		// The open sits on a character boundary of the text.
		require.Equal(t, frames[0].From, producer.Len16(producer.Slice16(final, 0, frames[0].From)))
	}
}

func TestJoinFollowsTheViewWhenTheStreamIsElsewhere(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := w.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	require.NoError(t, s.Push("first part 😀 "))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	w.waitDurable(t, "m", 1)
	// A reader on another instance, which hosts nothing: it follows the view.
	j, err := httpapi.Join(ctx, w.view, w.elsewhere, nil, "m", 3)
	require.NoError(t, err)
	require.NoError(t, s.Push("second part"))
	require.NoError(t, s.Close(ctx))
	got, last := streamtest.Replay(t, "fir", streamtest.Collect(t, j))
	require.Equal(t, producer.FrameEnd, last.Type)
	require.Equal(t, producer.StatusComplete, last.Status)
	require.Equal(t, "first part 😀 second part", got)
}

func TestJoinServesASealedEvictedStreamFromTheView(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id, body, seq, status, error) VALUES ('m', 'all of it', 9, 'error', 'model crashed')")
	require.NoError(t, err)
	j, err := httpapi.Join(ctx, w.view, w.elsewhere, nil, "m", 4)
	require.NoError(t, err)
	frames := streamtest.Collect(t, j)
	got, last := streamtest.Replay(t, "all ", frames)
	require.Equal(t, "all of it", got)
	require.Equal(t, producer.Frame{Type: producer.FrameEnd, Seq: 9, Status: producer.StatusError, Error: "model crashed"}, last)
	require.True(t, frames[0].Ended)

	_, err = httpapi.Join(ctx, w.view, w.elsewhere, nil, "ghost", 0)
	require.ErrorIs(t, err, ivm.ErrNotFound)
}
