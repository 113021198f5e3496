package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Two forks of a soft-deleted source deleted in two transactions at once: the one that counts
// the source's forks second must see the other's delete, or neither collects the source and its
// path stays taken for good. The first transaction holds its delete uncommitted while the
// second runs; the second must wait for it (the source's row lock) and then collect.
func TestForkDeletesThatOverlapCollectTheirSource(t *testing.T) {
	t.Parallel()
	p, db := newProtocol(t)
	ctx := t.Context()
	_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", Text: "x", SameType: sameType})
	require.NoError(t, err)
	for _, f := range []string{"a", "b"} {
		_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: f, SameType: sameType, Fork: &checkpoint.Fork{Source: "src"}})
		require.NoError(t, err)
	}
	require.NoError(t, p.Delete(ctx, "src"))
	_, err = p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	require.NoError(t, checkpoint.DeleteInTx(ctx, p, tx, "a"))
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
	p, db := newProtocol(t)
	ctx := t.Context()
	zero, hour := int64(0), int64(3600)
	create := func(path string, ttl *int64, fork *checkpoint.Fork) {
		t.Helper()
		ct := "text/plain"
		if fork != nil {
			ct = ""
		}
		_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: path, ContentType: ct, TTL: ttl, Text: "x", SameType: sameType, Fork: fork})
		require.NoError(t, err)
	}
	for _, path := range []string{"e1", "e2", "e3"} {
		create(path, &zero, nil) // a TTL of 0 s has lapsed as soon as it is made
	}
	create("kept", &hour, nil)
	create("src", &hour, nil)
	create("src-fork", &zero, &checkpoint.Fork{Source: "src"})
	require.NoError(t, p.Delete(ctx, "src"))
	_, err := p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone, "held by its (expired, unreaped) fork")

	for i, id := range []string{"old", "new"} {
		_, err := p.Append(ctx, checkpoint.AppendStream{Path: "kept", ContentType: "text/plain", Text: id, SameType: sameType,
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

// A text stream's plain append writes its chunk and its message row, and leaves the stream's row
// alone: a new version of it would only move accessed_at, which nothing reads without a TTL (it
// cost PostgreSQL about a fifth of its CPU per append under tools/appendload). A sliding TTL, a
// Stream-Seq and a close still write it.
func TestAPlainTextAppendLeavesTheStreamRowAlone(t *testing.T) {
	t.Parallel()
	p, db := newProtocol(t)
	ctx := t.Context()
	hour := int64(3600)
	for path, ttl := range map[string]*int64{"plain": nil, "sliding": &hour} {
		_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: path, ContentType: "text/plain", TTL: ttl, SameType: sameType})
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, "UPDATE ds_streams SET accessed_at = now() - interval '10 minutes'")
	require.NoError(t, err)
	version := func(path string) (xmin string, idle time.Duration) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT xmin::text, (extract(epoch FROM now() - accessed_at) * 1e9)::bigint FROM ds_streams WHERE path = $1", path).
			Scan(&xmin, &idle))
		return xmin, idle
	}
	appendTo := func(in checkpoint.AppendStream) checkpoint.AppendOutcome {
		t.Helper()
		in.ContentType, in.SameType = "text/plain", sameType
		out, err := p.Append(ctx, in)
		require.NoError(t, err)
		return out
	}

	before, _ := version("plain")
	out := appendTo(checkpoint.AppendStream{Path: "plain", Text: "abc"})
	require.Equal(t, producer.Seq(3), out.Tail)
	after, _ := version("plain")
	require.Equal(t, before, after, "a plain append wrote no new version of the stream's row")
	m, err := p.Head(ctx, "plain")
	require.NoError(t, err)
	require.Equal(t, producer.Seq(3), m.Tail, "the tail is the message row's")

	appendTo(checkpoint.AppendStream{Path: "sliding", Text: "abc"})
	_, idle := version("sliding")
	require.Less(t, idle, 5*time.Minute, "an append is an access of a stream with a TTL")

	appendTo(checkpoint.AppendStream{Path: "plain", Text: "d", StreamSeq: "0001"})
	seqd, _ := version("plain")
	require.NotEqual(t, after, seqd, "a Stream-Seq is written")
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "plain", ContentType: "text/plain", Text: "e", StreamSeq: "0001", SameType: sameType})
	require.ErrorIs(t, err, checkpoint.ErrSeqRegression, "the Stream-Seq written is the one checked next")

	out = appendTo(checkpoint.AppendStream{Path: "plain", Close: true})
	require.True(t, out.Closed)
	m, err = p.Head(ctx, "plain")
	require.NoError(t, err)
	require.True(t, m.Closed)
	require.Equal(t, producer.Seq(4), m.Tail)
}

