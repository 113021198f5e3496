package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/producer"
)

// Protocol stores the streams of the Durable Streams protocol on the project's schema
// (migration 005). A protocol stream's text is a messages row (id ProtocolMessageID(path),
// status pending while open, complete once closed) and one message_chunks row per append, so
// the CDC reader and the view see it like any message; ds_streams and ds_producers hold what
// only the protocol has.
//
// Every append is its own transaction, committed before the caller answers: the protocol
// acknowledges an append only once it is durable. The transaction locks the stream's row, so
// appends to one stream are serialized across every instance, and it commits the text, the
// closure, the writer sequence and the producer's state together (the protocol's atomicity
// requirement). A stream no live producer hosts is never sealed by a drain or a sweep: its
// message row is not streaming.
type Protocol struct {
	pool *pgxpool.Pool
}

// NewProtocol returns the protocol store on pool.
func NewProtocol(pool *pgxpool.Pool) (*Protocol, error) {
	if pool == nil {
		return nil, &ConfigError{Field: "Pool", Reason: "is required"}
	}
	return &Protocol{pool: pool}, nil
}

// ProtocolMessageID is the messages row of a protocol stream: its own namespace, apart from
// the ids the message API creates.
func ProtocolMessageID(path string) string { return "ds/" + path }

// Errors of the protocol store.
var (
	ErrStreamNotFound = errors.New("checkpoint: no such stream")
	// ErrStreamExists: a create found a stream at the path with another configuration.
	ErrStreamExists = errors.New("checkpoint: a stream with another configuration exists at this path")
	// ErrContentTypeMismatch: an append's content type is not the stream's.
	ErrContentTypeMismatch = errors.New("checkpoint: the content type is not the stream's")
	// ErrSeqRegression: a Stream-Seq not above the stream's last one.
	ErrSeqRegression = errors.New("checkpoint: the writer sequence did not increase")
)

// StreamClosedError is an append to a closed stream.
type StreamClosedError struct{ Tail producer.Seq }

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
	Tail                                producer.Seq
	// Created tells one incarnation of a path from the next (a stream deleted and created
	// again).
	Created time.Time
}

// CreateStream is a PUT.
type CreateStream struct {
	Path, Owner, ContentType string
	TTL                      *int64
	ExpiresAt                *time.Time
	Closed                   bool
	// Text is the initial content, already in the stream's stored form.
	Text string
	// SameType reports whether two content types name the same type (case, parameters).
	SameType func(a, b string) bool
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
	// Created is the stream's StreamMeta.Created.
	Created time.Time
}

const metaColumns = `d.path, d.message_id, coalesce(m.owner, ''), d.content_type, d.ttl_seconds, d.expires_at,
	m.status = 'complete', m.seq,
	(d.ttl_seconds IS NOT NULL AND d.accessed_at + make_interval(secs => d.ttl_seconds) <= now())
	OR (d.expires_at IS NOT NULL AND d.expires_at <= now()), d.created_at`

func scanMeta(row pgx.Row) (StreamMeta, bool, error) {
	var m StreamMeta
	var seq int64
	var expired bool
	err := row.Scan(&m.Path, &m.MessageID, &m.Owner, &m.ContentType, &m.TTL, &m.ExpiresAt, &m.Closed, &seq, &expired, &m.Created)
	m.Tail = producer.Seq(seq)
	return m, expired, err
}

// lockMeta reads and locks the stream's rows; an expired stream is deleted and reported
// missing.
func lockMeta(ctx context.Context, tx pgx.Tx, path string) (StreamMeta, error) {
	m, expired, err := scanMeta(tx.QueryRow(ctx, `SELECT `+metaColumns+`
		FROM ds_streams d JOIN messages m ON m.id = d.message_id WHERE d.path = $1 FOR UPDATE OF d, m`, path))
	if errors.Is(err, pgx.ErrNoRows) {
		return StreamMeta{}, ErrStreamNotFound
	}
	if err != nil {
		return StreamMeta{}, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	}
	if expired {
		if _, err := tx.Exec(ctx, "DELETE FROM messages WHERE id = $1", m.MessageID); err != nil {
			return StreamMeta{}, fmt.Errorf("checkpoint: expire stream %s: %w", path, err)
		}
		return StreamMeta{}, ErrStreamNotFound
	}
	return m, nil
}

