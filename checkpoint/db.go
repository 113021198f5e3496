package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/producer"
)

// Statement is one SQL statement with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// DB is the SQL surface the Store runs on. PoolDB implements it on a pgx pool; tests wrap it to
// inject faults against the real server (fail before applying, commit then lose the reply, fail
// read-backs, add latency, run a rival write first).
type DB interface {
	// Batch runs the statements as one transaction: all apply or none does. It reports no row
	// counts; the Store's read-backs decide what happened.
	Batch(ctx context.Context, stmts ...Statement) error
	// QueryRow runs a query expected to return at most one row and scans it into dest. It
	// returns pgx.ErrNoRows when there is none.
	QueryRow(ctx context.Context, sql string, args []any, dest ...any) error
	// WriteRow runs one writing statement (its own transaction) that returns at most one row,
	// and scans it into dest once the statement has committed. It returns pgx.ErrNoRows when
	// the statement returned none.
	WriteRow(ctx context.Context, sql string, args []any, dest ...any) error
}

// PoolDB adapts a pgx pool to DB. It is also a RowsWriter, so a Store on it commits checkpoints
// in groups when they arrive faster than one at a time.
func PoolDB(pool *pgxpool.Pool) DB { return poolDB{pool} }

type poolDB struct{ pool *pgxpool.Pool }

var _ RowsWriter = poolDB{}

// Batch sends every statement as one pipeline closed by a single Sync. The extended protocol runs
// everything up to a Sync as one implicit transaction, so the batch commits or rolls back whole
// (TestBatchIsAtomic holds pgx to it) in one round trip, and a failure leaves the connection
// idle for the pool rather than inside an aborted explicit transaction.
func (d poolDB) Batch(ctx context.Context, stmts ...Statement) error {
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.SQL, s.Args...)
	}
	br := d.pool.SendBatch(ctx, b)
	for i := range stmts {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return fmt.Errorf("statement %d of %d: %w", i+1, len(stmts), err)
		}
	}
	return br.Close()
}

func (d poolDB) QueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return d.pool.QueryRow(ctx, sql, args...).Scan(dest...)
}

// WriteRow is one statement in an implicit transaction: pgx's Scan returns only after the
// server's ReadyForQuery, so a row in hand means the statement committed.
func (d poolDB) WriteRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return d.pool.QueryRow(ctx, sql, args...).Scan(dest...)
}

// WriteRows sends the writes as one pipeline closed by a single Sync: one implicit transaction,
// one round trip. Each statement's row is scanned as it arrives, but the rows mean something only
// once Close has read the Sync's ReadyForQuery, that is, once the transaction committed.
func (d poolDB) WriteRows(ctx context.Context, writes []RowWrite) error {
	b := &pgx.Batch{}
	for _, w := range writes {
		b.Queue(w.SQL, w.Args...)
	}
	br := d.pool.SendBatch(ctx, b)
	for i := range writes {
		err := br.QueryRow().Scan(writes[i].Dest...)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			writes[i].NoRow = true
		case err != nil:
			_ = br.Close()
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				// The server refused this statement: the implicit transaction rolled back.
				return &StatementError{Index: i, Err: err}
			}
			return fmt.Errorf("statement %d of %d: %w", i+1, len(writes), err)
		}
	}
	return br.Close()
}

// permanentIf marks err as producer.ErrPermanent when PostgreSQL refused the statement for what
// it holds, which no retry can change: a data exception (class 22: U+0000 or an invalid byte
// sequence, a value too long for an app's column, a number out of range) or a program limit
// (class 54: a row or an index entry too large). Only a refusal the read-back confirmed (the
// row did not move) reaches here, so the plane may end the stream on it.
func permanentIf(err error) error {
	if IsPermanent(err) {
		return &producer.PermanentError{Err: err}
	}
	return err
}

// IsPermanent reports whether err is PostgreSQL refusing a statement for its data (SQLSTATE
// class 22) or for a program limit (class 54): retrying the same statement cannot succeed.
func IsPermanent(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}
