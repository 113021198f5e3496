package cdc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/rindle-sh/rindle-go/producer"
)

// EventKind names one row change the reader decodes.
type EventKind string

// The event kinds.
const (
	// ChunkAppended: a chunk row was inserted. StreamID, Seq (its END offset) and Text are set.
	ChunkAppended EventKind = "chunk.appended"
	// ChunkDeleted: a chunk row was deleted (compaction, a sweep). StreamID and Seq. A chunk
	// deleted after its message in the same transaction (the cascade of a message's delete) has
	// none: the transaction's MessageDeleted implies every chunk of that message goes. Once
	// the transaction writes the message or a chunk of it again, its chunk deletes are carried.
	ChunkDeleted EventKind = "chunk.deleted"
	// MessageChanged: a message row was inserted or updated. StreamID, Seq, Status, Error are
	// set; Body only when the row carried it (nil for an unchanged TOASTed body: keep the old)
	// and it fits Config.MaxBodyBytes (otherwise BodyOmitted).
	MessageChanged EventKind = "message.changed"
	// MessageDeleted: a message row was deleted. StreamID.
	MessageDeleted EventKind = "message.deleted"
	// Truncated: a table was truncated; every view of it must be rebuilt.
	Truncated EventKind = "truncated"
)

// Event is one decoded row change.
type Event struct {
	Kind     EventKind    `json:"kind"`
	StreamID string       `json:"streamId,omitempty"`
	Seq      producer.Seq `json:"seq,omitempty"`
	Text     string       `json:"text,omitempty"`
	Body     *string      `json:"body,omitempty"`
	// BodyOmitted says the row carried a body longer than Config.MaxBodyBytes, left out of the
	// event: Body is nil, and a consumer that needs the body reads it from the row.
	BodyOmitted bool    `json:"bodyOmitted,omitempty"`
	Status      string  `json:"status,omitempty"`
	Error       *string `json:"error,omitempty"`
	Created     bool    `json:"created,omitempty"` // MessageChanged from an INSERT
	// Traceparent is the W3C trace context a ChunkAppended's checkpoint wrote with the row,
	// when the chunk table has a traceparent column.
	Traceparent string `json:"traceparent,omitempty"`
}

// From is a chunk's start offset.
func (e Event) From() producer.Seq { return e.Seq - producer.Len16(e.Text) }

// Tx is one committed transaction's changes to the message and chunk tables, published whole
// so no consumer ever sees half a compaction.
type Tx struct {
	Xid        uint32        `json:"xid"`
	CommitLSN  pglogrepl.LSN `json:"commitLsn"`
	EndLSN     pglogrepl.LSN `json:"endLsn"` // what the reader acknowledges once published
	CommitTime time.Time     `json:"commitTime"`
	Events     []Event       `json:"events"`
	// Trace is the W3C trace context a transactional logical-decoding message with prefix
	// mapping.TraceMessagePrefix carried (a seal's: it writes no chunk row).
	Trace string `json:"trace,omitempty"`
}

// Traceparent is the trace context of the checkpoint that wrote the transaction, whose trace a
// consumer continues: the seal's message, else the first chunk that carries one.
func (t *Tx) Traceparent() string {
	if t.Trace != "" {
		return t.Trace
	}
	for _, e := range t.Events {
		if e.Traceparent != "" {
			return e.Traceparent
		}
	}
	return ""
}

// Watermill metadata keys the reader sets on every message.
const (
	MetaLSN        = "rindle_lsn"
	MetaCommitTime = "rindle_commit_time"
	MetaXid        = "rindle_xid"
	// MetaTraceparent is the W3C trace context of the checkpoint, when the row carried one.
	MetaTraceparent = "traceparent"
	// MetaPart is "i/n" on each piece of a transaction published in parts (Config.MaxEventBytes).
	MetaPart = "rindle_part"
)

