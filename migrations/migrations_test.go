package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	db := pgtest.NewBareDB(t)
	ctx := t.Context()
	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)

	// Two processes starting at once: the advisory lock lets exactly one apply each migration.
	var wg sync.WaitGroup
	applied := make([][]int, 4)
	for i := range applied {
		wg.Go(func() {
			conn, err := pgx.Connect(context.Background(), db.URL)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			applied[i], err = migrations.Migrate(context.Background(), conn)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	total := 0
	for _, a := range applied {
		total += len(a)
	}
	require.Equal(t, len(all), total, "each migration applied exactly once across all runners")

	var versions []int32
	rows, err := db.Pool.Query(ctx, "SELECT version FROM schema_migrations ORDER BY version")
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Len(t, versions, len(all))

	// The schema is the one DESIGN §5 describes: the status CHECK admits every status.
	_, err = db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	for _, st := range []string{"streaming", "complete", "cancelled", "error", "interrupted", "pending"} {
		_, err = db.Pool.Exec(ctx, "UPDATE messages SET status = $1 WHERE id = 'm'", st)
		require.NoError(t, err, st)
	}
	_, err = db.Pool.Exec(ctx, "UPDATE messages SET status = 'bogus' WHERE id = 'm'")
	require.Error(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE messages SET seq = NULL WHERE id = 'm'")
	require.Error(t, err, "the CAS column is NOT NULL")
}
