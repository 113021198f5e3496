package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/producer"
)

// Protocol stores the streams of the Durable Streams protocol on the project's schema
// (migrations 005 and 006). A stream's unit is fixed at creation (CreateStream.Binary). A text
// stream's text is a messages row (id ProtocolMessageID(path), status pending while open,
// complete once closed) and one message_chunks row per append, so the CDC reader and the view
// see it like any message; its offsets are UTF-16 units. A byte stream is a protocol stream,
// not an answer: no messages row, no view, one ds_bytes row per append, offsets in bytes.
// ds_streams and ds_producers hold what only the protocol has.
//
// A fork (CreateStream.Fork) copies its source's rows up to the fork point, so it keeps the
// source's offsets and reads nothing of the source afterwards. Deleting a stream that has forks
// soft-deletes it: its data goes, its path answers ErrStreamGone, and the row goes when its last
// fork does (and so on up a chain of forks).
//
// Every append is its own transaction, committed before the caller answers: the protocol
// acknowledges an append only once it is durable. The transaction locks the stream's row, so
// appends to one stream are serialized across every instance, and it commits the text, the
// closure, the writer sequence and the producer's state together (the protocol's atomicity
// requirement). A byte stream's append also notifies ByteStreamChannel (see Watch), so readers
// waiting on other instances wake. A stream no live producer hosts is never sealed by a drain
// or a sweep: its message row is not streaming.
type Protocol struct {
	pool *pgxpool.Pool
	*schema
	appends *batcher[appendJob] // nil: every append is a transaction of its own
	grouped atomic.Int64        // appends committed in a transaction with others
	// afterHead, set by tests only, runs in Read between its metadata read and its data read.
	afterHead func()
}

// ProtocolConfig configures a Protocol.
type ProtocolConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Tables maps the app's message and chunk tables, where a text stream's text lives, as
	// the Store's Config.Tables does (nil: the project's default schema). A text stream's
	// message row takes the key, seq and status columns, and owner and role when the mapping
	// names them (role 'stream'); its status column must also accept 'pending' (an open
	// protocol stream, which no drain or sweep seals). The protocol's own tables (ds_streams,
	// ds_producers, ds_bytes) keep their names: the project's migrations create them for the
	// default schema, ProtocolTablesDDL for a mapped one.
	Tables *Tables
	// Writers is how many append transactions run at once. Appends that arrive while they all
	// run wait and go together in the next one, up to MaxGroup, one per stream (group commit:
	// appends to different streams share a transaction and its WAL flush). Zero means
	// DefaultAppendWriters.
	Writers int
	// MaxGroup bounds the appends one transaction commits. Zero means DefaultMaxGroup; 1 turns
	// group commit off: every append is its own transaction, run as soon as it comes.
	MaxGroup int
}

// NewProtocol returns the protocol store.
func NewProtocol(cfg ProtocolConfig) (*Protocol, error) {
	if cfg.Pool == nil {
		return nil, &ConfigError{Field: "Pool", Reason: "is required"}
	}
	writers, maxGroup, err := groupSize(cfg.Writers, cfg.MaxGroup, DefaultAppendWriters)
	if err != nil {
		return nil, err
	}
	t, err := ResolveTables(cfg.Tables)
	if err != nil {
		return nil, err
	}
	p := &Protocol{pool: cfg.Pool, schema: newSchema(t)}
	if maxGroup > 1 {
		p.appends = &batcher[appendJob]{max: writers, batch: maxGroup, key: appendKey, run: p.runAppends}
	}
	return p, nil
}

// schema is the protocol store's statements on the app's message and chunk tables, in their
// mapping, built once.
type schema struct {
	// meta selects a stream's metadata (scanMeta's columns) by path ($1).
	meta string
	// appendMeta is meta followed by what an append checks beside it: the closure's producer
	// and the writer sequence (scanAppendReads).
	appendMeta string
	// insertMessage creates a text stream's message row ($1 id, $2 owner, $3 seq, $4 status),
	// or nothing when the id is taken.
	insertMessage string
	// updateMessage moves its seq and status ($1 id, $2 seq, $3 status).
	updateMessage string
	// deleteMessage removes it ($1 id); its chunks go with it.
	deleteMessage string
	// chunks is where a text stream's appends live (keyValue unset).
	chunks rows
	// merged is the merged text of each shape of writes planAppend has made.
	merged mergedTexts
}

func newSchema(t Tables) *schema {
	c := t.Columns
	owner, cols, vals := "", []string{q(c.Key), q(c.Seq), q(c.Status)}, []string{"$1", "$3", "$4"}
	if c.Owner != "" {
		owner = "m." + q(c.Owner) + ", "
		cols, vals = append(cols, q(c.Owner)), append(vals, "NULLIF($2::text, '')")
	}
	if c.Role != "" {
		cols, vals = append(cols, q(c.Role)), append(vals, "'stream'")
	}
	metaSelect := `SELECT d.path, coalesce(d.message_id, ''), coalesce(d.owner, ` + owner + `''), d.content_type, d.ttl_seconds, d.expires_at,
	CASE WHEN d.unit = 'byte' THEN d.byte_closed ELSE coalesce(m.` + q(c.Status) + ` = 'complete', false) END,
	CASE WHEN d.unit = 'byte' THEN d.byte_tail ELSE coalesce(m.` + q(c.Seq) + `, 0) END,
	(d.ttl_seconds IS NOT NULL AND d.accessed_at + make_interval(secs => d.ttl_seconds) <= now())
	OR (d.expires_at IS NOT NULL AND d.expires_at <= now()), d.incarnation, d.lineage, d.unit = 'byte', d.deleted_at IS NOT NULL`
	metaFrom := `FROM ds_streams d LEFT JOIN ` + q(t.Message) + ` m ON m.` + q(c.Key) + ` = d.message_id WHERE d.path = $1`
	return &schema{
		meta:       metaSelect + " " + metaFrom,
		appendMeta: metaSelect + ", d.closed_by, d.closed_epoch, d.closed_seq, d.stream_seq " + metaFrom,
		insertMessage: fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM (SELECT $1::text, $2::text, $3::bigint, $4::text) AS a ON CONFLICT (%s) DO NOTHING",
			q(t.Message), strings.Join(cols, ", "), strings.Join(vals, ", "), q(c.Key)),
		updateMessage: fmt.Sprintf("UPDATE %s SET %s = $2, %s = $3 WHERE %s = $1", q(t.Message), q(c.Seq), q(c.Status), q(c.Key)),
		deleteMessage: fmt.Sprintf("DELETE FROM %s WHERE %s = $1", q(t.Message), q(c.Key)),
		chunks:        rows{table: q(t.Chunks), key: q(c.ChunkStream), seq: q(c.ChunkSeq), data: q(c.ChunkText), chunkKey: optQ(c.ChunkKey)},
	}
}

