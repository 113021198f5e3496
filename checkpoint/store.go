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
	// Tables maps the app's tables. The zero value is DefaultTables(), the project's own schema
	// (the one default every package shares). In a mapping that names anything, empty names
	// take their defaults and the opt-in columns (cancel, error, host, chunk key, traceparent)
	// are used only if named.
	Tables Tables
	// HostID is this producer process's identity, written to the host column at open. It must be
	// unique per process: the open compare-and-swap trusts it to tell rivals apart. Refused when
	// Tables.Columns.Host is not named (it would do nothing). Defaults to a random token when a
	// host column is named.
	HostID string
	// Writers is how many checkpoint transactions run at once. Checkpoints that arrive while
	// they all run wait and go together in the next one (group commit, when DB is a
	// RowsWriter, as PoolDB is), up to MaxGroup per transaction. Zero means DefaultWriters.
	Writers int
	// MaxGroup bounds the checkpoints one transaction commits. Zero means DefaultMaxGroup; 1
	// turns group commit off. Off (or on a DB that is not a RowsWriter), every checkpoint is its
	// own transaction, run as soon as it comes, and Writers does not apply.
	MaxGroup int
}

// The group commit's defaults. DefaultAppendWriters is the Durable Streams appends': one
// transaction at a time, where the checkpoints' run four. An HTTP append's writer comes back
// only after its client's next request, so while a transaction runs the others' next appends
// trickle in; with a second slot free, the first of them ran at once in a group of its own, and
// the groups stayed small. With one slot they wait and go together, which on two cores shared
// with PostgreSQL and the client is cheaper per append on both sides. `tools/appendload` with 8
// writers, against a fresh rindled and cluster per run, one slot beside two (2026-12-07, six
// alternating pairs): 1.21× the appends/s at the median (0.84–1.27), and 434–581 µs of CPU per
// append in rindled and PostgreSQL together against 573–710; 4.1 appends per transaction against
// 2.5–2.6 (`tools/appendload/run.sh`). With 32 writers, two slots already make groups of about
// nine and one slot is no faster (0.85–1.47 over six pairs, median 1.0). Appends of
// LargeAppendBytes or more run outside the slots, so one long transaction does not hold every
// other stream's appends.
const (
	DefaultWriters       = 4
	DefaultAppendWriters = 1
	DefaultMaxGroup      = 64
)

// Store is the durable plane on Postgres: a producer.Committer that writes chunk rows at
// checkpoints and compacts them into the body at close.
type Store struct {
	db      DB
	group   *groupCommit
	t       Tables
	token   string
	sqlOf   statements
	hasHost bool
}

var (
	_ producer.WholeBodyCommitter = (*Store)(nil)
	_ producer.Reclaimer          = (*Store)(nil)
)

