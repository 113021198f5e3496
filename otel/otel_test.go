package otel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	rotel "github.com/rindle-sh/rindle-go/otel"
	"github.com/rindle-sh/rindle-go/producer"
)

func setup(t *testing.T, cfg rotel.Config) (*rotel.Telemetry, *tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	reader := sdkmetric.NewManualReader()
	cfg.SpanExporter, cfg.MetricReader = spans, reader
	tel, shutdown, err := rotel.Setup(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, shutdown(context.Background())) })
	return tel, spans, reader
}

func metricsByName(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func TestInstrumentsRecordCheckpointsApplyAndSlotLag(t *testing.T) {
	tel, spans, reader := setup(t, rotel.Config{ServiceVersion: "test"})
	inst := tel.Instruments
	inst.ObserveCheckpoint(producer.CheckpointInfo{StreamID: "m", From: 0, Seq: 300, Duration: 12 * time.Millisecond, Lag: 800 * time.Millisecond})
	inst.ObserveCheckpoint(producer.CheckpointInfo{StreamID: "m", From: 300, Seq: 310, Duration: 5 * time.Millisecond, Seal: true})
	inst.ObserveCheckpointError(producer.CheckpointInfo{StreamID: "m"})
	inst.ObserveApply(3*time.Millisecond, "")
	require.NoError(t, inst.ObserveSlotLag(func(context.Context) (int64, error) { return 4096, nil }))

	ms := metricsByName(t, reader)
	lag := ms["rindle.durability.lag"].Data.(metricdata.Histogram[float64])
	require.Len(t, lag.DataPoints, 1, "only the append had a lag")
	require.Equal(t, uint64(1), lag.DataPoints[0].Count)
	require.InDelta(t, 0.8, lag.DataPoints[0].Sum, 1e-9)
	require.Equal(t, "s", ms["rindle.durability.lag"].Unit)
	require.Contains(t, lag.DataPoints[0].Bounds, 0.75, "explicit second buckets, not the millisecond defaults")
	size := ms["rindle.checkpoint.size"].Data.(metricdata.Histogram[int64])
	total := int64(0)
	for _, dp := range size.DataPoints {
		total += dp.Sum
	}
	require.Equal(t, int64(310), total)
	require.Equal(t, int64(1), ms["rindle.checkpoint.failures"].Data.(metricdata.Sum[int64]).DataPoints[0].Value)
	require.Equal(t, uint64(1), ms["rindle.cdc.lag"].Data.(metricdata.Histogram[float64]).DataPoints[0].Count)
	require.Equal(t, int64(4096), ms["rindle.cdc.slot_lag"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value)

	inst.ObserveStream(1)
	inst.ObserveStream(1)
	inst.ObserveStream(-1)
	inst.ObserveSubscriber(1, false)
	inst.ObserveSubscriber(1, false)
	inst.ObserveSubscriber(-1, true)
	ms = metricsByName(t, reader)
	require.Equal(t, int64(1), ms["rindle.streams.live"].Data.(metricdata.Sum[int64]).DataPoints[0].Value)
	require.Equal(t, int64(1), ms["rindle.subscribers"].Data.(metricdata.Sum[int64]).DataPoints[0].Value)
	require.Equal(t, int64(1), ms["rindle.subscribers.stale_drops"].Data.(metricdata.Sum[int64]).DataPoints[0].Value)

	require.Empty(t, spans.GetSpans(), "metrics only: the span comes from CommitContext")

	// Prometheus text at /metrics, with the service in the resource.
	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	require.Contains(t, body, "rindle_durability_lag_seconds_bucket")
	require.Regexp(t, `rindle_checkpoint_failures_total\{[^}]*\} 1\n`, body)
	require.Contains(t, body, `service_name="rindled"`)
	// The Go runtime and the process, for sizing: goroutines (one per held event stream),
	// heap, resident memory, open descriptors.
	for _, m := range []string{"go_goroutines ", "go_memstats_heap_inuse_bytes ", "process_resident_memory_bytes ", "process_open_fds "} {
		require.Contains(t, body, "\n"+m, "missing %s", m)
	}
}

// TestCheckpointSpanContinuesIntoTheView: the commit's span context, written into the row as a
// traceparent and read back by the reader, parents the view's apply span: one trace.
func TestCheckpointSpanContinuesIntoTheView(t *testing.T) {
	tel, spans, _ := setup(t, rotel.Config{})
	inst := tel.Instruments
	ctx, settled := inst.CommitContext(context.Background(), producer.CheckpointInfo{StreamID: "m", From: 0, Seq: 300})
	tp := http.Header{}
	tel.Propagator.Inject(ctx, propagationCarrier(tp))
	settled(nil)
	_, failed := inst.CommitContext(context.Background(), producer.CheckpointInfo{StreamID: "m", From: 300, Seq: 310})
	failed(errors.New("store down"))
	inst.ObserveApply(5*time.Millisecond, tp.Get("traceparent"))
	inst.ObserveApply(5*time.Millisecond, "garbage") // no valid parent: no span

	got := spans.GetSpans()
	require.Len(t, got, 3)
	commit, failedSpan, apply := got[0], got[1], got[2]
	require.Equal(t, "rindle.checkpoint", commit.Name)
	require.Contains(t, commit.Attributes, attribute.Int64("rindle.chars", 300))
	require.Contains(t, commit.Attributes, attribute.String("rindle.stream_id", "m"))
	require.Equal(t, "Error", failedSpan.Status.Code.String())
	require.Equal(t, "rindle.ivm.apply", apply.Name)
	require.Equal(t, commit.SpanContext.TraceID(), apply.SpanContext.TraceID(), "one trace")
	require.Equal(t, commit.SpanContext.SpanID(), apply.Parent.SpanID())
	require.Equal(t, 5*time.Millisecond, apply.EndTime.Sub(apply.StartTime), "commit to apply")
}

func TestW3CPropagation(t *testing.T) {
	tel, _, _ := setup(t, rotel.Config{})
	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	h := http.Header{}
	tel.Propagator.Inject(ctx, propagationCarrier(h))
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, h.Get("traceparent"))
}

func TestOTLPExportOverHTTP(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	tel, shutdown, err := rotel.Setup(t.Context(), rotel.Config{OTLPEndpoint: collector.URL + "/", MetricInterval: time.Hour})
	require.NoError(t, err)
	tel.Instruments.ObserveCheckpoint(producer.CheckpointInfo{StreamID: "m", Seq: 10, Duration: time.Millisecond, Lag: time.Second})
	_, settled := tel.Instruments.CommitContext(context.Background(), producer.CheckpointInfo{StreamID: "m", Seq: 10})
	settled(nil)
	require.NoError(t, shutdown(context.Background()), "shutdown flushes both exporters")
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, paths["POST /v1/traces"])
	require.Positive(t, paths["POST /v1/metrics"])
}

