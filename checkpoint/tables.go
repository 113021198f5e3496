package checkpoint

import (
	"errors"
	"fmt"

	"github.com/rindle-sh/rindle-go/mapping"
	"github.com/rindle-sh/rindle-go/producer"
)

// Tables locates the app's message and chunk tables (mapping.Tables: the names live in a leaf
// package, so the reader and the view need not import the durable plane to share them).
type Tables = mapping.Tables

// Columns names the columns of the app's tables (mapping.Columns).
type Columns = mapping.Columns

// TraceMessagePrefix is the prefix of the logical-decoding message a seal carries its trace in.
const TraceMessagePrefix = mapping.TraceMessagePrefix

// DefaultTables is the mapping of the project's default schema (mapping.Default).
func DefaultTables() Tables { return mapping.Default() }

// ResolveTables applies the defaults to t and validates its names (nil or zero: the default).
func ResolveTables(t *Tables) (Tables, error) {
	if t == nil {
		return resolvedTables(Tables{})
	}
	return resolvedTables(*t)
}

// ChunkID is the text chunk key of a mapping that names Columns.ChunkKey (mapping.ChunkID).
func ChunkID(streamID string, seq producer.Seq) string { return mapping.ChunkID(streamID, seq) }

// ParseChunkID splits a chunk key into its stream id and end offset (mapping.ParseChunkID).
func ParseChunkID(id string) (streamID string, seq producer.Seq, err error) {
	return mapping.ParseChunkID(id)
}

// resolvedTables is t with its defaults and validated names, a refused name as the
// *ConfigError every constructor here returns.
func resolvedTables(t Tables) (Tables, error) {
	r, err := t.Resolved()
	return r, asConfigError(err)
}

// validateTables checks t's names as they are, a refused one as a *ConfigError.
func validateTables(t Tables) error { return asConfigError(t.Validate()) }

func asConfigError(err error) error {
	var ne *mapping.NameError
	if errors.As(err, &ne) {
		return &ConfigError{Field: ne.Field, Reason: ne.Reason}
	}
	return err
}

// q quotes a validated identifier.
func q(name string) string { return `"` + name + `"` }

// ChunkTableDDL is the chunk table's DDL for an app's own migration, in the shape of the
// project's schema: the primary key (stream, seq) that both the read path and compaction use,
// no foreign key (its check logs a row lock per chunk; the checkpoint cannot insert a chunk
// without its message row anyway), and a statement trigger that deletes a deleted message's
// chunks, as ON DELETE CASCADE did. A named ChunkKey gets a unique text column. The message
// table is the app's.
func ChunkTableDDL(t Tables) ([]string, error) {
	t, err := resolvedTables(t)
	if err != nil {
		return nil, err
	}
	c := t.Columns
	extra := ""
	if c.ChunkKey != "" {
		extra += ", " + q(c.ChunkKey) + " text NOT NULL UNIQUE"
	}
	if c.ChunkTraceparent != "" {
		extra += ", " + q(c.ChunkTraceparent) + " text"
	}
	fn := q(t.Chunks + "_cascade")
	return []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (%s text NOT NULL, %s bigint NOT NULL, %s text NOT NULL%s, PRIMARY KEY (%s, %s))",
			q(t.Chunks), q(c.ChunkStream), q(c.ChunkSeq), q(c.ChunkText), extra, q(c.ChunkStream), q(c.ChunkSeq)),
		fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN DELETE FROM %s c USING gone g WHERE c.%s = g.%s; RETURN NULL; END $$",
			fn, q(t.Chunks), q(c.ChunkStream), q(c.Key)),
		fmt.Sprintf("CREATE OR REPLACE TRIGGER %s AFTER DELETE ON %s REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION %s()",
			q(t.Chunks+"_cascade"), q(t.Message), fn),
	}, nil
}