func optQ(name string) string {
	if name == "" {
		return ""
	}
	return q(name)
}

// ProtocolMessageID is the messages row of a protocol stream: its own namespace, apart from
// the ids the message API creates.
func ProtocolMessageID(path string) string { return "ds/" + path }

// Errors of the protocol store.
var (
	ErrStreamNotFound = errors.New("checkpoint: no such stream")
	// ErrStreamExists: a create found a stream at the path with another configuration.
	ErrStreamExists = errors.New("checkpoint: a stream with another configuration exists at this path")
	// ErrStreamGone: the stream was deleted while forks of it exist; its path stays taken
	// until the last of them goes.
	ErrStreamGone = errors.New("checkpoint: the stream was deleted; forks of it still exist")
	// ErrContentTypeMismatch: an append's content type is not the stream's.
	ErrContentTypeMismatch = errors.New("checkpoint: the content type is not the stream's")
	// ErrSeqRegression: a Stream-Seq not above the stream's last one.
	ErrSeqRegression = errors.New("checkpoint: the writer sequence did not increase")
)

// ForkError is a fork the store refused: its source is missing (NotFound), deleted with forks
// still holding it (Gone), or its fork point is not in the source (neither).
type ForkError struct {
	NotFound, Gone bool
	Reason         string
}

func (e *ForkError) Error() string { return "checkpoint: fork: " + e.Reason }

// StreamClosedError is an append to a closed stream.
type StreamClosedError struct {
	Tail        producer.Seq
	Incarnation int64 // the stream's, for the offset of Tail
}

func (e *StreamClosedError) Error() string {
	return fmt.Sprintf("checkpoint: the stream is closed at %d", e.Tail)
}

// ProducerRefusal names why the store refused an idempotent producer's request. The storage
// layer sets no status codes: httpapi maps each kind to the protocol's answer.
type ProducerRefusal int

// The refusals.
const (
	// StaleEpoch: a zombie producer; Epoch is the current epoch (the protocol's 403).
	StaleEpoch ProducerRefusal = iota + 1
	// SeqGap: a sequence number past the next expected; Expected and Received say which (409).
	SeqGap
	// EpochNotAtZero: a new epoch whose first seq is not 0 (400).
	EpochNotAtZero
)

// ProducerError is an idempotent producer's request the store refused, and why.
type ProducerError struct {
	Kind               ProducerRefusal
	Epoch              int64
	Expected, Received int64
	Reason             string
}

func (e *ProducerError) Error() string { return "checkpoint: producer: " + e.Reason }

// StreamMeta is a protocol stream's configuration and state.
type StreamMeta struct {
	Path, MessageID, Owner, ContentType string
	TTL                                 *int64
	ExpiresAt                           *time.Time
	Closed                              bool
	// Binary: a byte stream (offsets in bytes, no messages row); else a text stream.
	Binary bool
	Tail   producer.Seq
	// Incarnation tells one stream at a path from the next (a stream deleted and created
	// again): a number no other stream had, greater than every stream's created before it.
	// Offsets carry it (Position).
	Incarnation int64
	// Lineage is a fork's ancestors, nearest first: their offsets name positions here too, up
	// to where the fork's data stops being theirs.
	Lineage []Ancestor
}

// Ancestor is a stream a fork descends from: its incarnation, and the offset up to which the
// fork's data is that stream's (the fork point, or an earlier one further up the line).
type Ancestor struct {
	Incarnation int64
	Shared      producer.Seq
}

// OffsetError is an offset that names no position of the stream: one handed out by another
// stream. Gone: by an earlier one, such as the stream this path named before it was deleted and
// created again (the protocol's 410); else by a later one (its 400).
type OffsetError struct {
	Gone   bool
	Reason string
}

func (e *OffsetError) Error() string { return "checkpoint: offset: " + e.Reason }

// Position checks that the offset seq, handed out by the stream with incarnation inc (0: by no
// stream in particular, such as a client's hand-written start), names a position of this stream,
// and reports whether the stream itself handed it out (own). A fork takes its ancestors'
// offsets up to where it shares their data.
func (m StreamMeta) Position(inc int64, seq producer.Seq) (own bool, err error) {
	switch inc {
	case 0:
		return false, nil
	case m.Incarnation:
		return true, nil
	}
	for _, a := range m.Lineage {
		if a.Incarnation != inc {
			continue
		}
		if seq > a.Shared {
			return false, &OffsetError{Reason: fmt.Sprintf("the offset was handed out by a stream this one forked from, past the fork point (%d)", a.Shared)}
		}
		return false, nil
	}
	if inc < m.Incarnation {
		return false, &OffsetError{Gone: true, Reason: "the offset was handed out by another stream: one this path named before it was deleted and created again, or another path's"}
	}
	return false, &OffsetError{Reason: "the offset was handed out by another stream, not this one"}
}

// lineage flattens Lineage into the column's pairs (incarnation, shared).
func (m StreamMeta) lineage() []int64 {
	out := make([]int64, 0, 2*len(m.Lineage))
	for _, a := range m.Lineage {
		out = append(out, a.Incarnation, int64(a.Shared))
	}
	return out
}

// Len is the length of data in the stream's unit: bytes, or UTF-16 units.
func (m StreamMeta) Len(data string) producer.Seq {
	if m.Binary {
		return producer.Seq(len(data))
	}
	return producer.Len16(data)
}

// CreateStream is a PUT.
type CreateStream struct {
	// ContentType may be empty for a fork: it inherits its source's.
	Path, Owner, ContentType string
	TTL                      *int64
	ExpiresAt                *time.Time
	Closed                   bool
	// Binary makes a byte stream; the caller chooses it from the content type.
	Binary bool
	// Text is the initial content, already in the stream's stored form (raw bytes for a byte
	// stream).
	Text string
	// SameType reports whether two content types name the same type (case, parameters).
	SameType func(a, b string) bool
	// Fork, if set, makes the stream a fork.
	Fork *Fork
}

// Fork is where a fork starts: its source, the source's offset (nil: its tail), and a
// sub-offset into the append that starts there, in bytes, or in messages for JSON (Cut says
// where in an append's stored form a count of them ends; nil means bytes of the stored form).
type Fork struct {
	Source string
	Offset *producer.Seq
	// OffsetIncarnation is the incarnation Offset came with (0: none), which must be the
	// source's or one of its ancestors' (StreamMeta.Position).
	OffsetIncarnation int64
	SubOffset         int64
	// Cut returns the stored-form prefix of an append holding n of its units, or false when
	// the append has fewer than n or cannot be cut there.
	Cut func(stored string, n int64) (string, bool)
}

// ProducerRef is an idempotent producer's request tuple.
type ProducerRef struct {
	ID         string
	Epoch, Seq int64
}

