package broker

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/natstest"
)

// TestOrderedSubscriberPassesWatermillsSuite runs watermill's own Pub/Sub conformance suite
// (pubsub/tests) over the hand-written ordered subscriber, with the watermill-nats JetStream
// publisher the broker uses, against a real NATS server.
//
// The features claimed are what the subscriber promises: order (one ordered consumer per
// subscription, one message in flight, a nacked message redelivered before anything after
// it), and that a new subscription sees messages published before it (with the start policy
// below). Not claimed: persistence in watermill's sense, a durable consumer that a new
// subscriber continues (every subscription here is a broadcast from its start; the view keeps
// its own position in the database); consumer groups; exactly-once delivery (a nack
// redelivers); and the broker-restart test, whose hook is a shell command (natstest restarts
// the broker in process, and the chaos and scale tests cover restarts end to end).
//
// The one difference from production: the suite publishes before it subscribes, so the
// subscriber starts from the stream's first message here (DeliverAllPolicy) instead of from
// the next one (DeliverNewPolicy, what the view needs).
func TestOrderedSubscriberPassesWatermillsSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("watermill's suite takes a while")
	}
	srv := natstest.Start(t)
	cfg := Config{URL: srv.URL(), Name: "watermill-suite", Logger: slog.New(slog.DiscardHandler)}
	construct := func(t *testing.T) (message.Publisher, message.Subscriber) {
		t.Helper()
		pubConn, err := connect(cfg, "suite-publisher")
		require.NoError(t, err)
		pub, err := wmjs.NewPublisher(wmjs.PublisherConfig{Conn: pubConn, Logger: watermill.NopLogger{},
			ConfigureStream: func(topic string) jetstream.StreamConfig { return cdcStream(topic, time.Hour) }})
		require.NoError(t, err)
		subConn, err := connect(cfg, "suite-subscriber")
		require.NoError(t, err)
		// The suite's subscribes pass context.Background(), so JetStream's own 5 s request
		// bound applied: under load (two busy loops, a fuzzer, the race detector) creating a
		// consumer took longer, and TestConcurrentClose failed with "context deadline exceeded".
		js, err := jetstream.New(subConn, jetstream.WithDefaultTimeout(time.Minute))
		require.NoError(t, err)
		sub := &orderedSubscriber{js: js, nc: subConn, logger: cfg.Logger, nackDelay: 10 * time.Millisecond,
			start: jetstream.DeliverAllPolicy, closing: make(chan struct{}),
			stream: func(topic string) jetstream.StreamConfig { return cdcStream(topic, time.Hour) }}
		// The suite closes what it subscribes with, except in TestPublishSubscribeInOrder,
		// whose `defer require.NoError(t, sub.Close())` closes its multiplied subscriber
		// before it subscribes (deferred arguments are evaluated at once): close every
		// subscriber at cleanup too (Close is idempotent).
		t.Cleanup(func() { _ = sub.Close(); pubConn.Close() })
		return pub, sub
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                   false,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  true,
		Persistent:                       false,
		NewSubscriberReceivesOldMessages: true,
		RequireSingleInstance:            false,
		// The suite's own short sizes (100 messages, 10 subscribers, not 5,000 and 50): every
		// subscription is a broadcast of the whole topic, one message in flight, and the long
		// sizes take minutes on a 2-core CI machine.
		ForceShort: true,
	}, construct, nil)
}
