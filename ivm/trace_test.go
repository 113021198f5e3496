package ivm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/ivm"
	rotel "github.com/rindle-sh/rindle-go/otel"
	"github.com/rindle-sh/rindle-go/producer"
)

// TestOneTraceFromCheckpointToView: the checkpoint's span context rides the chunk row's
// traceparent through the WAL and the reader, and the view's apply span joins the same trace.
func TestOneTraceFromCheckpointToView(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	spans := tracetest.NewInMemoryExporter()
	tel, shutdown, err := rotel.Setup(ctx, rotel.Config{SpanExporter: spans})
	require.NoError(t, err)
	defer func() { require.NoError(t, shutdown(context.Background())) }()

	w.view.Stop()
	applied := make(chan string, 100)
	v, err := ivm.New(ivm.Config{Subscriber: w.broker, Pool: w.db.Pool, OnApplyFunc: func(tx *cdc.Tx, lag time.Duration) {
		tel.Instruments.ObserveApply(lag, tx.Traceparent())
		if tp := tx.Traceparent(); tp != "" {
			applied <- tp
		}
	}})
	require.NoError(t, err)
	require.NoError(t, v.Start(ctx))
	w.view = v
	plane, err := producer.New(producer.Config{
		Committer:         w.store,
		Authorize:         func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CommitContextFunc: tel.Instruments.CommitContext,
	})
	require.NoError(t, err)
	defer plane.Close()

	_, err = w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)
	require.NoError(t, s.Push("traced"))
	_, err = s.Flush(ctx)
	require.NoError(t, err)
	var tp string
	select {
	case tp = <-applied:
	case <-time.After(20 * time.Second):
		t.Fatal("the view never applied a traced transaction")
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
