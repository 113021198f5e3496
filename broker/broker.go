// Package broker owns the choice of the watermill broker that carries CDC transactions from the
// one active CDC reader to every instance's incremental view, and the relay that carries live
// frames between instances (docs/DESIGN.md §8). It is a departure from docs/DESIGN.md §3's folder list: the
// broker choice is shared by cmd/rindled and by apps that embed the packages, so it has a
// package of its own rather than living in the binary.
//
// Two backends:
//   - GoChannel (no URL): one process. Ordered (BlockPublishUntilSubscriberAck), nothing kept,
//     no relay. It is the single-process default; several instances on one database need a
//     real broker, since only the instance holding the slot would see events.
//   - NATS JetStream (a nats:// URL). The CDC reader publishes through watermill-nats'
//     JetStream publisher (a publish returns once the server stored it). The stream is
//     file-backed and kept for Config.Retention. Every instance consumes every transaction
//     through its own ordered consumer that delivers what is published after it subscribes
//     (DeliverNew): a broadcast, not a work queue; a nack is delivered again (see
//     orderedSubscriber for why this is not watermill-nats' subscriber). The view subscribes before it reads its snapshot, so
//     together they miss nothing (ivm's bootstrap). An ordered consumer recreates itself after
//     a broker restart at the next stream sequence, so a restart loses nothing that was stored.
//
// Why JetStream over Redis Streams or Kafka: it is one small static server with persistence,
// per-instance ordered consumers that start at "new" and survive server restarts without
// consumer-group bookkeeping, and subject filters that give the relay a per-stream history
// (docs/DESIGN.md §9 notes Redis fan-out starts at "new only" after a restart and watermill-sql polls).
// Kafka would do, at the cost of a cluster and a consumer group per instance. Adding one means
// a new case in Open that returns its watermill Publisher and a per-instance Subscriber, and a
// Relay built on its client.
//
// It owns no decoding (cdc) and no view logic (ivm). Close releases every connection it opened.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rindle-sh/rindle-go/producer"
)

// Defaults of Config.
const (
	DefaultTopic          = "rindle_cdc" // also the JetStream stream name, which allows no dots
	DefaultRetention      = time.Hour
	DefaultLiveStream     = "rindle_live"
	DefaultLiveRetention  = 10 * time.Minute
	DefaultLivePerSubject = 100_000
	DefaultConnectTimeout = 5 * time.Second // bounds one connect to the broker
	DefaultWriteTimeout   = 2 * time.Second // bounds one flush of a connection's writes
)

