package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/broker"
	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/demo"
	"github.com/rindle-sh/rindle-go/ivm"
	rotel "github.com/rindle-sh/rindle-go/otel"
	"github.com/rindle-sh/rindle-go/producer"
)

// server is one serving process's parts. Each start step adds what it started to stops;
// stop undoes them in reverse, so a failure part-way releases exactly what was started.
type server struct {
	s       *settings
	logger  *slog.Logger
	hostID  string
	secret  []byte
	issuers []auth.Issuer // the local secret's, then the issuers file's

	url  string
	pool *pgxpool.Pool
	tel  *rotel.Telemetry

	// the durable plane, read side: CDC into the broker, the view out of it
	bus    *broker.Broker
	view   *ivm.View
	reader *cdc.Reader

	// the live plane and what fences it
	catalog *checkpoint.Catalog
	plane   *producer.Plane
	lease   *checkpoint.Lease

	// start-up: what it waits on, logged while a step is slow (slowStart, default 5 s)
	watch     *startupWatch
	slowStart time.Duration

	stops []func()
}

func (in *server) onStop(f func()) { in.stops = append(in.stops, f) }

func (in *server) stop() {
	for i := len(in.stops) - 1; i >= 0; i-- {
		in.stops[i]()
	}
}

// serve wires every part and runs until ctx ends, then drains.
func serve(ctx context.Context, s *settings, stdout io.Writer) error {
	in := &server{s: s, logger: s.logger(stdout), hostID: s.hostID}
	defer in.stop()
	if err := in.serve(ctx); err != nil {
		return s.reported(in.logger, err)
	}
	return nil
}

// issuers are the identity providers whose tokens are taken: the HS256 secret's, then the
// issuers file's.
func issuers(s *settings) ([]byte, []auth.Issuer, error) {
	secret, err := jwtSecret(s)
	if err != nil {
		return nil, nil, err
	}
	all := []auth.Issuer{auth.LocalIssuer(secret)}
	if s.issuersFile != "" {
		more, err := auth.ReadIssuersFile(s.issuersFile, s.getenv)
		if err != nil {
			return nil, nil, err
		}
		if err := auth.Check(more); err != nil {
			return nil, nil, fmt.Errorf("the issuers file %s: %w", s.issuersFile, err)
		}
		all = append(all, more...)
	}
	if err := auth.Check(all); err != nil {
		return nil, nil, fmt.Errorf("the issuers file %s beside the HS256 secret: %w", s.issuersFile, err)
	}
	return secret, all, nil
}

func (in *server) serve(ctx context.Context) error {
	s := in.s
	if in.hostID == "" {
		host, _ := os.Hostname()
		in.hostID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text()[:8])
	}
	var err error
	if in.secret, in.issuers, err = issuers(s); err != nil {
		return err
	}
	if in.slowStart <= 0 {
		in.slowStart = defaultSlowStart
	}
	in.watch = watchStartup(in.logger, in.slowStart)
	defer in.watch.stop()
	for _, step := range []func(context.Context) error{
		in.openDatabase,
		in.startTelemetry,
		in.startDurable,
		in.startLive,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	handler, err := in.httpHandler()
	if err != nil {
		return err
	}
	return in.listen(ctx, handler)
}

// openDatabase migrates the database (starting the private cluster when there is no URL),
// opens the pool sized by -db-max-conns, and checks the tables against the mapping.
func (in *server) openDatabase(ctx context.Context) error {
	url, _, stopDB, err := migratedDatabase(ctx, in.s, in.logger, in.watch.at)
	if err != nil {
		return err
	}
	in.onStop(stopDB)
	in.url = url
	in.watch.at("opening the pool and checking the tables")
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	if poolCfg.ConnConfig.ConnectTimeout == 0 {
		poolCfg.ConnConfig.ConnectTimeout = in.s.connectTimeout
	}
	if !strings.Contains(url, "pool_max_conns") {
		poolCfg.MaxConns = int32(in.s.dbMaxConns)
	}
	if in.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return err
	}
	in.onStop(in.pool.Close)
	return checkpoint.CheckSchema(ctx, checkpoint.PoolDB(in.pool), checkpoint.DefaultTables())
}

