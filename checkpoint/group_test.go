package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// groupWorld is a Store with group commit over the fault wrapper, and n opened streams g0…gn-1.
type groupWorld struct {
	db    *pgtest.DB
	fdb   *faultDB
	store *checkpoint.Store
	ids   []string
}

func newGroupWorld(t *testing.T, n int, cfg checkpoint.Config) *groupWorld {
	t.Helper()
	db := pgtest.NewDBWith(t, 8)
	fdb := newFaultDB(checkpoint.PoolDB(db.Pool))
	cfg.DB = fdb
	store, err := checkpoint.New(cfg)
	require.NoError(t, err)
	w := &groupWorld{db: db, fdb: fdb, store: store}
	for i := range n {
		id := fmt.Sprintf("g%d", i)
		_, err := db.Pool.Exec(t.Context(), "INSERT INTO messages (id, owner) VALUES ($1, 'alice')", id)
		require.NoError(t, err)
		require.NoError(t, store.Open(t.Context(), producer.OpenInput{StreamID: id}))
		w.ids = append(w.ids, id)
	}
	return w
}

// stored is a row's length and its chunks' text, in order.
func (w *groupWorld) stored(t *testing.T, id string) (producer.Seq, string) {
	t.Helper()
	var seq int64
	var text string
	require.NoError(t, w.db.Pool.QueryRow(context.Background(),
		`SELECT m.seq, COALESCE((SELECT string_agg(text, '' ORDER BY seq) FROM message_chunks WHERE stream_id = m.id AND seq <= m.seq), '')
		 FROM messages m WHERE m.id = $1`, id).Scan(&seq, &text))
	return producer.Seq(seq), text
}

// waitPending waits until n checkpoints wait for a slot.
func waitPending(t *testing.T, s *checkpoint.Store, n int) {
	t.Helper()
	for checkpoint.PendingWrites(s) != n {
		runtime.Gosched()
	}
}

type appendResult struct {
	res producer.AppendResult
	err error
}

// heldGroup runs one append on g0, held at the gate (it takes its faults before it), then one on
// each other stream, which wait for the slot; ctxs (when given) are their contexts. between runs
// once they all wait, after runs once g0 is let go. It returns the results in stream order.
func (w *groupWorld) heldGroup(t *testing.T, ctxs map[int]context.Context, between, after func()) []appendResult {
	t.Helper()
	gate := make(chan struct{})
	w.fdb.set(func(f *faultDB) { f.gate = gate })
	results := make([]appendResult, len(w.ids))
	var wg sync.WaitGroup
	start := func(i int) {
		ctx := t.Context()
		if c, ok := ctxs[i]; ok {
			ctx = c
		}
		text := strings.Repeat(string(rune('a'+i)), 300)
		wg.Go(func() {
			res, err := w.store.Append(ctx, producer.AppendInput{StreamID: w.ids[i], From: 0, Seq: 300, Text: text})
			results[i] = appendResult{res, err}
		})
	}
	start(0)
	<-w.fdb.held
	for i := 1; i < len(w.ids); i++ {
		start(i)
	}
	waitPending(t, w.store, len(w.ids)-1)
	if between != nil {
		between()
	}
	close(gate)
	if after != nil {
		after()
	}
	wg.Wait()
	return results
}

// Checkpoints that arrive while every slot runs go in one transaction, and each is confirmed
// with its own row.
func TestGroupCommitCarriesWaitingCheckpoints(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t, 9, checkpoint.Config{Writers: 1})
	results := w.heldGroup(t, nil, nil, nil)
	for i, r := range results {
		require.NoError(t, r.err, w.ids[i])
		require.Equal(t, producer.Seq(300), r.res.Durable, w.ids[i])
		seq, text := w.stored(t, w.ids[i])
		require.Equal(t, producer.Seq(300), seq)
		require.Equal(t, strings.Repeat(string(rune('a'+i)), 300), text)
	}
	require.EqualValues(t, 1, w.fdb.groups.Load(), "the eight waiting checkpoints went in one transaction")
	require.EqualValues(t, 8, w.fdb.grouped.Load())
}