// A stream that expired while forks of it live is soft-deleted like a deleted one: a create at
// its path is refused as one held by forks (409), never attempted (a duplicate key, 503).
func TestAnExpiredSourceWithForksHoldsItsPath(t *testing.T) {
	t.Parallel()
	p, db := newProtocol(t)
	ctx := t.Context()
	hour := int64(3600)
	_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", TTL: &hour, Text: "x", SameType: sameType})
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "fork", TTL: &hour, SameType: sameType, Fork: &checkpoint.Fork{Source: "src"}})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE ds_streams SET ttl_seconds = 0 WHERE path = 'src'") // its TTL lapses
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", SameType: sameType})
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
	writer, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: db.Pool})
	require.NoError(t, err)
	other, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(other.Close)
	watcher, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: other})
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
		case <-eventually.Late(t):
			t.Fatal(why)
			return ""
		}
	}
	require.Empty(t, next("the watcher never started listening"), "listening starts with a wake of everything")

	_, _, err = writer.Create(ctx, checkpoint.CreateStream{Path: "text", ContentType: "text/plain", SameType: sameType})
	require.NoError(t, err)
	_, _, err = writer.Create(ctx, checkpoint.CreateStream{Path: "bytes", ContentType: "application/octet-stream", Binary: true, SameType: sameType})
	require.NoError(t, err)
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "text", ContentType: "text/plain", Text: "a", SameType: sameType})
	require.NoError(t, err)
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "bytes", ContentType: "text/plain", Text: "x", SameType: sameType})
	require.ErrorIs(t, err, checkpoint.ErrContentTypeMismatch, "a refused append commits nothing, so notifies nothing")
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "bytes", ContentType: "application/octet-stream", Text: "\x00\xff", SameType: sameType})
	require.NoError(t, err)
	require.Equal(t, "bytes", next("the byte append was never heard"), "the first thing heard is the committed byte append: not the text stream's, not the refused one")

	// The watcher's connection dies: it reports the loss, listens again and wakes everything.
	_, err = db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN `+checkpoint.ByteStreamChannel+`'`)
	require.NoError(t, err)
	select {
	case err := <-failures:
		require.Error(t, err)
	case <-eventually.Late(t):
		t.Fatal("the lost connection was never reported")
	}
	require.Empty(t, next("the watcher never listened again"))
	_, err = writer.Append(ctx, checkpoint.AppendStream{Path: "bytes", ContentType: "application/octet-stream", Close: true, SameType: sameType})
	require.NoError(t, err)
	require.Equal(t, "bytes", next("the close was never heard"), "a close is heard too, after the reconnect")
	require.NoError(t, writer.Delete(ctx, "text"))
	require.NoError(t, writer.Delete(ctx, "bytes"))
	require.Equal(t, "bytes", next("the delete was never heard"), "a byte stream's delete is heard (a text stream's reaches other instances through the view)")

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
	p, db := newProtocol(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.text LIKE '%boom%' THEN RAISE EXCEPTION 'refused: %', NEW.text; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_now BEFORE INSERT ON message_chunks FOR EACH ROW WHEN (NEW.text = 'boom now') EXECUTE FUNCTION refuse_boom();
		CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON message_chunks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.text = 'boom at commit') EXECUTE FUNCTION refuse_boom();`)
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "s", ContentType: "text/plain", SameType: sameType})
	require.NoError(t, err)

	idleInTx := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'").Scan(&n))
		return n
	}
	appendAs := func(seq int64, text string) (checkpoint.AppendOutcome, error) {
		return p.Append(ctx, checkpoint.AppendStream{Path: "s", ContentType: "text/plain", Text: text, SameType: sameType,
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
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "fork", SameType: sameType, Fork: &checkpoint.Fork{Source: "s"}})
	require.NoError(t, err)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "alone", ContentType: "text/plain", SameType: sameType})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE ds_streams SET ttl_seconds = 0 WHERE path IN ('s', 'alone')")
	require.NoError(t, err)
	_, err = appendAs(2, "late")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone)
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "alone", ContentType: "text/plain", Text: "late", SameType: sameType})
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound)
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "never", ContentType: "text/plain", Text: "x", SameType: sameType})
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound)
	require.Zero(t, idleInTx())
}

// Issue 22: the protocol store honours the table mapping, as the Store does. In a database
// with no default tables at all (no messages, no message_chunks), an app's own tables (other
// names, other columns, a chunk key) and ProtocolTablesDDL carry every protocol operation:
// create, append (a producer's retry deduplicated), read, fork, byte streams, close, delete
// with a live fork (soft), the source collected with its last fork, the reaper, and an app
// deleting a stream's message row (the stream goes with it).
func TestProtocolInAnAppsMapping(t *testing.T) {
	t.Parallel()
	db := pgtest.NewBareDB(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE answers (answer_id text PRIMARY KEY, txt text NOT NULL DEFAULT '',
		len bigint NOT NULL DEFAULT 0, state text NOT NULL DEFAULT 'pending', who text, speaker text)`)
	require.NoError(t, err)
	tables := checkpoint.Tables{Message: "answers", Chunks: "answer_parts", Columns: checkpoint.Columns{
		Key: "answer_id", Body: "txt", Seq: "len", Status: "state", Owner: "who", Role: "speaker",
		ChunkKey: "id", ChunkStream: "answer", ChunkSeq: "end_at", ChunkText: "part"}}
	p := mappedProtocol(t, db.Pool, tables)
	read := func(path string) string {
		t.Helper()
		_, text, _, err := p.Read(ctx, path, 0, 1000, false)
		require.NoError(t, err)
		return text
	}
	row := func(id string) (owner, role, state string, length int64) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT coalesce(who, ''), speaker, state, len FROM answers WHERE answer_id = $1", id).Scan(&owner, &role, &state, &length))
		return
	}

	meta, created, err := p.Create(ctx, checkpoint.CreateStream{Path: "chat/1", Owner: "alice", ContentType: "text/plain", Text: "héllo ", SameType: sameType})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "alice", meta.Owner)
	owner, role, state, length := row("ds/chat/1")
	require.Equal(t, []any{"alice", "stream", "pending", int64(6)}, []any{owner, role, state, length})

	w := checkpoint.AppendStream{Path: "chat/1", ContentType: "text/plain", Text: "wörld", SameType: sameType, Producer: &checkpoint.ProducerRef{ID: "p", Seq: 0}}
	out, err := p.Append(ctx, w)
	require.NoError(t, err)
	require.Equal(t, producer.Seq(11), out.Tail)
	out, err = p.Append(ctx, w)
	require.NoError(t, err)
	require.True(t, out.Duplicate, "the producer's retry is deduplicated")
	require.Equal(t, "héllo wörld", read("chat/1"))
	var keys []string
	rs, err := db.Pool.Query(ctx, "SELECT id FROM answer_parts WHERE answer = 'ds/chat/1' ORDER BY end_at")
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rs, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ds/chat/1:6", "ds/chat/1:11"}, keys, "the chunk key is written as the mapping names it")

	six := producer.Seq(6)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "chat/1-edit", SameType: sameType, Fork: &checkpoint.Fork{Source: "chat/1", Offset: &six}})
	require.NoError(t, err)
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "chat/1-edit", ContentType: "text/plain", Text: "again", Close: true, SameType: sameType})
	require.NoError(t, err)
	require.Equal(t, "héllo again", read("chat/1-edit"))
	_, _, state, _ = row("ds/chat/1-edit")
	require.Equal(t, "complete", state)
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id FROM answer_parts WHERE answer = 'ds/chat/1-edit' AND end_at = 6").Scan(new(string)))

	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "bin", ContentType: "application/octet-stream", Binary: true, SameType: sameType})
	require.NoError(t, err)
	_, err = p.Append(ctx, checkpoint.AppendStream{Path: "bin", ContentType: "application/octet-stream", Text: "\x00\xff", SameType: sameType})
	require.NoError(t, err)
	require.Equal(t, "\x00\xff", read("bin"))

	require.NoError(t, p.Delete(ctx, "chat/1"))
	_, err = p.Head(ctx, "chat/1")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone, "soft-deleted while its fork lives")
	require.ErrorIs(t, db.Pool.QueryRow(ctx, "SELECT 1 FROM answers WHERE answer_id = 'ds/chat/1'").Scan(new(int)), pgx.ErrNoRows, "its message row went")
	require.Equal(t, "héllo again", read("chat/1-edit"), "the fork is a copy")
	require.NoError(t, p.Delete(ctx, "chat/1-edit"))
	_, err = p.Head(ctx, "chat/1")
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound, "collected with its last fork")

	hour := int64(3600)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "brief", ContentType: "text/plain", TTL: &hour, Text: "x", SameType: sameType})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE ds_streams SET ttl_seconds = 0 WHERE path = 'brief'")
	require.NoError(t, err)
	reaped, err := p.Reap(ctx, 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, reaped.Streams)

	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "app-deletes", ContentType: "text/plain", Text: "y", SameType: sameType})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "DELETE FROM answers WHERE answer_id = 'ds/app-deletes'")
	require.NoError(t, err)
	_, err = p.Head(ctx, "app-deletes")
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound, "the app deleted the message row: the stream went with it")

	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM answers) + (SELECT count(*) FROM answer_parts)").Scan(&left))
	require.Zero(t, left, "nothing of the text streams is left")
}