// statements is the Store's SQL, built once from the mapping.
type statements struct {
	probeOpen, markStreaming, appendChunk, readRow, reclaimRow, seal string
}

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	writers, maxGroup, err := groupSize(cfg.Writers, cfg.MaxGroup, DefaultWriters)
	if err != nil {
		return nil, err
	}
	group := newGroupCommit(cfg.DB, writers, maxGroup)
	t, err := resolvedTables(cfg.Tables)
	if err != nil {
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
	// owned is the fencing guard every write of a live stream carries: the row is still
	// streaming, and (with a host column) still this host's. The status half is a departure
	// from docs/DESIGN.md §5's SQL that fences a zombie producer (its lease lapsed, the sweeper sealed
	// its row) out of a sealed row; the host half fences it out of a row that was sealed at 0
	// and opened again by another host.
	owned := func(hostArg int) string {
		g := fmt.Sprintf("%s = 'streaming'", q(c.Status))
		if c.Host != "" {
			g += fmt.Sprintf(" AND %s = $%d", q(c.Host), hostArg)
		}
		return g
	}
	// The checkpoint's arguments: $1 stream, $2 end seq, $3 text, $4 from, then the optional
	// ones in this order (Append builds its argument list the same way).
	next := 5
	optional := func(col string) (colSQL, valSQL string) {
		next++
		return ", " + q(col), fmt.Sprintf(", $%d", next-1)
	}
	var traceCol, traceVal, keyCol, keyVal string
	if c.ChunkTraceparent != "" {
		traceCol, traceVal = optional(c.ChunkTraceparent)
	}
	if c.ChunkKey != "" {
		keyCol, keyVal = optional(c.ChunkKey)
	}
	hostArg := next
	hostCol, cancelCol, errorCol := "NULL::text", "false", "NULL::text"
	if c.Host != "" {
		hostCol = q(c.Host)
	}
	if c.Cancel != "" {
		cancelCol = fmt.Sprintf("COALESCE((%s)::boolean, false)", q(c.Cancel))
	}
	if c.Error != "" {
		errorCol = q(c.Error)
	}
	row := fmt.Sprintf("SELECT %s, %s, %s, %s, %s FROM %s WHERE %s = $1", q(c.Seq), q(c.Status), hostCol, cancelCol, errorCol, msg, q(c.Key))
	s := statements{
		probeOpen: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = $1", q(c.Seq), q(c.Status), msg, q(c.Key)),
		// The checkpoint is one statement, so one round trip commits and confirms it: the
		// length compare-and-swap (seq = from, on a row this host still holds), and the chunk
		// insert driven by the CAS's RETURNING, so it lands only if the CAS did. The UPDATE
		// takes the row's lock first, so a sweep cannot fold the chunks between the two (an
		// INSERT guarded by a snapshot EXISTS could land a chunk past a row sealed meanwhile).
		// seq = from refuses to apply twice or out of order, so the insert carries no ON
		// CONFLICT: a chunk key that somehow existed already fails the whole statement (the CAS
		// with it) instead of confirming a length whose text was never stored. (DO NOTHING also
		// logged a speculative-insertion record per chunk.) No row back means nothing was
		// written: the read-back then says why.
		appendChunk: fmt.Sprintf(`WITH cas AS (
			UPDATE %[1]s SET %[2]s = $2 WHERE %[3]s = $1 AND %[2]s = $4 AND %[4]s
			RETURNING %[2]s, %[5]s
		), ins AS (
			INSERT INTO %[6]s (%[7]s, %[8]s, %[9]s%[10]s%[11]s) SELECT $1, $2, $3%[12]s%[13]s FROM cas
		)
		SELECT * FROM cas`, msg, q(c.Seq), q(c.Key), owned(hostArg), cancelCol,
			q(t.Chunks), q(c.ChunkStream), q(c.ChunkSeq), q(c.ChunkText), traceCol, keyCol, traceVal, keyVal),
		// The read-back of every write: length, status, holder, cancel flag and error message in
		// one indexed point read.
		readRow: row,
		// Reclaim's read waits for a writer that holds the row (a sweep in flight) instead of
		// reading the version from before it.
		reclaimRow: row + " FOR SHARE",
	}
	// The claim carries CheckOpenable's conditions (length 0, not sealed), not only the probe
	// before it: an open that passed its probe and then waited (a slow pool, a client that
	// retried the open on another instance) must not reopen an answer opened, streamed and
	// sealed meanwhile. (The seed's claim checks only that nobody is streaming.) An
	// interrupted row at 0 is a released open and may be claimed again.
	openable := fmt.Sprintf("%s = 0 AND (%s IS NULL OR %s NOT IN ('%s', '%s', '%s'",
		q(c.Seq), q(c.Status), q(c.Status), producer.StatusComplete, producer.StatusCancelled, producer.StatusError)
	if c.Host != "" {
		// The CAS half of the single-flight guard: claim the row only if no producer holds it.
		// Its returned row is the claim's confirmation, as an append's is.
		s.markStreaming = fmt.Sprintf("UPDATE %s SET %s = 'streaming', %s = $1 WHERE %s = $2 AND %s, 'streaming')) RETURNING %s",
			msg, q(c.Status), q(c.Host), q(c.Key), openable, q(c.Host))
	} else {
		// Without a host column a claim cannot tell a rival's from its own replay, so a
		// streaming row is claimed again (the single-flight guard is the probe alone).
		s.markStreaming = fmt.Sprintf("UPDATE %s SET %s = 'streaming' WHERE %s = $1 AND %s)) RETURNING %s",
			msg, q(c.Status), q(c.Key), openable, q(c.Status))
	}
	// Compaction seals only a row this host still holds; its read-back tells a retried seal
	// whose first reply was lost (the row already holds this seal) from a fence. The body is
	// put together in the database: the chunk rows, which hold exactly [0, seq) (each was
	// written by the length compare-and-swap that moved seq over it), then the tail past seq,
	// which is all the seal sends. A long answer's text is not sent again at its seal, and the
	// guard seq = from makes the statement match only the length the tail starts at.
	// Arguments: $1 tail, $2 length, $3 status, [$4 error,] then key, from and (with a host
	// column) the host.
	set := fmt.Sprintf("%[1]s = coalesce((SELECT string_agg(ch.%[2]s, '' ORDER BY ch.%[3]s) FROM %[4]s ch WHERE ch.%[5]s = m.%[6]s), '') || $1, %[7]s = $2, %[8]s = $3",
		q(c.Body), q(c.ChunkText), q(c.ChunkSeq), q(t.Chunks), q(c.ChunkStream), q(c.Key), q(c.Seq), q(c.Status))
	keyArg := 4
	if c.Error != "" {
		set += fmt.Sprintf(", %s = $4", q(c.Error))
		keyArg = 5
	}
	// One statement, so a seal can share a group-commit transaction with other streams'
	// checkpoints and its returned row confirms it, as an append's does. The chunks go only if
	// this compaction's own update landed (a fenced compaction must not delete chunks it did not
	// fold into the body). The sub-statements share one snapshot: the DELETE removes exactly the
	// chunk rows the UPDATE folded, and no chunk can land between them, since every chunk insert
	// rides a compare-and-swap of this row, which the UPDATE holds.
	s.seal = fmt.Sprintf(`WITH sealed AS (
			UPDATE %[1]s m SET %[2]s WHERE m.%[3]s = $%[4]d AND m.%[5]s = $%[6]d AND %[7]s
			RETURNING m.%[5]s, m.%[8]s
		), folded AS (
			DELETE FROM %[9]s WHERE %[10]s = $%[4]d AND EXISTS (SELECT 1 FROM sealed)
		)
		SELECT * FROM sealed`,
		msg, set, q(c.Key), keyArg, q(c.Seq), keyArg+1, owned(keyArg+2), q(c.Status), q(t.Chunks), q(c.ChunkStream))
	return &Store{db: cfg.DB, group: group, t: t, token: token, sqlOf: s, hasHost: c.Host != ""}, nil
}