// A checkpoint that finds a slot free while another transaction runs yields once, to let
// writers that transaction answered join it, and then runs: it never waits on the running one.
func TestGroupCommitFreeSlotDoesNotWaitOnTheRunningTransaction(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t, 2, checkpoint.Config{Writers: 2})
	gate := make(chan struct{})
	w.fdb.set(func(f *faultDB) { f.gate = gate })
	held := make(chan appendResult, 1)
	go func() {
		res, err := w.store.Append(t.Context(), producer.AppendInput{StreamID: "g0", From: 0, Seq: 300, Text: strings.Repeat("a", 300)})
		held <- appendResult{res, err}
	}()
	<-w.fdb.held
	w.fdb.set(func(f *faultDB) { f.gate = nil }) // g0's transaction stays at the gate
	res, err := w.store.Append(t.Context(), producer.AppendInput{StreamID: "g1", From: 0, Seq: 300, Text: strings.Repeat("b", 300)})
	require.NoError(t, err)
	require.Equal(t, producer.Seq(300), res.Durable)
	seq, text := w.stored(t, "g1")
	require.Equal(t, producer.Seq(300), seq)
	require.Equal(t, strings.Repeat("b", 300), text)
	seq, _ = w.stored(t, "g0")
	require.Zero(t, seq, "g0's transaction is still held")
	close(gate)
	r := <-held
	require.NoError(t, r.err)
	require.Equal(t, producer.Seq(300), r.res.Durable)
}

// A statement the server refuses fails its own checkpoint only: the others, rolled back with
// it, are committed again without it, and the refused one confirms nothing.
func TestGroupCommitIsolatesARefusedStatement(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t, 9, checkpoint.Config{Writers: 1})
	// g5's chunk key is taken: its insert violates the primary key.
	_, err := w.db.Pool.Exec(t.Context(), "INSERT INTO message_chunks (stream_id, seq, text) VALUES ('g5', 300, 'squatter')")
	require.NoError(t, err)
	results := w.heldGroup(t, nil, nil, nil)
	for i, r := range results {
		seq, _ := w.stored(t, w.ids[i])
		if i == 5 {
			require.ErrorContains(t, r.err, "duplicate key")
			require.Equal(t, producer.Seq(0), seq, "nothing of the refused checkpoint applied")
			continue
		}
		require.NoError(t, r.err, w.ids[i])
		require.Equal(t, producer.Seq(300), r.res.Durable)
		require.Equal(t, producer.Seq(300), seq)
	}
	require.EqualValues(t, 2, w.fdb.groups.Load(), "refused, then the seven others again")
	require.EqualValues(t, 8+7, w.fdb.grouped.Load())
}

// A group's transaction that committed with its reply lost is confirmed by each checkpoint's
// read-back; one refused before applying confirms nothing, for every checkpoint in it.
func TestGroupCommitFaultsReachEveryCheckpoint(t *testing.T) {
	t.Parallel()
	t.Run("reply lost", func(t *testing.T) {
		t.Parallel()
		w := newGroupWorld(t, 5, checkpoint.Config{Writers: 1})
		results := w.heldGroup(t, nil, func() { w.fdb.set(func(f *faultDB) { f.loseAck = 2 }) }, nil)
		for i, r := range results {
			require.NoError(t, r.err, w.ids[i])
			require.True(t, r.res.ReadBack)
			require.Equal(t, producer.Seq(300), r.res.Durable, "committed, and the read-back says so")
		}
	})
	t.Run("refused before applying", func(t *testing.T) {
		t.Parallel()
		w := newGroupWorld(t, 5, checkpoint.Config{Writers: 1})
		results := w.heldGroup(t, nil, func() { w.fdb.set(func(f *faultDB) { f.failBatch = 1 }) }, nil)
		require.NoError(t, results[0].err, "g0 took its faults before the gate")
		for i, r := range results[1:] {
			i++
			require.ErrorIs(t, r.err, errInjected, w.ids[i])
			seq, _ := w.stored(t, w.ids[i])
			require.Equal(t, producer.Seq(0), seq)
		}
	})
	t.Run("read-back failed after a lost reply", func(t *testing.T) {
		t.Parallel()
		w := newGroupWorld(t, 5, checkpoint.Config{Writers: 1})
		results := w.heldGroup(t, nil, func() { w.fdb.set(func(f *faultDB) { f.loseAck, f.failQuery = 1, 4 }) }, nil)
		require.NoError(t, results[0].err, "g0 took its faults before the gate")
		for i, r := range results[1:] {
			i++
			require.ErrorIs(t, r.err, errInjected, w.ids[i])
			require.Zero(t, r.res.Durable, "nothing confirmed without a row or a read-back")
		}
	})
}