// AppendStream is a POST.
type AppendStream struct {
	Path, ContentType string
	Text              string // in the stored form; empty for a close-only request
	Close             bool
	StreamSeq         string
	Producer          *ProducerRef
	SameType          func(a, b string) bool
	// Invalid, if set, is why the body cannot be stored (the caller could not encode it; Text
	// is then the raw body). Append reports it as an *InvalidBodyError, in the protocol's
	// order: after the closed and content-type checks, before anything is written.
	Invalid error
}

// InvalidBodyError is an append whose body the stream cannot hold.
type InvalidBodyError struct{ Err error }

func (e *InvalidBodyError) Error() string { return e.Err.Error() }

func (e *InvalidBodyError) Unwrap() error { return e.Err }

// AppendOutcome is what an append did.
type AppendOutcome struct {
	Tail   producer.Seq
	Closed bool
	// Duplicate: a producer's retry (or a retried close) that the store already holds:
	// nothing was appended.
	Duplicate bool
	// AlreadyClosed: a close-only request to a closed stream.
	AlreadyClosed bool
	// ProducerEpoch and ProducerSeq are the producer's accepted state, with a producer.
	ProducerEpoch, ProducerSeq int64
	// From is where the append began (the tail before it).
	From producer.Seq
	// Incarnation is the stream's StreamMeta.Incarnation.
	Incarnation int64
}

// scanMeta reads a schema.meta row: the stream, whether it has expired, whether it is
// soft-deleted. A query that selects more columns after meta's scans them into extra.
func scanMeta(row pgx.Row, extra ...any) (m StreamMeta, expired, gone bool, err error) {
	var seq int64
	var lineage []int64
	err = row.Scan(append([]any{&m.Path, &m.MessageID, &m.Owner, &m.ContentType, &m.TTL, &m.ExpiresAt, &m.Closed, &seq, &expired, &m.Incarnation, &lineage, &m.Binary, &gone}, extra...)...)
	m.Tail = producer.Seq(seq)
	for i := 0; i+1 < len(lineage); i += 2 {
		m.Lineage = append(m.Lineage, Ancestor{Incarnation: lineage[i], Shared: producer.Seq(lineage[i+1])})
	}
	return m, expired, gone, err
}

// lockMeta reads and locks the stream's row; an expired stream is removed (removeStream) and
// reported missing.
func (s *schema) lockMeta(ctx context.Context, tx pgx.Tx, path string) (StreamMeta, error) {
	// The lock first, then the read in a statement of its own: a read that waited on the lock
	// would re-check only the locked row, and could see a messages row (the tail) from before
	// the append it waited for. A byte stream's messages side is empty (an outer join, which
	// FOR UPDATE cannot lock), so one statement cannot lock both.
	if _, err := tx.Exec(ctx, "SELECT 1 FROM ds_streams WHERE path = $1 FOR UPDATE", path); err != nil {
		return StreamMeta{}, fmt.Errorf("checkpoint: lock stream %s: %w", path, err)
	}
	m, expired, gone, err := scanMeta(tx.QueryRow(ctx, s.meta, path))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return StreamMeta{}, ErrStreamNotFound
	case err != nil:
		return StreamMeta{}, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	case gone:
		return StreamMeta{}, ErrStreamGone
	case expired:
		soft, err := s.removeStream(ctx, tx, m)
		if err != nil {
			return StreamMeta{}, err
		}
		if soft {
			// Soft-deleted, as a delete would: its forks still hold the path.
			return StreamMeta{}, ErrStreamGone
		}
		return StreamMeta{}, ErrStreamNotFound
	}
	return m, nil
}

// removeStream deletes a stream whose row the transaction holds locked: soft when forks of it
// exist (its data and producers go, its row stays with deleted_at), else the row goes, and then
// every soft-deleted ancestor that this was the last fork of. soft reports which. A byte
// stream's removal notifies ByteStreamChannel, so its readers on other instances hear of it.
func (s *schema) removeStream(ctx context.Context, tx pgx.Tx, m StreamMeta) (soft bool, err error) {
	fail := func(err error) error { return fmt.Errorf("checkpoint: delete stream %s: %w", m.Path, err) }
	forks, err := hasForks(ctx, tx, m.Path)
	if err != nil {
		return false, fail(err)
	}
	if m.Binary && len(m.Path) <= maxNotifyPayload {
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", ByteStreamChannel, m.Path); err != nil {
			return false, fail(err)
		}
	}
	if forks {
		return true, s.softDelete(ctx, tx, m, fail)
	}
	return false, s.hardDelete(ctx, tx, m, fail)
}

// softDelete drops the stream's data and producers and keeps its row, deleted_at set.
func (s *schema) softDelete(ctx context.Context, tx pgx.Tx, m StreamMeta, fail func(error) error) error {
	if _, err := tx.Exec(ctx, `UPDATE ds_streams SET deleted_at = now(), message_id = NULL, byte_tail = 0, stream_seq = NULL,
		closed_by = NULL, closed_epoch = NULL, closed_seq = NULL WHERE path = $1`, m.Path); err != nil {
		return fail(err)
	}
	for _, q := range []string{"DELETE FROM ds_bytes WHERE path = $1", "DELETE FROM ds_producers WHERE path = $1"} {
		if _, err := tx.Exec(ctx, q, m.Path); err != nil {
			return fail(err)
		}
	}
	return s.dropMessage(ctx, tx, m.MessageID, fail)
}

// hardDelete removes the stream's row, then each soft-deleted ancestor it was the last fork of.
func (s *schema) hardDelete(ctx context.Context, tx pgx.Tx, m StreamMeta, fail func(error) error) error {
	var parent *string
	if err := tx.QueryRow(ctx, "DELETE FROM ds_streams WHERE path = $1 RETURNING forked_from", m.Path).Scan(&parent); err != nil {
		return fail(err)
	}
	if err := s.dropMessage(ctx, tx, m.MessageID, fail); err != nil {
		return err
	}
	for parent != nil {
		// The parent is locked before its forks are counted: two of its forks deleted at once
		// serialize here, and the later one sees the earlier one's delete.
		var gone bool
		var next *string
		err := tx.QueryRow(ctx, "SELECT deleted_at IS NOT NULL, forked_from FROM ds_streams WHERE path = $1 FOR UPDATE", *parent).Scan(&gone, &next)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !gone) {
			return nil
		}
		if err != nil {
			return fail(err)
		}
		if forks, err := hasForks(ctx, tx, *parent); err != nil || forks {
			if err != nil {
				return fail(err)
			}
			return nil
		}
		if _, err := tx.Exec(ctx, "DELETE FROM ds_streams WHERE path = $1", *parent); err != nil {
			return fail(err)
		}
		parent = next
	}
	return nil
}

