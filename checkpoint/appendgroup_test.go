package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

type groupedResult struct {
	out checkpoint.AppendOutcome
	err error
}

// groupFixture is a Protocol with one append transaction at a time (Writers 1), on a database
// whose chunk inserts a test can make the server refuse: "boom now" at the insert, "boom at
// commit" at the COMMIT (a deferred trigger), and "die at commit" ends the session at COMMIT.
type groupFixture struct {
	t    *testing.T
	db   *pgtest.DB
	p    *checkpoint.Protocol
	same func(a, b string) bool
}

func newGroupFixture(t *testing.T, paths ...string) *groupFixture {
	t.Helper()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: db.Pool, Writers: 1})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `
		CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.text LIKE '%boom%' THEN RAISE EXCEPTION 'refused: %', NEW.text; END IF; RETURN NEW; END $$;
		CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
		CREATE TRIGGER refuse_now BEFORE INSERT ON message_chunks FOR EACH ROW WHEN (NEW.text = 'boom now') EXECUTE FUNCTION refuse_boom();
		CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON message_chunks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.text = 'boom at commit') EXECUTE FUNCTION refuse_boom();
		CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON message_chunks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.text = 'die at commit') EXECUTE FUNCTION die();`)
	require.NoError(t, err)
	f := &groupFixture{t: t, db: db, p: p, same: func(a, b string) bool { return a == b }}
	for _, path := range paths {
		_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: path, ContentType: "text/plain", SameType: f.same})
		require.NoError(t, err)
	}
	return f
}

func (f *groupFixture) text(path, text string) checkpoint.AppendStream {
	return checkpoint.AppendStream{Path: path, ContentType: "text/plain", Text: text, SameType: f.same}
}

// lock holds path's row in a transaction of its own until the returned function commits it.
func (f *groupFixture) lock(path string) func() {
	f.t.Helper()
	tx, err := f.db.Pool.Begin(f.t.Context())
	require.NoError(f.t, err)
	// A test that fails while holding it lets it go, so the appends waiting on it end.
	f.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(f.t.Context(), "SELECT 1 FROM ds_streams WHERE path = $1 FOR UPDATE", path)
	require.NoError(f.t, err)
	return func() { require.NoError(f.t, tx.Commit(f.t.Context())) }
}

func (f *groupFixture) start(in checkpoint.AppendStream) chan groupedResult {
	res := make(chan groupedResult, 1)
	go func() {
		out, err := f.p.Append(context.Background(), in)
		res <- groupedResult{out, err}
	}()
	return res
}

// group runs ins as one group commit: the test holds the one slot, ins queue for it one at a
// time (so the group's order is ins's), and the slot is given back: it passes to the first of
// ins, which takes the others into its transaction. The results are in ins's order.
func (f *groupFixture) group(ins ...checkpoint.AppendStream) []chan groupedResult {
	f.t.Helper()
	release := checkpoint.HoldAppendSlots(f.p)
	res := make([]chan groupedResult, len(ins))
	for i, in := range ins {
		res[i] = f.start(in)
		eventually.True(f.t, func() bool { return checkpoint.PendingAppends(f.p) == i+1 })
	}
	release()
	return res
}

// recv is the result on res, failing the test when none comes within a minute (an append that
// waits on what should not hold it).
func recv(t *testing.T, res chan groupedResult) groupedResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-eventually.Late(t):
		t.Fatal("no answer came")
		return groupedResult{}
	}
}

func (f *groupFixture) read(path string) string {
	f.t.Helper()
	_, text, _, err := f.p.Read(f.t.Context(), path, 0, 1<<20, false)
	require.NoError(f.t, err)
	return text
}