// A caller that leaves while its checkpoint waits for a slot takes it out: it never runs. One
// that leaves while its transaction runs does not abort the others'.
func TestGroupCommitCallersThatLeave(t *testing.T) {
	t.Parallel()
	t.Run("while waiting", func(t *testing.T) {
		t.Parallel()
		w := newGroupWorld(t, 5, checkpoint.Config{Writers: 1})
		ctx, cancel := context.WithCancel(t.Context())
		results := w.heldGroup(t, map[int]context.Context{3: ctx}, func() {
			cancel()
			waitPending(t, w.store, 3)
		}, nil)
		require.ErrorIs(t, results[3].err, context.Canceled)
		seq, _ := w.stored(t, "g3")
		require.Equal(t, producer.Seq(0), seq, "a checkpoint taken out before its transaction never ran")
		for _, i := range []int{0, 1, 2, 4} {
			require.NoError(t, results[i].err)
			require.Equal(t, producer.Seq(300), results[i].res.Durable)
		}
		require.EqualValues(t, 3, w.fdb.grouped.Load())
	})
	t.Run("while its transaction runs", func(t *testing.T) {
		t.Parallel()
		w := newGroupWorld(t, 5, checkpoint.Config{Writers: 1})
		ctx, cancel := context.WithCancel(t.Context())
		gate := make(chan struct{})
		results := w.heldGroup(t, map[int]context.Context{2: ctx}, func() {
			// The group's transaction will wait at a second gate.
			w.fdb.set(func(f *faultDB) { f.gate = gate })
		}, func() {
			<-w.fdb.held // the group's transaction holds at the second gate, g2 inside it
			cancel()
			close(gate)
		})
		// g2's caller left while its transaction ran, and that transaction committed. Whether
		// g2 hears the commit or its own leaving first is a race between two ready events; either
		// is honest, as long as a confirmation is what the row holds.
		if results[2].err == nil {
			seq, _ := w.stored(t, "g2")
			require.Equal(t, results[2].res.Durable, seq, "a confirmation is what the row holds")
		}
		for _, i := range []int{0, 1, 3, 4} {
			require.NoError(t, results[i].err, w.ids[i])
			require.Equal(t, producer.Seq(300), results[i].res.Durable)
		}
	})
}

// Random schedules over many streams, a few slots and small groups, with every fault: lost
// replies, failures before applying, failed read-backs, callers that leave, and a stream whose
// chunk key is taken. The faults are planned by counts, never by a timer: each write (a group's
// transaction or a lone checkpoint) draws its fault from its own number, and a caller that
// leaves does so once a drawn number of later writes have started. So a seed checks the same
// density of faults per transaction on a fast machine and on a slow one. Whatever happens, a
// confirmed length is stored with its text, and every stream but the blocked one gets all its
// text in.
func TestGroupCommitRandomSchedules(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0x9c))
			const streams, slices, size = 12, 25, 20
			w := newGroupWorld(t, streams, checkpoint.Config{Writers: 1 + rng.IntN(3), MaxGroup: 2 + rng.IntN(8)})
			blocked := rng.IntN(streams)
			blockedAt := producer.Seq(size * (1 + rng.IntN(slices-1)))
			_, err := w.db.Pool.Exec(t.Context(), "INSERT INTO message_chunks (stream_id, seq, text) VALUES ($1, $2, 'squatter')", w.ids[blocked], int64(blockedAt))
			require.NoError(t, err)

			type leave struct {
				at     int64 // the write whose start ends the caller's context
				cancel context.CancelFunc
			}
			var leaving []leave // under w.fdb.mu
			injected := map[string]int{}
			w.fdb.set(func(f *faultDB) {
				f.schedule = func(n int64, f *faultDB) {
					switch rand.New(rand.NewPCG(seed^0xfa, uint64(n))).IntN(6) {
					case 0:
						f.loseAck = 1 // commits, and its reply is lost
						injected["lost reply"]++
					case 1:
						f.failBatch = 1 // refused before applying
						injected["refused"]++
					case 2:
						f.loseAck, f.failQuery = 1, 1 // a lost reply, and the read-back after it fails
						injected["lost reply, failed read-back"]++
					}
					kept := leaving[:0]
					for _, l := range leaving {
						if l.at <= n {
							l.cancel()
							injected["caller left"]++
						} else {
							kept = append(kept, l)
						}
					}
					leaving = kept
				}
			})
			var wg sync.WaitGroup
			for i, id := range w.ids {
				srng := rand.New(rand.NewPCG(seed, uint64(i)))
				wg.Go(func() {
					piece := func(at producer.Seq) string {
						return fmt.Sprintf("%-*s", size, fmt.Sprintf("%s:%d|", id, at/size))
					}
					var at producer.Seq
					for tries := 0; at < slices*size && tries < 400; tries++ {
						ctx, cancel := context.WithCancel(context.Background())
						if srng.IntN(6) == 0 {
							// This caller leaves once 0 to 2 more writes have started after the
							// next: while it waits for a slot, in its transaction, or after it.
							w.fdb.set(func(f *faultDB) {
								leaving = append(leaving, leave{at: f.batches.Load() + 1 + int64(srng.IntN(3)), cancel: cancel})
							})
						}
						res, err := w.store.Append(ctx, producer.AppendInput{StreamID: id, From: at, Seq: at + size, Text: piece(at)})
						cancel()
						if err != nil {
							var fe *producer.FencedError
							if errors.As(err, &fe) {
								t.Errorf("%s fenced: %v", id, err)
								return
							}
							// A statement the server refused fails its own checkpoint only: a
							// stream whose key is free never hears another's refusal.
							var refused *pgconn.PgError
							if i != blocked && errors.As(err, &refused) {
								t.Errorf("%s failed with a refusal that was not its own: %v", id, err)
								return
							}
							continue
						}
						// Honesty: what is confirmed is stored, with its text.
						seq, text := w.stored(t, id)
						if res.Durable > seq {
							t.Errorf("%s: confirmed %d, stored %d", id, res.Durable, seq)
							return
						}
						var want strings.Builder
						for a := producer.Seq(0); a < seq; a += size {
							want.WriteString(piece(a))
						}
						if text != want.String() {
							t.Errorf("%s: stored %q, want %q", id, text, want.String())
							return
						}
						at = res.Durable
					}
				})
			}
			wg.Wait()
			w.fdb.set(func(f *faultDB) { f.schedule = nil })
			for _, kind := range []string{"lost reply", "refused", "lost reply, failed read-back", "caller left"} {
				require.Positive(t, injected[kind], "the schedule never injected %q", kind)
			}
			for i, id := range w.ids {
				seq, _ := w.stored(t, id)
				if i == blocked {
					require.Equal(t, blockedAt-size, seq, "%s stops below its taken key", id)
					continue
				}
				require.Equal(t, producer.Seq(slices*size), seq, "%s got all its text in", id)
			}
			t.Logf("writers/groups: %d transactions carried %d checkpoints; faults %v", w.fdb.groups.Load(), w.fdb.grouped.Load(), injected)
		})
	}
}