func (in *server) startTelemetry(ctx context.Context) error {
	in.watch.at("starting telemetry")
	tel, shutdown, err := rotel.Setup(ctx, rotel.Config{ServiceName: "rindled", ServiceVersion: version(), OTLPEndpoint: in.s.otlp, NoOTLPMetrics: in.s.otlpMetrics == "none"})
	if err != nil {
		return err
	}
	in.tel = tel
	in.onStop(func() { _ = shutdown(context.WithoutCancel(ctx)) })
	return nil
}

// startDurable starts the read side of the durable plane: the broker, the view subscribed to
// it, and the CDC reader that publishes into it.
func (in *server) startDurable(ctx context.Context) error {
	// The view subscribes before the reader publishes: GoChannel keeps no history, and a
	// JetStream consumer delivers what is published after it subscribed.
	in.watch.at("connecting to the broker")
	bus, err := broker.Open(ctx, broker.Config{URL: in.s.brokerURL, Name: in.hostID, Logger: in.logger})
	if err != nil {
		return err
	}
	in.bus = bus
	in.onStop(func() { _ = bus.Close() })
	tel := in.tel
	in.watch.at("starting the view")
	if in.view, err = ivm.New(ivm.Config{Subscriber: bus.Subscriber, Topic: bus.Topic, Pool: in.pool, Logger: in.logger,
		OnApplyFunc: func(tx *cdc.Tx, lag time.Duration) { tel.Instruments.ObserveApply(lag, tx.Traceparent()) }}); err != nil {
		return err
	}
	if err := in.view.Start(ctx); err != nil {
		return err
	}
	in.onStop(in.view.Stop)
	// Every instance runs a reader; the one holding the slot publishes, the others stand by
	// (the slot is the leader lock). application_name shows the leader in pg_stat_replication.
	maxEvent := 0 // the default, under NATS's 1 MB
	if bus.Kind == "gochannel" {
		// In one process a message has no size limit: a long answer's seal travels whole, and
		// the view need not gather it from parts (a copy of the answer less at its peak).
		maxEvent = math.MaxInt
	}
	if in.reader, err = cdc.New(cdc.Config{ConnString: in.url, ConnectTimeout: in.s.connectTimeout, ApplicationName: "rindled-cdc " + in.hostID,
		Slot: in.s.slot, Publisher: bus.Publisher, Topic: bus.Topic, Logger: in.logger, MaxEventBytes: maxEvent}); err != nil {
		return err
	}
	in.watch.at("setting up CDC: the publication and the replication slot (a new slot waits for running transactions to end)")
	if err := untilReachable(ctx, in.logger, "cdc setup", reachableWithin, 250*time.Millisecond, func() error { return in.reader.Start(ctx) }); err != nil {
		return err
	}
	in.onStop(in.reader.Stop)
	if err := tel.Instruments.ObservePublishStall(func() bool { return in.reader.Stats().Stalled }); err != nil {
		return err
	}
	return tel.Instruments.ObserveSlotLag(in.reader.SlotLag)
}