func hasForks(ctx context.Context, tx pgx.Tx, path string) (bool, error) {
	var forks bool
	err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM ds_streams WHERE forked_from = $1)", path).Scan(&forks)
	return forks, err
}

func (s *schema) dropMessage(ctx context.Context, tx pgx.Tx, id string, fail func(error) error) error {
	if id == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, s.deleteMessage, id); err != nil {
		return fail(err)
	}
	return nil
}

// rows names where a stream's appends live: the chunk table for text (in its mapping), ds_bytes
// for bytes. Columns are quoted, ready for SQL.
type rows struct {
	table, key, seq, data string
	// chunkKey, if set, is a text key written "<stream>:<seq>" (mapping.ChunkID).
	chunkKey string
	keyValue string
	binary   bool
}

func (s *schema) rowsOf(m StreamMeta) rows {
	if m.Binary {
		return rows{table: "ds_bytes", key: "path", seq: "seq", data: "data", keyValue: m.Path, binary: true}
	}
	r := s.chunks
	r.keyValue = m.MessageID
	return r
}

// arg is data as the column's type takes it.
func (r rows) arg(data string) any {
	if r.binary {
		return []byte(data)
	}
	return data
}

func (r rows) insert(ctx context.Context, tx pgx.Tx, seq producer.Seq, data string) error {
	_, err := tx.Exec(ctx, r.insertSQL(), r.keyValue, int64(seq), r.arg(data))
	return err
}

func (r rows) queueInsert(b *pgx.Batch, seq producer.Seq, data string) {
	b.Queue(r.insertSQL(), r.keyValue, int64(seq), r.arg(data))
}

// insertSQL inserts one append ($1 the stream's key, $2 its end offset, $3 its data).
func (r rows) insertSQL() string {
	if r.chunkKey != "" {
		return "INSERT INTO " + r.table + " (" + r.key + ", " + r.seq + ", " + r.data + ", " + r.chunkKey +
			") VALUES ($1, $2, $3, $1::text || ':' || $2::bigint::text)"
	}
	return "INSERT INTO " + r.table + " (" + r.key + ", " + r.seq + ", " + r.data + ") VALUES ($1, $2, $3)"
}

// Create creates the stream, or confirms one with the same configuration (created false).
func (p *Protocol) Create(ctx context.Context, in CreateStream) (meta StreamMeta, created bool, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		m, err := p.lockMeta(ctx, tx, in.Path)
		switch {
		case err == nil:
			same, err := sameConfig(ctx, tx, m, in)
			if err != nil {
				return err
			}
			if !same {
				return ErrStreamExists
			}
			meta = m
			return nil
		case errors.Is(err, ErrStreamGone):
			return fmt.Errorf("%w: %w", ErrStreamExists, err)
		case !errors.Is(err, ErrStreamNotFound):
			return err
		}
		meta = StreamMeta{Path: in.Path, Owner: in.Owner, ContentType: in.ContentType, TTL: in.TTL, ExpiresAt: in.ExpiresAt,
			Closed: in.Closed, Binary: in.Binary}
		var fork *forkPlan
		if in.Fork != nil {
			if fork, err = p.planFork(ctx, tx, in, &meta); err != nil {
				return err
			}
		}
		if !meta.Binary {
			meta.MessageID = ProtocolMessageID(in.Path)
		}
		r := p.rowsOf(meta)
		meta.Tail = meta.Len(in.Text)
		if fork != nil {
			meta.Tail += fork.at + meta.Len(fork.prefix)
		}
		status := "pending"
		if in.Closed {
			status = "complete"
		}
		if !meta.Binary {
			tag, err := tx.Exec(ctx, p.insertMessage, meta.MessageID, in.Owner, int64(meta.Tail), status)
			if err != nil {
				return fmt.Errorf("checkpoint: create stream %s: %w", in.Path, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: a message row %s exists", ErrStreamExists, meta.MessageID)
			}
		}
		unit, byteTail := "utf16", int64(0)
		if meta.Binary {
			unit, byteTail = "byte", int64(meta.Tail)
		}
		var forkedFrom *string
		var forkOffset *int64
		var forkSub int64
		if fork != nil {
			forkedFrom, forkOffset, forkSub = &in.Fork.Source, new(int64(fork.at)), in.Fork.SubOffset
		}
		if err := tx.QueryRow(ctx, `INSERT INTO ds_streams (path, message_id, owner, content_type, ttl_seconds, expires_at, unit, byte_tail, byte_closed,
			forked_from, fork_offset, fork_sub_offset, lineage) VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
			RETURNING incarnation`,
			in.Path, meta.MessageID, in.Owner, meta.ContentType, meta.TTL, meta.ExpiresAt, unit, byteTail, meta.Binary && in.Closed,
			forkedFrom, forkOffset, forkSub, meta.lineage()).Scan(&meta.Incarnation); err != nil {
			return fmt.Errorf("checkpoint: create stream %s: %w", in.Path, err)
		}
		at := producer.Seq(0)
		if fork != nil {
			if err := fork.copy(ctx, tx, r); err != nil {
				return fmt.Errorf("checkpoint: fork %s into %s: %w", in.Fork.Source, in.Path, err)
			}
			at = fork.at
			if fork.prefix != "" {
				at += meta.Len(fork.prefix)
				if err := r.insert(ctx, tx, at, fork.prefix); err != nil {
					return fmt.Errorf("checkpoint: fork %s into %s: %w", in.Fork.Source, in.Path, err)
				}
			}
		}
		if in.Text != "" {
			if err := r.insert(ctx, tx, meta.Tail, in.Text); err != nil {
				return fmt.Errorf("checkpoint: create stream %s: %w", in.Path, err)
			}
		}
		created = true
		return nil
	})
	return meta, created, err
}

// sameConfig reports whether a create asks for the stream m already is.
func sameConfig(ctx context.Context, tx pgx.Tx, m StreamMeta, in CreateStream) (bool, error) {
	var from *string
	var off, sub *int64
	if err := tx.QueryRow(ctx, "SELECT forked_from, fork_offset, fork_sub_offset FROM ds_streams WHERE path = $1", m.Path).Scan(&from, &off, &sub); err != nil {
		return false, fmt.Errorf("checkpoint: read stream %s: %w", m.Path, err)
	}
	same := m.Closed == in.Closed && (in.ContentType == "" || in.SameType(m.ContentType, in.ContentType))
	ttl := equalPtr(m.TTL, in.TTL) && equalTime(m.ExpiresAt, in.ExpiresAt)
	if in.Fork == nil {
		return same && ttl && from == nil, nil
	}
	f := in.Fork
	return same && from != nil && *from == f.Source && (f.Offset == nil || (off != nil && *off == int64(*f.Offset))) &&
		sub != nil && *sub == f.SubOffset && (ttl || (in.TTL == nil && in.ExpiresAt == nil)), nil
}