// HostID is the token this store writes to the host column at open ("" without one).
func (s *Store) HostID() string { return s.token }

// NeedsWholeBody marks the Store as compacting: its Close writes the whole text as the body.
func (s *Store) NeedsWholeBody() {}

func refused(streamID, format string, args ...any) error {
	return &producer.OpenRefusedError{StreamID: streamID, Reason: fmt.Sprintf(format, args...)}
}

// unopenable is the refusal of a claim that matched no row although the probe had passed: the
// probe, run again, says what changed.
func (s *Store) unopenable(ctx context.Context, streamID string) error {
	if err := s.CheckOpenable(ctx, streamID); err != nil {
		return err
	}
	return refused(streamID, "its row changed while it was being opened")
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
	case status != nil && producer.Status(*status).Terminal() && !(*status == string(producer.StatusInterrupted) && *seq == 0):
		// Sealed: a regeneration is a new message id. (Interrupted at 0 is a released open,
		// which may be opened again.)
		return refused(streamID, "it is sealed (%s at %d): a regeneration is a new message id, never a resume", *status, *seq)
	case *seq != 0:
		return refused(streamID, "the message row already holds %d characters: a regeneration is a new message id, never a resume", *seq)
	case status != nil && *status == string(producer.StatusStreaming):
		return refused(streamID, "%q is already %q: another producer holds this stream (if its host died, the sweeper's interrupted seal releases the row)", c.Status, producer.StatusStreaming)
	}
	return nil
}

