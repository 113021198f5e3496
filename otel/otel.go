// Package otel owns the project's OpenTelemetry setup and instruments: one Setup that builds the
// trace and metric providers (OTLP/HTTP when an endpoint is configured, Prometheus always) with
// W3C trace-context propagation, and Instruments that turn the planes' observations into
// metrics and spans.
//
// It owns no business rules and sets no globals: cmd/rindled alone decides whether to install
// the providers globally. It observes the other packages only through the hooks they already
// expose (producer.Config's OnCheckpointFunc, OnCheckpointErrorFunc, OnStreamFunc and
// OnSubscriberFunc, ivm.Config.OnApplyFunc, a slot-lag callback).
//
// Histograms carry explicit buckets in seconds (the SDK's defaults suit milliseconds).
//
// Lifecycle: Setup returns a shutdown function that flushes and stops the exporters; call it
// once, with a deadline. Errors: Setup fails on an unusable endpoint or a duplicate instrument.
package otel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rindle-sh/rindle-go/producer"
)

// ScopeName is the instrumentation scope of every instrument and span here.
const ScopeName = "github.com/rindle-sh/rindle-go"

// Config configures Setup.
type Config struct {
	// ServiceName names the service in the resource. Defaults to "rindled".
	ServiceName string
	// ServiceVersion is the build's version, if known.
	ServiceVersion string
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector (OTEL_EXPORTER_OTLP_ENDPOINT,
	// e.g. http://collector:4318); traces go to /v1/traces and metrics to /v1/metrics. Empty
	// means no OTLP export: metrics stay on the Prometheus handler, and unless SpanExporter is
	// set the traces this process starts are not sampled (a caller's sampled trace still is),
	// so they cost no recording and the checkpoints write no traceparent.
	OTLPEndpoint string
	// NoOTLPMetrics keeps metrics off OTLP (OTEL_METRICS_EXPORTER=none): they are served at
	// /metrics only, for a Prometheus that scrapes, while spans still go to OTLPEndpoint.
	NoOTLPMetrics bool
	// MetricInterval is the OTLP metric push cadence. Defaults to 15s.
	MetricInterval time.Duration
	// SpanExporter, if set, also receives every span, synchronously (tests use an in-memory one).
	SpanExporter sdktrace.SpanExporter
	// MetricReader, if set, also reads every metric (tests use a manual reader).
	MetricReader sdkmetric.Reader
}

// Telemetry is what Setup built.
type Telemetry struct {
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// Propagator is W3C trace context plus baggage (the global default propagates nothing).
	Propagator propagation.TextMapPropagator
	// MetricsHandler serves Prometheus text at /metrics.
	MetricsHandler http.Handler
	Instruments    *Instruments
}

// Setup builds the providers and the project's instruments. The returned shutdown flushes
// and stops every exporter.
func Setup(ctx context.Context, cfg Config) (*Telemetry, func(context.Context) error, error) {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "rindled"
	}
	if cfg.MetricInterval < 0 {
		return nil, nil, &ConfigError{Field: "MetricInterval", Reason: "must not be negative"}
	}
	if cfg.MetricInterval == 0 {
		cfg.MetricInterval = 15 * time.Second
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.ServiceName)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	// resource.New, not a merge with resource.Default(): merging resources of two semconv
	// versions is an error.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, nil, fmt.Errorf("otel: resource: %w", err)
	}

	var shutdowns []func(context.Context) error
	shutdown := func(ctx context.Context) error {
		var errs []error
		for i := len(shutdowns) - 1; i >= 0; i-- {
			errs = append(errs, shutdowns[i](ctx))
		}
		return errors.Join(errs...)
	}

	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	metricOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithView(httpMetricsView)}
	if cfg.SpanExporter != nil {
		traceOpts = append(traceOpts, sdktrace.WithSyncer(cfg.SpanExporter))
	}
	if cfg.SpanExporter == nil && strings.TrimRight(cfg.OTLPEndpoint, "/") == "" {
		// Spans would go nowhere: record none that this process starts. Each still gets a
		// valid, unsampled span context (so links and logs can name it), and a caller's sampled
		// trace context is still honoured and passed on.
		traceOpts = append(traceOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	if cfg.MetricReader != nil {
		metricOpts = append(metricOpts, sdkmetric.WithReader(cfg.MetricReader))
	}
	if ep := strings.TrimRight(cfg.OTLPEndpoint, "/"); ep != "" {
		spans, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(ep+"/v1/traces"))
		if err != nil {
			return nil, nil, fmt.Errorf("otel: OTLP trace exporter for %s: %w", ep, err)
		}
		traceOpts = append(traceOpts, sdktrace.WithBatcher(spans))
	}
	if ep := strings.TrimRight(cfg.OTLPEndpoint, "/"); ep != "" && !cfg.NoOTLPMetrics {
		metrics, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(ep+"/v1/metrics"))
		if err != nil {
			return nil, nil, fmt.Errorf("otel: OTLP metric exporter for %s: %w", ep, err)
		}
		metricOpts = append(metricOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(cfg.MetricInterval))))
	}
	// Prometheus on a registry of our own: nothing global. It also carries the Go runtime's
	// and the process's own metrics (goroutines, heap, GC pauses, RSS, open descriptors): an
	// operator sizing instances for thousands of held event streams needs them.
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := promexporter.New(promexporter.WithRegisterer(registry))
	if err != nil {
		return nil, nil, fmt.Errorf("otel: prometheus exporter: %w", err)
	}
	metricOpts = append(metricOpts, sdkmetric.WithReader(prom))

	tp := sdktrace.NewTracerProvider(traceOpts...)
	shutdowns = append(shutdowns, tp.Shutdown)
	mp := sdkmetric.NewMeterProvider(metricOpts...)
	shutdowns = append(shutdowns, mp.Shutdown)
	inst, err := NewInstruments(mp, tp)
	if err != nil {
		_ = shutdown(ctx)
		return nil, nil, err
	}
	return &Telemetry{
		TracerProvider: tp,
		MeterProvider:  mp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		MetricsHandler: promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
		Instruments:    inst,
	}, shutdown, nil
}