// startLive starts the live plane on the checkpoint store, the lease that fences it, and the
// sweeper that seals what lapsed hosts left.
func (in *server) startLive(ctx context.Context) error {
	in.watch.at("starting the live plane")
	db := checkpoint.PoolDB(in.pool)
	var err error
	if in.catalog, err = checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: db, Tables: checkpoint.DefaultTables()}); err != nil {
		return err
	}
	store, err := checkpoint.New(checkpoint.Config{DB: db, Tables: checkpoint.DefaultTables(), HostID: in.hostID})
	if err != nil {
		return err
	}
	tel, logger := in.tel, in.logger
	in.plane, err = producer.New(producer.Config{
		Committer:       store,
		CheckpointChars: in.s.checkpointChars,
		IdleTimeout:     in.s.streamIdleTimeout,
		// A burst of answers opened together spreads its interval commits over a quarter of
		// the interval instead of hitting the database in waves.
		CheckpointSpread: producer.DefaultCheckpointInterval / 4,
		// The HTTP layer authorizes every read (owner or producer scope) before it subscribes.
		Authorize:         func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CommitContextFunc: tel.Instruments.CommitContext,
		Relay:             in.bus.Relay, // nil in-process: readers of other instances' streams follow the view
		OnCheckpointFunc:  tel.Instruments.ObserveCheckpoint,
		OnStreamFunc:      tel.Instruments.ObserveStream,
		OnSubscriberFunc:  tel.Instruments.ObserveSubscriber,
		OnCheckpointErrorFunc: func(err error, info producer.CheckpointInfo) {
			tel.Instruments.ObserveCheckpointError(info)
			logger.Error("checkpoint failed", "stream", info.StreamID, "from", info.From, "seq", info.Seq, "err", err)
		},
		Logger: logger,
	})
	if err != nil {
		return err
	}
	in.onStop(in.plane.Close)
	if err := tel.Instruments.ObserveDurability(in.plane.Durability); err != nil {
		return err
	}
	// The lease fences this host before its TTL can lapse: its streams refuse pushes until a
	// renewal proves the lease again and the store confirms each stream is still this host's.
	plane := in.plane
	if in.lease, err = checkpoint.NewLease(checkpoint.LeaseConfig{DB: db, HostID: in.hostID, TTL: in.s.leaseTTL, Logger: logger,
		OnLostFunc: plane.Suspend,
		OnHeldFunc: func(ctx context.Context) {
			if err := plane.Resume(ctx); err != nil {
				logger.Warn("reclaiming streams after the lease came back; retrying at the next renewal", "err", err)
			}
		}}); err != nil {
		return err
	}
	if err := in.lease.Start(ctx); err != nil {
		return err
	}
	in.onStop(in.lease.Stop)
	// Sweeps run at half the TTL, jittered, and never seal this host's own rows: a live host
	// seals or reclaims its own streams.
	sweeper, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: db, Tables: checkpoint.DefaultTables(), HostID: in.hostID,
		Interval: max(in.s.leaseTTL/2, 100*time.Millisecond), Logger: logger})
	if err != nil {
		return err
	}
	// Rows under this host id before anything opened are a previous process's (the same
	// -host-id, killed rather than drained): this process's lease would keep them alive.
	if n, err := sweeper.SealHost(ctx, in.hostID); err != nil {
		return err
	} else if n > 0 {
		logger.Warn("sealed streams a previous process left under this host id", "host", in.hostID, "sealed", n)
	}
	if err := sweeper.Start(ctx); err != nil {
		return err
	}
	in.onStop(sweeper.Stop)
	return nil
}

