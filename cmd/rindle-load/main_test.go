package main

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// The ratios are taken within each repetition, then spread: run 1's 10 ÷ 20 and run 2's 9 ÷ 10
// are 0.5 and 0.9, which dividing the medians (or mins) of the two columns would not give.
func TestPrintRatiosPairsEachRunWithItsFloor(t *testing.T) {
	figures := map[string][]float64{
		"cpu":                 {10, 9, 12},
		"[floor] cpu":         {20, 10, 16},
		"[direct floor] cpu":  {10, 9, 12},
		"only ours":           {1, 2, 3},
		"[floor] only theirs": {1, 2, 3},
	}
	var out bytes.Buffer
	printRatios(&out, figures, []string{"cpu", "only ours", "[floor] cpu", "[direct floor] cpu", "[floor] only theirs"})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	require.Regexp(t, `^cpu ÷ \[floor\] +0\.500 +0\.750 +0\.900$`, lines[1])
	require.Regexp(t, `^cpu ÷ \[direct floor\] +1\.000 +1\.000 +1\.000$`, lines[2])
}

// nextLive reads what the servers write: rindled's encoding of every frame type (through
// producer.AppendSSE), keep-alive comments, a retry, and a chunk whose text the fast path
// cannot take (escaped, or on a line longer than the reader's buffer), which it decodes fully.
func TestNextLiveReadsEveryFrameTheServersWrite(t *testing.T) {
	long := strings.Repeat("7;", 3000)
	frames := []producer.Frame{
		{Type: producer.FrameOpen, StreamID: "s"},
		{Type: producer.FrameChunk, From: 0, Seq: 2, Text: "0;"},
		{Type: producer.FrameChunk, From: 2, Seq: 6, Text: "1;2;"},
		{Type: producer.FrameChunk, From: 6, Seq: 10, Text: "a\"b\\"},
		{Type: producer.FrameChunk, From: 10, Seq: 10 + producer.Len16(long), Text: long},
		{Type: producer.FrameDurable, Seq: 8},
		{Type: producer.FrameEnd, Seq: 10 + producer.Len16(long)},
	}
	wire := []byte("retry: 2000\n\n: ping\n\n")
	for _, f := range frames {
		wire = producer.AppendSSE(wire, f)
		wire = append(wire, ": ping\n\n"...)
	}
	r := bufio.NewReaderSize(bytes.NewReader(wire), 64)
	var scratch []byte
	for _, want := range frames {
		typ, text, err := nextLive(r, &scratch)
		require.NoError(t, err)
		require.Equal(t, want.Type, typ)
		if want.Type == producer.FrameChunk {
			require.Equal(t, want.Text, string(text))
		}
	}
	_, _, err := nextLive(r, &scratch)
	require.ErrorIs(t, err, io.EOF)
}
