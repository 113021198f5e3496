package checkpoint

import (
	"context"
	"errors"
	"fmt"
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

// groupCommit is the Store's group commit of checkpoints. At most max transactions run at
// once; a checkpoint that arrives while they all run waits, and the next transaction takes
// every waiting checkpoint (up to batch) with it. A quiet store so commits each checkpoint
// alone and at once, exactly as before; a busy one commits many per transaction, one round
// trip and one WAL flush for all, which is what lets many streams on a small pool keep up.
//
// It keeps the durable plane's honesty: a checkpoint is confirmed only by its own row from a
// transaction that committed. A statement the server refuses fails only its own checkpoint:
// the others, which rolled back with it, are committed again without it. Any other failure
// goes to every checkpoint of the transaction, whose Store read-back tells what happened.
//
// There is no goroutine of its own: the first writer to find a free slot leads (runs a
// transaction), and when it is done it hands the slot to the first writer still waiting.
type groupCommit struct {
	db    DB
	rows  RowsWriter
	max   int // transactions at once
	batch int // writes per transaction

	mu      sync.Mutex
	active  int
	pending []*groupWrite
}

type groupWrite struct {
	ctx  context.Context
	w    RowWrite
	err  error
	wake chan bool // false: err is set; true: this write's goroutine leads the next transaction
	led  bool      // handed the lead (under mu)
}

// write runs one writing statement like DB.WriteRow, possibly in one transaction with others.
func (g *groupCommit) write(ctx context.Context, sql string, args []any, dest ...any) error {
	if g.rows == nil {
		return g.db.WriteRow(ctx, sql, args, dest...)
	}
	r := &groupWrite{ctx: ctx, w: RowWrite{SQL: sql, Args: args, Dest: dest}, wake: make(chan bool, 1)}
	g.mu.Lock()
	if g.active < g.max {
		g.active++
		g.mu.Unlock()
		g.lead(r)
		return r.err
	}
	g.pending = append(g.pending, r)
	g.mu.Unlock()
	select {
	case lead := <-r.wake:
		if lead {
			g.lead(r)
		}
		return r.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.pending, r); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
		g.mu.Unlock()
		return context.Cause(ctx)
	}
	led := r.led
	g.mu.Unlock()
	if led {
		// Handed the slot just as this context ended: the writes still waiting need a leader.
		<-r.wake
		g.lead(nil)
	}
	// Otherwise the write is in a transaction that may still commit: returning without its
	// reply is the lost reply the Store's read-back resolves.
	return context.Cause(ctx)
}

// lead runs one transaction of r (when not nil) and the writes waiting, then hands the slot on.
func (g *groupCommit) lead(r *groupWrite) {
	g.mu.Lock()
	batch := make([]*groupWrite, 0, min(g.batch, len(g.pending)+1))
	if r != nil {
		batch = append(batch, r)
	}
	taken := 0
	for _, w := range g.pending {
		if len(batch) == g.batch {
			break
		}
		taken++
		if w.ctx.Err() == nil { // a write whose caller left is not run
			batch = append(batch, w)
		} else {
			w.err = context.Cause(w.ctx)
			w.wake <- false
		}
	}
	g.pending = slices.Delete(g.pending, 0, taken)
	g.mu.Unlock()

	g.run(batch)

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

// run commits the writes in one transaction and sets each one's outcome.
func (g *groupCommit) run(batch []*groupWrite) {
	for len(batch) > 0 {
		if len(batch) == 1 {
			w := batch[0]
			w.err = g.db.WriteRow(w.ctx, w.w.SQL, w.w.Args, w.w.Dest...)
			w.wake <- false
			return
		}
		ctx, stop := batchContext(batch)
		writes := make([]RowWrite, len(batch))
		for i, w := range batch {
			writes[i] = w.w
		}
		err := g.rows.WriteRows(ctx, writes)
		stop()
		var refused *StatementError
		if errors.As(err, &refused) && refused.Index >= 0 && refused.Index < len(batch) {
			// Nothing applied: the refused write gets its error, the others go again.
			w := batch[refused.Index]
			w.err = refused.Err
			w.wake <- false
			batch = slices.Delete(batch, refused.Index, refused.Index+1)
			continue
		}
		for i, w := range batch {
			switch {
			case err != nil:
				w.err = fmt.Errorf("group commit of %d checkpoints: %w", len(batch), err)
			case writes[i].NoRow:
				w.err = pgx.ErrNoRows
			default:
				w.err = nil
			}
			w.wake <- false
		}
		return
	}
}

// batchContext is the context of one transaction shared by several writers: it ends when every
// writer's context has ended, not when the first has, so one caller leaving cannot abort the
// others' checkpoints.
func batchContext(batch []*groupWrite) (context.Context, func()) {
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