// Encode is the wire form of a Tx in a watermill payload: JSON without HTML escaping, which
// would spell each of <, > and & in the text as six bytes (a model's answer full of markup would
// triple in size on the wire).
//
// The buffer is sized up front from the text it will carry: grown by doubling, a seal's payload
// of a long answer would allocate about twice its size again on the way.
func (t *Tx) Encode() ([]byte, error) {
	n := 256
	for _, e := range t.Events {
		n += 160 + len(e.StreamID) + len(e.Text) + len(e.Traceparent)
		if e.Body != nil {
			n += len(*e.Body)
		}
		if e.Error != nil {
			n += len(*e.Error)
		}
	}
	b := bytes.NewBuffer(make([]byte, 0, n))
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(t); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Parts splits a transaction's payload into pieces of at most max bytes, for a broker whose
// messages are bounded (NATS takes 1 MB by default): a consumer joins them back in order
// (Assembler). A payload that fits is one piece.
func Parts(payload []byte, max int) [][]byte {
	if max <= 0 || len(payload) <= max {
		return [][]byte{payload}
	}
	parts := make([][]byte, 0, (len(payload)+max-1)/max)
	for len(payload) > 0 {
		n := min(max, len(payload))
		parts = append(parts, payload[:n])
		payload = payload[n:]
	}
	return parts
}

// Assembler joins the parts of a transaction published in pieces (MetaPart "i/n" on each, the
// same MetaLSN on all). Parts of one transaction arrive in order on an ordered consumer; a
// republish after a failed publish starts again at part 1, which starts the transaction anew;
// a part delivered twice in a row (a redelivery) is taken once, and the last part delivered
// again (its handler failed and nacked it) yields the whole payload again. A part that does not
// follow the one before (a consumer that started mid-transaction) drops what was gathered: that
// transaction committed before the consumer began, so the consumer's snapshot holds it. Not
// safe for concurrent use: one per ordered consumer.
type Assembler struct {
	lsn  string
	next int // the part expected next; 0 when none is being gathered
	buf  []byte

	doneLSN string // the transaction last completed, kept for a redelivery of its last part
	doneN   int
	done    []byte
}

// Add takes one message's payload and metadata. It returns the whole payload once the last
// part arrived (or at once for a message that is not in parts), and nil otherwise.
func (a *Assembler) Add(payload []byte, meta map[string]string) ([]byte, error) {
	part := meta[MetaPart]
	if part == "" {
		return payload, nil
	}
	var i, n int
	if _, err := fmt.Sscanf(part, "%d/%d", &i, &n); err != nil || i < 1 || n < 1 || i > n {
		return nil, fmt.Errorf("cdc: malformed %s %q", MetaPart, part)
	}
	lsn := meta[MetaLSN]
	switch {
	case i == n && lsn == a.doneLSN && n == a.doneN:
		return a.done, nil // the last part again: its transaction is applied again (idempotent)
	case i == 1:
		a.lsn, a.next, a.buf = lsn, 1, nil
		a.doneLSN, a.doneN, a.done = "", 0, nil
	case lsn == a.lsn && i == a.next-1:
		return nil, nil // delivered twice in a row: taken once
	}
	if lsn != a.lsn || i != a.next {
		a.lsn, a.next, a.buf = "", 0, nil // joined mid-transaction: the snapshot holds it
		return nil, nil
	}
	a.buf = append(a.buf, payload...)
	a.next++
	if i < n {
		return nil, nil
	}
	a.doneLSN, a.doneN, a.done = lsn, n, a.buf
	a.lsn, a.next, a.buf = "", 0, nil
	return a.done, nil
}

// DecodeTx parses a watermill payload into a Tx.
func DecodeTx(payload []byte) (*Tx, error) {
	var t Tx
	if err := json.Unmarshal(payload, &t); err != nil {
		return nil, fmt.Errorf("cdc: decode transaction: %w", err)
	}
	return &t, nil
}
