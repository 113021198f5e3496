package checkpoint_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Issue 9's reproductions at the package level, on the real server: each names what was seen.

// A host's lease row held FOR UPDATE by another session for longer than the TTL: renewals hang,
// and the sweeper of the same, healthy process used to seal its own live stream interrupted
// while its producer kept getting every push accepted.
func TestHostNeverSealsItsOwnLiveStream(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	const ttl = time.Second
	lease := startLease(t, b, "h1", ttl)
	sw, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables(),
		HostID: "h1", Interval: ttl / 3})
	require.NoError(t, err)
	require.NoError(t, sw.Start(ctx))
	t.Cleanup(sw.Stop)

	s := b.open(t, "m1")
	require.NoError(t, s.Push("before the lock. "))
	_, err = s.Flush(ctx)
	require.NoError(t, err)

	// Another session locks the lease row until the host has fenced itself and at least 3 TTLs
	// have passed (the sweeper runs three times a TTL): the lock ends on what the host did, not
	// on a clock alone, so a slow machine cannot end it before the fence.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT * FROM rindle_hosts WHERE host = 'h1' FOR UPDATE")
	require.NoError(t, err)
	var accepted strings.Builder
	accepted.WriteString("before the lock. ")
	refused := 0
	locked := time.Now()
	eventually.True(t, func() bool {
		if err := s.Push("x"); err == nil {
			accepted.WriteString("x")
		} else {
			require.ErrorIs(t, err, producer.ErrSuspended, "a push is refused only because the lease cannot be proven")
			refused++
		}
		return refused > 0 && time.Since(locked) >= 3*ttl
	}, "the host never fenced itself while its lease could not be renewed")
	require.NoError(t, tx.Rollback(ctx))
	eventually.True(t, lease.Held)
	eventually.True(t, func() bool { return s.Push("") == nil }, "pushes resume once the lease is held again")
	require.NoError(t, s.Push(" after."))
	accepted.WriteString(" after.")
	require.NoError(t, s.Close(ctx))
	r := b.durable(t, "m1")
	require.Equal(t, "complete", r.status)
	require.Equal(t, accepted.String(), r.text)
}

// The stream's row sealed by another host's sweeper (this host's lease lapsed): the stream ends
// at once, pushes are refused with ErrFenced, and readers get the row's status and length.
func TestStreamSealedByAnotherWriterEndsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	s := b.open(t, "m1")
	require.NoError(t, s.Push("durable "))
	_, err := s.Flush(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Push("produced only"))
	sub, err := b.plane.Subscribe(ctx, producer.SubscribeInput{StreamID: "m1"})
	require.NoError(t, err)

	// h1 holds no lease at all: another host's sweeper takes the row.
	other, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables(), HostID: "h2"})
	require.NoError(t, err)
	n, err := other.SweepOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	_, err = s.Flush(ctx)
	require.ErrorIs(t, err, producer.ErrFenced)
	require.ErrorIs(t, s.Push("more"), producer.ErrFenced, "a fenced stream takes no more text")
	frames := streamtest.Collect(t, sub)
	end := frames[len(frames)-1]
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Equal(t, producer.StatusInterrupted, end.Status, "the end frame says what the row holds")
	require.Equal(t, producer.Seq(8), end.Seq)
	r := b.durable(t, "m1")
	require.Equal(t, "interrupted", r.status)
	require.Equal(t, "durable ", r.text)
	require.ErrorIs(t, s.Close(ctx), producer.ErrFenced)
}

// A close during a database blip: the seal is retried by its own host until it commits, and
// no reader hears an end before it has.
func TestFailedSealIsRetriedUntilItCommits(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"), withConfig(func(c *producer.Config) { c.CheckpointRetries = producer.NoRetries }))
	ctx := t.Context()
	s := b.open(t, "m1")
	require.NoError(t, s.Push(strings.Repeat("a", 16)))
	b.waitCheckpoint(t)
	require.NoError(t, s.Push("tail"))
	sub, err := b.plane.Subscribe(ctx, producer.SubscribeInput{StreamID: "m1"})
	require.NoError(t, err)

	b.fdb.set(func(f *faultDB) { f.down = true })
	err = s.Close(ctx)
	var nd *producer.NotDurableError
	require.ErrorAs(t, err, &nd, "the first close reports that the seal is not durable yet")
	require.Equal(t, producer.Seq(16), nd.DurableSeq)
	require.ErrorIs(t, s.Push("late"), producer.ErrClosed, "a sealing stream takes no more text")
	// No end while the seal is unconfirmed.
	pending := make(chan producer.Frame, 16)
	go func() {
		for {
			f, err := sub.Next(context.Background())
			if err != nil {
				close(pending)
				return
			}
			pending <- f
			if f.Terminal() {
				close(pending)
				return
			}
		}
	}()
	drainUntilQuiet(t, pending)
	b.fdb.set(func(f *faultDB) { f.down = false })
	// The retry runs on the interval, on its own.
	eventually.True(t, func() bool {
		b.clock.Advance(time.Second)
		return b.durable(t, "m1").status == "complete"
	})
	var end producer.Frame
	for f := range pending {
		end = f
	}
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Equal(t, producer.StatusComplete, end.Status)
	require.Equal(t, producer.Seq(20), end.Seq)
	require.NoError(t, s.Close(ctx), "a second close answers the committed seal")
	r := b.durable(t, "m1")
	require.Equal(t, strings.Repeat("a", 16)+"tail", r.text)
}