// forkPlan is a fork's copy of its source: the source's rows to offset at, then prefix (the
// sub-offset's part of the append that starts at at).
type forkPlan struct {
	src    rows
	at     producer.Seq
	prefix string
}

// planFork locks and checks the fork's source and completes meta from it: the content type and
// unit, and the expiry when the create names none.
func (s *schema) planFork(ctx context.Context, tx pgx.Tx, in CreateStream, meta *StreamMeta) (*forkPlan, error) {
	f := in.Fork
	src, err := s.lockMeta(ctx, tx, f.Source)
	switch {
	case errors.Is(err, ErrStreamNotFound):
		return nil, &ForkError{NotFound: true, Reason: "no stream " + f.Source + " to fork"}
	case errors.Is(err, ErrStreamGone):
		return nil, &ForkError{Gone: true, Reason: "the stream " + f.Source + " was deleted"}
	case err != nil:
		return nil, err
	}
	if in.ContentType == "" {
		meta.ContentType = src.ContentType
	} else if !in.SameType(src.ContentType, in.ContentType) {
		return nil, ErrContentTypeMismatch
	}
	meta.Binary = src.Binary
	if in.TTL == nil && in.ExpiresAt == nil {
		meta.TTL, meta.ExpiresAt = src.TTL, src.ExpiresAt
	}
	plan := &forkPlan{src: s.rowsOf(src), at: src.Tail}
	if f.Offset != nil {
		var oe *OffsetError
		if _, err := src.Position(f.OffsetIncarnation, *f.Offset); errors.As(err, &oe) {
			return nil, &ForkError{Reason: "the fork offset is not one " + f.Source + " holds: " + oe.Reason}
		}
		if *f.Offset > src.Tail {
			return nil, &ForkError{Reason: fmt.Sprintf("the fork offset %d is past the source's end (%d)", *f.Offset, src.Tail)}
		}
		plan.at = *f.Offset
	}
	// The fork's data up to the fork point is its source's, and so its source's ancestors' up
	// to where the source shares theirs.
	meta.Lineage = append(meta.Lineage, Ancestor{Incarnation: src.Incarnation, Shared: plan.at})
	for _, a := range src.Lineage {
		meta.Lineage = append(meta.Lineage, Ancestor{Incarnation: a.Incarnation, Shared: min(a.Shared, plan.at)})
	}
	// The append that starts at the fork offset: it must start there (a fork begins at an
	// append's boundary, as every offset this store hands out is), and the sub-offset cuts it.
	var end int64
	var data []byte
	r := plan.src
	err = tx.QueryRow(ctx, "SELECT "+r.seq+", "+r.data+" FROM "+r.table+" WHERE "+r.key+" = $1 AND "+r.seq+" > $2 ORDER BY "+r.seq+" LIMIT 1",
		r.keyValue, int64(plan.at)).Scan(&end, &data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		data = nil
	case err != nil:
		return nil, fmt.Errorf("checkpoint: read stream %s: %w", f.Source, err)
	case producer.Seq(end)-src.Len(string(data)) != plan.at:
		return nil, &ForkError{Reason: fmt.Sprintf("the fork offset %d is inside an append, not at a boundary", plan.at)}
	}
	if f.SubOffset > 0 {
		if data == nil {
			return nil, &ForkError{Reason: "the sub-offset has no append to cut at the fork offset"}
		}
		prefix, ok := f.Cut(string(data), f.SubOffset)
		if !ok {
			return nil, &ForkError{Reason: fmt.Sprintf("the sub-offset %d is not inside the append at the fork offset", f.SubOffset)}
		}
		plan.prefix = prefix
	}
	return plan, nil
}

// copy copies the source's appends up to the fork offset into the fork's rows.
func (f *forkPlan) copy(ctx context.Context, tx pgx.Tx, to rows) error {
	cols, vals := to.key+", "+to.seq+", "+to.data, "$1::text, "+f.src.seq+", "+f.src.data
	if to.chunkKey != "" {
		cols, vals = cols+", "+to.chunkKey, vals+", $1::text || ':' || "+f.src.seq+"::text"
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+to.table+" ("+cols+") SELECT "+vals+
		" FROM "+f.src.table+" WHERE "+f.src.key+" = $2 AND "+f.src.seq+" <= $3", to.keyValue, f.src.keyValue, int64(f.at))
	return err
}

// Head reads the stream's metadata without touching its TTL.
func (p *Protocol) Head(ctx context.Context, path string) (StreamMeta, error) {
	m, expired, gone, err := scanMeta(p.pool.QueryRow(ctx, p.meta, path))
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && expired && !gone):
		return StreamMeta{}, ErrStreamNotFound
	case err != nil:
		return StreamMeta{}, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	case gone:
		return StreamMeta{}, ErrStreamGone
	}
	return m, nil
}

// ProtocolReadBytes bounds one Read: it stops after the append that reaches this many bytes,
// and the reader asks again from where it ended. A long stream is read in pages instead of
// being held whole in memory by one response.
const ProtocolReadBytes = 1 << 20

// Read returns the stream's metadata and its data from offset from on (text, or a byte
// stream's bytes), at most limit appends and about ProtocolReadBytes. With touch it renews a
// sliding TTL (a read is an access); a live read touches once, when it begins, so a hundred
// waiting readers do not queue on the stream's row at every append.
//
// The metadata and the data are one stream's: were the path deleted and created again between
// the two reads, Read starts over (at most readAttempts times), so the data never comes from
// another incarnation than the one meta names.
func (p *Protocol) Read(ctx context.Context, path string, from producer.Seq, limit int, touch bool) (meta StreamMeta, text string, end producer.Seq, err error) {
	for range readAttempts {
		var again bool
		meta, text, end, again, err = p.readOnce(ctx, path, from, limit, touch)
		if !again {
			return meta, text, end, err
		}
	}
	return StreamMeta{}, "", 0, fmt.Errorf("checkpoint: read stream %s: it was deleted and created again %d times while read", path, readAttempts)
}

// readAttempts bounds Read's starts.
const readAttempts = 3