// Open marks the row streaming. With a host column it is a compare-and-swap: the conditional
// write claims the row only if nobody holds it. It rides the group commit, and its returned row
// confirms the claim; without one (the row is held, or the reply was lost) the read-back names
// the winner, so an open whose reply was lost reads its own claim back and proceeds, and a
// replayed open does the same.
func (s *Store) Open(ctx context.Context, in producer.OpenInput) error {
	if !s.hasHost {
		var status *string
		switch err := s.group.write(ctx, s.sqlOf.markStreaming, []any{in.StreamID}, &status); {
		case errors.Is(err, pgx.ErrNoRows):
			return s.unopenable(ctx, in.StreamID)
		case err != nil:
			return fmt.Errorf("stream %s: open: %w", in.StreamID, err)
		}
		return nil
	}
	var host *string
	werr := s.group.write(ctx, s.sqlOf.markStreaming, []any{s.token, in.StreamID}, &host)
	switch {
	case werr == nil && host != nil && *host == s.token:
		return nil
	case errors.Is(werr, pgx.ErrNoRows):
		werr = nil // the row is held (or already ours): the read-back says by whom
	}
	r, err := s.row(ctx, in.StreamID, false)
	switch {
	case err != nil && werr != nil:
		return fmt.Errorf("stream %s: open: %w (read-back: %w)", in.StreamID, werr, err)
	case err != nil:
		return fmt.Errorf("stream %s: open read-back: %w", in.StreamID, err)
	case r.ours(s.token):
		return nil
	case werr != nil:
		return fmt.Errorf("stream %s: open: %w", in.StreamID, werr)
	case r.status != string(producer.StatusStreaming):
		return s.unopenable(ctx, in.StreamID) // sealed or advanced since the probe
	}
	winner := "NULL"
	if r.host != nil {
		winner = fmt.Sprintf("%q", *r.host)
	}
	return refused(in.StreamID, "another producer won the open race (the row's host is %s); two producers on one stream would interleave their checkpoints, so this one stands down", winner)
}

// Append advances the length and inserts the slice in one statement (one round trip), whose
// returned row is the confirmation: it arrives only once the statement committed. When it
// returns no row (a stale slice, a retry whose first attempt landed, a fence) or its reply is
// lost, a read-back of the row decides. A row sealed by another writer is a
// *producer.FencedError carrying what it holds.
func (s *Store) Append(ctx context.Context, in producer.AppendInput) (producer.AppendResult, error) {
	args := []any{in.StreamID, int64(in.Seq), in.Text, int64(in.From)}
	if s.t.Columns.ChunkTraceparent != "" {
		args = append(args, traceparent(ctx))
	}
	if s.t.Columns.ChunkKey != "" {
		args = append(args, ChunkID(in.StreamID, in.Seq))
	}
	if s.hasHost {
		args = append(args, s.token)
	}
	var seq int64
	var cancel bool
	werr := s.group.write(ctx, s.sqlOf.appendChunk, args, &seq, &cancel)
	if werr == nil {
		return producer.AppendResult{Durable: producer.Seq(seq), ReadBack: true, CancelRequested: cancel}, nil
	}
	wrote := !errors.Is(werr, pgx.ErrNoRows) // an error may hide a commit whose reply was lost
	r, err := s.row(ctx, in.StreamID, false)
	switch {
	case err != nil && wrote:
		return producer.AppendResult{}, fmt.Errorf("stream %s: append %d→%d: %w (read-back: %w)", in.StreamID, in.From, in.Seq, werr, err)
	case err != nil:
		// Load-bearing: claiming durability the store did not confirm is the one dishonesty this
		// plane refuses. The retry is safe: a replayed slice no-ops on the guard and confirms on
		// its own read-back.
		return producer.AppendResult{}, fmt.Errorf("stream %s: append %d→%d: read-back: %w", in.StreamID, in.From, in.Seq, err)
	case !r.ours(s.token):
		return r.result(), r.fence(in.StreamID)
	case wrote && r.seq < int64(in.Seq):
		return producer.AppendResult{}, permanentIf(fmt.Errorf("stream %s: append %d→%d: %w", in.StreamID, in.From, in.Seq, werr))
	}
	// Committed with its reply lost, or a stale slice the guard refused: the row's length says
	// which, and the plane re-covers from it.
	return r.result(), nil
}

