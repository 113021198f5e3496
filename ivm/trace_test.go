package ivm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/ivm"
	rotel "github.com/rindle-sh/rindle-go/otel"
	"github.com/rindle-sh/rindle-go/producer"
)

// TestOneTraceFromCheckpointToView: the checkpoint's span context rides the chunk row's
// traceparent through the WAL and the reader, and the view's apply span joins the same trace.
func TestOneTraceFromCheckpointToView(t *testing.T) {
	t.Parallel()
	w, _, spans, applied, plane := traced(t)
	ctx := t.Context()

	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	require.NoError(t, s.Push("traced"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	var tp string
	for deadline := eventually.Late(t); tp == ""; {
		select {
		case tx := <-applied:
			tp = tx.Traceparent()
		case <-deadline:
			t.Fatal("the view never applied a traced transaction")
		}
	}
	var stored string
	require.NoError(t, w.db.Pool.QueryRow(ctx, "SELECT traceparent FROM message_chunks WHERE stream_id = 'm'").Scan(&stored))
	require.Equal(t, stored, tp, "the row carried the checkpoint's trace context")

	var commit, apply *tracetest.SpanStub
	got := spans.GetSpans()
	for i := range got {
		switch got[i].Name {
		case "rindle.checkpoint":
			commit = &got[i]
		case "rindle.ivm.apply":
			apply = &got[i]
		}
	}
	require.NotNil(t, commit)
	require.NotNil(t, apply)
	require.Equal(t, commit.SpanContext.TraceID(), apply.SpanContext.TraceID(), "push → commit → WAL → view: one trace")
	require.Equal(t, commit.SpanContext.SpanID(), apply.Parent.SpanID())
}

// Issue 13, item 9: the request that pushed the text is linked from the checkpoint that made it
// durable, and the seal (which writes no chunk row) still reaches the view in its own trace:
// its context travels as a transactional logical-decoding message.
func TestRequestsLinkToTheirCheckpointAndTheSealIsApplyTraced(t *testing.T) {
	t.Parallel()
	w, tel, spans, applied, plane := traced(t)
	ctx := t.Context()

	tracer := tel.TracerProvider.Tracer("test")
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	reqCtx, req := tracer.Start(ctx, "POST /v1/streams/{id}/append")
	require.NoError(t, s.Push("linked"))
	s.Cause(reqCtx)
	req.End()
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	closeCtx, closeReq := tracer.Start(ctx, "POST /v1/streams/{id}/close")
	s.Cause(closeCtx)
	require.NoError(t, s.Close(ctx))
	closeReq.End()

	var sealTx *cdc.Tx
	deadline := eventually.Late(t)
	for sealTx == nil {
		select {
		case tx := <-applied:
			for _, e := range tx.Events {
				if e.Kind == cdc.MessageChanged && e.Status == string(producer.StatusComplete) {
					sealTx = tx
				}
			}
		case <-deadline:
			t.Fatal("the view never applied the seal")
		}
	}
	require.NotEmpty(t, sealTx.Trace, "the seal's transaction carried its trace context")

	var appendCP, sealCP *tracetest.SpanStub
	var applies []tracetest.SpanStub
	got := spans.GetSpans()
	for i := range got {
		switch got[i].Name {
		case "rindle.checkpoint":
			for _, a := range got[i].Attributes {
				if a.Key == "rindle.checkpoint.kind" && a.Value.AsString() == "seal" {
					sealCP = &got[i]
				} else if a.Key == "rindle.checkpoint.kind" {
					appendCP = &got[i]
				}
			}
		case "rindle.ivm.apply":
			applies = append(applies, got[i])
		}
	}
	require.NotNil(t, appendCP)
	require.NotNil(t, sealCP)
	require.Len(t, appendCP.Links, 1, "the append's checkpoint links the request that pushed its text")
	require.Equal(t, req.SpanContext().SpanID(), appendCP.Links[0].SpanContext.SpanID())
	require.Len(t, sealCP.Links, 1)
	require.Equal(t, closeReq.SpanContext().SpanID(), sealCP.Links[0].SpanContext.SpanID())
	parents := map[string]bool{}
	for _, a := range applies {
		parents[a.Parent.SpanID().String()] = true
	}
	require.True(t, parents[sealCP.SpanContext.SpanID().String()], "the seal has its apply span, a child of the seal's checkpoint")
	require.True(t, parents[appendCP.SpanContext.SpanID().String()])
}

// traced is a world whose view reports every applied transaction on applied (and traces its
// apply), and a plane whose checkpoints are traced: the spans land in spans.
func traced(t *testing.T) (*world, *rotel.Telemetry, *tracetest.InMemoryExporter, chan *cdc.Tx, *producer.Plane) {
	t.Helper()
	w := setup(t)
	spans := tracetest.NewInMemoryExporter()
	tel, shutdown, err := rotel.Setup(t.Context(), rotel.Config{SpanExporter: spans})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, shutdown(context.Background())) })
	w.view.Stop()
	applied := make(chan *cdc.Tx, 100)
	v, err := ivm.New(ivm.Config{Subscriber: w.broker, Pool: w.db.Pool, OnApplyFunc: func(tx *cdc.Tx, lag time.Duration) {
		tel.Instruments.ObserveApply(lag, tx.Traceparent())
		applied <- tx
	}})
	require.NoError(t, err)
	require.NoError(t, v.Start(t.Context()))
	w.view = v
	plane, err := producer.New(producer.Config{
		Committer:         w.store,
		Authorize:         func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CommitContextFunc: tel.Instruments.CommitContext,
	})
	require.NoError(t, err)
	t.Cleanup(plane.Close)
	return w, tel, spans, applied, plane
}