// readOnce is one of Read's attempts; again: the stream read was not the one found first.
func (p *Protocol) readOnce(ctx context.Context, path string, from producer.Seq, limit int, touch bool) (meta StreamMeta, text string, end producer.Seq, again bool, err error) {
	m, err := p.Head(ctx, path)
	if err != nil {
		return StreamMeta{}, "", 0, false, err
	}
	if p.afterHead != nil {
		p.afterHead()
	}
	if touch && m.TTL != nil {
		if _, err := p.pool.Exec(ctx, "UPDATE ds_streams SET accessed_at = now() WHERE path = $1", path); err != nil {
			return StreamMeta{}, "", 0, false, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
		}
	}
	end = max(from, 0)
	if from >= m.Tail {
		return m, "", min(end, m.Tail), false, nil
	}
	r := p.rowsOf(m)
	// The rows come only while the stream is still the incarnation Head found (one statement,
	// one snapshot). The stream holds data past from, so no rows means it is not.
	rs, err := p.pool.Query(ctx, "SELECT "+r.seq+", "+r.data+" FROM "+r.table+" WHERE "+r.key+" = $1 AND "+r.seq+" > $2"+
		" AND EXISTS (SELECT 1 FROM ds_streams WHERE path = $4 AND incarnation = $5 AND deleted_at IS NULL) ORDER BY "+r.seq+" LIMIT $3",
		r.keyValue, int64(from), limit, path, m.Incarnation)
	if err != nil {
		return StreamMeta{}, "", 0, false, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	}
	defer rs.Close()
	buf, rowsRead := []byte{}, false
	for rs.Next() {
		rowsRead = true
		var seq int64
		var chunk []byte
		if err := rs.Scan(&seq, &chunk); err != nil {
			return StreamMeta{}, "", 0, false, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
		}
		// An offset inside an append (never one this store handed out) reads from there.
		if start := producer.Seq(seq) - m.Len(string(chunk)); start < from {
			if m.Binary {
				chunk = chunk[from-start:]
			} else {
				chunk = []byte(producer.Slice16(string(chunk), from-start, producer.Len16(string(chunk))))
			}
		}
		buf = append(buf, chunk...)
		end = producer.Seq(seq)
		if len(buf) >= ProtocolReadBytes {
			break // a page: the reader goes on from end (whole appends keep JSON messages whole)
		}
	}
	if err := rs.Err(); err != nil {
		return StreamMeta{}, "", 0, false, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	}
	if !rowsRead {
		return StreamMeta{}, "", 0, true, nil
	}
	return m, string(buf), end, false, nil
}

// Delete removes the stream, its data and its producers; a stream with forks is soft-deleted
// (ErrStreamGone from then on) until its last fork goes.
func (p *Protocol) Delete(ctx context.Context, path string) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		m, err := p.lockMeta(ctx, tx, path)
		if err != nil {
			return err
		}
		_, err = p.removeStream(ctx, tx, m)
		return err
	})
}

// Append appends (and or closes) in one transaction, with the protocol's checks in its order:
// closed, content type, producer, writer sequence. The transaction takes two round trips: one
// pipeline begins it, locks the stream's row and reads what the checks need (the stream, its
// closure and writer sequence, the producer's state, locked); the other carries the writes
// and the COMMIT. A request refused after the reads rolls back, having written nothing.
//
// Appends to different streams that come while Writers transactions run share the next one
// (runAppends): the same reads and writes, and the same answers, with one BEGIN, one COMMIT
// and one WAL flush for all.
func (p *Protocol) Append(ctx context.Context, in AppendStream) (out AppendOutcome, err error) {
	for range 3 {
		out, err = p.appendGrouped(ctx, in)
		if !errors.Is(err, errExpired) {
			return out, err
		}
		// Rare: an expired stream. Its answer (missing, or gone while forks of it live) is
		// lockMeta's, in a transaction of its own; a stream that is alive there was re-created
		// meanwhile, and the append tries again.
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			_, err := p.lockMeta(ctx, tx, in.Path)
			return err
		})
		if err != nil {
			return out, err
		}
	}
	return out, fmt.Errorf("checkpoint: append to stream %s: it expired and was re-created on every try", in.Path)
}

// appendOnce is one try of Append; errExpired when the stream has expired.
func (p *Protocol) appendOnce(ctx context.Context, in AppendStream) (out AppendOutcome, err error) {
	return p.appendTx(ctx, in, false)
}

// appendTx is appendOnce; with skipLocked, errAlone instead of waiting when another transaction
// holds the stream's row (or it is missing).
func (p *Protocol) appendTx(ctx context.Context, in AppendStream, skipLocked bool) (out AppendOutcome, err error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return out, fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, err)
	}
	// A connection left inside a transaction (a failed ROLLBACK) is destroyed on release.
	defer conn.Release()
	st, err := p.readAppendState(ctx, conn, in, skipLocked)
	if err == nil {
		var write *pgx.QueuedQuery
		out, write, err = p.planAppend(st, in)
		if err == nil && write != nil {
			b := &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{write}}
			b.Queue("COMMIT")
			if err = conn.SendBatch(ctx, b).Close(); err != nil {
				err = fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, err)
			}
		}
	}
	if rerr := rollbackOpen(ctx, conn); rerr != nil && err == nil {
		err = fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, rerr)
	}
	return out, err
}

// rollbackOpen rolls back the transaction conn is still in, if any (refused, failed, or nothing
// to write: nothing of it stays), even when ctx has ended.
func rollbackOpen(ctx context.Context, conn *pgxpool.Conn) error {
	if conn.Conn().PgConn().TxStatus() == 'I' || conn.Conn().IsClosed() {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_, err := conn.Exec(rctx, "ROLLBACK")
	return err
}

// rollbackTimeout bounds the ROLLBACK of a refused append, which runs even when the caller's
// context has ended (the connection goes back to the pool either idle or destroyed).
const rollbackTimeout = 10 * time.Second

// errExpired is Append's read of an expired stream, answered by lockMeta's path.
var errExpired = errors.New("checkpoint: stream expired")

// appendState is what Append reads, under the stream's row lock, before it decides.
type appendState struct {
	meta                StreamMeta
	closedBy            *string
	closedEpoch, closed *int64
	streamSeq           *string
	// producer's state, when the request names one: found, and its epoch and last seq.
	producerFound             bool
	producerEpoch, producerAt int64
}

// readAppendState begins the transaction and reads, in one pipeline: the stream's row lock
// first, then what the checks need (queueAppendReads).
func (s *schema) readAppendState(ctx context.Context, conn *pgxpool.Conn, in AppendStream, skipLocked bool) (st appendState, err error) {
	lock := "SELECT 1 FROM ds_streams WHERE path = $1 FOR UPDATE"
	if skipLocked {
		lock += " SKIP LOCKED"
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lock, in.Path)
	s.queueAppendReads(b, in, skipLocked)
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("checkpoint: read stream %s: %w", in.Path, cerr)
		}
	}()
	fail := func(err error) error { return fmt.Errorf("checkpoint: read stream %s: %w", in.Path, err) }
	if _, err := br.Exec(); err != nil { // BEGIN
		return st, fail(err)
	}
	locked, err := br.Exec()
	switch {
	case err != nil:
		return st, fail(err)
	case skipLocked && locked.RowsAffected() == 0:
		return st, errAlone // held by another transaction (or missing): not waited on here
	}
	st, err = s.scanAppendReads(br, in)
	if skipLocked && isLockNotAvailable(err) {
		return st, errAlone // its producer's row is held (by the reaper, say): not waited on here
	}
	return st, err
}

