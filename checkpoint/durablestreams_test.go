package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Two forks of a soft-deleted source deleted in two transactions at once: the one that counts
// the source's forks second must see the other's delete, or neither collects the source and its
// path stays taken for good. The first transaction holds its delete uncommitted while the
// second runs; the second must wait for it (the source's row lock) and then collect.
func TestForkDeletesThatOverlapCollectTheirSource(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(db.Pool)
	require.NoError(t, err)
	same := func(a, b string) bool { return a == b }
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", Text: "x", SameType: same})
	require.NoError(t, err)
	for _, f := range []string{"a", "b"} {
		_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: f, SameType: same, Fork: &checkpoint.Fork{Source: "src"}})
		require.NoError(t, err)
	}
	require.NoError(t, p.Delete(ctx, "src"))
	_, err = p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	require.NoError(t, checkpoint.DeleteInTx(ctx, tx, "a"))
	done := make(chan error, 1)
	go func() { done <- p.Delete(ctx, "b") }()
	// Commit only once the second delete has finished or is waiting on a lock: committing
	// earlier would let it see the first delete whether or not it waits.
	waiting := func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n))
		return n > 0
	}
	var second error
	returned := false
	for !returned && !waiting() {
		select {
		case second = <-done:
			returned = true
		default:
		}
	}
	require.NoError(t, tx.Commit(ctx))
	if !returned {
		second = <-done
	}
	require.NoError(t, second)
	_, err = p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound, "the later delete collected the source")
}

// Issue 22, retention: the reaper removes expired streams in bounded batches (a soft-deleted
// source goes with its last fork), and producer state idle past the window, and nothing else.
func TestReapRemovesExpiredStreamsAndIdleProducers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(db.Pool)
	require.NoError(t, err)
	same := func(a, b string) bool { return a == b }
	zero, hour := int64(0), int64(3600)
	create := func(path string, ttl *int64, fork *checkpoint.Fork) {
		t.Helper()
		ct := "text/plain"
		if fork != nil {
			ct = ""
		}
		_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: path, ContentType: ct, TTL: ttl, Text: "x", SameType: same, Fork: fork})
		require.NoError(t, err)
	}
	for _, path := range []string{"e1", "e2", "e3"} {
		create(path, &zero, nil) // a TTL of 0 s has lapsed as soon as it is made
	}
	create("kept", &hour, nil)
	create("src", &hour, nil)
	create("src-fork", &zero, &checkpoint.Fork{Source: "src"})
	require.NoError(t, p.Delete(ctx, "src"))
	_, err = p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone, "held by its (expired, unreaped) fork")

	for i, id := range []string{"old", "new"} {
		_, err := p.Append(ctx, checkpoint.AppendStream{Path: "kept", ContentType: "text/plain", Text: id, SameType: same,
			Producer: &checkpoint.ProducerRef{ID: id}})
		require.NoError(t, err, i)
	}
	_, err = db.Pool.Exec(ctx, "UPDATE ds_producers SET updated_at = now() - interval '2 hours' WHERE producer_id = 'old'")
	require.NoError(t, err)

	got, err := p.Reap(ctx, 2, time.Hour)
	require.NoError(t, err)
	require.Equal(t, checkpoint.Reaped{Streams: 2, Producers: 1}, got, "a batch is bounded")
	got, err = p.Reap(ctx, 2, time.Hour)
	require.NoError(t, err)
	require.Equal(t, checkpoint.Reaped{Streams: 2}, got, "e3 and src-fork, which collects src")
	got, err = p.Reap(ctx, 2, time.Hour)
	require.NoError(t, err)
	require.Equal(t, checkpoint.Reaped{}, got)

	var paths []string
	rows, err := db.Pool.Query(ctx, "SELECT path FROM ds_streams ORDER BY path")
	require.NoError(t, err)
	paths, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"kept"}, paths)
	var producers []string
	rows, err = db.Pool.Query(ctx, "SELECT producer_id FROM ds_producers")
	require.NoError(t, err)
	producers, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"new"}, producers)
	var messages int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM messages").Scan(&messages))
	require.Equal(t, 1, messages, "the reaped text streams' messages rows went with them")

	got, err = p.Reap(ctx, 10, 0)
	require.NoError(t, err)
	require.Zero(t, got.Producers, "a window of 0 keeps producer state")
}

// A stream that expired while forks of it live is soft-deleted like a deleted one: a create at
// its path is refused as one held by forks (409), never attempted (a duplicate key, 503).
func TestAnExpiredSourceWithForksHoldsItsPath(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(db.Pool)
	require.NoError(t, err)
	same := func(a, b string) bool { return a == b }
	hour := int64(3600)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", TTL: &hour, Text: "x", SameType: same})
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "fork", TTL: &hour, SameType: same, Fork: &checkpoint.Fork{Source: "src"}})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE ds_streams SET ttl_seconds = 0 WHERE path = 'src'") // its TTL lapses
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", SameType: same})
	require.ErrorIs(t, err, checkpoint.ErrStreamExists)
	require.ErrorIs(t, err, checkpoint.ErrStreamGone)
}

