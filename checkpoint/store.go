package checkpoint

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/rindle-sh/rindle-go/producer"
)

// ConfigError names the Config field that New refused, and why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("checkpoint: Config.%s: %s", e.Field, e.Reason)
}

// Config configures a Store.
type Config struct {
	// DB runs the SQL. Required; PoolDB adapts a pgx pool.
	DB DB
	// Tables maps the app's tables. Empty names take the seed's defaults, with no opt-in column
	// (cancel, error, host) named; DefaultTables is the mapping of the project's own schema.
	Tables Tables
	// HostID is this producer process's identity, written to the host column at open. It must be
	// unique per process: the open compare-and-swap trusts it to tell rivals apart. Refused when
	// Tables.Columns.Host is not named (it would do nothing). Defaults to a random token when a
	// host column is named.
	HostID string
}

// Store is the durable plane on Postgres: a producer.Committer that writes chunk rows at
// checkpoints and compacts them into the body at close.
type Store struct {
	db     DB
	t      Tables
	token  string
	sqlOf  statements
	hasCan bool
}

var _ producer.WholeBodyCommitter = (*Store)(nil)

// statements is the Store's SQL, built once from the mapping.
type statements struct {
	probeOpen, markStreaming, probeHost, insertChunk, casSeq, readState, compactBody, deleteChunks, readSeal string
}

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	t := cfg.Tables.resolve()
	if err := t.validate(); err != nil {
		return nil, err
	}
	c := t.Columns
	token := cfg.HostID
	switch {
	case c.Host == "" && token != "":
		return nil, &ConfigError{Field: "HostID", Reason: "does nothing until Tables.Columns.Host names where to persist it"}
	case c.Host != "" && token == "":
		token = "open-" + rand.Text()
	}
	msg := q(t.Message)
	traceCol, traceVal := "", ""
	if c.ChunkTraceparent != "" {
		traceCol, traceVal = ", "+q(c.ChunkTraceparent), ", $6"
	}
	s := statements{
		probeOpen: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = $1", q(c.Seq), q(c.Status), msg, q(c.Key)),
		// Both checkpoint statements are guarded by the same predicate. seq = from: the CAS refuses
		// to apply twice or out of order, and the guarded insert makes a stale re-cover a no-op
		// (an unguarded one would land an overlapping chunk under another id). status =
		// 'streaming': a departure from DESIGN §5's SQL, which fences a zombie producer (its
		// lease lapsed, the sweeper sealed its row) out of a sealed row. ON CONFLICT is the belt
		// under those braces.
		insertChunk: fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s%s) SELECT $1, $2, $3, $4%s WHERE EXISTS (SELECT 1 FROM %s WHERE %s = $2 AND %s = $5 AND %s = 'streaming') ON CONFLICT DO NOTHING",
			q(t.Chunks), q(c.ChunkKey), q(c.ChunkStream), q(c.ChunkSeq), q(c.ChunkText), traceCol, traceVal, msg, q(c.Key), q(c.Seq), q(c.Status)),
		casSeq: fmt.Sprintf("UPDATE %s SET %s = $1 WHERE %s = $2 AND %s = $3 AND %s = 'streaming'", msg, q(c.Seq), q(c.Key), q(c.Seq), q(c.Status)),
		// The chunks go only if this compaction's own update landed: a fenced compaction must not
		// delete chunks it did not fold into the body.
		deleteChunks: fmt.Sprintf("DELETE FROM %s WHERE %s = $1 AND EXISTS (SELECT 1 FROM %s WHERE %s = $1 AND %s = $2 AND %s = $3)",
			q(t.Chunks), q(c.ChunkStream), msg, q(c.Key), q(c.Status), q(c.Seq)),
		readSeal: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = $1", q(c.Status), q(c.Seq), msg, q(c.Key)),
	}
	if c.Host != "" {
		// The CAS half of the single-flight guard: claim the row only if no producer holds it.
		s.markStreaming = fmt.Sprintf("UPDATE %s SET %s = 'streaming', %s = $1 WHERE %s = $2 AND %s <> 'streaming'", msg, q(c.Status), q(c.Host), q(c.Key), q(c.Status))
		s.probeHost = fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", q(c.Host), msg, q(c.Key))
	} else {
		s.markStreaming = fmt.Sprintf("UPDATE %s SET %s = 'streaming' WHERE %s = $1", msg, q(c.Status), q(c.Key))
	}
	if c.Cancel != "" {
		s.readState = fmt.Sprintf("SELECT %s, %s, COALESCE((%s)::boolean, false) FROM %s WHERE %s = $1", q(c.Seq), q(c.Status), q(c.Cancel), msg, q(c.Key))
	} else {
		s.readState = fmt.Sprintf("SELECT %s, %s, false FROM %s WHERE %s = $1", q(c.Seq), q(c.Status), msg, q(c.Key))
	}
	// Compaction seals only a row that is still streaming; its read-back (readSeal) tells a
	// retried seal whose first reply was lost (the row already holds this seal) from a fence.
	if c.Error != "" {
		s.compactBody = fmt.Sprintf("UPDATE %s SET %s = $1, %s = $2, %s = $3, %s = $4 WHERE %s = $5 AND %s = 'streaming'", msg, q(c.Body), q(c.Seq), q(c.Status), q(c.Error), q(c.Key), q(c.Status))
	} else {
		s.compactBody = fmt.Sprintf("UPDATE %s SET %s = $1, %s = $2, %s = $3 WHERE %s = $4 AND %s = 'streaming'", msg, q(c.Body), q(c.Seq), q(c.Status), q(c.Key), q(c.Status))
	}
	return &Store{db: cfg.DB, t: t, token: token, sqlOf: s, hasCan: c.Cancel != ""}, nil
}

