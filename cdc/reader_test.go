package cdc_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/migrations"
	"github.com/rindle-sh/rindle-go/producer"
)

func TestReaderDecodesCheckpointsAndCompactionAsWholeTransactions(t *testing.T) {
	t.Parallel()
	db, col := startReader(t, nil, nil)
	ctx := t.Context()

	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	plane, err := producer.New(producer.Config{Committer: store, Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }})
	require.NoError(t, err)
	defer plane.Close()
	_, err = db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('chat:1:m')")
	require.NoError(t, err)
	tx := col.next(t)
	require.Len(t, tx.Events, 1)
	require.Equal(t, cdc.MessageChanged, tx.Events[0].Kind)
	require.True(t, tx.Events[0].Created)
	require.Equal(t, "pending", tx.Events[0].Status)

	s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "chat:1:m"})
	require.NoError(t, err)
	tx = col.next(t)
	require.Equal(t, "streaming", tx.Events[0].Status)

	require.NoError(t, s.Push("hello 😀"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	tx = col.next(t)
	// One transaction: the length CAS, then the chunk it admitted (the checkpoint's single
	// statement writes them in that order).
	require.Len(t, tx.Events, 2, kinds(tx))
	require.Equal(t, cdc.MessageChanged, tx.Events[0].Kind)
	require.Equal(t, producer.Seq(8), tx.Events[0].Seq)
	require.Equal(t, cdc.ChunkAppended, tx.Events[1].Kind)
	require.Equal(t, "chat:1:m", tx.Events[1].StreamID)
	require.Equal(t, producer.Seq(8), tx.Events[1].Seq)
	require.Equal(t, producer.Seq(0), tx.Events[1].From())
	require.Equal(t, "hello 😀", tx.Events[1].Text)
	require.NotZero(t, tx.EndLSN)

	require.NoError(t, s.Push(" world"))
	require.NoError(t, s.Close(ctx))
	tx = col.next(t)
	require.Len(t, tx.Events, 2, "the body update and the chunk delete arrive together: %s", kinds(tx))
	require.Equal(t, cdc.MessageChanged, tx.Events[0].Kind)
	require.Equal(t, "complete", tx.Events[0].Status)
	require.NotNil(t, tx.Events[0].Body)
	require.Equal(t, "hello 😀 world", *tx.Events[0].Body)
	require.Equal(t, cdc.ChunkDeleted, tx.Events[1].Kind)
	require.Equal(t, "chat:1:m", tx.Events[1].StreamID, "the stream comes from the key, split at the last colon")
	require.Equal(t, producer.Seq(8), tx.Events[1].Seq)
}

func TestUnchangedToastedBodyIsNotEmpty(t *testing.T) {
	t.Parallel()
	db, col := startReader(t, nil, nil)
	ctx := t.Context()

	// Random, incompressible text over 2 KB: stored out of line, so an update that leaves it
	// alone sends 'u'. Compressible text would stay inline and pass by accident.
	raw := make([]byte, 6000)
	_, _ = rand.Read(raw)
	big := base64.StdEncoding.EncodeToString(raw)
	_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id, body, seq, status) VALUES ('m', $1, $2, 'complete')", big, len(big))
	require.NoError(t, err)
	tx := col.next(t)
	require.Equal(t, big, *tx.Events[0].Body)

	_, err = db.Pool.Exec(ctx, "UPDATE messages SET status = 'interrupted' WHERE id = 'm'")
	require.NoError(t, err)
	tx = col.next(t)
	require.Equal(t, "interrupted", tx.Events[0].Status)
	require.Nil(t, tx.Events[0].Body, "an unchanged TOASTed body is 'unchanged', not empty")
}

func TestReaderConfigRefusals(t *testing.T) {
	t.Parallel()
	field := func(err error) string {
		t.Helper()
		var ce *cdc.ConfigError
		require.ErrorAs(t, err, &ce)
		return ce.Field
	}
	_, err := cdc.New(cdc.Config{})
	require.Equal(t, "ConnString", field(err))
	require.EqualError(t, err, "cdc: Config.ConnString: is required")
	_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere"})
	require.Equal(t, "Publisher", field(err))
	_, err = cdc.New(cdc.Config{ConnString: "port=notaport", Publisher: ordered()})
	require.Equal(t, "ConnString", field(err))
	require.Error(t, errors.Unwrap(err), "the parse error is kept")
	_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere", Publisher: ordered(), ServerTimeout: -1})
	require.Equal(t, "ServerTimeout", field(err))
	_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere", Publisher: ordered(), MaxBodyBytes: -2})
	require.Equal(t, "MaxBodyBytes", field(err))
	_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere", Publisher: ordered(), MaxBodyBytes: -1})
	require.NoError(t, err, "-1 carries every body")
	for _, bad := range []string{"Bad", "a'b", "x-y", strings.Repeat("s", 64)} {
		_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere", Publisher: ordered(), Slot: bad})
		require.Equal(t, "Slot", field(err), bad)
		require.ErrorContains(t, err, bad)
		_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere", Publisher: ordered(), Publication: bad})
		require.Equal(t, "Publication", field(err), bad)
	}
}

func TestReaderRefusesWithoutLogicalWAL(t *testing.T) {
	t.Parallel()
	c := pgtest.PrivateCluster(t, pgcluster.Config{Settings: map[string]string{"wal_level": "replica"}})
	r, err := cdc.New(cdc.Config{ConnString: c.URL, Publisher: ordered()})
	require.NoError(t, err)
	err = r.Start(t.Context())
	require.ErrorIs(t, err, cdc.ErrWALLevel)
	require.ErrorContains(t, err, `"replica"`)
	require.ErrorContains(t, err, "wal_level = logical")
}