// Seals ride the group commit too: one statement each, in the transaction of whatever waits,
// each confirmed by its own returned row (no read-back). A fenced seal in the same transaction
// applies nothing and leaves its chunk rows, which it did not fold into a body.
func TestGroupCommitCarriesSeals(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t, 9, checkpoint.Config{Writers: 1})
	ctx := t.Context()
	text := func(i int) string { return strings.Repeat(string(rune('a'+i)), 300) }
	for i, id := range w.ids {
		_, err := w.store.Append(ctx, producer.AppendInput{StreamID: id, From: 0, Seq: 300, Text: text(i)})
		require.NoError(t, err)
	}
	_, err := w.db.Pool.Exec(ctx, "UPDATE messages SET host = 'another-host' WHERE id = 'g8'")
	require.NoError(t, err)
	groups0, queries0 := w.fdb.groups.Load(), w.fdb.queries.Load()

	gate := make(chan struct{})
	w.fdb.set(func(f *faultDB) { f.gate = gate })
	errs := make([]error, len(w.ids))
	var wg sync.WaitGroup
	wg.Go(func() { // g0's checkpoint holds the only slot
		_, errs[0] = w.store.Append(ctx, producer.AppendInput{StreamID: "g0", From: 300, Seq: 600, Text: text(0)})
	})
	<-w.fdb.held
	w.fdb.set(func(f *faultDB) { f.gate = nil })
	for i := 1; i < len(w.ids); i++ {
		wg.Go(func() {
			body := text(i) + "!"
			errs[i] = w.store.Close(ctx, producer.CloseInput{StreamID: w.ids[i], From: 300, Seq: 301, Body: body, Status: producer.StatusComplete})
		})
	}
	// A seal that bypassed the group would never wait for its slot: fail rather than spin.
	eventually.True(t, func() bool { return checkpoint.PendingWrites(w.store) == len(w.ids)-1 },
		"the seals wait for the group's only slot")
	close(gate)
	wg.Wait()

	require.NoError(t, errs[0])
	for i := 1; i < 8; i++ {
		require.NoError(t, errs[i], w.ids[i])
		var body, status string
		var seq, chunks int64
		require.NoError(t, w.db.Pool.QueryRow(ctx, "SELECT body, seq, status, (SELECT count(*) FROM message_chunks WHERE stream_id = $1) FROM messages WHERE id = $1", w.ids[i]).
			Scan(&body, &seq, &status, &chunks))
		require.Equal(t, text(i)+"!", body)
		require.EqualValues(t, 301, seq)
		require.Equal(t, "complete", status)
		require.Zero(t, chunks, "compaction folded and deleted the chunk rows")
	}
	require.ErrorIs(t, errs[8], producer.ErrFenced)
	seq, stored := w.stored(t, "g8")
	require.Equal(t, producer.Seq(300), seq)
	require.Equal(t, text(8), stored, "the fenced seal left the chunk rows it did not fold")
	require.EqualValues(t, 1, w.fdb.groups.Load()-groups0, "the eight seals went in one transaction")
	require.EqualValues(t, 1, w.fdb.queries.Load()-queries0, "only the fenced seal read its row back")
}