// HostID is the token this store writes to the host column at open ("" without one).
func (s *Store) HostID() string { return s.token }

// NeedsWholeBody marks the Store as compacting: its Close writes the whole text as the body.
func (s *Store) NeedsWholeBody() {}

func refused(streamID, format string, args ...any) error {
	return &producer.OpenRefusedError{StreamID: streamID, Reason: fmt.Sprintf(format, args...)}
}

// CheckOpenable is the read-only precondition on the message row: it exists, its length is a
// number and zero (a regeneration is a new message id, never a resume of an advanced row), and no
// producer holds it. Alone this is check-then-act; naming a host column closes the window with
// the compare-and-swap in Open.
func (s *Store) CheckOpenable(ctx context.Context, streamID string) error {
	var seq *int64
	var status *string
	err := s.db.QueryRow(ctx, s.sqlOf.probeOpen, []any{streamID}, &seq, &status)
	c := s.t.Columns
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return refused(streamID, "no row in %q: the app must write the message row before opening a stream on it", s.t.Message)
	case err != nil:
		return fmt.Errorf("stream %s: open probe: %w", streamID, err)
	case seq == nil:
		// The CAS column: WHERE seq = 0 never matches NULL, so every chunk would land while its
		// length CAS silently matched nothing.
		return refused(streamID, "%q.%q is NULL: the length column must be NOT NULL DEFAULT 0", s.t.Message, c.Seq)
	case *seq != 0:
		return refused(streamID, "the message row already holds %d characters: a regeneration is a new message id, never a resume", *seq)
	case status != nil && *status == string(producer.StatusStreaming):
		return refused(streamID, "%q is already %q: another producer holds this stream (if its host died, the sweeper's interrupted seal releases the row)", c.Status, producer.StatusStreaming)
	}
	return nil
}

// Open marks the row streaming. With a host column it is a compare-and-swap: the conditional
// write claims the row only if nobody holds it, and the read-back of the host names the winner.
// A replayed open (its reply lost) reads back its own token and proceeds.
func (s *Store) Open(ctx context.Context, in producer.OpenInput) error {
	if s.sqlOf.probeHost == "" {
		return s.db.Batch(ctx, Statement{SQL: s.sqlOf.markStreaming, Args: []any{in.StreamID}})
	}
	if err := s.db.Batch(ctx, Statement{SQL: s.sqlOf.markStreaming, Args: []any{s.token, in.StreamID}}); err != nil {
		return fmt.Errorf("stream %s: open: %w", in.StreamID, err)
	}
	var host *string
	if err := s.db.QueryRow(ctx, s.sqlOf.probeHost, []any{in.StreamID}, &host); err != nil {
		return fmt.Errorf("stream %s: open read-back: %w", in.StreamID, err)
	}
	if host == nil || *host != s.token {
		winner := "NULL"
		if host != nil {
			winner = fmt.Sprintf("%q", *host)
		}
		return refused(in.StreamID, "another producer won the open race (the row's host is %s); two producers on one stream would interleave their checkpoints, so this one stands down", winner)
	}
	return nil
}

