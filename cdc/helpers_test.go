package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// ordered is the in-process broker the way the design asks for it: Publish blocks until the
// subscriber acked, so delivery keeps commit order.
func ordered() *gochannel.GoChannel {
	return gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
}

func newReader(t testing.TB, db *pgtest.DB, pub message.Publisher, change func(*cdc.Config)) *cdc.Reader {
	t.Helper()
	cfg := cdc.Config{ConnString: db.URL, Slot: db.Slot(), Publisher: pub, StatusInterval: 100 * time.Millisecond}
	if change != nil {
		change(&cfg)
	}
	r, err := cdc.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		r.Stop()
		require.NoError(t, r.DropSlot(context.Background()))
	})
	return r
}

// startReader starts a reader on a new database, publishing to an in-process broker (through
// wrap, when set) that a collector subscribes to; the broker closes when the test ends.
func startReader(t testing.TB, wrap func(message.Publisher) message.Publisher, change func(*cdc.Config)) (*pgtest.DB, *txCollector) {
	t.Helper()
	db := pgtest.NewDB(t)
	broker := ordered()
	t.Cleanup(func() { _ = broker.Close() })
	col := collectTxs(t, broker)
	var pub message.Publisher = broker
	if wrap != nil {
		pub = wrap(broker)
	}
	require.NoError(t, newReader(t, db, pub, change).Start(t.Context()))
	return db, col
}

// txCollector acks and keeps every transaction published on the topic.
type txCollector struct {
	txs chan *cdc.Tx
}

func collectTxs(t testing.TB, sub message.Subscriber) *txCollector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, cdc.DefaultTopic)
	require.NoError(t, err)
	c := &txCollector{txs: make(chan *cdc.Tx, 10000)}
	go func() {
		for msg := range msgs {
			tx, err := cdc.DecodeTx(msg.Payload)
			if err != nil {
				panic(err)
			}
			c.txs <- tx
			msg.Ack()
		}
	}()
	return c
}

func (c *txCollector) next(t testing.TB) *cdc.Tx {
	t.Helper()
	select {
	case tx := <-c.txs:
		return tx
	case <-eventually.Late(t):
		t.Fatal("no transaction came")
	}
	return nil
}

func kinds(tx *cdc.Tx) string {
	s := ""
	for _, e := range tx.Events {
		s += fmt.Sprintf("%s(%s:%d) ", e.Kind, e.StreamID, e.Seq)
	}
	return s
}

// switchPublisher refuses every publish while down: a broker outage.
type switchPublisher struct {
	message.Publisher
	down atomic.Bool
}

func (s *switchPublisher) Publish(topic string, msgs ...*message.Message) error {
	if s.down.Load() {
		return errors.New("broker unavailable")
	}
	return s.Publisher.Publish(topic, msgs...)
}