func TestAPlaneFeedsTheInstruments(t *testing.T) {
	tel, _, reader := setup(t, rotel.Config{})
	plane, err := producer.New(producer.Config{
		Committer: producer.CommitFunc(func(context.Context, producer.CommitInput) (producer.AppendResult, error) {
			return producer.AppendResult{}, nil
		}),
		Authorize:        func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		OnCheckpointFunc: tel.Instruments.ObserveCheckpoint,
	})
	require.NoError(t, err)
	defer plane.Close()
	s, err := plane.Open(t.Context(), producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	require.NoError(t, s.Push(strings.Repeat("x", 100)))
	_, err = s.Flush(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
	size := metricsByName(t, reader)["rindle.checkpoint.size"].Data.(metricdata.Histogram[int64])
	var n uint64
	for _, dp := range size.DataPoints {
		n += dp.Count
	}
	require.Equal(t, uint64(2), n, "the flush and the seal")
}

func TestHTTPHandlerTracesRoutesContinuesCallersAndSkipsStreams(t *testing.T) {
	tel, spans, _ := setup(t, rotel.Config{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/streams/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") })
	mux.HandleFunc("GET /v1/streams/{id}/events", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "data: {}\n\n") })
	srv := httptest.NewServer(tel.HTTPHandler(mux, func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/events") }))
	defer srv.Close()

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/streams/m1", nil)
	require.NoError(t, err)
	req.Header.Set("traceparent", parent)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/v1/streams/m1/events")
	require.NoError(t, err)
	resp.Body.Close()

	require.NoError(t, tel.TracerProvider.ForceFlush(t.Context()))
	got := spans.GetSpans()
	require.Len(t, got, 1, "the event stream is not traced")
	require.Equal(t, "GET /v1/streams/{id}", got[0].Name, "named by the route pattern, not the id")
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", got[0].SpanContext.TraceID().String(), "continues the caller's trace")
	require.Equal(t, "b7ad6b7169203331", got[0].Parent.SpanID().String())
}

// With no exporter, spans would go nowhere: the ones this process starts are not sampled, so
// nothing is recorded and a checkpoint writes no traceparent (checkpoint's
// TestOnlyASampledCheckpointWritesItsTraceparent), while each span context stays valid for
// links. A caller's sampled trace context is still continued and passed on.
func TestWithoutAnExporterOnlyACallersSampledTraceIsSampled(t *testing.T) {
	t.Parallel()
	tel, shutdown, err := rotel.Setup(t.Context(), rotel.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, shutdown(context.Background())) })

	ctx, settled := tel.Instruments.CommitContext(context.Background(), producer.CheckpointInfo{StreamID: "m", Seq: 4})
	span := trace.SpanFromContext(ctx)
	require.True(t, span.SpanContext().IsValid(), "a valid span context, for links")
	require.False(t, span.SpanContext().IsSampled())
	require.False(t, span.IsRecording(), "nothing recorded for a trace that goes nowhere")
	settled(nil)

	seen := make(chan trace.SpanContext, 2)
	srv := httptest.NewServer(tel.HTTPHandler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen <- trace.SpanContextFromContext(r.Context())
	}), nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/streams/m")
	require.NoError(t, err)
	resp.Body.Close()
	require.False(t, (<-seen).IsSampled(), "a request without a trace context starts no sampled trace")

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/streams/m", nil)
	require.NoError(t, err)
	req.Header.Set("traceparent", parent)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	sc := <-seen
	require.True(t, sc.IsSampled(), "the caller's sampling decision is honoured")
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
}

func TestSetupRefusesANegativeIntervalByField(t *testing.T) {
	t.Parallel()
	var ce *rotel.ConfigError
	_, _, err := rotel.Setup(t.Context(), rotel.Config{MetricInterval: -time.Second})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "MetricInterval", ce.Field)
}