// Append inserts the slice and advances the length in one transaction, then reads the row back:
// the read-back alone decides what is durable. If the transaction's reply is lost, the read-back
// still tells whether it committed.
func (s *Store) Append(ctx context.Context, in producer.AppendInput) (producer.AppendResult, error) {
	args := []any{ChunkID(in.StreamID, in.Seq), in.StreamID, int64(in.Seq), in.Text, int64(in.From)}
	if s.t.Columns.ChunkTraceparent != "" {
		args = append(args, traceparent(ctx))
	}
	err := s.db.Batch(ctx,
		Statement{SQL: s.sqlOf.insertChunk, Args: args},
		Statement{SQL: s.sqlOf.casSeq, Args: []any{int64(in.Seq), in.StreamID, int64(in.From)}},
	)
	if err != nil {
		// The batch may have committed with only its reply lost: a row at or past this slice's
		// end means it landed.
		if st, rerr := s.readState(ctx, in.StreamID); (rerr == nil || errors.Is(rerr, producer.ErrFenced)) && st.Durable >= in.Seq {
			return st, nil
		}
		return producer.AppendResult{}, fmt.Errorf("stream %s: append %d→%d: %w", in.StreamID, in.From, in.Seq, err)
	}
	st, err := s.readState(ctx, in.StreamID)
	if errors.Is(err, producer.ErrFenced) && st.Durable >= in.Seq {
		return st, nil // it landed before the row was sealed; the next append learns of the fence
	}
	if err != nil {
		// Load-bearing: claiming durability the store did not confirm is the one dishonesty this
		// plane refuses. The retry is safe: a replayed slice no-ops on the guard and confirms on
		// its own read-back.
		return producer.AppendResult{}, fmt.Errorf("stream %s: append %d→%d: read-back: %w", in.StreamID, in.From, in.Seq, err)
	}
	return st, nil
}

// DurableSeq reads the row's authoritative length.
func (s *Store) DurableSeq(ctx context.Context, streamID string) (producer.Seq, error) {
	st, err := s.readState(ctx, streamID)
	if err != nil && !errors.Is(err, producer.ErrFenced) {
		return 0, fmt.Errorf("stream %s: read durable length: %w", streamID, err)
	}
	return st.Durable, nil
}

// readState is the post-append read-back: the length, and the cancel flag when one is mapped,
// in one indexed point read.
func (s *Store) readState(ctx context.Context, streamID string) (producer.AppendResult, error) {
	var seq *int64
	var status *string
	var cancel bool
	err := s.db.QueryRow(ctx, s.sqlOf.readState, []any{streamID}, &seq, &status, &cancel)
	if errors.Is(err, pgx.ErrNoRows) {
		return producer.AppendResult{}, fmt.Errorf("no message row %q in %q", streamID, s.t.Message)
	}
	if err != nil {
		return producer.AppendResult{}, err
	}
	if seq == nil {
		return producer.AppendResult{}, fmt.Errorf("message row %q has a NULL %q", streamID, s.t.Columns.Seq)
	}
	return producer.AppendResult{Durable: producer.Seq(*seq), ReadBack: true, CancelRequested: cancel}, fenced(streamID, status)
}

// fenced returns an error wrapping producer.ErrFenced unless the row is still streaming.
func fenced(streamID string, status *string) error {
	if status != nil && *status == string(producer.StatusStreaming) {
		return nil
	}
	st := "NULL"
	if status != nil {
		st = *status
	}
	return fmt.Errorf("stream %s: the row is %s: %w", streamID, st, producer.ErrFenced)
}

// Close is compaction: the whole body, its length, the status (and error, when mapped) in the
// message row, and every chunk row deleted, in one transaction. Whatever the chunks did or did
// not capture, the body ends up right, so it also repairs failed checkpoints.
func (s *Store) Close(ctx context.Context, in producer.CloseInput) error {
	if in.BodyFrom != 0 {
		return fmt.Errorf("stream %s: close: the body starts at %d, but compaction needs the whole text", in.StreamID, in.BodyFrom)
	}
	n := producer.Len16(in.Body)
	if n != in.Seq {
		return fmt.Errorf("stream %s: close: the body is %d units long, not %d", in.StreamID, n, in.Seq)
	}
	args := []any{in.Body, int64(n), string(in.Status)}
	if s.t.Columns.Error != "" {
		var e *string
		if in.Error != "" {
			e = &in.Error
		}
		args = append(args, e)
	}
	args = append(args, in.StreamID)
	if err := s.db.Batch(ctx,
		Statement{SQL: s.sqlOf.compactBody, Args: args},
		Statement{SQL: s.sqlOf.deleteChunks, Args: []any{in.StreamID, string(in.Status), int64(n)}},
	); err != nil {
		return fmt.Errorf("stream %s: close %s at %d: %w", in.StreamID, in.Status, in.Seq, err)
	}
	// The guarded update reports no row count: the row itself says whether this seal holds.
	var status string
	var seq int64
	if err := s.db.QueryRow(ctx, s.sqlOf.readSeal, []any{in.StreamID}, &status, &seq); err != nil {
		return fmt.Errorf("stream %s: close %s at %d: read-back: %w", in.StreamID, in.Status, in.Seq, err)
	}
	if status != string(in.Status) || producer.Seq(seq) != n {
		return fmt.Errorf("stream %s: close %s at %d: the row holds %s at %d: %w", in.StreamID, in.Status, in.Seq, status, seq, producer.ErrFenced)
	}
	return nil
}

// traceparent formats the W3C traceparent of ctx's span, or NULL without one.
func traceparent(ctx context.Context) *string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	v := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	return &v
}
