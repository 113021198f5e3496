package cdc

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/rindle-sh/rindle-go/mapping"
	"github.com/rindle-sh/rindle-go/producer"
)

// decoder turns pgoutput (protocol version 1) messages into transactions. It is pure state (a
// relation cache and the open transaction) with no I/O, so arbitrary bytes can be fed to it:
// every input is either decoded or refused with an error, never a panic.
type decoder struct {
	t         mapping.Tables
	relations map[uint32]*pglogrepl.RelationMessage
	tx        *Tx // the open transaction, between Begin and Commit
	maxBody   int // a longer body is not carried (Event.BodyOmitted); -1 or 0: no bound
	// gone holds the messages the open transaction deleted, with no change to them since:
	// their chunk deletes (the schema's trigger deletes a message's chunks after it) are
	// implied by the MessageDeleted and not carried.
	gone map[string]struct{}
}

func newDecoder(t mapping.Tables) *decoder {
	if resolved, err := mapping.Resolve(&t); err == nil {
		t = resolved // names that fail validation never reach here: New refuses them
	}
	return &decoder{t: t, relations: map[uint32]*pglogrepl.RelationMessage{}}
}

// inTx reports whether a transaction is open: its changes are in flight.
func (d *decoder) inTx() bool { return d.tx != nil }

// feed decodes one message. It returns the transaction when the message was its Commit.
func (d *decoder) feed(wal []byte) (done *Tx, err error) {
	if len(wal) == 0 {
		return nil, errors.New("cdc: empty logical replication message")
	}
	defer func() {
		// pglogrepl's decoders index into the buffer; a malformed message must not take the
		// reader down.
		if r := recover(); r != nil {
			done, err = nil, fmt.Errorf("cdc: malformed %q message: %v", wal[0], r)
		}
	}()
	if err := checkTupleFraming(wal); err != nil {
		return nil, err
	}
	msg, err := pglogrepl.Parse(wal)
	if err != nil {
		return nil, fmt.Errorf("cdc: parse %q message: %w", wal[0], err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.tx = &Tx{Xid: m.Xid, CommitTime: m.CommitTime}
		clear(d.gone)
	case *pglogrepl.CommitMessage:
		if d.tx == nil {
			return nil, errors.New("cdc: commit without begin")
		}
		tx := d.tx
		d.tx = nil
		tx.CommitLSN, tx.EndLSN, tx.CommitTime = m.CommitLSN, m.TransactionEndLSN, m.CommitTime
		return tx, nil
	case *pglogrepl.InsertMessage:
		return nil, d.row(m.RelationID, m.Tuple, nil, true)
	case *pglogrepl.UpdateMessage:
		return nil, d.row(m.RelationID, m.NewTuple, nil, false)
	case *pglogrepl.DeleteMessage:
		return nil, d.row(m.RelationID, nil, m.OldTuple, false)
	case *pglogrepl.LogicalDecodingMessage:
		if d.tx != nil && m.Transactional && m.Prefix == mapping.TraceMessagePrefix {
			d.tx.Trace = string(m.Content)
		}
	case *pglogrepl.TruncateMessage:
		if d.tx == nil {
			return nil, errors.New("cdc: truncate outside a transaction")
		}
		for _, id := range m.RelationIDs {
			if rel, ok := d.relations[id]; ok && d.ours(rel) {
				d.tx.Events = append(d.tx.Events, Event{Kind: Truncated})
				break
			}
		}
	}
	// Type and origin messages carry nothing this reader needs.
	return nil, nil
}

func (d *decoder) ours(rel *pglogrepl.RelationMessage) bool {
	return rel.RelationName == d.t.Message || rel.RelationName == d.t.Chunks
}

// row decodes an insert or update (tuple) or a delete (old key) on one of the two tables.
func (d *decoder) row(relID uint32, tuple, old *pglogrepl.TupleData, created bool) error {
	if d.tx == nil {
		return errors.New("cdc: row change outside a transaction")
	}
	rel, ok := d.relations[relID]
	if !ok {
		return fmt.Errorf("cdc: row change for unknown relation %d (no Relation message before it)", relID)
	}
	if !d.ours(rel) {
		return nil
	}
	data := tuple
	if data == nil {
		data = old
	}
	if data == nil {
		return fmt.Errorf("cdc: %s change with no tuple", rel.RelationName)
	}
	r := tupleRow{rel: rel, cols: map[string]*pglogrepl.TupleDataColumn{}}
	for i, col := range data.Columns {
		if i < len(rel.Columns) {
			r.cols[rel.Columns[i].Name] = col
		}
	}
	var ev Event
	var err error
	switch {
	case rel.RelationName == d.t.Chunks && old != nil:
		ev, err = d.chunkDeleted(r)
	case rel.RelationName == d.t.Chunks:
		if tuple != nil && !created {
			return nil // chunk rows are append-only; an app that edits one gets no event
		}
		ev, err = d.chunkAppended(r)
	case old != nil:
		ev, err = d.messageDeleted(r)
	default:
		ev, err = d.messageChanged(r, created)
	}
	if err != nil {
		return err
	}
	switch ev.Kind {
	case MessageDeleted:
		if d.gone == nil {
			d.gone = map[string]struct{}{}
		}
		d.gone[ev.StreamID] = struct{}{}
	case ChunkDeleted:
		if _, implied := d.gone[ev.StreamID]; implied {
			return nil
		}
	default: // the message is back (or a chunk of it came): its later chunk deletes are news
		delete(d.gone, ev.StreamID)
	}
	d.tx.Events = append(d.tx.Events, ev)
	return nil
}

// tupleRow is one decoded tuple's columns by name, in its relation.
type tupleRow struct {
	rel  *pglogrepl.RelationMessage
	cols map[string]*pglogrepl.TupleDataColumn
}

// text is a column's text value; false for NULL or an unchanged TOASTed value.
func (r tupleRow) text(name string) (string, bool, error) {
	c, ok := r.cols[name]
	switch {
	case !ok:
		return "", false, fmt.Errorf("cdc: %s has no column %q", r.rel.RelationName, name)
	case c.DataType == pglogrepl.TupleDataTypeText:
		return string(c.Data), true, nil
	case c.DataType == pglogrepl.TupleDataTypeNull, c.DataType == pglogrepl.TupleDataTypeToast:
		return "", false, nil
	}
	return "", false, fmt.Errorf("cdc: %s.%s arrived in format %q; the reader asks for text", r.rel.RelationName, name, c.DataType)
}

// seq is a NOT NULL integer column.
func (r tupleRow) seq(name string) (producer.Seq, error) {
	s, ok, err := r.text(name)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("cdc: %s.%s is NULL", r.rel.RelationName, name)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cdc: %s.%s = %q is not an integer", r.rel.RelationName, name, s)
	}
	return producer.Seq(n), nil
}