// isLockNotAvailable reports err is a NOWAIT lock that another transaction holds (SQLSTATE
// 55P03).
func isLockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// queueAppendReads queues what an append's checks read once its stream's row is locked, in
// statements of their own (as lockMeta explains): the stream with its closure and writer
// sequence, then the producer's state, locked. With nowait, the producer's lock fails (55P03)
// instead of waiting when another transaction holds it: the reads of a group commit's slot,
// which must never wait on a row lock, and which may be reads of a stream whose row the slot
// did not get (another transaction's, which may hold its producer's row too).
func (s *schema) queueAppendReads(b *pgx.Batch, in AppendStream, nowait bool) {
	b.Queue(s.appendMeta, in.Path)
	if in.Producer != nil {
		lock := "SELECT epoch, last_seq FROM ds_producers WHERE path = $1 AND producer_id = $2 FOR UPDATE"
		if nowait {
			lock += " NOWAIT"
		}
		b.Queue(lock, in.Path, in.Producer.ID)
	}
}

// scanAppendReads reads queueAppendReads's results: ErrStreamNotFound, ErrStreamGone or
// errExpired for a stream the append cannot go to.
func (s *schema) scanAppendReads(br pgx.BatchResults, in AppendStream) (st appendState, err error) {
	// Every result is read before any is judged: in a group, the next append's results follow.
	m, expired, gone, err := scanMeta(br.QueryRow(), &st.closedBy, &st.closedEpoch, &st.closed, &st.streamSeq)
	var perr error
	if in.Producer != nil {
		perr = br.QueryRow().Scan(&st.producerEpoch, &st.producerAt)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return st, ErrStreamNotFound
	case err != nil:
		return st, fmt.Errorf("checkpoint: read stream %s: %w", in.Path, err)
	case gone:
		return st, ErrStreamGone
	case expired:
		return st, errExpired
	}
	st.meta = m
	if in.Producer != nil {
		switch {
		case errors.Is(perr, pgx.ErrNoRows):
		case perr != nil:
			return st, fmt.Errorf("checkpoint: read producer %s: %w", in.Producer.ID, perr)
		default:
			st.producerFound = true
		}
	}
	return st, nil
}

// planAppend decides an append from what readAppendState read: the outcome, and the one
// statement of writes that makes it (nil when there is nothing to write), or the refusal.
func (s *schema) planAppend(st appendState, in AppendStream) (out AppendOutcome, write *pgx.QueuedQuery, err error) {
	m := st.meta
	out = AppendOutcome{Tail: m.Tail, From: m.Tail, Closed: m.Closed, Incarnation: m.Incarnation}
	if m.Closed {
		by, epoch, seq := st.closedBy, st.closedEpoch, st.closed
		switch {
		case in.Producer != nil && by != nil && epoch != nil && seq != nil && *by == in.Producer.ID && *epoch == in.Producer.Epoch && *seq == in.Producer.Seq:
			out.Duplicate, out.ProducerEpoch, out.ProducerSeq = true, *epoch, *seq
			return out, nil, nil
		case in.Text == "" && in.Close:
			out.AlreadyClosed = true
			return out, nil, nil
		}
		return out, nil, &StreamClosedError{Tail: m.Tail, Incarnation: m.Incarnation}
	}
	if in.Text != "" && !in.SameType(m.ContentType, in.ContentType) {
		return out, nil, ErrContentTypeMismatch
	}
	if in.Invalid == nil && !m.Binary && !utf8.ValidString(in.Text) {
		// A text stream made before byte streams existed, under a type that now means bytes.
		in.Invalid = errors.New("the body is not UTF-8 text, and this stream holds text (offsets are UTF-16 units)")
	}
	if in.Invalid != nil {
		return out, nil, &InvalidBodyError{Err: in.Invalid}
	}
	if in.Producer != nil {
		dup, err := checkProducer(st, *in.Producer)
		if err != nil {
			return out, nil, err
		}
		out.ProducerEpoch, out.ProducerSeq = in.Producer.Epoch, in.Producer.Seq
		if dup != nil {
			out.Duplicate, out.ProducerSeq = true, *dup
			return out, nil, nil
		}
	}
	if in.StreamSeq != "" && st.streamSeq != nil && in.StreamSeq <= *st.streamSeq {
		return out, nil, ErrSeqRegression
	}
	writes := &pgx.Batch{}
	tail := m.Tail
	if in.Text != "" {
		tail += m.Len(in.Text)
		s.rowsOf(m).queueInsert(writes, tail, in.Text)
	}
	if !m.Binary {
		status := "pending"
		if in.Close {
			status = "complete"
		}
		writes.Queue(s.updateMessage, m.MessageID, int64(tail), status)
	}
	// The stream's row changes only for a sliding TTL (an append is an access), a Stream-Seq, a
	// close, or a byte stream's tail. A text stream's plain append leaves it alone: the update
	// would write a new row version (and check its constraints) for an accessed_at nothing reads.
	if m.TTL != nil || in.StreamSeq != "" || in.Close || m.Binary {
		var by *string
		var epoch, seq *int64
		if in.Close && in.Producer != nil {
			by, epoch, seq = &in.Producer.ID, &in.Producer.Epoch, &in.Producer.Seq
		}
		writes.Queue(`UPDATE ds_streams SET accessed_at = now(), stream_seq = coalesce(NULLIF($2, ''), stream_seq),
		closed_by = coalesce($3, closed_by), closed_epoch = coalesce($4, closed_epoch), closed_seq = coalesce($5, closed_seq),
		byte_tail = CASE WHEN unit = 'byte' THEN $6 ELSE byte_tail END, byte_closed = (unit = 'byte' AND $7) WHERE path = $1`,
			in.Path, in.StreamSeq, by, epoch, seq, int64(tail), in.Close)
	}
	if in.Producer != nil {
		writes.Queue(`INSERT INTO ds_producers (path, producer_id, epoch, last_seq) VALUES ($1, $2, $3, $4)
			ON CONFLICT (path, producer_id) DO UPDATE SET epoch = EXCLUDED.epoch, last_seq = EXCLUDED.last_seq, updated_at = now()`,
			in.Path, in.Producer.ID, in.Producer.Epoch, in.Producer.Seq)
	}
	if m.Binary && len(in.Path) <= maxNotifyPayload {
		writes.Queue("SELECT pg_notify($1, $2)", ByteStreamChannel, in.Path) // last: oneStatement's main query
	}
	out.Tail, out.Closed = tail, in.Close
	return out, s.merged.oneStatement(writes.QueuedQueries), nil
}