func TestBrokerOutageStallsThenCatchesUp(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	broker := ordered()
	defer broker.Close()
	col := collectTxs(t, broker)
	pub := &switchPublisher{Publisher: broker}
	pub.down.Store(true)
	refused := make(chan struct{}, 100)
	r := newReader(t, db, pub, func(c *cdc.Config) {
		c.OnPublishErrorFunc = func(error, *cdc.Tx, int) {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
	})
	require.NoError(t, r.Start(ctx))
	_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('a'), ('b')")
	require.NoError(t, err)
	<-refused
	require.True(t, r.Stats().Stalled, "the stall is reported")
	lagBefore, err := r.SlotLag(ctx)
	require.NoError(t, err)
	require.Positive(t, lagBefore, "the slot keeps the WAL while the broker is down")
	pub.down.Store(false)
	tx := col.next(t)
	require.Len(t, tx.Events, 2)
	// The collector sees the message before Publish returns to the reader.
	eventually.True(t, func() bool { return !r.Stats().Stalled && r.Stats().Published == 1 })
}

func TestASecondReaderOnTheSlotWaitsAndTakesOver(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	broker := ordered()
	defer broker.Close()
	col := collectTxs(t, broker)
	first := newReader(t, db, broker, nil)
	require.NoError(t, first.Start(ctx))
	_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('one')")
	require.NoError(t, err)
	require.Equal(t, "one", col.next(t).Events[0].StreamID)

	second, err := cdc.New(cdc.Config{ConnString: db.URL, Slot: db.Slot(), Publisher: broker, StatusInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, second.Start(ctx))
	defer second.Stop()
	eventually.True(t, func() bool { return second.Stats().Reconnects > 0 }, "the second reader is refused the held slot")
	require.True(t, first.Stats().Leader)
	require.False(t, second.Stats().Leader, "a standby")

	first.Stop()
	require.False(t, first.Stats().Leader)
	eventually.True(t, func() bool { return second.Stats().Leader }, "the standby takes over")
	_, err = db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('two')")
	require.NoError(t, err)
	// At least once: the standby may re-send what the leader never acknowledged, then "two".
	for {
		id := col.next(t).Events[0].StreamID
		if id == "two" {
			break
		}
		require.Equal(t, "one", id)
	}
}

// TestAQuietConnectionIsNotTakenForDead runs a reader on a cluster of its own, where nothing
// writes: a walsender with nothing to send stays silent while status updates keep arriving, so
// the reader must ask it to answer before the server timeout, or it reconnects (its backoff
// growing each time) every timeout on an idle system. It must hear several keep-alives on one
// connection, with no reconnect.
func TestAQuietConnectionIsNotTakenForDead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.PrivateCluster(t, pgcluster.Config{})
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	_, err = migrations.Migrate(ctx, conn)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	// The timeout is short so the test is, and long enough that a loaded machine answers a
	// request for a reply within its second half.
	r, err := cdc.New(cdc.Config{ConnString: c.URL, Publisher: ordered(), StatusInterval: 50 * time.Millisecond, ServerTimeout: 4 * time.Second})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s := r.Stats()
		require.Zero(t, s.Reconnects, "the quiet connection was taken for dead")
		if s.Keepalives >= 4 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	require.True(t, r.Stats().Leader)
}

// A message's delete takes its chunks with it (the schema's trigger deletes them in the same
// transaction): the transaction is published as the MessageDeleted alone, not one ChunkDeleted
// per chunk, so deleting a stream of n appends costs every consumer one event instead of n
// (a Durable Streams DELETE of a million-append stream was a million-event message, held whole
// by the reader and by every instance's view). A chunk delete the message's delete does not
// imply, one after the message came back in the same transaction, is still published.
func TestAMessageDeleteCarriesNoChunkDeletes(t *testing.T) {
	t.Parallel()
	db, col := startReader(t, nil, nil)
	ctx := t.Context()

	const n = 5000
	_, err := db.Pool.Exec(ctx, `INSERT INTO messages (id, seq) VALUES ('m', $1), ('other', 2)`, n)
	require.NoError(t, err)
	require.Len(t, col.next(t).Events, 2)
	_, err = db.Pool.Exec(ctx, `INSERT INTO message_chunks (stream_id, seq, text) SELECT 'm', g, 'x' FROM generate_series(1, $1) g
		UNION ALL SELECT 'other', g, 'y' FROM generate_series(1, 2) g`, n)
	require.NoError(t, err)
	require.Len(t, col.next(t).Events, n+2)

	// One transaction: another message's chunk goes (published), then m with all its chunks.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `DELETE FROM message_chunks WHERE stream_id = 'other' AND seq = 1`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `DELETE FROM messages WHERE id = 'm'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	got := col.next(t)
	require.Equal(t, 2, len(got.Events), "the delete of a message of %d chunks is %d events", n, len(got.Events))
	require.Equal(t, "chunk.deleted(other:1) message.deleted(m:0) ", kinds(got))

	// Deleted and made again in one transaction: the new row's chunk delete is not implied.
	_, err = db.Pool.Exec(ctx, `INSERT INTO messages (id) VALUES ('m')`)
	require.NoError(t, err)
	col.next(t)
	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	for _, q := range []string{
		`DELETE FROM messages WHERE id = 'm'`,
		`INSERT INTO messages (id, seq) VALUES ('m', 3)`,
		`INSERT INTO message_chunks (stream_id, seq, text) VALUES ('m', 3, 'abc')`,
		`DELETE FROM message_chunks WHERE stream_id = 'm'`,
	} {
		_, err = tx.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, tx.Commit(ctx))
	got = col.next(t)
	require.Equal(t, "message.deleted(m:0) message.changed(m:3) chunk.appended(m:3) chunk.deleted(m:3) ", kinds(got))
}