// httpHandler builds the API (and the demo, when on) behind the tracing middleware.
func (in *server) httpHandler() (http.Handler, error) {
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: in.pool, MaxGroup: in.s.streamsAppendGroup, Writers: in.s.streamsAppendWriters})
	if err != nil {
		return nil, err
	}
	if in.s.streamsReapInterval > 0 {
		rctx, stopReaper := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			reapStreams(rctx, streams, in.s.streamsReapInterval, in.s.streamsProducerRetention, in.tel.Instruments, in.logger)
		}()
		in.onStop(func() { stopReaper(); <-done })
	}
	// The verifier's key sets refresh until the server stops.
	vctx, stopKeys := context.WithCancel(context.Background())
	in.onStop(stopKeys)
	verifier, err := auth.New(vctx, auth.Config{Issuers: in.issuers, OnFetchError: in.tel.Instruments.ObserveKeyFetchError, Logger: in.logger})
	if err != nil {
		return nil, err
	}
	var direct *producer.DirectWriter
	if in.s.sseDirect {
		direct = producer.NewDirectWriter(producer.DirectConfig{PlainWrites: !in.s.sseRing})
		in.onStop(direct.Close)
		if err := direct.RingError(); err != nil {
			in.logger.Info("event streams' live tails are written with write(2), one per reader", "why", err)
		} else {
			in.logger.Info("event streams' live tails are sent through io_uring, one submission per writer turn")
		}
	}
	api, err := httpapi.New(httpapi.Config{
		Direct: direct, Plane: in.plane, View: in.view, Messages: in.catalog, Verifier: verifier, Logger: in.logger,
		Metrics: in.tel.MetricsHandler, HostID: in.hostID, AllowedOrigins: in.s.origins(), Ready: in.ready,
		Streams: streams, StreamsLongPoll: in.s.streamsLongPoll,
		BodyTimeout: in.s.bodyTimeout, IngestIdleTimeout: in.s.ingestIdleTimeout,
		MaxEventStreams: in.s.maxEventStreams, MaxEventStreamsPerSubject: in.s.maxEventStreamsPerSubject,
	})
	if err != nil {
		return nil, err
	}
	// Byte streams reach readers waiting on this instance through PostgreSQL's notifications
	// (text streams come through CDC and the view).
	wctx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = streams.Watch(wctx, api.StreamChanged, 0, func(err error) {
			in.logger.Warn("durable streams: byte-stream notifications lost; readers poll until they are back", "err", err)
		})
	}()
	in.onStop(func() { stopWatch(); <-watched })
	mux := http.NewServeMux()
	mux.Handle("/", api.Handler())
	if in.s.demoOn() {
		secret := in.secret
		d, err := demo.New(demo.Config{Plane: in.plane, Messages: in.catalog, Logger: in.logger,
			Mint: func(sub string, ttl time.Duration) (string, error) { return httpapi.NewToken(secret, sub, "", ttl) }})
		if err != nil {
			return nil, err
		}
		d.Register(mux)
		in.onStop(d.Stop)
	}
	// Event streams live for hours and probes are noise: neither gets a span (docs/DESIGN.md §9).
	return in.tel.HTTPHandler(mux, func(r *http.Request) bool {
		p := r.URL.Path
		return strings.HasSuffix(p, "/events") || p == "/healthz" || p == "/readyz" || p == "/metrics"
	}), nil
}

// ready is /readyz: the lease held, the database reachable, CDC publishing.
func (in *server) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if !in.lease.Held() {
		return errors.New("lease: not renewed in time; this server refuses pushes until it is")
	}
	if err := in.pool.Ping(ctx); err != nil {
		// The probe is public: say what is wrong, not where the database is.
		return errors.New("database: unreachable")
	}
	st := in.reader.Stats()
	if st.Stalled {
		return errors.New("cdc: publishing is stalled")
	}
	if in.bus.Kind == "gochannel" && !st.Leader {
		// In-process, only the slot holder's view hears events: a second instance on the
		// same slot without a broker would serve a view that never moves.
		return fmt.Errorf("cdc: not streaming slot %s (held by another process?); several instances need -broker-url, or each its own -slot", in.s.slot)
	}
	return nil
}

// listen serves handler on -addr (and pprof on -debug-addr) until ctx ends, then drains: every
// live stream is sealed interrupted with everything produced, then serving stops.
func (in *server) listen(ctx context.Context, handler http.Handler) error {
	in.watch.at("listening on " + in.s.addr)
	ln, err := net.Listen("tcp", in.s.addr)
	if err != nil {
		return err
	}
	if in.s.debugAddr != "" {
		stopDebug, err := serveDebug(in.s.debugAddr, in.logger)
		if err != nil {
			_ = ln.Close()
			return err
		}
		in.onStop(stopDebug)
	}
	// No WriteTimeout: SSE responses live for minutes and set their own per-write deadlines.
	// Shutdown does not cancel request contexts, so requests get one that the drain cancels.
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: in.s.idleTimeout,
		BaseContext: func(net.Listener) context.Context { return base }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	in.logger.Info("rindled listening", "url", "http://"+ln.Addr().String(), "host", in.hostID, "version", version(), "demo", in.s.demoOn(),
		"started_in", in.watch.stop().Round(time.Millisecond))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	in.logger.Info("draining: sealing live streams interrupted")
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.s.drainTimeout)
	defer cancel()
	drainErr := in.plane.Drain(dctx)
	cancelRequests() // readers of sealed streams got their end; the rest read the database
	shutdownErr := srv.Shutdown(dctx)
	if errors.Is(shutdownErr, context.DeadlineExceeded) {
		shutdownErr = srv.Close() // long-lived SSE responses: cut them
	}
	in.logger.Info("stopped")
	return errors.Join(drainErr, shutdownErr)
}