// oneStatement merges statements into one, which PostgreSQL parses, binds and runs once: every
// statement but the last becomes a WITH query (PostgreSQL runs a data-modifying WITH query to
// completion whether or not anything reads it), and the last is the main statement, so only the
// last may be a SELECT. The statements must touch different rows: the parts of one statement
// all see the snapshot it started with, so none sees another's writes. Each statement's
// parameters are renumbered after the ones before it.
func (mt *mergedTexts) oneStatement(qs []*pgx.QueuedQuery) *pgx.QueuedQuery {
	if len(qs) == 1 {
		return qs[0]
	}
	var args []any
	for _, qq := range qs {
		args = append(args, qq.Arguments...)
	}
	// An append's statements come in a few shapes, so the merged text is made once per shape
	// (it was most of what an append's planning allocated).
	var key mergedKey
	if len(qs) > len(key.sql) {
		return &pgx.QueuedQuery{SQL: mergeStatements(qs), Arguments: args}
	}
	for i, qq := range qs {
		key.sql[i], key.args[i] = qq.SQL, len(qq.Arguments)
	}
	mt.mu.RLock()
	sql, ok := mt.m[key]
	mt.mu.RUnlock()
	if !ok {
		sql = mergeStatements(qs)
		mt.mu.Lock()
		if mt.m == nil || len(mt.m) >= maxMerged {
			mt.m = map[mergedKey]string{} // shapes are few; this bounds a mapping that makes many
		}
		mt.m[key] = sql
		mt.mu.Unlock()
	}
	return &pgx.QueuedQuery{SQL: sql, Arguments: args}
}

// mergedKey is a shape of statements oneStatement merges: their texts and argument counts.
type mergedKey struct {
	sql  [6]string
	args [6]int
}

// maxMerged bounds the merged texts kept.
const maxMerged = 256

// mergedTexts holds the merged text of each shape oneStatement has seen. The zero value is
// ready to use.
type mergedTexts struct {
	mu sync.RWMutex
	m  map[mergedKey]string
}

// mergeStatements is oneStatement's text.
func mergeStatements(qs []*pgx.QueuedQuery) string {
	var sql strings.Builder
	params := 0
	for i, qq := range qs {
		switch {
		case i == 0:
			sql.WriteString("WITH ")
		case i < len(qs)-1:
			sql.WriteString(", ")
		default:
			sql.WriteString("\n")
		}
		if i < len(qs)-1 {
			fmt.Fprintf(&sql, "w%d AS (", i)
		}
		renumber(&sql, qq.SQL, params)
		if i < len(qs)-1 {
			sql.WriteString(")")
		}
		params += len(qq.Arguments)
	}
	return sql.String()
}

// renumber writes sql to w with each parameter $n as $(n+by). It skips quoted identifiers and
// string literals, in which a $ is not a parameter (the statements it is given have no
// dollar-quoted strings or comments).
func renumber(w *strings.Builder, sql string, by int) {
	var quote byte // the quote the scan is inside, or 0
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0 // a doubled quote closes and reopens: the same result
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '$' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9':
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			n, _ := strconv.Atoi(sql[i+1 : j])
			w.WriteString("$" + strconv.Itoa(n+by))
			i = j - 1
			continue
		}
		w.WriteByte(c)
	}
}

// Reaped is what one Reap removed.
type Reaped struct {
	// Streams: expired streams removed (soft-deleted when forks of them live), and
	// soft-deleted ones no fork holds any more.
	Streams int
	// Producers: idempotent producers' state rows idle past the window.
	Producers int
}

// Reap removes up to batch expired streams, as a delete does, and up to batch producer state
// rows idle longer than producerIdle (0 keeps them). Without it an expired stream goes only when
// next touched. Rows another transaction holds are skipped (SKIP LOCKED), so several instances
// reap at once without waiting on each other or on appends; a caller repeats while a batch
// comes back full.
func (p *Protocol) Reap(ctx context.Context, batch int, producerIdle time.Duration) (Reaped, error) {
	var out Reaped
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		out = Reaped{}
		rows, err := tx.Query(ctx, `SELECT d.path FROM ds_streams d
			WHERE (d.deleted_at IS NULL AND ((d.ttl_seconds IS NOT NULL AND d.accessed_at + make_interval(secs => d.ttl_seconds) <= now())
				OR (d.expires_at IS NOT NULL AND d.expires_at <= now())))
			OR (d.deleted_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ds_streams c WHERE c.forked_from = d.path))
			ORDER BY d.path LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
		if err != nil {
			return fmt.Errorf("checkpoint: reap streams: %w", err)
		}
		paths, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("checkpoint: reap streams: %w", err)
		}
		for _, path := range paths {
			m, _, _, err := scanMeta(tx.QueryRow(ctx, p.meta, path))
			if errors.Is(err, pgx.ErrNoRows) {
				continue // collected with a fork reaped before it in this batch
			}
			if err != nil {
				return fmt.Errorf("checkpoint: reap stream %s: %w", path, err)
			}
			if _, err := p.removeStream(ctx, tx, m); err != nil {
				return err
			}
			out.Streams++
		}
		if producerIdle > 0 {
			tag, err := tx.Exec(ctx, `DELETE FROM ds_producers WHERE (path, producer_id) IN (SELECT path, producer_id FROM ds_producers
				WHERE updated_at < now() - make_interval(secs => $1) LIMIT $2 FOR UPDATE SKIP LOCKED)`, producerIdle.Seconds(), batch)
			if err != nil {
				return fmt.Errorf("checkpoint: reap producers: %w", err)
			}
			out.Producers = int(tag.RowsAffected())
		}
		return nil
	})
	return out, err
}

// checkProducer validates a producer's (epoch, seq) against its state (read locked for the
// transaction): nil to append, the highest accepted seq for a duplicate, or a *ProducerError.
func checkProducer(st appendState, ref ProducerRef) (*int64, error) {
	epoch, last := st.producerEpoch, st.producerAt
	switch {
	case !st.producerFound:
		if ref.Seq != 0 {
			return nil, &ProducerError{Kind: SeqGap, Expected: 0, Received: ref.Seq, Reason: "a new producer starts at seq 0"}
		}
		return nil, nil
	case ref.Epoch < epoch:
		return nil, &ProducerError{Kind: StaleEpoch, Epoch: epoch, Reason: fmt.Sprintf("epoch %d is stale: the current epoch is %d", ref.Epoch, epoch)}
	case ref.Epoch > epoch:
		if ref.Seq != 0 {
			return nil, &ProducerError{Kind: EpochNotAtZero, Reason: fmt.Sprintf("a new epoch starts at seq 0, not %d", ref.Seq)}
		}
		return nil, nil
	case ref.Seq <= last:
		return &last, nil
	case ref.Seq > last+1:
		return nil, &ProducerError{Kind: SeqGap, Expected: last + 1, Received: ref.Seq, Reason: fmt.Sprintf("expected seq %d, got %d", last+1, ref.Seq)}
	}
	return nil, nil
}

func equalPtr(a, b *int64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func equalTime(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}