// Issue 22: a byte stream has no view, so its appends reach other instances through
// notifications. A watcher on its own pool (another instance) hears every committed append and
// close of a byte stream, by path, and nothing of a refused append or of a text stream. When its
// connection is killed it says so, listens again and reports "" (anything may have moved).
func TestWatchHearsByteStreamAppendsFromAnotherInstance(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	writer, err := checkpoint.NewProtocol(db.Pool)
	require.NoError(t, err)
	other, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(other.Close)
	watcher, err := checkpoint.NewProtocol(other)
	require.NoError(t, err)

	heard := make(chan string, 16)
	failures := make(chan error, 16)
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		watched <- watcher.Watch(wctx, func(path string) { heard <- path }, 10*time.Millisecond, func(err error) { failures <- err })
	}()
	next := func(why string) string {
		t.Helper()
		select {
		case p := <-heard:
			return p
		case <-time.After(time.Minute): // a bound on a hang, not a measurement
			t.Fatal(why)
			return ""
		}
	}
	require.Empty(t, next("the watcher never started listening"), "listening starts with a wake of everything")

	same := func(a, b string) bool { return a == b }
	_, _, err = writer.Create(ctx, checkpoint.CreateStream{Path: "text", ContentType: "text/plain", SameType: same})
	require.NoError(t, err)
	_, _, err = writer.Create(ctx, checkpoint.CreateStream{Path: "bytes", ContentType: "application/octet-stream", Binary: true, SameType: same})
	require.NoError(t, err)
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "text", ContentType: "text/plain", Text: "a", SameType: same})
	require.NoError(t, err)
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "bytes", ContentType: "text/plain", Text: "x", SameType: same})
	require.ErrorIs(t, err, checkpoint.ErrContentTypeMismatch, "a refused append commits nothing, so notifies nothing")
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "bytes", ContentType: "application/octet-stream", Text: "\x00\xff", SameType: same})
	require.NoError(t, err)
	require.Equal(t, "bytes", next("the byte append was never heard"), "the first thing heard is the committed byte append: not the text stream's, not the refused one")

	// The watcher's connection dies: it reports the loss, listens again and wakes everything.
	_, err = db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN `+checkpoint.ByteStreamChannel+`'`)
	require.NoError(t, err)
	select {
	case err := <-failures:
		require.Error(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the lost connection was never reported")
	}
	require.Empty(t, next("the watcher never listened again"))
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "bytes", ContentType: "application/octet-stream", Close: true, SameType: same})
	require.NoError(t, err)
	require.Equal(t, "bytes", next("the close was never heard"), "a close is heard too, after the reconnect")

	stop()
	require.ErrorIs(t, <-watched, context.Canceled)
}

// An append takes two pipelines (reads, then writes and COMMIT). Whatever fails, nothing of it
// stays and no connection is left inside a transaction: a write refused by the database (a
// trigger raises on the chunk insert), a COMMIT refused (a deferred trigger raises there), a
// producer refused after the reads, an expired stream (missing, or gone while a fork lives).
// After each, the same producer's next append is accepted at the seq the failure did not take.
func TestProtocolAppendFailuresLeaveNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(db.Pool)
	require.NoError(t, err)
	same := func(a, b string) bool { return a == b }
	_, err = db.Pool.Exec(ctx, `
		CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.text LIKE '%boom%' THEN RAISE EXCEPTION 'refused: %', NEW.text; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_now BEFORE INSERT ON message_chunks FOR EACH ROW WHEN (NEW.text = 'boom now') EXECUTE FUNCTION refuse_boom();
		CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON message_chunks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.text = 'boom at commit') EXECUTE FUNCTION refuse_boom();`)
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "s", ContentType: "text/plain", SameType: same})
	require.NoError(t, err)

	idleInTx := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'").Scan(&n))
		return n
	}
	appendAs := func(seq int64, text string) (checkpoint.AppendOutcome, error) {
		return p.Append(ctx, checkpoint.AppendStream{Path: "s", ContentType: "text/plain", Text: text, SameType: same,
			Producer: &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: seq}})
	}
	out, err := appendAs(0, "first ")
	require.NoError(t, err)
	require.Equal(t, producer.Seq(6), out.Tail)

	for _, refused := range []struct {
		name string
		seq  int64
		text string
		want string
	}{
		{"the chunk insert raises", 1, "boom now", "refused: boom now"},
		{"the COMMIT raises", 1, "boom at commit", "refused: boom at commit"},
		{"a producer's seq gap", 5, "gap", "expected seq 1, got 5"},
	} {
		_, err := appendAs(refused.seq, refused.text)
		require.ErrorContains(t, err, refused.want, refused.name)
		m, err := p.Head(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, producer.Seq(6), m.Tail, "%s: nothing appended", refused.name)
		require.Zero(t, idleInTx(), "%s: no connection left in a transaction", refused.name)
	}
	out, err = appendAs(1, "second")
	require.NoError(t, err, "the producer's next seq is still 1")
	require.False(t, out.Duplicate)
	require.Equal(t, producer.Seq(12), out.Tail)
	_, meta, _, err := p.Read(ctx, "s", 0, 1<<20, false)
	require.NoError(t, err)
	require.Equal(t, "first second", meta)

	// Expired: missing, or gone while a fork of it lives; neither writes.
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "fork", SameType: same, Fork: &checkpoint.Fork{Source: "s"}})
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "alone", ContentType: "text/plain", SameType: same})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE ds_streams SET ttl_seconds = 0 WHERE path IN ('s', 'alone')")
	require.NoError(t, err)
	_, err = appendAs(2, "late")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone)
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "alone", ContentType: "text/plain", Text: "late", SameType: same})
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound)
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "never", ContentType: "text/plain", Text: "x", SameType: same})
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound)
	require.Zero(t, idleInTx())
}
