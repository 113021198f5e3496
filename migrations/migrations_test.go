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
	rows, err := db.Pool.Query(ctx, "SELECT version FROM "+migrations.Table+" ORDER BY version")
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Len(t, versions, len(all))

	// The schema is the one docs/DESIGN.md §5 describes: the status CHECK admits every status.
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

// TestMigrateLeavesAnotherToolsTableAlone: a database golang-migrate (or dbmate, or Rails)
// manages has its own schema_migrations; ours is named for this project and theirs is kept.
func TestMigrateLeavesAnotherToolsTableAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.NewBareDB(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, "CREATE TABLE schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL); INSERT INTO schema_migrations VALUES (20240101, false)")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	applied, err := migrations.Migrate(ctx, conn)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	var version int64
	var dirty bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty))
	require.Equal(t, int64(20240101), version, "the other tool's row is untouched")
}

// TestMigrateMovesAnOlderInstall: a database migrated by an earlier rindled (its versions in
// schema_migrations, chunks keyed by a text id) moves to the current layout with its rows:
// the versions move to our table, and migration 004 re-keys the chunks it holds.
func TestMigrateMovesAnOlderInstall(t *testing.T) {
	t.Parallel()
	db := pgtest.NewBareDB(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	applied, err := migrations.MigrateTo(ctx, conn, 3)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3}, applied)
	_, err = db.Pool.Exec(ctx, `ALTER TABLE `+migrations.Table+` RENAME TO schema_migrations;
		INSERT INTO messages (id, status, seq) VALUES ('a:1', 'streaming', 3), ('b', 'streaming', 1);
		INSERT INTO message_chunks (id, stream_id, seq, text) VALUES ('a:1:1', 'a:1', 1, 'x'), ('a:1:3', 'a:1', 3, 'yz'), ('b:1', 'b', 1, 'w')`)
	require.NoError(t, err)

	applied, err = migrations.Migrate(ctx, conn)
	require.NoError(t, err)
	all, err := migrations.All()
	require.NoError(t, err)
	var later []int
	for _, m := range all[3:] {
		later = append(later, m.Version)
	}
	require.Equal(t, later, applied, "1 to 3 were recognised from the old table")
	var old *string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations')::text").Scan(&old))
	require.Nil(t, old, "our old table is gone once moved")

	var text string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT string_agg(text, '' ORDER BY seq) FROM message_chunks WHERE stream_id = 'a:1'").Scan(&text))
	require.Equal(t, "xyz", text)
	_, err = db.Pool.Exec(ctx, "INSERT INTO message_chunks (stream_id, seq, text) VALUES ('a:1', 3, 'again')")
	require.ErrorContains(t, err, "message_chunks_pkey", "(stream_id, seq) is the key now")
	_, err = db.Pool.Exec(ctx, "DELETE FROM messages WHERE id = 'a:1'")
	require.NoError(t, err)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM message_chunks").Scan(&left))
	require.Equal(t, 1, left, "the delete cascaded to a:1's chunks only")
}

// Migration 007 gives every protocol stream an incarnation, and the forks made before it their
// lineage: each ancestor's incarnation with the offset up to which the fork shares its data.
func TestMigrate007GivesForksTheirLineage(t *testing.T) {
	t.Parallel()
	db := pgtest.NewBareDB(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = migrations.MigrateTo(ctx, conn, 6)
	require.NoError(t, err)
	// src (tail 9) ← f, forked at 6 ← g, forked at 8; and a stream with no fork.
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO messages (id, status, seq) VALUES ('ds/src', 'pending', 9), ('ds/f', 'pending', 10), ('ds/g', 'pending', 8), ('ds/alone', 'pending', 0);
		INSERT INTO ds_streams (path, message_id, content_type) VALUES ('src', 'ds/src', 'text/plain'), ('alone', 'ds/alone', 'text/plain');
		INSERT INTO ds_streams (path, message_id, content_type, forked_from, fork_offset) VALUES ('f', 'ds/f', 'text/plain', 'src', 6);
		INSERT INTO ds_streams (path, message_id, content_type, forked_from, fork_offset) VALUES ('g', 'ds/g', 'text/plain', 'f', 8)`)
	require.NoError(t, err)
	applied, err := migrations.Migrate(ctx, conn)
	require.NoError(t, err)
	require.Contains(t, applied, 7)

	inc := map[string]int64{}
	lineage := map[string][]int64{}
	rows, err := db.Pool.Query(ctx, "SELECT path, incarnation, lineage FROM ds_streams")
	require.NoError(t, err)
	for rows.Next() {
		var path string
		var i int64
		var l []int64
		require.NoError(t, rows.Scan(&path, &i, &l))
		inc[path], lineage[path] = i, l
	}
	require.NoError(t, rows.Err())
	require.Len(t, inc, 4)
	seen := map[int64]bool{}
	for path, i := range inc {
		require.Positive(t, i, path)
		require.False(t, seen[i], "%s: incarnations are unique", path)
		seen[i] = true
	}
	require.Empty(t, lineage["src"])
	require.Empty(t, lineage["alone"])
	require.Equal(t, []int64{inc["src"], 6}, lineage["f"])
	require.Equal(t, []int64{inc["f"], 8, inc["src"], 6}, lineage["g"], "g shares src's data only up to f's fork point")

	var next int64
	_, err = db.Pool.Exec(ctx, "INSERT INTO messages (id, status, seq) VALUES ('ds/new', 'pending', 0)")
	require.NoError(t, err)
	require.NoError(t, db.Pool.QueryRow(ctx, "INSERT INTO ds_streams (path, message_id, content_type) VALUES ('new', 'ds/new', 'text/plain') RETURNING incarnation").Scan(&next))
	for path, i := range inc {
		require.Greater(t, next, i, "a stream created later has a greater incarnation than %s", path)
	}
}