// Issue 22: appends to different streams share a transaction, and each gets the answer it
// would get alone. In one group: an append, a content type that is not the stream's, a
// producer's retry, a close, an expired stream, a missing one, and a stream whose row another
// transaction holds. That last one runs alone (it waits for the lock) while the group commits
// without waiting for it.
func TestGroupedAppendsAnswerAsAlone(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "a", "b", "d", "e", "locked", "expired")
	ctx := t.Context()
	dup := f.text("d", "once")
	dup.Producer = &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: 0}
	_, err := f.p.Append(ctx, dup)
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, "UPDATE ds_streams SET ttl_seconds = 0 WHERE path = 'expired'")
	require.NoError(t, err)
	release := f.lock("locked")

	mismatch := f.text("b", "json?")
	mismatch.ContentType = "application/json"
	closing := f.text("e", "bye")
	closing.Close = true
	before := checkpoint.GroupedAppends(f.p)
	// The expired stream first, with a producer: its reads must not be taken for the next one's.
	expired := f.text("expired", "x")
	expired.Producer = &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: 0}
	res := f.group(expired, f.text("a", "a1"), mismatch, dup, closing, f.text("locked", "l1"), f.text("missing", "x"))
	res = append(res[1:], res[0]) // a, b, d, e, locked, missing, expired

	a, b, d, e := recv(t, res[0]), recv(t, res[1]), recv(t, res[2]), recv(t, res[3])
	require.NoError(t, a.err)
	require.Equal(t, producer.Seq(2), a.out.Tail)
	require.ErrorIs(t, b.err, checkpoint.ErrContentTypeMismatch)
	require.NoError(t, d.err)
	require.True(t, d.out.Duplicate, "a producer's retry is a duplicate in a group too")
	require.NoError(t, e.err)
	require.True(t, e.out.Closed)
	require.ErrorIs(t, recv(t, res[5]).err, checkpoint.ErrStreamNotFound, "missing")
	require.ErrorIs(t, recv(t, res[6]).err, checkpoint.ErrStreamNotFound, "expired")
	require.Equal(t, before+2, checkpoint.GroupedAppends(f.p), "a and e committed in one transaction")
	select {
	case r := <-res[4]:
		t.Fatalf("the append to the locked stream returned before its lock was let go: %+v", r)
	default:
	}
	release()
	l := recv(t, res[4])
	require.NoError(t, l.err)
	require.Equal(t, producer.Seq(2), l.out.Tail)

	for path, want := range map[string]string{"a": "a1", "b": "", "d": "once", "e": "bye", "locked": "l1"} {
		require.Equal(t, want, f.read(path), path)
	}
	m, err := f.p.Head(ctx, "e")
	require.NoError(t, err)
	require.True(t, m.Closed)
}

// A statement the server refuses in a group (at the insert, or at the COMMIT) rolls the group
// back: the refused append gets the server's error, every other append runs again alone and is
// acknowledged once, and nothing of the refused one is stored.
func TestGroupedAppendRefusedFailsOnlyItself(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "a", "b", "c")
	for _, boom := range []string{"boom now", "boom at commit"} {
		res := f.group(f.text("a", "["+boom+"]"), f.text("b", boom), f.text("c", "["+boom+"]"))
		require.NoError(t, recv(t, res[0]).err, boom)
		require.ErrorContains(t, recv(t, res[1]).err, "refused: "+boom)
		require.NoError(t, recv(t, res[2]).err, boom)
	}
	require.Equal(t, "[boom now][boom at commit]", f.read("a"))
	require.Empty(t, f.read("b"))
	require.Equal(t, "[boom now][boom at commit]", f.read("c"))
}

// A group whose session ends at its COMMIT has an unknown outcome, as a lone append's would:
// every append of it gets an error, and none is run again (a retry of a COMMIT that took effect
// would append twice).
func TestGroupedAppendsOfALostCommitAllFail(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "a", "b", "c")
	before := checkpoint.GroupedAppends(f.p)
	res := f.group(f.text("a", "a"), f.text("b", "die at commit"), f.text("c", "c"))
	for i, r := range res {
		got := recv(t, r)
		require.Error(t, got.err, "append %d", i)
		require.NotErrorIs(t, got.err, checkpoint.ErrStreamNotFound)
	}
	require.Equal(t, before, checkpoint.GroupedAppends(f.p))
	// Here the session ended before the commit record: nothing was stored, and the streams take
	// appends again.
	for _, path := range []string{"a", "b", "c"} {
		require.Empty(t, f.read(path), path)
		_, err := f.p.Append(t.Context(), f.text(path, "again"))
		require.NoError(t, err)
	}
}

// Random schedules: writers append to a few streams at once, each with an idempotent producer
// that sometimes retries an append it already made, sometimes sends a gap (refused), and with
// some appends' callers leaving before the answer. Every acknowledged append is stored exactly
// once, in the order of its producer's seq; nothing refused is stored. Groups form (more
// writers than transactions), and each stream's text is its producer's acknowledged appends.
// Some appends are large (LargeAppendBytes), and so transactions of their own beside the groups.
// With one transaction at a time (the default) and with two.
func TestGroupedAppendsRandomSchedules(t *testing.T) {
	t.Parallel()
	for _, writers := range []int{1, 2} {
		t.Run(fmt.Sprintf("Writers=%d", writers), func(t *testing.T) {
			t.Parallel()
			groupedAppendsRandomSchedule(t, writers)
		})
	}
}