// Buckets, in seconds.
var (
	lagBuckets      = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30}        //nolint:gochecknoglobals // read-only bucket layout
	durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10} //nolint:gochecknoglobals // read-only bucket layout
	sizeBuckets     = []float64{1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 16384, 65536}                    //nolint:gochecknoglobals // read-only bucket layout
)

// Instruments are the project's metrics and its tracer.
type Instruments struct {
	tracer             trace.Tracer
	meter              metric.Meter
	durabilityLag      metric.Float64Histogram
	checkpointSize     metric.Int64Histogram
	checkpointDuration metric.Float64Histogram
	checkpointFailures metric.Int64Counter
	cdcLag             metric.Float64Histogram
	liveStreams        metric.Int64UpDownCounter
	subscribers        metric.Int64UpDownCounter
	staleDrops         metric.Int64Counter
	keyFetchFailures   metric.Int64Counter
	reaped             metric.Int64Counter
}

// NewInstruments creates the instruments on mp and a tracer on tp.
func NewInstruments(mp metric.MeterProvider, tp trace.TracerProvider) (*Instruments, error) {
	m := mp.Meter(ScopeName)
	i := &Instruments{tracer: tp.Tracer(ScopeName), meter: m}
	var errs [10]error
	i.durabilityLag, errs[0] = m.Float64Histogram("rindle.durability.lag", metric.WithUnit("s"),
		metric.WithDescription("Time from a character's production to the store confirming it (the oldest character of each checkpoint)."),
		metric.WithExplicitBucketBoundaries(lagBuckets...))
	i.checkpointSize, errs[1] = m.Int64Histogram("rindle.checkpoint.size", metric.WithUnit("{char}"),
		metric.WithDescription("UTF-16 code units per checkpoint."), metric.WithExplicitBucketBoundaries(sizeBuckets...))
	i.checkpointDuration, errs[2] = m.Float64Histogram("rindle.checkpoint.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a checkpoint's commit took, retries included."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	i.checkpointFailures, errs[3] = m.Int64Counter("rindle.checkpoint.failures",
		metric.WithDescription("Checkpoints that exhausted their retries (a durability stall)."))
	i.cdcLag, errs[4] = m.Float64Histogram("rindle.cdc.lag", metric.WithUnit("s"),
		metric.WithDescription("Time from a transaction's commit to its application in the view."), metric.WithExplicitBucketBoundaries(lagBuckets...))
	i.liveStreams, errs[5] = m.Int64UpDownCounter("rindle.streams.live", metric.WithUnit("{stream}"),
		metric.WithDescription("Streams hosted on this instance's live plane."))
	i.subscribers, errs[6] = m.Int64UpDownCounter("rindle.subscribers", metric.WithUnit("{subscriber}"),
		metric.WithDescription("Readers attached to this instance's live streams."))
	i.staleDrops, errs[7] = m.Int64Counter("rindle.subscribers.stale_drops",
		metric.WithDescription("Readers dropped with stale for not draining their queue."))
	i.keyFetchFailures, errs[8] = m.Int64Counter("rindle.auth.key_fetch.failures",
		metric.WithDescription("Failed fetches of an identity provider's key set (JWKS), by configured issuer name."))
	i.reaped, errs[9] = m.Int64Counter("rindle.streams.reaped",
		metric.WithDescription("Durable Streams rows the reaper removed, by kind: stream (expired, or soft-deleted with no fork left) or producer (idle state)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otel: instruments: %w", err)
	}
	// Every counter exports 0 from the start, not only after its first increment: an alert on
	// rate() or absent() needs the series before anything has happened.
	for _, c := range []metric.Int64Counter{i.checkpointFailures, i.staleDrops, i.reaped} {
		c.Add(context.Background(), 0)
	}
	for _, c := range []metric.Int64UpDownCounter{i.liveStreams, i.subscribers} {
		c.Add(context.Background(), 0)
	}
	return i, nil
}

// ObserveStream counts streams joining (+1) and leaving (-1) the live plane. Use it as
// producer.Config.OnStreamFunc.
func (i *Instruments) ObserveStream(delta int) {
	i.liveStreams.Add(context.Background(), int64(delta))
}

// ObserveSubscriber counts readers attaching and leaving, and stale drops. Use it as
// producer.Config.OnSubscriberFunc.
func (i *Instruments) ObserveSubscriber(delta int, stale bool) {
	i.subscribers.Add(context.Background(), int64(delta))
	if stale {
		i.staleDrops.Add(context.Background(), 1)
	}
}

// CommitContext starts the span of one checkpoint's commit (retries included) and returns its
// context, which the checkpoint.Store writes into the chunk row as a traceparent: the CDC reader
// and the view continue this trace. Use it as producer.Config.CommitContextFunc.
func (i *Instruments) CommitContext(ctx context.Context, info producer.CheckpointInfo) (context.Context, func(error)) {
	kind := "append"
	if info.Seal {
		kind = "seal"
	}
	ctx, span := i.tracer.Start(ctx, "rindle.checkpoint", trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(causeLinks(info.Causes)...), trace.WithAttributes(
		attribute.String("rindle.stream_id", info.StreamID),
		attribute.Int64("rindle.from", int64(info.From)),
		attribute.Int64("rindle.seq", int64(info.Seq)),
		attribute.Int64("rindle.chars", int64(info.Seq-info.From)),
		attribute.String("rindle.checkpoint.kind", kind),
	))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// causeLinks links a checkpoint's span to the spans of the requests whose text it commits (the
// HTTP append, ingest or close that called LiveStream.Cause), once per span.
func causeLinks(causes []context.Context) []trace.Link {
	var links []trace.Link
	seen := map[trace.SpanID]bool{}
	for _, c := range causes {
		sc := trace.SpanContextFromContext(c)
		if sc.IsValid() && !seen[sc.SpanID()] {
			seen[sc.SpanID()] = true
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

// ObserveCheckpoint records a confirmed checkpoint's lag, size and duration. Use it as
// producer.Config.OnCheckpointFunc.
func (i *Instruments) ObserveCheckpoint(info producer.CheckpointInfo) {
	ctx := context.Background()
	kind := "append"
	if info.Seal {
		kind = "seal"
	}
	attrs := metric.WithAttributes(attribute.String("rindle.checkpoint.kind", kind))
	i.checkpointSize.Record(ctx, int64(info.Seq-info.From), attrs)
	i.checkpointDuration.Record(ctx, info.Duration.Seconds(), attrs)
	if info.Lag > 0 {
		i.durabilityLag.Record(ctx, info.Lag.Seconds(), attrs)
	}
}

// ObserveReaped counts what one round of the Durable Streams reaper removed.
func (i *Instruments) ObserveReaped(streams, producers int) {
	if streams > 0 {
		i.reaped.Add(context.Background(), int64(streams), metric.WithAttributes(attribute.String("kind", "stream")))
	}
	if producers > 0 {
		i.reaped.Add(context.Background(), int64(producers), metric.WithAttributes(attribute.String("kind", "producer")))
	}
}

// ObserveKeyFetchError counts a failed JWKS fetch of the issuer named issuer (a configured
// name, never one from a request). Use it as auth.Config.OnFetchError.
func (i *Instruments) ObserveKeyFetchError(issuer string, _ error) {
	i.keyFetchFailures.Add(context.Background(), 1, metric.WithAttributes(attribute.String("issuer", issuer)))
}

// ObserveCheckpointError counts a checkpoint that exhausted its retries. Use it inside
// producer.Config.OnCheckpointErrorFunc.
func (i *Instruments) ObserveCheckpointError(info producer.CheckpointInfo) {
	i.checkpointFailures.Add(context.Background(), 1)
}

// ObserveApply records a transaction's commit-to-view lag and, when the checkpoint left its
// traceparent in the row, a span of that trace from the commit to the view's apply. Use it from
// ivm.Config.OnApplyFunc with the transaction's Traceparent().
func (i *Instruments) ObserveApply(lag time.Duration, traceparent string) {
	i.cdcLag.Record(context.Background(), lag.Seconds())
	if traceparent == "" {
		return
	}
	parent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	if !trace.SpanContextFromContext(parent).IsValid() {
		return
	}
	end := time.Now()
	_, span := i.tracer.Start(parent, "rindle.ivm.apply", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(end.Add(-lag)), trace.WithAttributes(attribute.Float64("rindle.cdc.lag_s", lag.Seconds())))
	span.End(trace.WithTimestamp(end))
}

// ObserveSlotLag registers a gauge of the replication slot's retained WAL, read by f at each
// collection (cdc.Reader.SlotLag), and of the age of that reading. While f fails (the database
// is away) the lag series keeps its last value instead of vanishing, and the age grows: a
// dashboard sees the slot's lag go stale rather than go missing.
func (i *Instruments) ObserveSlotLag(f func(context.Context) (int64, error)) error {
	var (
		mu     sync.Mutex
		last   int64
		readAt time.Time
		ok     bool
	)
	lag, err := i.meter.Int64ObservableGauge("rindle.cdc.slot_lag", metric.WithUnit("By"),
		metric.WithDescription("WAL bytes the replication slot holds back (the last successful reading)."))
	if err != nil {
		return err
	}
	age, err := i.meter.Float64ObservableGauge("rindle.cdc.slot_lag.age", metric.WithUnit("s"),
		metric.WithDescription("Time since rindle.cdc.slot_lag was last read successfully; it grows while the database is away."))
	if err != nil {
		return err
	}
	_, err = i.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		v, err := f(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			last, readAt, ok = v, time.Now(), true
		}
		if !ok {
			return err // never read: there is no value to keep
		}
		o.ObserveInt64(lag, last)
		o.ObserveFloat64(age, time.Since(readAt).Seconds())
		return nil
	}, lag, age)
	return err
}

// ObservePublishStall registers a gauge that is 1 while the CDC reader's publish is failing (its
// slot position stalls on one transaction and holds WAL; cdc.Reader.Stats().Stalled) and 0
// otherwise, so a stall is an alert, not a silence.
func (i *Instruments) ObservePublishStall(f func() bool) error {
	g, err := i.meter.Int64ObservableGauge("rindle.cdc.publish_stalled", metric.WithUnit("1"),
		metric.WithDescription("1 while the CDC reader cannot publish the transaction at its position (the slot holds WAL meanwhile), else 0."))
	if err != nil {
		return err
	}
	_, err = i.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var v int64
		if f() {
			v = 1
		}
		o.ObserveInt64(g, v)
		return nil
	}, g)
	return err
}

// ObserveDurability registers the gauges of what this instance holds that the store has not
// confirmed (producer.Plane.Durability): characters, streams, and the age of the oldest
// character. They rise during a durability stall, before any checkpoint gives up.
func (i *Instruments) ObserveDurability(f func() producer.DurabilityStats) error {
	chars, err := i.meter.Int64ObservableGauge("rindle.durability.outstanding", metric.WithUnit("{char}"),
		metric.WithDescription("UTF-16 code units produced on this instance and not yet confirmed durable."))
	if err != nil {
		return err
	}
	streams, err := i.meter.Int64ObservableGauge("rindle.durability.outstanding_streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Live streams on this instance holding text not yet confirmed durable."))
	if err != nil {
		return err
	}
	age, err := i.meter.Float64ObservableGauge("rindle.durability.outstanding_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest character not yet confirmed durable has waited since its push."))
	if err != nil {
		return err
	}
	_, err = i.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := f()
		o.ObserveInt64(chars, int64(st.Chars))
		o.ObserveInt64(streams, int64(st.Streams))
		o.ObserveFloat64(age, st.Oldest.Seconds())
		return nil
	}, chars, streams, age)
	return err
}

