package cdc_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

func TestReaderDecodesCheckpointsAndCompactionAsWholeTransactions(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	broker := ordered()
	defer broker.Close()
	col := collectTxs(t, broker)
	r := newReader(t, db, broker, nil)
	require.NoError(t, r.Start(ctx))

	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	plane, err := producer.New(producer.Config{Committer: store, Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }})
	require.NoError(t, err)
	defer plane.Close()
	_, err = db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('chat:1:m')")
	require.NoError(t, err)
	tx := col.next(t)
	require.Len(t, tx.Events, 1)
	require.Equal(t, cdc.MessageChanged, tx.Events[0].Kind)
	require.True(t, tx.Events[0].Created)
	require.Equal(t, "pending", tx.Events[0].Status)

	s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "chat:1:m"})
	require.NoError(t, err)
	tx = col.next(t)
	require.Equal(t, "streaming", tx.Events[0].Status)

	require.NoError(t, s.Push("hello 😀"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	tx = col.next(t)
	require.Len(t, tx.Events, 2, kinds(tx))
	require.Equal(t, cdc.ChunkAppended, tx.Events[0].Kind)
	require.Equal(t, "chat:1:m", tx.Events[0].StreamID)
	require.Equal(t, producer.Seq(8), tx.Events[0].Seq)
	require.Equal(t, producer.Seq(0), tx.Events[0].From())
	require.Equal(t, "hello 😀", tx.Events[0].Text)
	require.Equal(t, cdc.MessageChanged, tx.Events[1].Kind)
	require.Equal(t, producer.Seq(8), tx.Events[1].Seq)
	require.NotZero(t, tx.EndLSN)

	require.NoError(t, s.Push(" world"))
	require.NoError(t, s.Close(ctx))
	tx = col.next(t)
	require.Len(t, tx.Events, 2, "the body update and the chunk delete arrive together: %s", kinds(tx))
	require.Equal(t, cdc.MessageChanged, tx.Events[0].Kind)
	require.Equal(t, "complete", tx.Events[0].Status)
	require.NotNil(t, tx.Events[0].Body)
	require.Equal(t, "hello 😀 world", *tx.Events[0].Body)
	require.Equal(t, cdc.ChunkDeleted, tx.Events[1].Kind)
	require.Equal(t, "chat:1:m", tx.Events[1].StreamID, "the stream comes from the key, split at the last colon")
	require.Equal(t, producer.Seq(8), tx.Events[1].Seq)
}

func TestUnchangedToastedBodyIsNotEmpty(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	broker := ordered()
	defer broker.Close()
	col := collectTxs(t, broker)
	require.NoError(t, newReader(t, db, broker, nil).Start(ctx))

	// Random, incompressible text over 2 KB: stored out of line, so an update that leaves it
	// alone sends 'u'. Compressible text would stay inline and pass by accident.
	raw := make([]byte, 6000)
	_, _ = rand.Read(raw)
	big := base64.StdEncoding.EncodeToString(raw)
	_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id, body, seq, status) VALUES ('m', $1, $2, 'complete')", big, len(big))
	require.NoError(t, err)
	tx := col.next(t)
	require.Equal(t, big, *tx.Events[0].Body)

	_, err = db.Pool.Exec(ctx, "UPDATE messages SET status = 'interrupted' WHERE id = 'm'")
	require.NoError(t, err)
	tx = col.next(t)
	require.Equal(t, "interrupted", tx.Events[0].Status)
	require.Nil(t, tx.Events[0].Body, "an unchanged TOASTed body is 'unchanged', not empty")
}

func TestReaderConfigRefusals(t *testing.T) {
	t.Parallel()
	_, err := cdc.New(cdc.Config{})
	require.ErrorContains(t, err, "ConnString is required")
	_, err = cdc.New(cdc.Config{ConnString: "host=/nowhere"})
	require.ErrorContains(t, err, "Publisher is required")
}