func groupedAppendsRandomSchedule(t *testing.T, writers int) {
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: db.Pool, Writers: writers})
	require.NoError(t, err)
	same := func(a, b string) bool { return a == b }
	const streams, perStream = 12, 40
	for s := range streams {
		_, _, err := p.Create(ctx, checkpoint.CreateStream{Path: fmt.Sprintf("s%d", s), ContentType: "text/plain", SameType: same})
		require.NoError(t, err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	want := make([]strings.Builder, streams)
	var wg sync.WaitGroup
	for s := range streams {
		rng := rand.New(rand.NewPCG(seed, uint64(s)))
		wg.Go(func() {
			path := fmt.Sprintf("s%d", s)
			var seq int64
			for seq < perStream {
				text := fmt.Sprintf("<%d:%d>", s, seq)
				if rng.IntN(10) == 0 {
					text = fmt.Sprintf("<%d:%d:%s>", s, seq, strings.Repeat("x", checkpoint.LargeAppendBytes))
				}
				in := checkpoint.AppendStream{Path: path, ContentType: "text/plain", Text: text, SameType: same,
					Producer: &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: seq}}
				switch rng.IntN(8) {
				case 0: // a gap: refused, nothing stored
					gap := in
					gap.Producer = &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: seq + 2}
					gap.Text = "<gap>"
					_, err := p.Append(ctx, gap)
					var pe *checkpoint.ProducerError
					if !assertAs(t, err, &pe) {
						return
					}
					continue
				case 1: // the caller leaves at once; the append may or may not be stored
					cctx, cancel := context.WithCancel(ctx)
					cancel()
					_, _ = p.Append(cctx, in)
				}
				out, err := p.Append(ctx, in) // the append, or the retry of one that may be stored
				if err != nil {
					t.Errorf("%s seq %d: %v", path, seq, err)
					return
				}
				if out.Duplicate {
					require.Equal(t, seq, out.ProducerSeq)
				}
				want[s].WriteString(text)
				if rng.IntN(4) == 0 { // a retry of an acknowledged append
					again, err := p.Append(ctx, in)
					if err != nil || !again.Duplicate {
						t.Errorf("%s seq %d retried: %+v, %v", path, seq, again, err)
						return
					}
				}
				seq++
			}
		})
	}
	wg.Wait()
	for s := range streams {
		_, text, _, err := p.Read(ctx, fmt.Sprintf("s%d", s), 0, 64<<20, false)
		require.NoError(t, err)
		require.True(t, want[s].String() == text, "stream s%d (seed %d): %d bytes stored, %d acknowledged", s, seed, len(text), want[s].Len())
	}
	require.Positive(t, checkpoint.GroupedAppends(p), "appends went in groups")
}

func assertAs[E error](t *testing.T, err error, target *E) bool {
	t.Helper()
	if err == nil {
		t.Error("want an error, got none")
		return false
	}
	if !errors.As(err, target) {
		t.Errorf("want %T, got %v", *target, err)
		return false
	}
	return true
}

// Appends to a stream whose row another transaction holds (a long fork, say) wait outside the
// group commit's slots: with the one slot, an append to the held stream waits, and an append to
// another stream is answered meanwhile.
func TestAHeldStreamTakesNoAppendSlot(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "held", "a")
	release := f.lock("held")
	held := f.start(f.text("held", "h"))
	f.answeredWhileOneWaits(held)
	release()
	require.NoError(t, recv(t, held).err)
	require.Equal(t, "h", f.read("held"))
}