// drainUntilQuiet reads frames until none came for a moment, and fails on a terminal one.
func drainUntilQuiet(t *testing.T, frames <-chan producer.Frame) {
	t.Helper()
	for {
		select {
		case f, ok := <-frames:
			require.True(t, ok, "the subscription ended while the seal was unconfirmed")
			require.False(t, f.Terminal(), "%s frame before the seal committed", f.Type)
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

// An open and a close whose replies are lost on their only attempt: each reads the row back
// and reports what it holds, as an append does.
func TestOpenAndCloseReadBackAfterALostReply(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"), withConfig(func(c *producer.Config) { c.CheckpointRetries = producer.NoRetries }))
	ctx := t.Context()
	b.insert(t, "m1")
	b.fdb.set(func(f *faultDB) { f.loseAck = 1 })
	s, err := b.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m1"})
	require.NoError(t, err, "the open committed: its read-back says so")
	require.NoError(t, s.Push("text"))
	b.fdb.set(func(f *faultDB) { f.loseAck = 1 })
	require.NoError(t, s.Close(ctx), "the seal committed: its read-back says so")
	r := b.durable(t, "m1")
	require.Equal(t, "complete", r.status)
	require.Equal(t, "text", r.text)
}

// An open whose outcome cannot be known (the write and its read-back both fail) must not leave
// the row streaming under this host's live lease: the plane releases it in the background.
func TestUnconfirmedOpenIsReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"), withConfig(func(c *producer.Config) { c.CheckpointRetries = producer.NoRetries }))
	ctx := t.Context()
	b.insert(t, "m1")
	b.fdb.set(func(f *faultDB) { f.loseAck, f.failQuery = 1, 1 })
	_, err := b.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m1"})
	require.Error(t, err)
	eventually.True(t, func() bool {
		b.clock.Advance(time.Second)
		return b.durable(t, "m1").status != "streaming"
	}, "the row is released, not left streaming behind a live lease")
	// And it can be opened again.
	eventually.True(t, func() bool {
		_, err := b.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m1"})
		return err == nil
	})
}

// Dead hosts' lease rows are forgotten once their streams are sealed.
func TestSweeperForgetsDeadHosts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO rindle_hosts (host, lease_until) VALUES
		('long-dead', now() - interval '2 hours'), ('just-lapsed', now() - interval '1 second'), ('alive', now() + interval '1 hour')`)
	require.NoError(t, err)
	sw, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables(), HostID: "me"})
	require.NoError(t, err)
	_, err = sw.SweepOnce(ctx)
	require.NoError(t, err)
	rows, err := b.db.Pool.Query(ctx, "SELECT host FROM rindle_hosts ORDER BY host")
	require.NoError(t, err)
	var hosts []string
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		hosts = append(hosts, h)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"alive", "just-lapsed"}, hosts)
}

// A real lease: when renewals stop (the row is locked by another session), the holder fences
// itself while the database still counts its lease as live, so no other host's sweeper can have
// acted first; and once renewals succeed again it says so.
//
// The fence comes Guard before the lapse by the holder's clock; the test gives it a wide Guard
// (2 s of a 4 s TTL) so that a busy machine's scheduling delay cannot make the fence late.
func TestLeaseFencesItselfBeforeItLapses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	lost := make(chan bool, 1) // whether the database still held the lease at the fence
	held := make(chan struct{}, 64)
	lease, err := checkpoint.NewLease(checkpoint.LeaseConfig{
		DB: checkpoint.PoolDB(b.db.Pool), HostID: "h1",
		TTL: 4 * time.Second, Interval: time.Second, Guard: 2 * time.Second,
		OnLostFunc: func(error) {
			var live bool
			// Another connection: the row is locked, but a plain read is not blocked.
			err := b.db.Pool.QueryRow(context.Background(), "SELECT lease_until > now() FROM rindle_hosts WHERE host = 'h1'").Scan(&live)
			lost <- err == nil && live
		},
		OnHeldFunc: func(context.Context) { held <- struct{}{} },
	})
	require.NoError(t, err)
	require.NoError(t, lease.Start(ctx))
	t.Cleanup(lease.Stop)
	require.True(t, lease.Held())

	tx := lockLeaseRow(t, b.db, "h1")
	select {
	case live := <-lost:
		require.True(t, live, "the holder fenced itself only after its lease had lapsed in the database")
	case <-eventually.Late(t):
		t.Fatal("the lease never fenced its holder")
	}
	require.False(t, lease.Held())
	for len(held) > 0 {
		<-held
	}
	require.NoError(t, tx.Rollback(ctx))
	select {
	case <-held:
	case <-eventually.Late(t):
		t.Fatal("the lease was never held again")
	}
	require.True(t, lease.Held())
}

// lockLeaseRow holds host's lease row FOR UPDATE in a transaction of its own until the test
// rolls it back, or until the test ends (even a failed one: a transaction left open would hold
// its connection, and the pool's close in the database's cleanup would wait for it forever).
func lockLeaseRow(t *testing.T, db *pgtest.DB, host string) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(t.Context(), "SELECT * FROM rindle_hosts WHERE host = $1 FOR UPDATE", host)
	require.NoError(t, err)
	return tx
}

// Stop cannot hang behind a lease row another session holds locked (and so neither can a
// drain on SIGTERM): the renewal stuck on the lock is abandoned, and the release gives up after
// ReleaseTimeout, leaving the lease to lapse.
func TestLeaseStopIsBoundedBehindALockedRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lease, err := checkpoint.NewLease(checkpoint.LeaseConfig{
		DB: checkpoint.PoolDB(b.db.Pool), HostID: "h1", TTL: time.Minute, Interval: time.Second,
		RetryInterval: 10 * time.Millisecond, ReleaseTimeout: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, lease.Start(t.Context()))
	tx := lockLeaseRow(t, b.db, "h1")
	// Wait until a renewal is stuck on the lock.
	eventually.True(t, func() bool {
		var waiting int
		_ = b.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		return waiting > 0
	}, "a renewal waits for the lock")
	stopped := make(chan struct{})
	go func() { lease.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-eventually.Late(t):
		t.Fatal("Stop hung behind the locked lease row")
	}
	// Stop returned while the row was still locked.
	require.NoError(t, tx.Rollback(t.Context()))
}

// An open of a sealed row is refused as sealed, whatever its length; a row released at 0 (an
// open whose outcome was unknown) may be opened again.
func TestOpenOfASealedRowSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO messages (id, owner, status) VALUES
		('empty-done', 'alice', 'complete'), ('released', 'alice', 'interrupted')`)
	require.NoError(t, err)
	_, err = b.plane.Open(ctx, producer.OpenStreamInput{StreamID: "empty-done"})
	require.ErrorIs(t, err, producer.ErrOpenRefused)
	require.ErrorContains(t, err, "it is sealed (complete at 0)")
	s, err := b.plane.Open(ctx, producer.OpenStreamInput{StreamID: "released"})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
}