// chunkDeleted decodes a chunk DELETE. Under REPLICA IDENTITY DEFAULT it carries only the key:
// the project's key is (stream, seq); a mapping with a text chunk key names its stream in it.
func (d *decoder) chunkDeleted(r tupleRow) (Event, error) {
	c := d.t.Columns
	if c.ChunkKey != "" {
		if k, keyed := r.cols[c.ChunkKey]; keyed && k.DataType == pglogrepl.TupleDataTypeText {
			stream, seq, err := mapping.ParseChunkID(string(k.Data))
			if err != nil {
				return Event{}, fmt.Errorf("cdc: chunk delete: %w", err)
			}
			return Event{Kind: ChunkDeleted, StreamID: stream, Seq: seq}, nil
		}
	}
	stream, ok, err := r.text(c.ChunkStream)
	if err != nil {
		return Event{}, fmt.Errorf("cdc: chunk delete: %w", err)
	}
	if !ok {
		return Event{}, fmt.Errorf("cdc: %s delete carries no %q: its replica identity must include the stream column or a mapped chunk key", r.rel.RelationName, c.ChunkStream)
	}
	seq, err := r.seq(c.ChunkSeq)
	if err != nil {
		return Event{}, fmt.Errorf("cdc: chunk delete: %w", err)
	}
	return Event{Kind: ChunkDeleted, StreamID: stream, Seq: seq}, nil
}

// chunkAppended decodes a chunk INSERT, with its trace context where the mapping carries one.
func (d *decoder) chunkAppended(r tupleRow) (Event, error) {
	c := d.t.Columns
	stream, ok, err := r.text(c.ChunkStream)
	if err != nil || !ok {
		return Event{}, fmt.Errorf("cdc: chunk row without its stream: %w", err)
	}
	seq, err := r.seq(c.ChunkSeq)
	if err != nil {
		return Event{}, err
	}
	body, ok, err := r.text(c.ChunkText)
	if err != nil || !ok {
		return Event{}, fmt.Errorf("cdc: chunk row %s:%d without text: %w", stream, seq, err)
	}
	ev := Event{Kind: ChunkAppended, StreamID: stream, Seq: seq, Text: body}
	if c.ChunkTraceparent != "" {
		if tp, ok := r.cols[c.ChunkTraceparent]; ok && tp.DataType == pglogrepl.TupleDataTypeText {
			ev.Traceparent = string(tp.Data)
		}
	}
	return ev, nil
}

