package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/clocktest"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

var errInjected = errors.New("injected fault")

// faultDB wraps the real database with the faults a checkpoint must survive. Every fault is
// injected around real statements on the real server: the store cannot tell it from the
// network misbehaving.
type faultDB struct {
	inner checkpoint.DB

	mu          sync.Mutex
	failBatch   int           // the next N batches fail before applying
	loseAck     int           // the next N batches commit, then report an error
	failQuery   int           // the next N queries (read-backs) fail
	down        bool          // every call fails until up
	gate        chan struct{} // when set, each batch waits for a token before applying
	held        chan struct{} // signalled when a batch starts waiting at the gate
	beforeBatch func(context.Context) error
	latency     time.Duration
	// schedule, when set, runs under mu at the start of every write, with the write's number
	// (from 1), before that write takes its faults: a fault plan driven by counts of writes,
	// which injects the same faults per write on a fast machine and on a slow one.
	schedule func(n int64, f *faultDB)

	batches atomic.Int64
	queries atomic.Int64
	// batchText is the longest string argument any write has sent.
	batchText atomic.Int64
	groups    atomic.Int64 // WriteRows calls: group-commit transactions
	grouped   atomic.Int64 // the writes they carried
}

func newFaultDB(inner checkpoint.DB) *faultDB {
	return &faultDB{inner: inner, held: make(chan struct{}, 64)}
}

// noteText keeps batchText up to date with a write's arguments.
func (f *faultDB) noteText(args []any) {
	for _, a := range args {
		if s, ok := a.(string); ok && int64(len(s)) > f.batchText.Load() {
			f.batchText.Store(int64(len(s)))
		}
	}
}

func (f *faultDB) Batch(ctx context.Context, stmts ...checkpoint.Statement) error {
	for _, st := range stmts {
		f.noteText(st.Args)
	}
	return f.write(ctx, func(ctx context.Context) error { return f.inner.Batch(ctx, stmts...) })
}

// WriteRow is a write, faulted as Batch is.
func (f *faultDB) WriteRow(ctx context.Context, sql string, args []any, dest ...any) error {
	f.noteText(args)
	return f.write(ctx, func(ctx context.Context) error { return f.inner.WriteRow(ctx, sql, args, dest...) })
}

// WriteRows is a write, faulted as a whole as Batch is: the group commit's transaction. It makes
// faultDB a RowsWriter, so a Store on it groups checkpoints as one on PoolDB does.
func (f *faultDB) WriteRows(ctx context.Context, writes []checkpoint.RowWrite) error {
	f.groups.Add(1)
	f.grouped.Add(int64(len(writes)))
	for _, w := range writes {
		f.noteText(w.Args)
	}
	return f.write(ctx, func(ctx context.Context) error {
		return f.inner.(checkpoint.RowsWriter).WriteRows(ctx, writes)
	})
}

// write runs one write with the faults set: refused before applying, applied with its reply
// lost, held at the gate, slowed.
func (f *faultDB) write(ctx context.Context, apply func(context.Context) error) error {
	n := f.batches.Add(1)
	f.mu.Lock()
	if f.schedule != nil {
		f.schedule(n, f)
	}
	hook := f.beforeBatch
	f.beforeBatch = nil
	gate, down, latency := f.gate, f.down, f.latency
	fail := f.failBatch > 0
	if fail {
		f.failBatch--
	}
	lose := !fail && !down && f.loseAck > 0
	if lose {
		f.loseAck--
	}
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return err
		}
	}
	if gate != nil {
		f.held <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if latency > 0 {
		time.Sleep(latency)
	}
	if down || fail {
		return fmt.Errorf("%w: write refused before applying", errInjected)
	}
	err := apply(ctx)
	if (err == nil || errors.Is(err, pgx.ErrNoRows)) && lose {
		return fmt.Errorf("%w: the write committed but its reply was lost", errInjected)
	}
	return err
}

func (f *faultDB) QueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	f.queries.Add(1)
	f.mu.Lock()
	fail := f.down || f.failQuery > 0
	if f.failQuery > 0 {
		f.failQuery--
	}
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("%w: read failed", errInjected)
	}
	return f.inner.QueryRow(ctx, sql, args, dest...)
}

// reset clears every fault.
func (f *faultDB) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failBatch, f.loseAck, f.failQuery, f.down = 0, 0, 0, false
	f.gate, f.beforeBatch, f.latency = nil, nil, 0
}

