package checkpoint_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/rindle-sh/rindle-go/producer"
)

// A checkpoint committed inside a sampled span writes its traceparent into the chunk row, for
// the CDC reader and the view to continue the trace. One inside an unsampled span (rindled's
// when no exporter is configured) or outside any span writes NULL: a trace nobody records
// would cost every chunk row 55 bytes, in the table and in the WAL.
func TestOnlyASampledCheckpointWritesItsTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	b.insert(t, "m1")
	require.NoError(t, b.store.Open(ctx, producer.OpenInput{StreamID: "m1"}))
	span := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0x0a, 0xf7}, SpanID: trace.SpanID{0xb7}, TraceFlags: flags}))
	}
	for _, c := range []struct {
		ctx      context.Context
		from, to producer.Seq
	}{{span(trace.FlagsSampled), 0, 4}, {span(0), 4, 8}, {ctx, 8, 12}} {
		res, err := b.store.Append(c.ctx, producer.AppendInput{StreamID: "m1", From: c.from, Seq: c.to, Text: "text"})
		require.NoError(t, err)
		require.Equal(t, c.to, res.Durable)
	}
	rows, err := b.db.Pool.Query(ctx, "SELECT traceparent FROM message_chunks WHERE stream_id = 'm1' ORDER BY seq")
	require.NoError(t, err)
	var got []*string
	for rows.Next() {
		var tp *string
		require.NoError(t, rows.Scan(&tp))
		got = append(got, tp)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 3)
	require.NotNil(t, got[0], "a sampled span's checkpoint carries its trace")
	require.Equal(t, "00-0af70000000000000000000000000000-b700000000000000-01", *got[0])
	require.Nil(t, got[1], "an unsampled span's checkpoint writes no traceparent")
	require.Nil(t, got[2], "a checkpoint outside any span writes no traceparent")
}
