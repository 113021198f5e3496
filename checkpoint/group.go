package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// RowWrite is one writing statement of a RowsWriter.WriteRows call and where its row goes.
type RowWrite struct {
	SQL  string
	Args []any
	Dest []any
	// NoRow is set by WriteRows when the statement returned no row (Dest is then untouched).
	NoRow bool
}

// RowsWriter is a DB that can commit several writing statements as one transaction and hand
// each its row back: the Store's group commit. PoolDB implements it; a DB that does not gets
// one transaction per checkpoint.
type RowsWriter interface {
	// WriteRows runs the writes in order as one transaction, in one round trip. Nil means the
	// transaction committed, and each write's Dest or NoRow says what its statement returned.
	// Any error means no write's row may be trusted: a *StatementError when the server refused
	// one statement (the transaction rolled back whole, nothing of it applied), anything else
	// when the outcome is unknown (the commit may have happened with its reply lost).
	WriteRows(ctx context.Context, writes []RowWrite) error
}

// StatementError is a WriteRows failure the server pinned on one statement: the transaction
// rolled back, so none of its writes applied.
type StatementError struct {
	Index int // the refused write's position
	Err   error
}

func (e *StatementError) Error() string {
	return fmt.Sprintf("statement %d refused: %v", e.Index+1, e.Err)
}

func (e *StatementError) Unwrap() error { return e.Err }

// batcher is a group commit: writers taking turns at a few transactions. At most max
// transactions run at once; an item that arrives while they all run waits, and the next
// transaction takes every waiting item (up to batch, and, when key is set, at most one item per
// key) with it. A quiet batcher so runs each item alone and at once; a busy one runs many per
// transaction, one round trip and one WAL flush for all.
//
// There is no goroutine of its own: the first writer to find a free slot leads (runs a
// transaction of its item and the waiting ones), and when it is done it hands the slot to the
// first writer still waiting. run must end every item of its batch (batchItem.end).
type batcher[T any] struct {
	max   int // transactions at once
	batch int // items per transaction
	key   func(*T) string
	run   func(batch []*batchItem[T])

	mu      sync.Mutex
	active  int
	pending []*batchItem[T]
}

type batchItem[T any] struct {
	ctx  context.Context
	v    T
	err  error
	wake chan bool // false: ended (err is set); true: this item's goroutine leads the next transaction
	led  bool      // handed the lead (under mu)
}

// end sets the item's outcome and lets its writer go.
func (it *batchItem[T]) end(err error) {
	it.err = err
	it.wake <- false
}

// do runs v in a transaction, possibly with others, and returns what run ended it with. A
// caller whose ctx ends while its item waits is let go with ctx's cause, its item not run; once
// the item is in a transaction, it returns with ctx's cause too, the outcome unknown to it.
func (g *batcher[T]) do(ctx context.Context, v T) (T, error) {
	it := &batchItem[T]{ctx: ctx, v: v, wake: make(chan bool, 1)}
	g.mu.Lock()
	if g.active < g.max {
		busy := g.active > 0 && g.batch > 1
		g.active++
		g.mu.Unlock()
		if busy {
			// Another transaction is running, so the one that freed this slot has just
			// answered its writers, who are runnable and about to come back with their next
			// items. Yielding once lets them queue behind this item and go in its transaction;
			// without it this item ran alone and they waited for the next one (in
			// BenchmarkCheckpointSaturation, about half the transactions carried one item).
			// A lone writer (no transaction running) never waits here.
			runtime.Gosched()
		}
		g.lead(it)
		return it.v, it.err
	}
	g.pending = append(g.pending, it)
	g.mu.Unlock()
	select {
	case lead := <-it.wake:
		if lead {
			g.lead(it)
		}
		return it.v, it.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.pending, it); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
		g.mu.Unlock()
		return v, context.Cause(ctx)
	}
	led := it.led
	g.mu.Unlock()
	if led {
		// Handed the slot just as this context ended: the items still waiting need a leader.
		<-it.wake
		g.lead(nil)
	}
	// Otherwise the item is in a transaction that may still commit: returning without its
	// outcome (v as given: the transaction may still be writing it.v) is a lost reply, which
	// the caller must be able to resolve.
	return v, context.Cause(ctx)
}

