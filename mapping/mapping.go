// Package mapping owns the names of an app's message and chunk tables and their columns: the
// one mapping the durable plane writes through (checkpoint), the replication reader decodes
// (cdc) and the view reads (ivm), with the project's default schema as its zero value. It is a
// leaf: it knows no SQL beyond the names, no connection and no HTTP; checkpoint owns every
// statement, and migrations owns the default schema itself.
//
// The chunk key helpers live here too: a chunk DELETE under the default replica identity names
// its stream only through its key, and the reader must split it the same way the writer built it.
package mapping

import (
	"fmt"
	"strings"

	"github.com/rindle-sh/rindle-go/producer"
)

// TraceMessagePrefix is the prefix of the transactional logical-decoding message a seal writes
// with its W3C trace context (a seal writes no chunk row to carry it).
const TraceMessagePrefix = "rindle.traceparent"

// Columns names the columns of the app's tables the plane reads and writes. An empty field takes
// its default, except Cancel, Error, Host, Owner, Chat, Role, ChunkKey and ChunkTraceparent,
// which are opt-in by naming: the plane never emits SQL against a column the app did not ask it
// to use.
type Columns struct {
	// Key is the message row's primary key, matched against the stream id. Defaults to "id".
	Key string
	// Body is the compacted text, empty at open. Defaults to "body".
	Body string
	// Status holds streaming, then a terminal status. Defaults to "status".
	Status string
	// Seq is the durable length, len16(body) plus the chunk lengths: the compare-and-swap
	// column, which must be NOT NULL DEFAULT 0. Defaults to "seq".
	Seq string
	// Cancel, if named, is a boolean a reader sets to stop the generation; it is read on every
	// checkpoint round trip. No default.
	Cancel string
	// Error, if named, records a failed generation's message (NULL otherwise). No default.
	Error string
	// Host, if named, records the producer's identity at open and turns the open guard into a
	// true compare-and-swap; it also gives subscribe routing a column to read. No default.
	Host string
	// Owner, if named, is the text column a reader's token subject must match (Catalog needs
	// it). No default.
	Owner string
	// Chat and Role, if named, are text columns Catalog.Create fills (the conversation and the
	// speaker). No default.
	Chat, Role string
	// ChunkKey, if named, is a text key written as "<streamId>:<seq>" (the seed's schema keys
	// chunks by it). No default: the project's schema keys chunks by (stream, seq), which says
	// the same thing without a second index.
	ChunkKey string
	// ChunkStream references the message row. Defaults to "stream_id".
	ChunkStream string
	// ChunkSeq is the chunk's END offset, the ordering key. Defaults to "seq".
	ChunkSeq string
	// ChunkText is the chunk's slice of the text. Defaults to "text".
	ChunkText string
	// ChunkTraceparent, if named, receives the W3C traceparent of the checkpoint's commit
	// context, so the CDC reader and the view continue the producer's trace (logical
	// replication carries no trace context of its own). No default.
	ChunkTraceparent string
}

// Tables locates the app's message table and the append-only chunk table. The app owns and
// migrates both; the message row must exist (with seq 0) before a stream opens on it.
//
// Requirements on the message table: the key is unique; seq is an integer NOT NULL DEFAULT 0;
// body is text; status accepts streaming, complete, cancelled, error and interrupted (a CHECK
// that omits one turns a seal into an infrastructure failure); cancel is boolean-readable;
// error is nullable text; host is text.
type Tables struct {
	// Message is the app's message table. Defaults to "messages".
	Message string
	// Chunks is the chunk table. Defaults to "message_chunks".
	Chunks  string
	Columns Columns
}

// Default is the mapping of the project's default schema (migrations/): every opt-in
// column named, as docs/DESIGN.md §5 lays it out, except the chunk key, which migration 004 folded
// into the (stream_id, seq) primary key. It is what a zero Tables means in every package.
func Default() Tables {
	return Tables{
		Message: "messages",
		Chunks:  "message_chunks",
		Columns: Columns{Cancel: "cancel_requested", Error: "error", Host: "host", Owner: "owner", Chat: "chat_id", Role: "role",
			ChunkTraceparent: "traceparent"},
	}
}

// orDefault is the one default: a zero mapping is the project's schema.
func (t Tables) orDefault() Tables {
	if t == (Tables{}) {
		return Default()
	}
	return t
}

func (t Tables) resolve() Tables {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&t.Message, "messages")
	def(&t.Chunks, "message_chunks")
	c := &t.Columns
	def(&c.Key, "id")
	def(&c.Body, "body")
	def(&c.Status, "status")
	def(&c.Seq, "seq")
	def(&c.ChunkStream, "stream_id")
	def(&c.ChunkSeq, "seq")
	def(&c.ChunkText, "text")
	return t
}

// Validate refuses a name that would need escaping: a mapping is app configuration, and such a
// name is a mistake worth failing loudly on. The error is a *NameError.
func (t Tables) Validate() error {
	c := t.Columns
	for _, n := range []struct{ field, name string }{
		{"Message", t.Message}, {"Chunks", t.Chunks},
		{"Columns.Key", c.Key}, {"Columns.Body", c.Body}, {"Columns.Status", c.Status}, {"Columns.Seq", c.Seq},
		{"Columns.Cancel", c.Cancel}, {"Columns.Error", c.Error}, {"Columns.Host", c.Host},
		{"Columns.Owner", c.Owner}, {"Columns.Chat", c.Chat}, {"Columns.Role", c.Role},
		{"Columns.ChunkKey", c.ChunkKey}, {"Columns.ChunkStream", c.ChunkStream},
		{"Columns.ChunkSeq", c.ChunkSeq}, {"Columns.ChunkText", c.ChunkText}, {"Columns.ChunkTraceparent", c.ChunkTraceparent},
	} {
		if strings.ContainsAny(n.name, "\"\x00") {
			return &NameError{Field: "Tables." + n.field, Reason: fmt.Sprintf("%q contains a double quote or NUL; rename it rather than escape it", n.name)}
		}
	}
	return nil
}

// Resolved is t with the one default (a zero t is Default()) and every empty name's default
// applied, its names validated.
func (t Tables) Resolved() (Tables, error) {
	r := t.orDefault().resolve()
	return r, r.Validate()
}

// Resolve is Resolved for an optional mapping: nil means Default().
func Resolve(t *Tables) (Tables, error) {
	if t == nil {
		return Tables{}.Resolved()
	}
	return t.Resolved()
}

// NameError names the mapping field whose name Validate refused, and why.
type NameError struct {
	Field  string
	Reason string
}

func (e *NameError) Error() string { return "mapping: " + e.Field + ": " + e.Reason }

// ChunkID is the text chunk key of a mapping that names Columns.ChunkKey: deterministic, so a
// chunk can only ever be written once. Split it at the LAST colon to get the stream back (a
// stream id may contain colons).
func ChunkID(streamID string, seq producer.Seq) string {
	return fmt.Sprintf("%s:%d", streamID, seq)
}

// ParseChunkID splits a chunk key into its stream id and end offset.
func ParseChunkID(id string) (streamID string, seq producer.Seq, err error) {
	i := strings.LastIndexByte(id, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("chunk id %q has no ':'", id)
	}
	var n int64
	if _, err := fmt.Sscanf(id[i+1:], "%d", &n); err != nil || fmt.Sprint(n) != id[i+1:] {
		return "", 0, fmt.Errorf("chunk id %q does not end in an offset", id)
	}
	return id[:i], producer.Seq(n), nil
}