// DurableSeq reads the row's authoritative length.
func (s *Store) DurableSeq(ctx context.Context, streamID string) (producer.Seq, error) {
	r, err := s.row(ctx, streamID, false)
	if err != nil {
		return 0, fmt.Errorf("stream %s: read durable length: %w", streamID, err)
	}
	return producer.Seq(r.seq), nil
}

// Reclaim tells whether this host still holds a live stream after its lease was lost and held
// again: nil when the row is streaming under this host's token, a *producer.FencedError with
// what it holds otherwise. Its read waits for a sweep that holds the row, so a seal committing
// just after the lease came back is seen, not read around.
func (s *Store) Reclaim(ctx context.Context, streamID string) error {
	r, err := s.row(ctx, streamID, true)
	if err != nil {
		return fmt.Errorf("stream %s: reclaim: %w", streamID, err)
	}
	if r.ours(s.token) {
		return nil
	}
	return r.fence(streamID)
}

// rowState is one read of a message row.
type rowState struct {
	seq    int64
	status string
	host   *string
	cancel bool
	err    *string
}

func (r rowState) ours(token string) bool {
	return r.status == string(producer.StatusStreaming) && (r.host == nil && token == "" || r.host != nil && *r.host == token)
}

func (r rowState) result() producer.AppendResult {
	return producer.AppendResult{Durable: producer.Seq(r.seq), ReadBack: true, CancelRequested: r.cancel}
}

func (r rowState) fence(streamID string) *producer.FencedError {
	fe := &producer.FencedError{StreamID: streamID, Status: producer.Status(r.status), Seq: producer.Seq(r.seq)}
	if r.err != nil {
		fe.Message = *r.err
	}
	return fe
}

// row reads a message row back (lock: FOR SHARE, waiting out a writer that holds it).
func (s *Store) row(ctx context.Context, streamID string, lock bool) (rowState, error) {
	sql := s.sqlOf.readRow
	if lock {
		sql = s.sqlOf.reclaimRow
	}
	var seq *int64
	var status *string
	var r rowState
	err := s.db.QueryRow(ctx, sql, []any{streamID}, &seq, &status, &r.host, &r.cancel, &r.err)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r, fmt.Errorf("no message row %q in %q", streamID, s.t.Message)
	case err != nil:
		return r, err
	case seq == nil:
		return r, fmt.Errorf("message row %q has a NULL %q", streamID, s.t.Columns.Seq)
	}
	r.seq = *seq
	if status != nil {
		r.status = *status
	}
	return r, nil
}

