package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
	"github.com/rindle-sh/rindle-go/producer/committertest"
)

// The Store passes the committer seam's conformance suite on PostgreSQL, in the project's
// schema and in an app's own mapping with the seed's text chunk key.
func TestStorePassesTheCommitterSuite(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	stored := func(t *testing.T, streamID string) (string, producer.Status) {
		t.Helper()
		var text, status string
		err := db.Pool.QueryRow(t.Context(), `SELECT m.body || coalesce((SELECT string_agg(c.text, '' ORDER BY c.seq)
			FROM message_chunks c WHERE c.stream_id = m.id), ''), m.status FROM messages m WHERE m.id = $1`, streamID).Scan(&text, &status)
		if err != nil {
			return "", ""
		}
		return text, producer.Status(status)
	}
	committertest.Run(t, func(t *testing.T) committertest.Harness {
		store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), HostID: "host-" + t.Name()})
		require.NoError(t, err)
		return committertest.Harness{
			Committer: store,
			Create: func(t *testing.T, streamID string) {
				_, err := db.Pool.Exec(t.Context(), "INSERT INTO messages (id) VALUES ($1)", streamID)
				require.NoError(t, err)
			},
			Stored: stored,
		}
	})
}

func TestStoreInAnAppsMappingPassesTheCommitterSuite(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE answers (answer_id text PRIMARY KEY, txt text NOT NULL DEFAULT '',
		len bigint NOT NULL DEFAULT 0, state text NOT NULL DEFAULT 'pending', stop boolean, failure text, node text)`)
	require.NoError(t, err)
	tables := checkpoint.Tables{Message: "answers", Chunks: "answer_parts", Columns: checkpoint.Columns{
		Key: "answer_id", Body: "txt", Seq: "len", Status: "state", Cancel: "stop", Error: "failure", Host: "node",
		ChunkKey: "id", ChunkStream: "answer", ChunkSeq: "end_at", ChunkText: "part"}}
	ddl, err := checkpoint.ChunkTableDDL(tables)
	require.NoError(t, err)
	for _, stmt := range ddl {
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, checkpoint.CheckSchema(ctx, checkpoint.PoolDB(db.Pool), tables))
	committertest.Run(t, func(t *testing.T) committertest.Harness {
		store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: tables, HostID: "host-" + t.Name()})
		require.NoError(t, err)
		return committertest.Harness{
			Committer: store,
			Create: func(t *testing.T, streamID string) {
				_, err := db.Pool.Exec(t.Context(), "INSERT INTO answers (answer_id) VALUES ($1)", streamID)
				require.NoError(t, err)
			},
			Stored: func(t *testing.T, streamID string) (string, producer.Status) {
				var text, status string
				err := db.Pool.QueryRow(t.Context(), `SELECT a.txt || coalesce((SELECT string_agg(p.part, '' ORDER BY p.end_at)
					FROM answer_parts p WHERE p.answer = a.answer_id), ''), a.state FROM answers a WHERE a.answer_id = $1`, streamID).Scan(&text, &status)
				if err != nil {
					return "", ""
				}
				return text, producer.Status(status)
			},
		}
	})
}