// httpMetricsView keeps only a fixed set of attributes on the instruments of otelhttp's scope,
// each of which takes its values from a small set (the route pattern, never the path; the
// method, which otelhttp folds to _OTHER when it is not a standard one). otelhttp also records
// server.address and server.port from the request's Host header, which any client chooses:
// every distinct Host would mint new series without bound.
func httpMetricsView(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
	if i.Scope.Name != otelhttp.ScopeName {
		return sdkmetric.Stream{}, false
	}
	return sdkmetric.Stream{Name: i.Name, Description: i.Description, Unit: i.Unit,
		AttributeFilter: attribute.NewAllowKeysFilter(
			"http.request.method", "http.response.status_code", "http.route", "url.scheme",
			"network.protocol.name", "network.protocol.version", "error.type")}, true
}

// HTTPHandler instruments h with otelhttp on this Telemetry's providers and propagator: a
// server span per request named by its route pattern, continuing a caller's W3C trace context,
// and the HTTP server metrics. Requests for which skip returns true are not traced: an event
// stream is one request that lives for minutes to hours (docs/DESIGN.md §9), and probes are noise.
func (t *Telemetry) HTTPHandler(h http.Handler, skip func(*http.Request) bool) http.Handler {
	opts := []otelhttp.Option{
		otelhttp.WithTracerProvider(t.TracerProvider),
		otelhttp.WithMeterProvider(t.MeterProvider),
		otelhttp.WithPropagators(t.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}),
	}
	if skip != nil {
		opts = append(opts, otelhttp.WithFilter(func(r *http.Request) bool { return !skip(r) }))
	}
	return otelhttp.NewHandler(h, "http", opts...)
}

// ConfigError names the Config field that New refused, and why. It is the convention of every
// package here (producer, checkpoint, cdc, ivm, broker, httpapi, otel): match it with errors.As.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "otel: Config." + e.Field + ": " + e.Reason
}