// Close is compaction: the body, its length, the status (and error, when mapped) in the message
// row, and every chunk row deleted, in one transaction. The body is the chunk rows followed by
// the tail of the text past the row's length, so it also repairs failed checkpoints: whatever
// they did not store, the tail carries. The seal starts the tail at the length the plane last
// confirmed (in.From); when the row holds another length (a checkpoint whose confirmation was
// lost), the read-back says which, and the seal is sent once more from there. The read-back
// decides, whether or not the write's reply arrived: the row holding this seal is success, a
// row still this host's and streaming is a failure to retry, anything else is a fence.
func (s *Store) Close(ctx context.Context, in producer.CloseInput) error {
	n := in.BodyFrom + producer.Len16(in.Body)
	if n != in.Seq {
		return fmt.Errorf("stream %s: close: the body covers [%d, %d), not [%d, %d)", in.StreamID, in.BodyFrom, n, in.BodyFrom, in.Seq)
	}
	from := in.From
	for resent := false; ; resent = true {
		if from < in.BodyFrom || from > n {
			return fmt.Errorf("stream %s: close %s at %d: the row holds %d units, outside the retained text [%d, %d)", in.StreamID, in.Status, in.Seq, from, in.BodyFrom, n)
		}
		done, werr := s.compact(ctx, in, from, n)
		if done {
			return nil
		}
		r, err := s.row(ctx, in.StreamID, false)
		switch {
		case err != nil && werr != nil:
			return fmt.Errorf("stream %s: close %s at %d: %w (read-back: %w)", in.StreamID, in.Status, in.Seq, werr, err)
		case err != nil:
			return fmt.Errorf("stream %s: close %s at %d: read-back: %w", in.StreamID, in.Status, in.Seq, err)
		case r.status == string(in.Status) && r.seq == int64(n):
			return nil
		case r.ours(s.token) && werr != nil:
			return permanentIf(fmt.Errorf("stream %s: close %s at %d: %w", in.StreamID, in.Status, in.Seq, werr))
		case r.ours(s.token) && r.seq != int64(from) && !resent:
			from = producer.Seq(r.seq)
			continue
		case r.ours(s.token):
			return fmt.Errorf("stream %s: close %s at %d: the row is still streaming at %d", in.StreamID, in.Status, in.Seq, r.seq)
		}
		return r.fence(in.StreamID)
	}
}

// compact sends one seal: the tail of in.Body from offset from, to a row that holds from units.
// done means the statement's own row confirmed the seal (it committed); otherwise the caller's
// read-back decides, err being the write's failure (nil when the statement matched no row).
func (s *Store) compact(ctx context.Context, in producer.CloseInput, from, n producer.Seq) (done bool, err error) {
	tail := producer.Slice16(in.Body, from-in.BodyFrom, n-in.BodyFrom)
	args := []any{tail, int64(n), string(in.Status)}
	if s.t.Columns.Error != "" {
		var e *string
		if in.Error != "" {
			e = &in.Error
		}
		args = append(args, e)
	}
	args = append(args, in.StreamID, int64(from))
	if s.hasHost {
		args = append(args, s.token)
	}
	// The seal writes no chunk row to carry its trace context, so (where the mapping carries
	// trace context at all) it travels as a transactional logical-decoding message, which the
	// CDC reader reads in the same transaction: the view's apply of the seal joins its trace.
	// That seal is a transaction of its own, confirmed by the read-back.
	if tp := traceparent(ctx); tp != nil && s.t.Columns.ChunkTraceparent != "" {
		return false, s.db.Batch(ctx, Statement{SQL: s.sqlOf.seal, Args: args},
			Statement{SQL: "SELECT pg_logical_emit_message(true, $1::text, $2::text)", Args: []any{TraceMessagePrefix, *tp}})
	}
	var seq int64
	var status string
	switch err := s.group.write(ctx, s.sqlOf.seal, args, &seq, &status); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil // the row is not at from, or not this host's: the read-back says which
	case err != nil:
		return false, err
	}
	return seq == int64(n) && status == string(in.Status), nil
}

// traceparent formats the W3C traceparent of ctx's span, or NULL without one. An unsampled span
// (rindled's when no exporter is configured) writes NULL too: the downstream spans it would
// parent are unsampled as well, so it would cost every chunk row 55 bytes, in the table and in
// the WAL, for a trace nobody records.
func traceparent(ctx context.Context) *string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return nil
	}
	v := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	return &v
}
