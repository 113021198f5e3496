package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rindle-sh/rindle-go/producer"
)

// The relay carries the frames an instance's producers fan out to readers on other instances,
// on the same NATS server as the CDC stream: a memory-backed JetStream stream with one subject
// per live stream, kept DefaultLiveRetention. Publishing is a core NATS publish, which the
// stream captures: it never blocks. Attaching replays that subject's frames from its first
// through an ordered consumer and follows it live; the plane's conform pass trims what the
// reader already holds and turns a gap (frames aged out, a broker restart) into stale, after
// which the reader reads the durable plane. So a broker outage costs smoothness, never
// correctness.
//
// The relay speaks to NATS through nats.go, the engine's own client, rather than through
// watermill-nats as the CDC path does, for two reasons found in watermill-nats v2.1.3: its
// JetStream publisher waits for an acknowledgement per message, and the seam is called under
// the stream's lock; and its JetStream subscriber closes the output channel before it drains
// the consumer, so a subscription cancelled while a message is in hand can panic with a send on
// a closed channel. The CDC subscription lives as long as the process; a relay subscription
// lives as long as one reader's connection, and readers come and go all the time.

func liveSubject(streamID string) string {
	return DefaultLiveStream + "." + base64.RawURLEncoding.EncodeToString([]byte(streamID))
}

func liveStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: DefaultLiveStream, Subjects: []string{DefaultLiveStream + ".*"}, Storage: jetstream.MemoryStorage,
		MaxAge: DefaultLiveRetention, MaxMsgsPerSubject: DefaultLivePerSubject, Discard: jetstream.DiscardOld,
	}
}

func newRelay(ctx context.Context, cfg Config) (*producer.Relay, func() error, error) {
	nc, err := connect(cfg, "relay")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	r := &relay{nc: nc, js: js}
	if err := r.provision(ctx); err != nil {
		nc.Close()
		return nil, nil, err
	}
	// A memory stream does not survive a broker restart: provision it again on every reconnect
	// (and on a lookup that finds it missing), or the relay would stay down for good.
	reprovisionOnReconnect(nc, cfg, "relay", r.provision)
	return &producer.Relay{Publish: r.publish, Attach: r.attach}, func() error { nc.Close(); return nil }, nil
}

type relay struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func (r *relay) provision(ctx context.Context) error {
	if _, err := r.js.CreateOrUpdateStream(ctx, liveStreamConfig()); err != nil {
		return fmt.Errorf("broker: provision the live stream: %w", err)
	}
	return nil
}

func (r *relay) publish(streamID string, f producer.Frame) error {
	return r.nc.Publish(liveSubject(streamID), f.AppendJSON(nil))
}

// attach follows streamID's frames if some instance has published any; nil (absent) otherwise.
func (r *relay) attach(ctx context.Context, streamID string, _ producer.Seq) (producer.FrameSource, error) {
	subject := liveSubject(streamID)
	stream, err := r.js.Stream(ctx, DefaultLiveStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// The broker restarted and lost the memory stream: nothing to relay; provide for next time.
		return nil, r.provision(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: relay lookup: %w", err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("broker: relay lookup: %w", err)
	}
	c, err := r.js.OrderedConsumer(ctx, DefaultLiveStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: relay consumer: %w", err)
	}
	it, err := c.Messages()
	if err != nil {
		return nil, fmt.Errorf("broker: relay messages: %w", err)
	}
	return &source{it: it}, nil
}

type source struct {
	it   jetstream.MessagesContext
	done bool
}

func (s *source) Next(ctx context.Context) (producer.Frame, error) {
	if s.done {
		return producer.Frame{}, io.EOF
	}
	m, err := s.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return producer.Frame{}, context.Cause(ctx)
		}
		return producer.Frame{}, fmt.Errorf("broker: relay: %w", err)
	}
	var f producer.Frame
	if err := json.Unmarshal(m.Data(), &f); err != nil {
		return producer.Frame{}, fmt.Errorf("broker: relay frame: %w", err)
	}
	if f.Terminal() {
		s.done = true
	}
	return f, nil
}

func (s *source) Close() error {
	s.it.Stop()
	return nil
}