// Config configures Open.
type Config struct {
	// URL selects the backend: empty for GoChannel, nats://host:port[,nats://...] for JetStream.
	URL string
	// Topic is the CDC topic (and JetStream stream). Defaults to DefaultTopic.
	Topic string
	// Retention bounds how long the JetStream CDC stream keeps transactions. Defaults to
	// DefaultRetention.
	Retention time.Duration
	// Name identifies this instance's connections to the broker (its host id).
	Name string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Broker is an opened backend.
type Broker struct {
	// Publisher carries CDC transactions (cdc.Config.Publisher).
	Publisher message.Publisher
	// Subscriber is this instance's broadcast subscription (ivm.Config.Subscriber).
	Subscriber message.Subscriber
	// Topic is the CDC topic both use.
	Topic string
	// Relay carries live frames between instances (producer.Config.Relay); nil on GoChannel.
	Relay *producer.Relay
	// Kind is "gochannel" or "nats".
	Kind string

	closers []func() error
}

// Open connects the backend cfg.URL names and provisions its streams.
func Open(ctx context.Context, cfg Config) (*Broker, error) {
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Retention < 0 {
		return nil, &ConfigError{Field: "Retention", Reason: "must not be negative"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// watermill-nats logs every message it receives at Info: that is Debug here.
	wlog := watermill.NewSlogLoggerWithLevelMapping(cfg.Logger.With("part", "broker"), map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	switch {
	case cfg.URL == "":
		ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, wlog)
		return &Broker{Publisher: ch, Subscriber: ch, Topic: cfg.Topic, Kind: "gochannel", closers: []func() error{ch.Close}}, nil
	case strings.HasPrefix(cfg.URL, "nats://") || strings.HasPrefix(cfg.URL, "tls://"):
		return openNATS(ctx, cfg, wlog)
	}
	return nil, fmt.Errorf("broker: unsupported URL %q (empty for in-process, nats://host:4222 for NATS JetStream)", cfg.URL)
}

// Close releases every connection.
func (b *Broker) Close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	return errors.Join(errs...)
}

// connect dials NATS with reconnects that never give up: a broker outage stalls the CDC reader
// and the relay, and both resume when it returns.
func connect(cfg Config, role string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(strings.Trim(cfg.Name+" "+role, " ")),
		// Bounded connects and writes: a broker that accepts and never answers fails the
		// connect (and so start-up) with a clear error, and a connection whose writes stall is
		// declared broken and reconnected rather than holding its publishers for a minute.
		nats.Timeout(DefaultConnectTimeout),
		nats.FlusherTimeout(DefaultWriteTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cfg.Logger.Warn("broker: disconnected", "role", role, "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { cfg.Logger.Info("broker: reconnected", "role", role) }),
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect %s (%s): %w", cfg.URL, role, err)
	}
	return nc, nil
}

// reprovisionOnReconnect runs provision after every reconnect of nc (logging the reconnect,
// which the handler it replaces did). Installed once provision's dependencies exist.
func reprovisionOnReconnect(nc *nats.Conn, cfg Config, role string, provision func(context.Context) error) {
	nc.SetReconnectHandler(func(*nats.Conn) {
		cfg.Logger.Info("broker: reconnected", "role", role)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := provision(ctx); err != nil {
				cfg.Logger.Warn("broker: re-provisioning after a reconnect", "role", role, "err", err)
			}
		}()
	})
}

func cdcStream(topic string, retention time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: topic, Subjects: []string{topic}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, MaxAge: retention, Discard: jetstream.DiscardOld,
	}
}

func openNATS(ctx context.Context, cfg Config, wlog watermill.LoggerAdapter) (*Broker, error) {
	b := &Broker{Topic: cfg.Topic, Kind: "nats"}
	fail := func(err error) (*Broker, error) {
		_ = b.Close()
		return nil, err
	}
	streamCfg := cdcStream(cfg.Topic, cfg.Retention)
	configure := func(string) jetstream.StreamConfig { return streamCfg }
	// The publisher's connection provisions the stream, and again after every reconnect: a
	// broker that lost its store (replaced, wiped) would otherwise refuse every publish.
	pubConn, err := connect(cfg, "cdc-publisher")
	if err != nil {
		return fail(err)
	}
	pubJS, err := jetstream.New(pubConn)
	if err != nil {
		pubConn.Close()
		return fail(err)
	}
	provision := func(ctx context.Context) error {
		if _, err := pubJS.CreateOrUpdateStream(ctx, streamCfg); err != nil {
			return fmt.Errorf("broker: provision the CDC stream %s: %w", cfg.Topic, err)
		}
		return nil
	}
	if err := provision(ctx); err != nil {
		pubConn.Close()
		return fail(err)
	}
	reprovisionOnReconnect(pubConn, cfg, "cdc-publisher", provision)
	pub, err := wmjs.NewPublisher(wmjs.PublisherConfig{Conn: pubConn, Logger: wlog, ConfigureStream: configure})
	if err != nil {
		pubConn.Close()
		return fail(err)
	}
	b.closers = append(b.closers, pub.Close)
	b.Publisher = pub

	subConn, err := connect(cfg, "cdc-subscriber")
	if err != nil {
		return fail(err)
	}
	subJS, err := jetstream.New(subConn)
	if err != nil {
		subConn.Close()
		return fail(err)
	}
	sub := &orderedSubscriber{js: subJS, nc: subConn, logger: cfg.Logger, nackDelay: 100 * time.Millisecond,
		start: jetstream.DeliverNewPolicy, closing: make(chan struct{}),
		stream: func(topic string) jetstream.StreamConfig { return cdcStream(topic, cfg.Retention) }}
	b.closers = append(b.closers, sub.Close)
	b.Subscriber = sub

	relay, closeRelay, err := newRelay(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	b.closers = append(b.closers, closeRelay)
	b.Relay = relay
	return b, nil
}

// ConfigError names the Config field that New refused, and why. It is the convention of every
// package here (producer, checkpoint, cdc, ivm, broker, httpapi, otel): match it with errors.As.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "broker: Config." + e.Field + ": " + e.Reason
}
