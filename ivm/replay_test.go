package ivm_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/producer"
)

// capture records every transaction the reader publishes, through a second subscriber.
func capture(t *testing.T, w *world) <-chan *cdc.Tx {
	t.Helper()
	msgs, err := w.broker.Subscribe(t.Context(), cdc.DefaultTopic)
	require.NoError(t, err)
	out := make(chan *cdc.Tx, 1000)
	go func() {
		for msg := range msgs {
			tx, err := cdc.DecodeTx(msg.Payload)
			if err == nil {
				out <- tx
			}
			msg.Ack()
		}
	}()
	return out
}

// streamOneMessage opens, checkpoints and seals a message, returning the transactions the
// reader published for it: open, append, compaction.
func streamOneMessage(t *testing.T, w *world, txs <-chan *cdc.Tx) []*cdc.Tx {
	t.Helper()
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := w.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	require.NoError(t, s.Push("hello"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Push(" world"))
	require.NoError(t, s.Close(ctx))
	var got []*cdc.Tx
	for len(got) < 4 { // insert, open, append, compaction
		select {
		case tx := <-txs:
			got = append(got, tx)
		case <-eventually.Late(t):
			t.Fatalf("only %d transactions arrived", len(got))
		}
	}
	// The capture may see a transaction before the view has applied it: wait on the view.
	m, err := w.view.Wait(ctx, "m", 0)
	for err == nil && m.Status != producer.StatusComplete {
		m, err = w.view.Wait(ctx, "m", m.Seq)
	}
	require.NoError(t, err)
	require.Equal(t, "hello world", m.Text)
	return got
}

func republish(t *testing.T, w *world, tx *cdc.Tx) {
	t.Helper()
	payload, err := tx.Encode()
	require.NoError(t, err)
	require.NoError(t, w.broker.Publish(cdc.DefaultTopic, message.NewMessage(watermill.NewUUID(), payload)))
}

func TestARedeliveredTransactionChangesNothing(t *testing.T) {
	t.Parallel()
	w := setup(t)
	txs := capture(t, w)
	got := streamOneMessage(t, w, txs)
	// The reader restarted and re-sent from an older acknowledged point: the open and the
	// append arrive again, after the compaction.
	for _, tx := range got[1:3] {
		republish(t, w, tx)
	}
	m, err := w.view.Get(context.Background(), "m")
	require.NoError(t, err)
	require.Equal(t, "hello world", m.Text)
	require.Equal(t, producer.StatusComplete, m.Status, "a replayed open must not reopen a sealed message")
}

func TestTransactionsInTheLoadSnapshotAreSkipped(t *testing.T) {
	t.Parallel()
	w := setup(t)
	txs := capture(t, w)
	got := streamOneMessage(t, w, txs)
	// A fresh view reads the sealed message from the database on its first access, then
	// receives transactions that its snapshot already reflects.
	w.view.Stop()
	w.view = w.newView(t, 0)
	m, err := w.view.Get(context.Background(), "m")
	require.NoError(t, err)
	require.Equal(t, "hello world", m.Text)
	republish(t, w, got[1]) // the open: status streaming, body ''
	m, err = w.view.Get(context.Background(), "m")
	require.NoError(t, err)
	require.Equal(t, "hello world", m.Text, "a transaction visible in the load's snapshot is not applied again")
	require.Equal(t, producer.StatusComplete, m.Status)
}
