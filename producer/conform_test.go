package producer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

func open(from, seq producer.Seq) producer.Frame {
	return producer.Frame{Type: producer.FrameOpen, StreamID: "s", From: from, Seq: seq, DurableSeq: 0}
}

func chunk(from, seq producer.Seq, text string) producer.Frame {
	return producer.Frame{Type: producer.FrameChunk, From: from, Seq: seq, Text: text}
}

func durable(seq producer.Seq) producer.Frame {
	return producer.Frame{Type: producer.FrameDurable, Seq: seq}
}

func end(seq producer.Seq) producer.Frame {
	return producer.Frame{Type: producer.FrameEnd, Seq: seq, Status: producer.StatusComplete}
}

func stale(floor, dur producer.Seq) producer.Frame {
	return producer.Frame{Type: producer.FrameStale, FloorSeq: floor, DurableSeq: dur}
}

// TestConformPass is the seed's conform table, rule by rule, plus the DESIGN's overlap trim.
func TestConformPass(t *testing.T) {
	t.Parallel()
	synth := func(at producer.Seq) producer.Frame {
		return producer.Frame{Type: producer.FrameOpen, StreamID: "s", From: at, Seq: at, DurableSeq: at}
	}
	for _, tc := range []struct {
		name      string
		from      producer.Seq
		in        []producer.Frame
		want      []producer.Frame
		violation bool
	}{
		{"HappyPath", 0, []producer.Frame{open(0, 0), chunk(0, 2, "ab"), durable(2), end(2)},
			[]producer.Frame{open(0, 0), chunk(0, 2, "ab"), durable(2), end(2)}, false},
		{"SecondOpenAbsorbed", 0, []producer.Frame{open(0, 0), open(0, 0), chunk(0, 1, "a"), end(1)},
			[]producer.Frame{open(0, 0), chunk(0, 1, "a"), end(1)}, false},
		{"OpenForAnotherStream", 0, []producer.Frame{{Type: producer.FrameOpen, StreamID: "other"}},
			[]producer.Frame{stale(0, 0)}, true},
		{"OpenWithSeqBelowFrom", 0, []producer.Frame{open(0, -1)},
			[]producer.Frame{stale(0, 0)}, true},
		{"OpenPastTheRequestedOffset", 3, []producer.Frame{open(5, 9)},
			[]producer.Frame{stale(3, 0)}, true},
		// Beyond the seed, which passed this open through: an adapter that replays from an
		// earlier offset (JetStream from the stream's start) opens the reader where it asked,
		// and the replay below is trimmed rather than re-sent (docs/DESIGN.md §9's whole-buffer replay).
		{"OpenBelowTheRequestedOffset", 3, []producer.Frame{open(1, 4), chunk(1, 4, "abc"), end(4)},
			[]producer.Frame{open(3, 4), chunk(3, 4, "c"), end(4)}, false},
		{"ReplayFromTheStartOpensAtTheJoin", 5, []producer.Frame{open(0, 0), chunk(0, 3, "abc"), durable(3), chunk(3, 6, "def"), durable(6), end(6)},
			[]producer.Frame{{Type: producer.FrameOpen, StreamID: "s", From: 5, Seq: 5}, chunk(5, 6, "f"), durable(6), end(6)}, false},
		{"MissingOpenSynthesized", 2, []producer.Frame{chunk(2, 3, "c"), end(3)},
			[]producer.Frame{synth(2), chunk(2, 3, "c"), end(3)}, false},
		{"ChunkWithWrongSpan", 0, []producer.Frame{chunk(0, 3, "ab")},
			[]producer.Frame{stale(0, 0)}, true},
		{"ChunkSpanCountsUTF16", 0, []producer.Frame{chunk(0, 2, "😀"), end(2)},
			[]producer.Frame{synth(0), chunk(0, 2, "😀"), end(2)}, false},
		{"ChunkNegativeFrom", 0, []producer.Frame{chunk(-1, 0, "a")},
			[]producer.Frame{stale(0, 0)}, true},
		{"ChunkLeavesAGap", 0, []producer.Frame{chunk(0, 1, "a"), chunk(2, 3, "c")},
			[]producer.Frame{synth(0), chunk(0, 1, "a"), stale(1, 0)}, true},
		{"ReplayedChunkAbsorbed", 0, []producer.Frame{chunk(0, 2, "ab"), chunk(0, 2, "ab"), chunk(1, 2, "b"), end(2)},
			[]producer.Frame{synth(0), chunk(0, 2, "ab"), end(2)}, false},
		{"OverlapTrimmedToTheUnseenSuffix", 0, []producer.Frame{chunk(0, 2, "ab"), chunk(1, 4, "bcd"), end(4)},
			[]producer.Frame{synth(0), chunk(0, 2, "ab"), chunk(2, 4, "cd"), end(4)}, false},
		{"OverlapSplittingASurrogatePair", 0, []producer.Frame{chunk(0, 1, "a"), chunk(0, 3, "😀b")},
			[]producer.Frame{synth(0), chunk(0, 1, "a"), stale(1, 0)}, true},
		{"DurableRewindDropped", 0, []producer.Frame{chunk(0, 2, "ab"), durable(2), durable(1), end(2)},
			[]producer.Frame{synth(0), chunk(0, 2, "ab"), durable(2), end(2)}, false},
		{"DurablePastDeliveredDropped", 0, []producer.Frame{chunk(0, 2, "ab"), durable(5), end(2)},
			[]producer.Frame{synth(0), chunk(0, 2, "ab"), end(2)}, false},
		{"EndOutrunsDelivered", 0, []producer.Frame{chunk(0, 2, "ab"), end(5)},
			[]producer.Frame{synth(0), chunk(0, 2, "ab"), stale(2, 0)}, true},
		{"EndMalformed", 0, []producer.Frame{end(-1)},
			[]producer.Frame{stale(0, 0)}, true},
		{"BareEndGetsAnOpen", 4, []producer.Frame{end(4)},
			[]producer.Frame{synth(4), end(4)}, false},
		{"StaleAndAbsentPassBare", 0, []producer.Frame{{Type: producer.FrameAbsent}},
			[]producer.Frame{{Type: producer.FrameAbsent}}, false},
		{"NothingAfterATerminal", 0, []producer.Frame{chunk(0, 1, "a"), end(1), chunk(1, 2, "b")},
			[]producer.Frame{synth(0), chunk(0, 1, "a"), end(1)}, false},
		{"UnknownType", 0, []producer.Frame{{Type: "bogus"}},
			[]producer.Frame{stale(0, 0)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reasons []string
			c := producer.NewConform("s", tc.from, func(r string) { reasons = append(reasons, r) })
			var got []producer.Frame
			for _, f := range tc.in {
				got = append(got, c.Feed(f)...)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.violation, len(reasons) > 0, "violations: %v", reasons)
		})
	}
}

func TestConformEndAndFail(t *testing.T) {
	t.Parallel()
	var reasons []string
	c := producer.NewConform("s", 0, func(r string) { reasons = append(reasons, r) })
	c.Feed(chunk(0, 2, "ab"))
	c.Feed(durable(1))
	require.Equal(t, []producer.Frame{stale(2, 1)}, c.End(), "a source that ends without a terminal is truncated")
	require.Len(t, reasons, 1)
	require.Nil(t, c.End())
	require.Nil(t, c.Fail())

	c = producer.NewConform("s", 3, nil)
	require.Equal(t, []producer.Frame{stale(3, 0)}, c.Fail())
	require.Nil(t, c.Feed(chunk(3, 4, "x")))
}