// Issue 13, item 9: the slot-lag series outlives a database outage (last value, growing age),
// and the outstanding durability is a gauge in characters, streams and age.
func TestSlotLagSurvivesAnOutageAndDurabilityIsGauged(t *testing.T) {
	tel, _, reader := setup(t, rotel.Config{})
	inst := tel.Instruments
	var down atomic.Bool
	require.NoError(t, inst.ObserveSlotLag(func(context.Context) (int64, error) {
		if down.Load() {
			return 0, errors.New("database unreachable")
		}
		return 8192, nil
	}))
	stats := producer.DurabilityStats{Streams: 2, Chars: 640, Oldest: 1500 * time.Millisecond}
	require.NoError(t, inst.ObserveDurability(func() producer.DurabilityStats { return stats }))

	ms := metricsByName(t, reader)
	require.Equal(t, int64(8192), ms["rindle.cdc.slot_lag"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value)
	fresh := ms["rindle.cdc.slot_lag.age"].Data.(metricdata.Gauge[float64]).DataPoints[0].Value
	require.Less(t, fresh, 1.0)
	require.Equal(t, int64(640), ms["rindle.durability.outstanding"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value)
	require.Equal(t, int64(2), ms["rindle.durability.outstanding_streams"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value)
	require.InDelta(t, 1.5, ms["rindle.durability.outstanding_age"].Data.(metricdata.Gauge[float64]).DataPoints[0].Value, 1e-9)

	down.Store(true)
	time.Sleep(20 * time.Millisecond) // the age is wall-clock: let it visibly grow
	ms = metricsByName(t, reader)
	require.Contains(t, ms, "rindle.cdc.slot_lag", "the series does not vanish while the database is away")
	require.Equal(t, int64(8192), ms["rindle.cdc.slot_lag"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value)
	require.Greater(t, ms["rindle.cdc.slot_lag.age"].Data.(metricdata.Gauge[float64]).DataPoints[0].Value, fresh)

	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, name := range []string{"rindle_durability_outstanding{", "rindle_durability_outstanding_streams{",
		"rindle_durability_outstanding_age_seconds{", "rindle_cdc_slot_lag_bytes{", "rindle_cdc_slot_lag_age_seconds{"} {
		require.Contains(t, rec.Body.String(), "\n"+name)
	}
}

// No metric label takes its value from a request: a client that sends many Host headers, odd
// methods and unknown paths adds no series (issue: each Host minted ~53 new series).
func TestHTTPMetricsHaveNoLabelFromTheRequest(t *testing.T) {
	tel, _, reader := setup(t, rotel.Config{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/streams/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") })
	srv := httptest.NewServer(tel.HTTPHandler(mux, nil))
	defer srv.Close()
	series := func() int {
		n := 0
		for _, m := range metricsByName(t, reader) {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				n += len(d.DataPoints)
			case metricdata.Histogram[int64]:
				n += len(d.DataPoints)
			case metricdata.Sum[int64]:
				n += len(d.DataPoints)
			}
		}
		return n
	}
	send := func(method, host, path string) {
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	send("GET", "a.example", "/v1/streams/m1")
	send("GET", "a.example", "/nowhere")
	base := series()
	for i := range 50 {
		send("GET", fmt.Sprintf("h%d.example:%d", i, 1000+i), fmt.Sprintf("/v1/streams/m%d", i))
		send("GET", fmt.Sprintf("h%d.example", i), fmt.Sprintf("/nowhere/%d", i))
		send(fmt.Sprintf("BREW%d", i), "a.example", "/v1/streams/m1")
	}
	got := series()
	require.LessOrEqual(t, got, base+4, "requests with new hosts, paths and methods add no series (a new method class and status at most)")
	for _, m := range metricsByName(t, reader) {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			for _, dp := range h.DataPoints {
				for _, kv := range dp.Attributes.ToSlice() {
					require.NotContains(t, []string{"server.address", "server.port", "client.address", "url.path", "user_agent.original"}, string(kv.Key), m.Name)
				}
			}
		}
	}
}

func TestPublishStallIsAGauge(t *testing.T) {
	tel, _, reader := setup(t, rotel.Config{})
	var stalled atomic.Bool
	require.NoError(t, tel.Instruments.ObservePublishStall(stalled.Load))
	value := func() int64 {
		g := metricsByName(t, reader)["rindle.cdc.publish_stalled"].Data.(metricdata.Gauge[int64])
		return g.DataPoints[0].Value
	}
	require.Zero(t, value())
	stalled.Store(true)
	require.EqualValues(t, 1, value())
}

// Counters export 0 before their first increment, so alerts on rate() and absent() see them.
func TestCountersExistBeforeTheirFirstIncrement(t *testing.T) {
	_, _, reader := setup(t, rotel.Config{})
	got := metricsByName(t, reader)
	for _, name := range []string{"rindle.checkpoint.failures", "rindle.subscribers.stale_drops", "rindle.streams.live", "rindle.subscribers"} {
		m, ok := got[name]
		require.True(t, ok, "%s is exported before anything happened", name)
		sum, ok := m.Data.(metricdata.Sum[int64])
		require.True(t, ok, name)
		require.Len(t, sum.DataPoints, 1, name)
		require.Zero(t, sum.DataPoints[0].Value, name)
	}
}
