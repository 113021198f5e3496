package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

func TestHarnessSmoke(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	var wal string
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SHOW wal_level").Scan(&wal))
	require.Equal(t, "logical", wal)
	var n int
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM messages").Scan(&n))
}