// An open's compare-and-swap rides the group commit and its returned row confirms the claim
// (no read-back). A rival host's open matches nothing and its read-back names the holder; a
// replay of the winner's open does the same and finds the row its own.
func TestOpenIsConfirmedByItsOwnRow(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDBWith(t, 8)
	fdb := newFaultDB(checkpoint.PoolDB(db.Pool))
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id, owner) VALUES ('m1', 'alice')")
	require.NoError(t, err)
	h1, err := checkpoint.New(checkpoint.Config{DB: fdb, HostID: "h1"})
	require.NoError(t, err)
	h2, err := checkpoint.New(checkpoint.Config{DB: fdb, HostID: "h2"})
	require.NoError(t, err)

	require.NoError(t, h1.Open(ctx, producer.OpenInput{StreamID: "m1"}))
	require.Zero(t, fdb.queries.Load(), "the claim's own row confirmed it")
	var host string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT host FROM messages WHERE id = 'm1'").Scan(&host))
	require.Equal(t, "h1", host)

	err = h2.Open(ctx, producer.OpenInput{StreamID: "m1"})
	require.ErrorIs(t, err, producer.ErrOpenRefused)
	require.ErrorContains(t, err, `"h1"`)
	require.EqualValues(t, 1, fdb.queries.Load(), "the rival's read-back named the holder")

	require.NoError(t, h1.Open(ctx, producer.OpenInput{StreamID: "m1"}), "a replayed open finds its own claim")
	require.EqualValues(t, 2, fdb.queries.Load())
}

// An open whose compare-and-swap lands late (it passed the probe, then waited: a slow pool, a
// client that retried the open on another instance) must not claim a row that was opened,
// streamed and sealed meanwhile: the claim's guard carries the probe's conditions (length 0,
// not sealed), so it refuses, and the sealed answer is left as it was.
func TestALateOpenCannotReopenASealedAnswer(t *testing.T) {
	t.Parallel()
	for _, host := range []bool{true, false} {
		t.Run(fmt.Sprintf("host column %v", host), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDBWith(t, 8)
			ctx := t.Context()
			_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id, owner) VALUES ('m1', 'alice')")
			require.NoError(t, err)
			tables := checkpoint.DefaultTables()
			late, winner := checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: tables}, checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: tables}
			if host {
				late.HostID, winner.HostID = "late", "winner"
			} else {
				late.Tables.Columns.Host, winner.Tables.Columns.Host = "", ""
			}
			l, err := checkpoint.New(late)
			require.NoError(t, err)
			w, err := checkpoint.New(winner)
			require.NoError(t, err)

			require.NoError(t, l.CheckOpenable(ctx, "m1"), "the late open passed its probe")
			require.NoError(t, w.CheckOpenable(ctx, "m1"))
			require.NoError(t, w.Open(ctx, producer.OpenInput{StreamID: "m1"}))
			_, err = w.Append(ctx, producer.AppendInput{StreamID: "m1", From: 0, Seq: 5, Text: "hello"})
			require.NoError(t, err)
			require.NoError(t, w.Close(ctx, producer.CloseInput{StreamID: "m1", From: 5, Seq: 11, Body: "hello world", Status: producer.StatusComplete}))

			err = l.Open(ctx, producer.OpenInput{StreamID: "m1"})
			require.ErrorIs(t, err, producer.ErrOpenRefused)
			require.ErrorContains(t, err, "sealed")
			var body, status string
			var seq int64
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT body, seq, status FROM messages WHERE id = 'm1'").Scan(&body, &seq, &status))
			require.Equal(t, "hello world", body)
			require.EqualValues(t, 11, seq)
			require.Equal(t, "complete", status, "the sealed answer is untouched")
		})
	}
}
