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