// An append's writes go to PostgreSQL as one statement whose parameters are renumbered
// (oneStatement): a $ followed by digits inside a mapped name is part of the name, not a
// parameter. With names like that (legal in a quoted identifier), create, append (a producer's
// too, whose state is written in the same statement), close and read still land every value
// where it belongs.
func TestProtocolAppendsWithDollarsInTheMappedNames(t *testing.T) {
	t.Parallel()
	db := pgtest.NewBareDB(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE "m$1" ("id$2" text PRIMARY KEY, "body$1" text NOT NULL DEFAULT '',
		"seq$3" bigint NOT NULL DEFAULT 0, "status$2" text NOT NULL DEFAULT 'pending', "owner$1" text)`)
	require.NoError(t, err)
	tables := checkpoint.Tables{Message: "m$1", Chunks: "c$2", Columns: checkpoint.Columns{
		Key: "id$2", Body: "body$1", Seq: "seq$3", Status: "status$2", Owner: "owner$1",
		ChunkKey: "k$1", ChunkStream: "s$1", ChunkSeq: "e$2", ChunkText: "t$3"}}
	p := mappedProtocol(t, db.Pool, tables)
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "d", Owner: "o", ContentType: "text/plain", SameType: sameType})
	require.NoError(t, err)
	out, err := p.Append(ctx, checkpoint.AppendStream{Path: "d", ContentType: "text/plain", Text: "$1 costs ", SameType: sameType,
		Producer: &checkpoint.ProducerRef{ID: "$2", Seq: 0}, StreamSeq: "$3"})
	require.NoError(t, err)
	require.Equal(t, producer.Seq(9), out.Tail)
	out, err = p.Append(ctx, checkpoint.AppendStream{Path: "d", ContentType: "text/plain", Text: "$2", Close: true, SameType: sameType,
		Producer: &checkpoint.ProducerRef{ID: "$2", Seq: 1}})
	require.NoError(t, err)
	require.Equal(t, producer.Seq(11), out.Tail)
	require.True(t, out.Closed)
	_, text, _, err := p.Read(ctx, "d", 0, 100, false)
	require.NoError(t, err)
	require.Equal(t, "$1 costs $2", text)

	var seq int64
	var status, owner string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT "seq$3", "status$2", "owner$1" FROM "m$1" WHERE "id$2" = 'ds/d'`).Scan(&seq, &status, &owner))
	require.Equal(t, []any{int64(11), "complete", "o"}, []any{seq, status, owner})
	rs, err := db.Pool.Query(ctx, `SELECT "k$1" || ' ' || "t$3" FROM "c$2" WHERE "s$1" = 'ds/d' ORDER BY "e$2"`)
	require.NoError(t, err)
	chunks, err := pgx.CollectRows(rs, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ds/d:9 $1 costs ", "ds/d:11 $2"}, chunks)
	var by, streamSeq string
	var epoch, last int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT d.closed_by, d.stream_seq, p.epoch, p.last_seq FROM ds_streams d
		JOIN ds_producers p USING (path) WHERE d.path = 'd'`).Scan(&by, &streamSeq, &epoch, &last))
	require.Equal(t, []any{"$2", "$3", int64(0), int64(1)}, []any{by, streamSeq, epoch, last})
}

// ProtocolTablesDDL gives the protocol's tables the shape the project's migrations give them:
// the same columns (types, nullability, defaults), constraints and indexes, compared from the
// catalog of a migrated database and of a bare one given the DDL.
func TestProtocolTablesDDLMatchesTheMigrations(t *testing.T) {
	t.Parallel()
	migrated := pgtest.NewDB(t)
	bare := pgtest.NewBareDB(t)
	ctx := t.Context()
	_, err := bare.Pool.Exec(ctx, "CREATE TABLE messages (id text PRIMARY KEY)")
	require.NoError(t, err)
	stmts, err := checkpoint.ProtocolTablesDDL(checkpoint.DefaultTables())
	require.NoError(t, err)
	for _, stmt := range stmts {
		_, err := bare.Pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	shape := func(db *pgtest.DB) []string {
		rs, err := db.Pool.Query(ctx, `
			SELECT format('column %s.%s %s null=%s default=%s', table_name, column_name, data_type, is_nullable, coalesce(column_default, ''))
				FROM information_schema.columns WHERE table_name IN ('ds_streams', 'ds_producers', 'ds_bytes')
			UNION ALL SELECT format('constraint %s %s', conrelid::regclass, pg_get_constraintdef(oid))
				FROM pg_constraint WHERE conrelid::regclass::text IN ('ds_streams', 'ds_producers', 'ds_bytes')
			UNION ALL SELECT format('index %s', regexp_replace(indexdef, 'INDEX \S+ ON', 'INDEX ON'))
				FROM pg_indexes WHERE tablename IN ('ds_streams', 'ds_producers', 'ds_bytes')
			ORDER BY 1`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rs, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	require.Equal(t, shape(migrated), shape(bare))
}

// A path deleted and created again between Read's metadata read and its data read: Read
// answers wholly from the new stream (its incarnation, its data), never the old stream's
// metadata with the new stream's data, which would hand the old stream's readers offsets of the
// old stream over text it never held.
func TestProtocolReadNeverMixesIncarnations(t *testing.T) {
	t.Parallel()
	p, _ := newProtocol(t)
	ctx := t.Context()
	for _, ct := range []string{"text/plain", "application/octet-stream"} {
		path := "again-" + ct
		old, _, err := p.Create(ctx, checkpoint.CreateStream{Path: path, ContentType: ct, Text: "old", SameType: sameType, Binary: ct != "text/plain"})
		require.NoError(t, err)
		var fresh checkpoint.StreamMeta
		checkpoint.SetAfterHead(p, func() {
			checkpoint.SetAfterHead(p, nil)
			require.NoError(t, p.Delete(ctx, path))
			fresh, _, err = p.Create(ctx, checkpoint.CreateStream{Path: path, ContentType: ct, Text: "new and longer", SameType: sameType, Binary: ct != "text/plain"})
			require.NoError(t, err)
		})
		m, text, end, err := p.Read(ctx, path, 1, 10, false)
		require.NoError(t, err)
		require.Greater(t, fresh.Incarnation, old.Incarnation, "a later stream has a greater incarnation")
		require.Equal(t, fresh.Incarnation, m.Incarnation, "%s: the read names the stream it read", ct)
		require.Equal(t, "ew and longer", text, ct)
		require.Equal(t, producer.Seq(len("new and longer")), end, ct)
	}
}

// mappedProtocol creates the chunk table and the protocol's tables for an app's mapping (its
// message table already made) and returns a Protocol on them.
func mappedProtocol(t *testing.T, pool *pgxpool.Pool, tables checkpoint.Tables) *checkpoint.Protocol {
	t.Helper()
	for _, ddl := range []func(checkpoint.Tables) ([]string, error){checkpoint.ChunkTableDDL, checkpoint.ProtocolTablesDDL} {
		stmts, err := ddl(tables)
		require.NoError(t, err)
		for _, stmt := range stmts {
			_, err := pool.Exec(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
	}
	p, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: pool, Tables: &tables})
	require.NoError(t, err)
	return p
}

// newProtocol is a protocol store on a fresh database of its own.
func newProtocol(t *testing.T) (*checkpoint.Protocol, *pgtest.DB) {
	t.Helper()
	db := pgtest.NewDB(t)
	p, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: db.Pool})
	require.NoError(t, err)
	return p, db
}

// sameType is the tests' content-type match: exact.
func sameType(a, b string) bool { return a == b }