func (d *decoder) messageDeleted(r tupleRow) (Event, error) {
	id, ok, err := r.text(d.t.Columns.Key)
	if err != nil || !ok {
		return Event{}, fmt.Errorf("cdc: message change without its key: %w", err)
	}
	return Event{Kind: MessageDeleted, StreamID: id}, nil
}

// messageChanged decodes a message INSERT or UPDATE. An unchanged TOASTed body arrives as 'u'
// with no value: a nil Body means "keep the old body", never "empty".
func (d *decoder) messageChanged(r tupleRow, created bool) (Event, error) {
	c := d.t.Columns
	id, ok, err := r.text(c.Key)
	if err != nil || !ok {
		return Event{}, fmt.Errorf("cdc: message change without its key: %w", err)
	}
	ev := Event{Kind: MessageChanged, StreamID: id, Created: created}
	if ev.Seq, err = r.seq(c.Seq); err != nil {
		return Event{}, err
	}
	if ev.Status, _, err = r.text(c.Status); err != nil {
		return Event{}, err
	}
	if col, ok := r.cols[c.Body]; ok && col.DataType == pglogrepl.TupleDataTypeText {
		if d.maxBody > 0 && len(col.Data) > d.maxBody {
			ev.BodyOmitted = true
		} else {
			b := string(col.Data)
			ev.Body = &b
		}
	} else if ok && col.DataType == pglogrepl.TupleDataTypeNull {
		empty := ""
		ev.Body = &empty
	}
	if c.Error != "" {
		e, ok, err := r.text(c.Error)
		if err != nil {
			return Event{}, err
		}
		if ok {
			ev.Error = &e
		}
	}
	return ev, nil
}

// checkTupleFraming walks the tuples of an insert, update or delete (and a truncate's relation
// list) and refuses a length that overruns the message, before pglogrepl allocates whatever
// length a message claims (up to 4 GiB of data, or 16 GiB of relation ids, for a corrupt one).
// PostgreSQL never sends such a message; the check keeps a corrupt one an error instead of an
// allocation storm. It follows the grammar pglogrepl decodes, tuple by tuple: an insert's 'N'
// tuple; a delete's 'K' or 'O' tuple; an update's 'N' tuple, or a 'K' or 'O' tuple and then
// an 'N' one (pglogrepl skips the byte after an old tuple without reading it, so a message
// that put anything else there would have the bytes after it decoded as an unchecked tuple).
func checkTupleFraming(wal []byte) error {
	rest := wal[1:]
	tupleAt := func(b []byte) ([]byte, error) {
		if len(b) < 2 {
			return nil, errors.New("cdc: truncated tuple")
		}
		n := int(b[0])<<8 | int(b[1])
		b = b[2:]
		for i := 0; i < n; i++ {
			if len(b) < 1 {
				return nil, errors.New("cdc: truncated tuple column")
			}
			kind := b[0]
			b = b[1:]
			if kind != pglogrepl.TupleDataTypeText && kind != pglogrepl.TupleDataTypeBinary {
				continue
			}
			if len(b) < 4 {
				return nil, errors.New("cdc: truncated tuple column length")
			}
			size := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
			b = b[4:]
			if size > uint64(len(b)) {
				return nil, fmt.Errorf("cdc: a tuple column claims %d bytes, %d remain", size, len(b))
			}
			b = b[size:]
		}
		return b, nil
	}
	switch wal[0] {
	case 'I', 'U', 'D':
	case 'T':
		// A truncate lists its relations: 4 bytes each after the count and an options byte.
		if len(rest) < 5 {
			return errors.New("cdc: truncated truncate message")
		}
		n := uint64(rest[0])<<24 | uint64(rest[1])<<16 | uint64(rest[2])<<8 | uint64(rest[3])
		if n*4 > uint64(len(rest)-5) {
			return fmt.Errorf("cdc: a truncate claims %d relations in %d bytes", n, len(rest)-5)
		}
		return nil
	default:
		return nil
	}
	if len(rest) < 5 {
		return errors.New("cdc: truncated row message")
	}
	kind := wal[0]
	rest = rest[4:] // relation id
	marker := rest[0]
	switch {
	case kind == 'I' && marker == 'N', kind == 'U' && marker == 'N':
	case (kind == 'D' || kind == 'U') && (marker == 'K' || marker == 'O'):
		old, err := tupleAt(rest[1:])
		if err != nil || kind == 'D' {
			return err
		}
		if len(old) == 0 || old[0] != 'N' {
			return errors.New("cdc: an update's old tuple is not followed by its new one ('N')")
		}
		rest = old
	default:
		return fmt.Errorf("cdc: a %q message with tuple kind %q", kind, marker)
	}
	_, err := tupleAt(rest[1:])
	return err
}
