package httpapi

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// TestCatchUpEncodingIsSharedForTheSameText: readers joining one long answer at one offset
// share one encoding; a different text under the same stream and range (a message deleted
// and re-created under its id) is encoded afresh; short chunks are not cached at all.
func TestCatchUpEncodingIsSharedForTheSameText(t *testing.T) {
	text := strings.Repeat("long answer “quoted” 😀 ", 400)
	f := producer.Frame{Type: producer.FrameChunk, From: 0, Seq: producer.Len16(text), Text: text}
	a, b := catchUp("shared-1", f), catchUp("shared-1", f)
	require.Equal(t, producer.AppendSSE(nil, f), a.enc, "the shared bytes are the frame's own encoding")
	require.Equal(t, unsafe.SliceData(a.enc), unsafe.SliceData(b.enc), "escaped once, not once per reader")

	other := f
	other.Text = strings.Repeat("x", len(text))
	c := catchUp("shared-1", other)
	require.Equal(t, producer.AppendSSE(nil, other), c.enc, "another text under the same key is not served the old bytes")

	short := producer.Frame{Type: producer.FrameChunk, From: 0, Seq: 2, Text: "hi"}
	require.Nil(t, catchUp("shared-1", short).enc)

	for i := range catchUpEntries * 2 {
		catchUp("evict", producer.Frame{Type: producer.FrameChunk, From: producer.Seq(i), Seq: producer.Seq(i) + f.Seq, Text: text})
	}
	catchUps.mu.Lock()
	defer catchUps.mu.Unlock()
	require.LessOrEqual(t, len(catchUps.m), catchUpEntries)
	require.Len(t, catchUps.order, len(catchUps.m))
}
