package cdc

import (
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
	// ChunkDeleted: a chunk row was deleted (compaction, a sweep, a cascade). StreamID and Seq.
	ChunkDeleted EventKind = "chunk.deleted"
	// MessageChanged: a message row was inserted or updated. StreamID, Seq, Status, Error are
	// set; Body only when the row carried it (nil for an unchanged TOASTed body: keep the old).
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
	Status   string       `json:"status,omitempty"`
	Error    *string      `json:"error,omitempty"`
	Created  bool         `json:"created,omitempty"` // MessageChanged from an INSERT
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
	// checkpoint.TraceMessagePrefix carried (a seal's: it writes no chunk row).
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
)

// Encode is the wire form of a Tx in a watermill payload.
func (t *Tx) Encode() ([]byte, error) { return json.Marshal(t) }

// DecodeTx parses a watermill payload into a Tx.
func DecodeTx(payload []byte) (*Tx, error) {
	var t Tx
	if err := json.Unmarshal(payload, &t); err != nil {
		return nil, fmt.Errorf("cdc: decode transaction: %w", err)
	}
	return &t, nil
}