// lead runs one transaction of it (when not nil) and the items waiting, then hands the slot on.
func (g *batcher[T]) lead(it *batchItem[T]) {
	g.mu.Lock()
	batch := make([]*batchItem[T], 0, min(g.batch, len(g.pending)+1))
	var keys map[string]bool
	fits := func(it *batchItem[T]) bool { // at most one item per key, when there is a key
		if g.key == nil {
			return true
		}
		k := g.key(&it.v)
		if keys[k] {
			return false
		}
		if keys == nil {
			keys = map[string]bool{}
		}
		keys[k] = true
		return true
	}
	if it != nil {
		fits(it)
		batch = append(batch, it)
	}
	left := g.pending[:0]
	for _, w := range g.pending {
		switch {
		case len(batch) == g.batch:
			left = append(left, w)
		case w.ctx.Err() != nil: // an item whose caller left is not run
			w.end(context.Cause(w.ctx))
		case !fits(w):
			left = append(left, w) // the next transaction's: this one has an item of its key
		default:
			batch = append(batch, w)
		}
	}
	clear(g.pending[len(left):])
	g.pending = left
	g.mu.Unlock()

	if len(batch) > 0 {
		g.run(batch)
	}
	g.handOff()
}

// handOff gives a finished transaction's slot to the first item waiting, or frees it.
func (g *batcher[T]) handOff() {
	g.mu.Lock()
	if len(g.pending) > 0 {
		next := g.pending[0]
		g.pending = slices.Delete(g.pending, 0, 1)
		next.led = true
		next.wake <- true
	} else {
		g.active--
	}
	g.mu.Unlock()
}

// groupSize validates a group commit's settings and applies their defaults: the transactions
// at once (Writers, defaultWriters when 0) and the items per transaction (MaxGroup).
func groupSize(writers, maxGroup, defaultWriters int) (int, int, error) {
	if writers < 0 {
		return 0, 0, &ConfigError{Field: "Writers", Reason: fmt.Sprintf("%d: want 0 (the default) or more", writers)}
	}
	if maxGroup < 0 {
		return 0, 0, &ConfigError{Field: "MaxGroup", Reason: fmt.Sprintf("%d: want 0 (the default) or more", maxGroup)}
	}
	return cmp.Or(writers, defaultWriters), cmp.Or(maxGroup, DefaultMaxGroup), nil
}

// batchContext is the context of one transaction shared by several writers: it ends when every
// writer's context has ended, not when the first has, so one caller leaving cannot abort the
// others' writes.
func batchContext[T any](batch []*batchItem[T]) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(batch[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, w := range batch {
		stops[i] = context.AfterFunc(w.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(w.ctx))
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
	}
}

// groupCommit is the Store's group commit of checkpoints (a batcher of row writes).
//
// It keeps the durable plane's honesty: a checkpoint is confirmed only by its own row from a
// transaction that committed. A statement the server refuses fails only its own checkpoint:
// the others, which rolled back with it, are committed again without it. Any other failure
// goes to every checkpoint of the transaction, whose Store read-back tells what happened.
type groupCommit struct {
	db   DB
	rows RowsWriter
	b    batcher[RowWrite]
}

func newGroupCommit(db DB, writers, batch int) *groupCommit {
	g := &groupCommit{db: db}
	g.b = batcher[RowWrite]{max: writers, batch: batch, run: g.run}
	if rw, ok := db.(RowsWriter); ok && batch > 1 {
		g.rows = rw
	}
	return g
}

// write runs one writing statement like DB.WriteRow, possibly in one transaction with others.
func (g *groupCommit) write(ctx context.Context, sql string, args []any, dest ...any) error {
	if g.rows == nil {
		return g.db.WriteRow(ctx, sql, args, dest...)
	}
	_, err := g.b.do(ctx, RowWrite{SQL: sql, Args: args, Dest: dest})
	return err
}

// run commits the writes in one transaction and ends each one.
func (g *groupCommit) run(batch []*batchItem[RowWrite]) {
	for len(batch) > 0 {
		if len(batch) == 1 {
			w := batch[0]
			w.end(g.db.WriteRow(w.ctx, w.v.SQL, w.v.Args, w.v.Dest...))
			return
		}
		ctx, stop := batchContext(batch)
		writes := make([]RowWrite, len(batch))
		for i, w := range batch {
			writes[i] = w.v
		}
		err := g.rows.WriteRows(ctx, writes)
		stop()
		var refused *StatementError
		if errors.As(err, &refused) && refused.Index >= 0 && refused.Index < len(batch) {
			// Nothing applied: the refused write gets its error, the others go again.
			batch[refused.Index].end(refused.Err)
			batch = slices.Delete(batch, refused.Index, refused.Index+1)
			continue
		}
		for i, w := range batch {
			switch {
			case err != nil:
				w.end(fmt.Errorf("group commit of %d checkpoints: %w", len(batch), err))
			case writes[i].NoRow:
				w.end(pgx.ErrNoRows)
			default:
				w.end(nil)
			}
		}
		return
	}
}
