package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// The seal sends only the text past what the row holds: the database puts the body together
// from the chunk rows, so a long answer's text is not sent (nor held in the driver's buffers)
// a second time at its close. A seal whose plane missed a checkpoint's confirmation (the row
// holds more than From) reads the row's length back and sends the tail from there.
func TestSealSendsOnlyTheTailPastTheRow(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	b.insert(t, "m1")
	require.NoError(t, b.store.Open(ctx, producer.OpenInput{StreamID: "m1"}))
	for _, in := range []producer.AppendInput{
		{StreamID: "m1", From: 0, Seq: 6, Text: "hello "},
		{StreamID: "m1", From: 6, Seq: 14, Text: "world 🙂"},
	} {
		res, err := b.store.Append(ctx, in)
		require.NoError(t, err)
		require.Equal(t, in.Seq, res.Durable)
	}
	tail := ", and the rest of a long answer"
	body := "hello world 🙂" + tail
	// The plane saw only the first checkpoint's confirmation: it seals from 6.
	require.NoError(t, b.store.Close(ctx, producer.CloseInput{StreamID: "m1", From: 6, Seq: producer.Len16(body), Body: body, Status: producer.StatusComplete}))
	r := b.durable(t, "m1")
	require.Equal(t, body, r.text)
	require.Equal(t, producer.Len16(body), r.seq)
	require.Equal(t, "complete", r.status)
	require.Zero(t, r.chunks, "compaction deletes the chunk rows")
	require.Equal(t, int64(len("world 🙂"+tail)), b.fdb.batchText.Load(),
		"the seal sent the tail from the plane's confirmed length, then from the row's: never the whole body")
}

// A plane that trims its buffer (BodyFrom > 0) seals with the text it kept: the rows below it
// are already in the database.
func TestSealOfATrimmedBuffer(t *testing.T) {
	t.Parallel()
	b := setup(t, withHost("h1"))
	ctx := t.Context()
	b.insert(t, "m1")
	require.NoError(t, b.store.Open(ctx, producer.OpenInput{StreamID: "m1"}))
	_, err := b.store.Append(ctx, producer.AppendInput{StreamID: "m1", From: 0, Seq: 6, Text: "hello "})
	require.NoError(t, err)
	require.NoError(t, b.store.Close(ctx, producer.CloseInput{StreamID: "m1", From: 6, Seq: 11, Body: "world", BodyFrom: 6, Status: producer.StatusComplete}))
	r := b.durable(t, "m1")
	require.Equal(t, "hello world", r.text)
	require.Equal(t, "complete", r.status)

	// A seal whose retained text starts past what the row holds cannot be put together: it says
	// so, and the row stays as it was.
	b.insert(t, "m2")
	require.NoError(t, b.store.Open(ctx, producer.OpenInput{StreamID: "m2"}))
	err = b.store.Close(ctx, producer.CloseInput{StreamID: "m2", From: 6, Seq: 11, Body: "world", BodyFrom: 6, Status: producer.StatusComplete})
	require.ErrorContains(t, err, "the row holds 0 units, outside the retained text [6, 11)")
	require.Equal(t, "streaming", b.durable(t, "m2").status)
}
