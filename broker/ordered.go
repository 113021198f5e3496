package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rindle-sh/rindle-go/internal/retry"
)

// orderedSubscriber is this instance's broadcast subscription: a watermill Subscriber over one
// JetStream ordered consumer per Subscribe, delivering what is published after it subscribed,
// one message at a time, in stream order. It reads what watermill-nats' JetStream publisher
// writes (the same unmarshaler).
//
// It replaces watermill-nats' own JetStream subscriber, which on an ordered consumer (no
// acknowledgements on the server) turns a nack into a lost message, and which closes its
// output channel before draining the consumer (a send on a closed channel at shutdown). Here a
// nacked message is delivered again, after NackDelay, before anything after it; the view's
// handlers are idempotent, so redelivery is safe, and loss is not. docs/upstream/watermill-nats.md
// describes both defects for a report upstream.
type orderedSubscriber struct {
	js        jetstream.JetStream
	nc        *nats.Conn
	logger    *slog.Logger
	nackDelay time.Duration
	// start is where a new subscription starts: DeliverNewPolicy in production (the view
	// subscribes, then reads its snapshot); watermill's conformance suite, which publishes
	// before it subscribes, runs the same code from DeliverAllPolicy.
	start jetstream.DeliverPolicy
	// stream is the JetStream stream a topic is provisioned as (SubscribeInitialize).
	stream func(topic string) jetstream.StreamConfig

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var (
	_ message.Subscriber           = (*orderedSubscriber)(nil)
	_ message.SubscribeInitializer = (*orderedSubscriber)(nil)
)

// SubscribeInitialize provisions topic's JetStream stream, so a subscription (or a publish)
// can precede the first publisher. The broker's publisher provisions the CDC topic too.
func (s *orderedSubscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultConnectTimeout)
	defer cancel()
	if _, err := s.js.CreateOrUpdateStream(ctx, s.stream(topic)); err != nil {
		return fmt.Errorf("broker: provision the stream of %s: %w", topic, err)
	}
	return nil
}

// Subscribe creates the ordered consumer before it returns, so what is published afterwards
// reaches this subscription (the view's bootstrap depends on it).
func (s *orderedSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, errors.New("broker: subscriber closed")
	default:
	}
	c, err := s.js.OrderedConsumer(ctx, topic, jetstream.OrderedConsumerConfig{DeliverPolicy: s.start})
	if err != nil {
		return nil, err
	}
	it, err := c.Messages()
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, it.Stop) // unblocks Next
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer cancel()
		defer stop()
		defer it.Stop()
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		for ctx.Err() == nil {
			raw, err := it.Next(jetstream.NextContext(ctx))
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, nats.ErrConnectionClosed):
				s.logger.Warn("broker: subscription ended", "topic", topic, "err", err)
				return
			case err != nil:
				// The ordered consumer recreates itself (a broker restart); wait a moment.
				s.logger.Debug("broker: receive", "topic", topic, "err", err)
				if retry.Sleep(ctx, 100*time.Millisecond) != nil {
					return
				}
				continue
			}
			if !s.deliver(ctx, out, raw) {
				return
			}
		}
	}()
	return out, nil
}

// deliver hands raw to the subscriber until it is acked; false when ctx ended first.
func (s *orderedSubscriber) deliver(ctx context.Context, out chan<- *message.Message, raw jetstream.Msg) bool {
	for {
		m, err := wmjs.DefaultUnmarshaler{}.Unmarshal(raw)
		if err != nil {
			// Not ours to judge: the view's poison handling sees the bad payload.
			m = message.NewMessage("", raw.Data())
		}
		// Each delivery has its own context, ended once it is acked or nacked (or the
		// subscription ends), as watermill's subscribers do: work tied to it stops with it.
		mctx, done := context.WithCancel(ctx)
		m.SetContext(mctx)
		select {
		case out <- m:
		case <-ctx.Done():
			done()
			return false
		}
		select {
		case <-m.Acked():
			done()
			return true
		case <-m.Nacked():
			done()
			if retry.Sleep(ctx, s.nackDelay) != nil {
				return false
			}
		case <-ctx.Done():
			done()
			return false
		}
	}
}

// Close ends every subscription, waits for them, and closes the connection.
func (s *orderedSubscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	s.nc.Close()
	return nil
}