// ProtocolTablesDDL is the Durable Streams store's own tables (Protocol) for an app's migration
// when its message table is mapped: ds_streams, ds_producers and ds_bytes, in the shape the
// project's migrations give them (005, 006, 007), with a text stream's message_id referencing the
// app's message key (ON DELETE CASCADE: deleting the message row removes the stream). The key
// must be a text column (a protocol stream's message id is "ds/" + its path). Every statement
// is idempotent (IF NOT EXISTS).
func ProtocolTablesDDL(t Tables) ([]string, error) {
	t, err := resolvedTables(t)
	if err != nil {
		return nil, err
	}
	return []string{
		"CREATE SEQUENCE IF NOT EXISTS ds_incarnations",
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS ds_streams (
	path text PRIMARY KEY,
	message_id text UNIQUE REFERENCES %s (%s) ON DELETE CASCADE,
	content_type text NOT NULL,
	ttl_seconds bigint CHECK (ttl_seconds >= 0),
	expires_at timestamptz,
	accessed_at timestamptz NOT NULL DEFAULT now(),
	stream_seq text,
	closed_by text,
	closed_epoch bigint,
	closed_seq bigint,
	created_at timestamptz NOT NULL DEFAULT now(),
	owner text,
	unit text NOT NULL DEFAULT 'utf16' CHECK (unit IN ('utf16', 'byte')),
	byte_tail bigint NOT NULL DEFAULT 0,
	byte_closed boolean NOT NULL DEFAULT false,
	forked_from text REFERENCES ds_streams (path),
	fork_offset bigint,
	fork_sub_offset bigint,
	deleted_at timestamptz,
	incarnation bigint NOT NULL DEFAULT nextval('ds_incarnations'),
	lineage bigint[] NOT NULL DEFAULT '{}',
	CONSTRAINT ds_streams_unit_data CHECK (deleted_at IS NOT NULL OR (unit = 'utf16') = (message_id IS NOT NULL)))`, q(t.Message), q(t.Columns.Key)),
		// A ds_streams made by this function before incarnations (007) gains them. Forks made
		// before then accept only the offsets they handed out, not their sources' (the
		// migration fills in their lineage; an app that has such forks can run its UPDATE).
		`ALTER TABLE ds_streams ADD COLUMN IF NOT EXISTS incarnation bigint NOT NULL DEFAULT nextval('ds_incarnations'),
	ADD COLUMN IF NOT EXISTS lineage bigint[] NOT NULL DEFAULT '{}'`,
		"CREATE INDEX IF NOT EXISTS ds_streams_forked_from ON ds_streams (forked_from) WHERE forked_from IS NOT NULL",
		"CREATE INDEX IF NOT EXISTS ds_streams_expiring ON ds_streams (path) WHERE ttl_seconds IS NOT NULL OR expires_at IS NOT NULL",
		`CREATE TABLE IF NOT EXISTS ds_producers (
	path text NOT NULL REFERENCES ds_streams (path) ON DELETE CASCADE,
	producer_id text NOT NULL,
	epoch bigint NOT NULL,
	last_seq bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (path, producer_id))`,
		"CREATE INDEX IF NOT EXISTS ds_producers_updated_at ON ds_producers (updated_at)",
		`CREATE TABLE IF NOT EXISTS ds_bytes (
	path text NOT NULL REFERENCES ds_streams (path) ON DELETE CASCADE,
	seq bigint NOT NULL,
	data bytea NOT NULL,
	PRIMARY KEY (path, seq))`,
	}, nil
}

// ViewStatements are the reads the view (ivm) runs, inside its own snapshot transactions, in the
// app's mapping: checkpoint owns every statement on the app's tables, the view only runs them.
type ViewStatements struct {
	// Row reads one message: body, seq, status, error ($1: the id).
	Row string
	// Chunks reads the chunks of several messages: stream, seq, text, in stream and seq order
	// ($1: the ids).
	Chunks string
	// Streaming reads every streaming message: id, body, seq, status, error.
	Streaming string
}

// ViewReads builds the view's statements for a resolved mapping (ResolveTables).
func ViewReads(t Tables) ViewStatements {
	c := t.Columns
	errCol := "NULL::text"
	if c.Error != "" {
		errCol = q(c.Error)
	}
	return ViewStatements{
		Row: fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s WHERE %s = $1", q(c.Body), q(c.Seq), q(c.Status), errCol, q(t.Message), q(c.Key)),
		Chunks: fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = ANY($1) ORDER BY %s, %s",
			q(c.ChunkStream), q(c.ChunkSeq), q(c.ChunkText), q(t.Chunks), q(c.ChunkStream), q(c.ChunkStream), q(c.ChunkSeq)),
		Streaming: fmt.Sprintf("SELECT %s, %s, %s, %s, %s FROM %s WHERE %s = 'streaming'", q(c.Key), q(c.Body), q(c.Seq), q(c.Status), errCol, q(t.Message), q(c.Status)),
	}
}