func (f *faultDB) set(change func(f *faultDB)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// bundle is one test's world: a fresh database, the fault wrapper, a Store and a Plane on a
// manual clock, and signals for every checkpoint.
type bundle struct {
	db          *pgtest.DB
	fdb         *faultDB
	store       *checkpoint.Store
	plane       *producer.Plane
	clock       *clocktest.Clock
	checkpoints chan producer.CheckpointInfo
	failures    chan error
}

type setupOpts struct {
	tables checkpoint.Tables
	hostID string
	config func(*producer.Config)
}

func withTables(t checkpoint.Tables) func(*setupOpts) {
	return func(o *setupOpts) { o.tables = t }
}

func withConfig(f func(*producer.Config)) func(*setupOpts) {
	return func(o *setupOpts) { o.config = f }
}

func setup(t testing.TB, opts ...func(*setupOpts)) *bundle {
	t.Helper()
	o := setupOpts{tables: checkpoint.DefaultTables()}
	for _, f := range opts {
		f(&o)
	}
	db := pgtest.NewDB(t)
	fdb := newFaultDB(checkpoint.PoolDB(db.Pool))
	store, err := checkpoint.New(checkpoint.Config{DB: fdb, Tables: o.tables, HostID: o.hostID})
	require.NoError(t, err)
	b := &bundle{
		db:          db,
		fdb:         fdb,
		store:       store,
		clock:       clocktest.New(),
		checkpoints: make(chan producer.CheckpointInfo, 4096),
		failures:    make(chan error, 4096),
	}
	cfg := producer.Config{
		Committer:             store,
		Authorize:             func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CheckpointChars:       16,
		RetryBackoff:          time.Millisecond,
		IdleTimeout:           producer.NoIdleTimeout, // the clock's pending timers are the checkpoints'
		Clock:                 b.clock,
		OnCheckpointFunc:      func(info producer.CheckpointInfo) { b.checkpoints <- info },
		OnCheckpointErrorFunc: func(err error, _ producer.CheckpointInfo) { b.failures <- err },
	}
	if o.config != nil {
		o.config(&cfg)
	}
	b.plane, err = producer.New(cfg)
	require.NoError(t, err)
	t.Cleanup(b.plane.Close)
	return b
}

func (b *bundle) insert(t testing.TB, id string) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), "INSERT INTO messages (id, owner) VALUES ($1, 'alice')", id)
	require.NoError(t, err)
}

func (b *bundle) open(t testing.TB, id string) *producer.LiveStream {
	t.Helper()
	b.insert(t, id)
	s, err := b.plane.Open(t.Context(), producer.OpenStreamInput{StreamID: id})
	require.NoError(t, err)
	return s
}

// row is what the store holds for a message.
type row struct {
	text   string // body, then the chunks in seq order
	seq    producer.Seq
	status string
	err    *string
	chunks int
}

// durable reads a message's durable text and checks the store's own invariants on the way: the
// chunks are contiguous from the body's end, and the seq column is the text's length.
func (b *bundle) durable(t testing.TB, id string) row {
	t.Helper()
	ctx := context.Background()
	var r row
	var body string
	var seq int64
	type chunk struct {
		seq  int64
		text string
	}
	var chunks []chunk
	// One snapshot for both reads: a compaction committing between them would otherwise look
	// like lost text.
	err := pgx.BeginTxFunc(ctx, b.db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT body, seq, status, error FROM messages WHERE id = $1", id).Scan(&body, &seq, &r.status, &r.err); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT seq, text FROM message_chunks WHERE stream_id = $1 ORDER BY seq", id)
		if err != nil {
			return err
		}
		chunks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (chunk, error) {
			var c chunk
			return c, r.Scan(&c.seq, &c.text)
		})
		return err
	})
	require.NoError(t, err)
	r.text = body
	at := producer.Len16(body)
	for _, c := range chunks {
		end := at + producer.Len16(c.text)
		require.Equal(t, producer.Seq(c.seq), end, "chunk ending at %d is not contiguous after %d", c.seq, at)
		r.text += c.text
		at = end
	}
	r.seq = producer.Seq(seq)
	r.chunks = len(chunks)
	require.Equal(t, at, r.seq, "the seq column disagrees with the stored text")
	return r
}

func (b *bundle) waitCheckpoint(t testing.TB) producer.CheckpointInfo {
	t.Helper()
	select {
	case info := <-b.checkpoints:
		return info
	case <-eventually.Late(t):
		t.Fatal("no checkpoint came")
	}
	return producer.CheckpointInfo{}
}

func (b *bundle) waitFailure(t testing.TB) error {
	t.Helper()
	select {
	case err := <-b.failures:
		return err
	case <-eventually.Late(t):
		t.Fatal("no checkpoint failure came")
	}
	return nil
}

// waitHeld waits until a batch is parked at the gate.
func (b *bundle) waitHeld(t testing.TB) {
	t.Helper()
	select {
	case <-b.fdb.held:
	case <-eventually.Late(t):
		t.Fatal("no batch reached the gate")
	}
}

func withHost(id string) func(*setupOpts) {
	return func(o *setupOpts) { o.hostID = id }
}

// startLease runs hostID's lease on the bundle's real database (not the fault wrapper) and
// wires it to the plane as rindled does: the fence suspends, a renewal reclaims.
func startLease(t testing.TB, b *bundle, hostID string, ttl time.Duration) *checkpoint.Lease {
	t.Helper()
	lease, err := checkpoint.NewLease(checkpoint.LeaseConfig{
		DB: checkpoint.PoolDB(b.db.Pool), HostID: hostID, TTL: ttl,
		OnLostFunc: b.plane.Suspend,
		OnHeldFunc: func(ctx context.Context) { _ = b.plane.Resume(ctx) },
	})
	require.NoError(t, err)
	require.NoError(t, lease.Start(t.Context()))
	t.Cleanup(lease.Stop)
	return lease
}