// answeredWhileOneWaits checks that the append held is waiting on a row lock, outside the one
// slot: an append to stream "a" is answered meanwhile, and held is not.
func (f *groupFixture) answeredWhileOneWaits(held chan groupedResult) {
	t := f.t
	t.Helper()
	eventually.True(t, func() bool {
		var waiting int
		require.NoError(t, f.db.Pool.QueryRow(t.Context(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting))
		return waiting > 0
	})
	a := recv(t, f.start(f.text("a", "a")))
	require.NoError(t, a.err)
	select {
	case r := <-held:
		t.Fatalf("the held append returned before its lock was let go: %+v", r)
	default:
	}
}

// heldProducer appends "h0" to stream "held" as producer p (seq 0), then holds p's state row,
// and with stream also the stream's own row, in a transaction of its own (the reaper holds the
// first alone; an append holds both) until the returned function commits it. It returns p's
// next append, "h1" at seq 1.
func (f *groupFixture) heldProducer(stream bool) (checkpoint.AppendStream, func()) {
	f.t.Helper()
	ctx := f.t.Context()
	first := f.text("held", "h0")
	first.Producer = &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: 0}
	_, err := f.p.Append(ctx, first)
	require.NoError(f.t, err)
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if stream {
		_, err = tx.Exec(ctx, "SELECT 1 FROM ds_streams WHERE path = 'held' FOR UPDATE")
		require.NoError(f.t, err)
	}
	tag, err := tx.Exec(ctx, "SELECT 1 FROM ds_producers WHERE path = 'held' AND producer_id = 'p' FOR UPDATE")
	require.NoError(f.t, err)
	require.Equal(f.t, int64(1), tag.RowsAffected(), "the producer's state row exists")
	next := f.text("held", "h1")
	next.Producer = &checkpoint.ProducerRef{ID: "p", Epoch: 0, Seq: 1}
	return next, func() { require.NoError(f.t, tx.Commit(ctx)) }
}

// A group commit reads every append's state in the round trip that locks the group's rows, so
// it also reads the producer state of a stream whose row it did not get. When the transaction
// holding that stream holds its producer's row too, the group must not wait on it: it runs
// alone what it cannot lock, and the others are answered while the row is held.
func TestAGroupDoesNotWaitOnAHeldProducerRow(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "held", "a")
	next, release := f.heldProducer(true)
	res := f.group(next, f.text("a", "a1"))
	a := recv(t, res[1])
	require.NoError(t, a.err, "answered while the held stream's producer row is held")
	select {
	case r := <-res[0]:
		t.Fatalf("the append to the held stream returned before its lock was let go: %+v", r)
	default:
	}
	release()
	h := recv(t, res[0])
	require.NoError(t, h.err)
	require.Equal(t, int64(1), h.out.ProducerSeq)
	require.Equal(t, "h0h1", f.read("held"))
	require.Equal(t, "a1", f.read("a"))
}

// A slot's lone append locks its stream's row, then reads its producer's state without waiting
// on it: a producer row that another transaction holds alone (the reaper's batch) sends the
// append to wait outside the slot, and an append to another stream is answered meanwhile.
func TestAHeldProducerRowTakesNoAppendSlot(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "held", "a")
	next, release := f.heldProducer(false)
	held := f.start(next)
	f.answeredWhileOneWaits(held) // it waits on the producer's row, outside the slot
	release()
	h := recv(t, held)
	require.NoError(t, h.err)
	require.Equal(t, "h0h1", f.read("held"))
}

// An append of LargeAppendBytes or more is a transaction of its own, outside the one slot: with
// the slot taken, it is answered, and a small append to another stream waits for the slot. A
// long transaction (an 8 MiB body) so never holds every other stream's appends.
func TestALargeAppendTakesNoAppendSlot(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t, "large", "small")
	release := checkpoint.HoldAppendSlots(f.p)
	defer func() {
		if release != nil {
			release()
		}
	}()
	small := f.start(f.text("small", "s"))
	eventually.True(t, func() bool { return checkpoint.PendingAppends(f.p) == 1 })
	body := strings.Repeat("L", checkpoint.LargeAppendBytes)
	large := recv(t, f.start(f.text("large", body)))
	require.NoError(t, large.err)
	require.Equal(t, producer.Seq(len(body)), large.out.Tail)
	require.Equal(t, 1, checkpoint.PendingAppends(f.p), "the small append still waits for the slot")
	select {
	case r := <-small:
		t.Fatalf("the small append was answered while the slot was held: %+v", r)
	default:
	}
	release()
	release = nil
	require.NoError(t, recv(t, small).err)
	require.Equal(t, body, f.read("large"))
	require.Equal(t, "s", f.read("small"))

	// One byte less goes through the group commit: it waits for the slot like any other.
	release = checkpoint.HoldAppendSlots(f.p)
	below := f.start(f.text("large", body[1:]))
	eventually.True(t, func() bool { return checkpoint.PendingAppends(f.p) == 1 })
	release()
	release = nil
	require.NoError(t, recv(t, below).err)
}