// Create creates the stream, or confirms one with the same configuration (created false).
func (p *Protocol) Create(ctx context.Context, in CreateStream) (meta StreamMeta, created bool, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		m, err := lockMeta(ctx, tx, in.Path)
		switch {
		case err == nil:
			same := in.SameType(m.ContentType, in.ContentType) && m.Closed == in.Closed &&
				equalPtr(m.TTL, in.TTL) && equalTime(m.ExpiresAt, in.ExpiresAt)
			if !same {
				return ErrStreamExists
			}
			meta = m
			return nil
		case !errors.Is(err, ErrStreamNotFound):
			return err
		}
		id := ProtocolMessageID(in.Path)
		n := producer.Len16(in.Text)
		status := "pending"
		if in.Closed {
			status = "complete"
		}
		tag, err := tx.Exec(ctx, `INSERT INTO messages (id, owner, role, seq, status) VALUES ($1, NULLIF($2, ''), 'stream', $3, $4)
			ON CONFLICT (id) DO NOTHING`, id, in.Owner, int64(n), status)
		if err != nil {
			return fmt.Errorf("checkpoint: create stream %s: %w", in.Path, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: a message row %s exists", ErrStreamExists, id)
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, "INSERT INTO message_chunks (stream_id, seq, text) VALUES ($1, $2, $3)", id, int64(n), in.Text); err != nil {
				return fmt.Errorf("checkpoint: create stream %s: %w", in.Path, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ds_streams (path, message_id, content_type, ttl_seconds, expires_at) VALUES ($1, $2, $3, $4, $5)`,
			in.Path, id, in.ContentType, in.TTL, in.ExpiresAt); err != nil {
			return fmt.Errorf("checkpoint: create stream %s: %w", in.Path, err)
		}
		created = true
		meta = StreamMeta{Path: in.Path, MessageID: id, Owner: in.Owner, ContentType: in.ContentType, TTL: in.TTL,
			ExpiresAt: in.ExpiresAt, Closed: in.Closed, Tail: n}
		return nil
	})
	return meta, created, err
}

// Head reads the stream's metadata without touching its TTL.
func (p *Protocol) Head(ctx context.Context, path string) (StreamMeta, error) {
	m, expired, err := scanMeta(p.pool.QueryRow(ctx, `SELECT `+metaColumns+`
		FROM ds_streams d JOIN messages m ON m.id = d.message_id WHERE d.path = $1`, path))
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && expired) {
		return StreamMeta{}, ErrStreamNotFound
	}
	if err != nil {
		return StreamMeta{}, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	}
	return m, nil
}

// ProtocolReadBytes bounds one Read: it stops after the append that reaches this many bytes,
// and the reader asks again from where it ended. A long stream is read in pages instead of
// being held whole in memory by one response.
const ProtocolReadBytes = 1 << 20

// Read returns the stream's metadata and its text from offset from on, at most limit appends
// and about ProtocolReadBytes. With touch it renews a sliding TTL (a read is an access); a live
// read touches once, when it begins, so a hundred waiting readers do not queue on the stream's
// row at every append.
func (p *Protocol) Read(ctx context.Context, path string, from producer.Seq, limit int, touch bool) (meta StreamMeta, text string, end producer.Seq, err error) {
	m, err := p.Head(ctx, path)
	if err != nil {
		return StreamMeta{}, "", 0, err
	}
	if touch && m.TTL != nil {
		if _, err := p.pool.Exec(ctx, "UPDATE ds_streams SET accessed_at = now() WHERE path = $1", path); err != nil {
			return StreamMeta{}, "", 0, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
		}
	}
	end = max(from, 0)
	if from >= m.Tail {
		return m, "", min(end, m.Tail), nil
	}
	rows, err := p.pool.Query(ctx, `SELECT seq, text FROM message_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		m.MessageID, int64(from), limit)
	if err != nil {
		return StreamMeta{}, "", 0, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	}
	defer rows.Close()
	buf := []byte{}
	for rows.Next() {
		var seq int64
		var chunk string
		if err := rows.Scan(&seq, &chunk); err != nil {
			return StreamMeta{}, "", 0, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
		}
		// An offset inside an append (never one this store handed out) reads from there.
		if start := producer.Seq(seq) - producer.Len16(chunk); start < from {
			chunk = producer.Slice16(chunk, from-start, producer.Len16(chunk))
		}
		buf = append(buf, chunk...)
		end = producer.Seq(seq)
		if len(buf) >= ProtocolReadBytes {
			break // a page: the reader goes on from end (whole appends keep JSON messages whole)
		}
	}
	if err := rows.Err(); err != nil {
		return StreamMeta{}, "", 0, fmt.Errorf("checkpoint: read stream %s: %w", path, err)
	}
	return m, string(buf), end, nil
}

// Delete removes the stream, its text and its producers.
func (p *Protocol) Delete(ctx context.Context, path string) error {
	tag, err := p.pool.Exec(ctx, "DELETE FROM messages WHERE id = (SELECT message_id FROM ds_streams WHERE path = $1)", path)
	if err != nil {
		return fmt.Errorf("checkpoint: delete stream %s: %w", path, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStreamNotFound
	}
	return nil
}

// Append appends (and or closes) in one transaction, with the protocol's checks in its order:
// closed, content type, producer, writer sequence.
func (p *Protocol) Append(ctx context.Context, in AppendStream) (out AppendOutcome, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		m, err := lockMeta(ctx, tx, in.Path)
		if err != nil {
			return err
		}
		out = AppendOutcome{Tail: m.Tail, Closed: m.Closed, Created: m.Created}
		if m.Closed {
			var by *string
			var epoch, seq *int64
			if err := tx.QueryRow(ctx, "SELECT closed_by, closed_epoch, closed_seq FROM ds_streams WHERE path = $1", in.Path).Scan(&by, &epoch, &seq); err != nil {
				return fmt.Errorf("checkpoint: read stream %s: %w", in.Path, err)
			}
			switch {
			case in.Producer != nil && by != nil && *by == in.Producer.ID && *epoch == in.Producer.Epoch && *seq == in.Producer.Seq:
				out.Duplicate, out.ProducerEpoch, out.ProducerSeq = true, *epoch, *seq
				return nil
			case in.Text == "" && in.Close:
				out.AlreadyClosed = true
				return nil
			}
			return &StreamClosedError{Tail: m.Tail}
		}
		if in.Text != "" && !in.SameType(m.ContentType, in.ContentType) {
			return ErrContentTypeMismatch
		}
		if in.Invalid != nil {
			return &InvalidBodyError{Err: in.Invalid}
		}
		if in.Producer != nil {
			dup, err := checkProducer(ctx, tx, in.Path, *in.Producer)
			if err != nil {
				return err
			}
			out.ProducerEpoch, out.ProducerSeq = in.Producer.Epoch, in.Producer.Seq
			if dup != nil {
				out.Duplicate, out.ProducerSeq = true, *dup
				return nil
			}
		}
		if in.StreamSeq != "" {
			var last *string
			if err := tx.QueryRow(ctx, "SELECT stream_seq FROM ds_streams WHERE path = $1", in.Path).Scan(&last); err != nil {
				return fmt.Errorf("checkpoint: read stream %s: %w", in.Path, err)
			}
			if last != nil && in.StreamSeq <= *last {
				return ErrSeqRegression
			}
		}
		tail := m.Tail
		if in.Text != "" {
			tail += producer.Len16(in.Text)
			if _, err := tx.Exec(ctx, "INSERT INTO message_chunks (stream_id, seq, text) VALUES ($1, $2, $3)", m.MessageID, int64(tail), in.Text); err != nil {
				return fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, err)
			}
		}
		status := "pending"
		if in.Close {
			status = "complete"
		}
		if _, err := tx.Exec(ctx, "UPDATE messages SET seq = $2, status = $3, updated_at = now() WHERE id = $1", m.MessageID, int64(tail), status); err != nil {
			return fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, err)
		}
		var by *string
		var epoch, seq *int64
		if in.Close && in.Producer != nil {
			by, epoch, seq = &in.Producer.ID, &in.Producer.Epoch, &in.Producer.Seq
		}
		if _, err := tx.Exec(ctx, `UPDATE ds_streams SET accessed_at = now(), stream_seq = coalesce(NULLIF($2, ''), stream_seq),
			closed_by = coalesce($3, closed_by), closed_epoch = coalesce($4, closed_epoch), closed_seq = coalesce($5, closed_seq) WHERE path = $1`,
			in.Path, in.StreamSeq, by, epoch, seq); err != nil {
			return fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, err)
		}
		if in.Producer != nil {
			if _, err := tx.Exec(ctx, `INSERT INTO ds_producers (path, producer_id, epoch, last_seq) VALUES ($1, $2, $3, $4)
				ON CONFLICT (path, producer_id) DO UPDATE SET epoch = EXCLUDED.epoch, last_seq = EXCLUDED.last_seq`,
				in.Path, in.Producer.ID, in.Producer.Epoch, in.Producer.Seq); err != nil {
				return fmt.Errorf("checkpoint: append to stream %s: %w", in.Path, err)
			}
		}
		out.Tail, out.Closed = tail, in.Close
		return nil
	})
	return out, err
}

// checkProducer validates a producer's (epoch, seq) against its state, locked for the
// transaction: nil to append, the highest accepted seq for a duplicate, or a *ProducerError.
func checkProducer(ctx context.Context, tx pgx.Tx, path string, ref ProducerRef) (*int64, error) {
	var epoch, last int64
	err := tx.QueryRow(ctx, "SELECT epoch, last_seq FROM ds_producers WHERE path = $1 AND producer_id = $2 FOR UPDATE", path, ref.ID).Scan(&epoch, &last)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if ref.Seq != 0 {
			return nil, &ProducerError{Kind: SeqGap, Expected: 0, Received: ref.Seq, Reason: "a new producer starts at seq 0"}
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("checkpoint: read producer %s: %w", ref.ID, err)
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