// An append racing a sweep: the sweeper has locked the row; the append waits; the sweeper seals
// the row (folding its chunks) and commits. The append must then write nothing: a chunk landing
// after the fold would sit past the sealed row's length.
func TestAnAppendRacingASweepLeavesNoChunkBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	s := b.open(t, "m1")
	require.NoError(t, s.Push(strings.Repeat("a", 16)))
	b.waitCheckpoint(t)

	sweep, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = sweep.Rollback(ctx) }()
	_, err = sweep.Exec(ctx, "SELECT 1 FROM messages WHERE id = 'm1' FOR UPDATE")
	require.NoError(t, err)

	require.NoError(t, s.Push("tail"))
	flushed := make(chan error, 1)
	go func() { _, err := s.Flush(ctx); flushed <- err }()
	eventually.True(t, func() bool {
		var waiting int
		_ = b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		return waiting > 0
	}, "the append waits for the sweep")
	_, err = sweep.Exec(ctx, `UPDATE messages SET body = body || coalesce((SELECT string_agg(text, '' ORDER BY seq) FROM message_chunks WHERE stream_id = 'm1'), ''), status = 'interrupted' WHERE id = 'm1'`)
	require.NoError(t, err)
	_, err = sweep.Exec(ctx, "DELETE FROM message_chunks WHERE stream_id = 'm1'")
	require.NoError(t, err)
	require.NoError(t, sweep.Commit(ctx))

	require.ErrorIs(t, <-flushed, producer.ErrFenced)
	r := b.durable(t, "m1") // checks the chunks continue the body and the length column agrees
	require.Equal(t, "interrupted", r.status)
	require.Equal(t, strings.Repeat("a", 16), r.text)
	require.Zero(t, r.chunks)
}
