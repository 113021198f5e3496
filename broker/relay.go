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
// stream captures: it never blocks (the seam is called under the stream's lock, so
// watermill's JetStream publisher, which waits for an acknowledgement per message, is not
// used here). Attaching replays that subject's frames from its first through an ordered
// consumer and follows it live; the plane's conform pass trims what the reader already holds
// and turns a gap (frames aged out, a broker restart) into stale, after which the reader reads
// the durable plane. So a broker outage costs smoothness, never correctness.

func liveSubject(streamID string) string {
	return DefaultLiveStream + "." + base64.RawURLEncoding.EncodeToString([]byte(streamID))
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
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: DefaultLiveStream, Subjects: []string{DefaultLiveStream + ".*"}, Storage: jetstream.MemoryStorage,
		MaxAge: DefaultLiveRetention, MaxMsgsPerSubject: DefaultLivePerSubject, Discard: jetstream.DiscardOld,
	})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("broker: provision the live stream: %w", err)
	}
	r := &relay{nc: nc, js: js, stream: stream}
	return &producer.Relay{Publish: r.publish, Attach: r.attach}, func() error { nc.Close(); return nil }, nil
}

type relay struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
}

func (r *relay) publish(streamID string, f producer.Frame) error {
	return r.nc.Publish(liveSubject(streamID), f.AppendJSON(nil))
}

// attach follows streamID's frames if some instance has published any; nil (absent) otherwise.
func (r *relay) attach(ctx context.Context, streamID string, _ producer.Seq) (producer.FrameSource, error) {
	subject := liveSubject(streamID)
	if _, err := r.stream.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
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
