package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

func TestCatalogCreatesLooksUpAndCancelsOnTheDefaultSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	cat, err := checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: checkpoint.PoolDB(db.Pool)})
	require.NoError(t, err)
	ctx := t.Context()

	created, err := cat.Create(ctx, checkpoint.NewMessage{ID: "m1", Owner: "alice", Chat: "c1", Role: "assistant"})
	require.NoError(t, err)
	require.True(t, created)
	created, err = cat.Create(ctx, checkpoint.NewMessage{ID: "m1", Owner: "mallory"})
	require.NoError(t, err)
	require.False(t, created, "a second create of the same id changes nothing")

	var owner, chat, role, status string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT owner, chat_id, role, status FROM messages WHERE id = 'm1'").Scan(&owner, &chat, &role, &status))
	require.Equal(t, []string{"alice", "c1", "assistant", "pending"}, []string{owner, chat, role, status})

	info, err := cat.Lookup(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, "alice", *info.Owner)
	require.Equal(t, "pending", info.Status)
	require.Nil(t, info.Host)

	_, err = cat.Lookup(ctx, "nope")
	require.ErrorIs(t, err, checkpoint.ErrNoMessage)
	_, err = cat.RequestCancel(ctx, "nope")
	require.ErrorIs(t, err, checkpoint.ErrNoMessage)

	ok, err := cat.RequestCancel(ctx, "m1")
	require.NoError(t, err)
	require.True(t, ok)
	var flag bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT cancel_requested FROM messages WHERE id = 'm1'").Scan(&flag))
	require.True(t, flag)

	_, err = db.Pool.Exec(ctx, "UPDATE messages SET status = 'complete' WHERE id = 'm1'")
	require.NoError(t, err)
	ok, err = cat.RequestCancel(ctx, "m1")
	require.NoError(t, err)
	require.False(t, ok, "a sealed row cannot be cancelled")

	// Empty optional fields are NULL, not empty strings.
	_, err = cat.Create(ctx, checkpoint.NewMessage{ID: "m2"})
	require.NoError(t, err)
	info, err = cat.Lookup(ctx, "m2")
	require.NoError(t, err)
	require.Nil(t, info.Owner)
}

func TestCatalogFollowsAnAppsOwnMapping(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE answers (answer_id text PRIMARY KEY, author text, txt text NOT NULL DEFAULT '',
		len bigint NOT NULL DEFAULT 0, state text NOT NULL DEFAULT 'pending')`)
	require.NoError(t, err)
	tables := checkpoint.Tables{Message: "answers", Chunks: "answer_chunks", Columns: checkpoint.Columns{
		Key: "answer_id", Owner: "author", Body: "txt", Seq: "len", Status: "state"}}
	ddl, err := checkpoint.ChunkTableDDL(tables)
	require.NoError(t, err)
	for _, stmt := range ddl {
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, checkpoint.CheckSchema(ctx, checkpoint.PoolDB(db.Pool), tables))

	cat, err := checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: checkpoint.PoolDB(db.Pool), Tables: tables})
	require.NoError(t, err)
	created, err := cat.Create(ctx, checkpoint.NewMessage{ID: "a1", Owner: "bob", Chat: "ignored: no chat column", Role: "ignored"})
	require.NoError(t, err)
	require.True(t, created)
	info, err := cat.Lookup(ctx, "a1")
	require.NoError(t, err)
	require.Equal(t, "bob", *info.Owner)
	_, err = cat.RequestCancel(ctx, "a1")
	require.ErrorIs(t, err, checkpoint.ErrNoCancelColumn)

	_, err = checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: checkpoint.PoolDB(db.Pool), Tables: checkpoint.Tables{Message: "answers"}})
	var cfgErr *checkpoint.ConfigError
	require.ErrorAs(t, err, &cfgErr)
	require.Equal(t, "Tables.Columns.Owner", cfgErr.Field)
}

func TestCheckSchemaNamesWhatTheMappingGotWrong(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	pdb := checkpoint.PoolDB(db.Pool)
	require.NoError(t, checkpoint.CheckSchema(t.Context(), pdb, checkpoint.Tables{}), "the project's schema matches its default mapping")

	typo := checkpoint.DefaultTables()
	typo.Columns.Status = "statsu"
	var schemaErr *checkpoint.SchemaError
	require.ErrorAs(t, checkpoint.CheckSchema(t.Context(), pdb, typo), &schemaErr)
	require.Equal(t, checkpoint.SchemaError{Field: "Tables.Columns.Status", Table: "messages", Column: "statsu"}, *schemaErr)
	require.EqualError(t, schemaErr, `checkpoint: Tables.Columns.Status: table "messages" has no column "statsu"`)

	missing := checkpoint.DefaultTables()
	missing.Chunks = "message_chunk"
	require.ErrorAs(t, checkpoint.CheckSchema(t.Context(), pdb, missing), &schemaErr)
	require.Equal(t, checkpoint.SchemaError{Field: "Tables.Chunks", Table: "message_chunk"}, *schemaErr)

	seed := checkpoint.DefaultTables()
	seed.Columns.ChunkKey = "id" // the seed's chunk key, which migration 004 dropped
	require.ErrorAs(t, checkpoint.CheckSchema(t.Context(), pdb, seed), &schemaErr)
	require.Equal(t, "Tables.Columns.ChunkKey", schemaErr.Field)
}
