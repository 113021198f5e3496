package producer_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rindle-sh/rindle-go/producer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// len16Reference counts UTF-16 units the slow, obviously right way.
func len16Reference(s string) producer.Seq {
	return producer.Seq(len(utf16.Encode([]rune(s))))
}

func TestLen16CountsUTF16Units(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "abc", "é", "日本", "😀", "👋🏽", "e\u0301", "a😀b", strings.Repeat("x😀", 5000)} {
		require.Equal(t, len16Reference(s), producer.Len16(s), "%q", s)
	}
}

func TestSlice16NeverSplitsASurrogatePair(t *testing.T) {
	t.Parallel()
	s := "a😀b"
	require.Equal(t, "a", producer.Slice16(s, 0, 1))
	require.Equal(t, "a", producer.Slice16(s, 0, 2), "an end inside the pair moves down")
	require.Equal(t, "a😀", producer.Slice16(s, 0, 3))
	require.Equal(t, "😀b", producer.Slice16(s, 2, 4), "a start inside the pair moves down")
	require.Equal(t, "", producer.Slice16(s, 3, 1))
	require.Equal(t, s, producer.Slice16(s, -3, 99))
}

func TestFrameJSONUsesTheSeedsFieldNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		frame producer.Frame
		want  string
	}{
		{producer.Frame{Type: producer.FrameOpen, StreamID: "m1", From: 0, Seq: 5, DurableSeq: 3}, `{"type":"open","streamId":"m1","from":0,"seq":5,"durableSeq":3,"ended":false}`},
		{producer.Frame{Type: producer.FrameChunk, From: 3, Seq: 5, Text: "a\n\"😀\u2028"}, `{"type":"chunk","from":3,"seq":5,"text":"a\n\"😀\u2028"}`},
		{producer.Frame{Type: producer.FrameDurable, Seq: 4}, `{"type":"durable","seq":4}`},
		{producer.Frame{Type: producer.FrameEnd, Seq: 4, Status: producer.StatusComplete}, `{"type":"end","seq":4,"status":"complete"}`},
		{producer.Frame{Type: producer.FrameEnd, Seq: 4, Status: producer.StatusError, Error: "boom"}, `{"type":"end","seq":4,"status":"error","error":"boom"}`},
		{producer.Frame{Type: producer.FrameStale, FloorSeq: 10, DurableSeq: 12}, `{"type":"stale","floorSeq":10,"durableSeq":12}`},
		{producer.Frame{Type: producer.FrameAbsent}, `{"type":"absent"}`},
	} {
		got, err := json.Marshal(tc.frame)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(got))
		require.NotContains(t, string(got), "\n", "a frame never carries a raw newline")
		var back producer.Frame
		require.NoError(t, json.Unmarshal(got, &back))
		require.Equal(t, tc.frame, back)
	}
}

func TestFrameJSONRefusesMalformedFrames(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"type":"bogus"}`,
		`{"type":"chunk","from":1,"seq":2}`,
		`{"type":"open","streamId":"x","from":0,"seq":1,"durableSeq":0}`,
		`{"type":"end","seq":1}`,
		`{"type":"chunk","from":1.5,"seq":2,"text":"a"}`,
		`[]`,
	} {
		var f producer.Frame
		require.Error(t, json.Unmarshal([]byte(in), &f), in)
	}
}

func TestResumePoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		frame producer.Frame
		at    producer.Seq
		ok    bool
	}{
		{producer.Frame{Type: producer.FrameOpen, From: 7, Seq: 9}, 7, true},
		{producer.Frame{Type: producer.FrameChunk, From: 7, Seq: 9}, 9, true},
		{producer.Frame{Type: producer.FrameDurable, Seq: 8}, 8, true},
		{producer.Frame{Type: producer.FrameEnd, Seq: 8}, 8, true},
		{producer.Frame{Type: producer.FrameStale, FloorSeq: 3}, 0, false},
		{producer.Frame{Type: producer.FrameAbsent}, 0, false},
	} {
		at, ok := tc.frame.ResumePoint()
		require.Equal(t, tc.ok, ok, tc.frame.Type)
		require.Equal(t, tc.at, at, tc.frame.Type)
	}
}

func TestSplice(t *testing.T) {
	t.Parallel()
	got, err := producer.Splice("hello", producer.Frame{Type: producer.FrameChunk, From: 3, Seq: 7, Text: "p me"})
	require.NoError(t, err)
	require.Equal(t, "help me", got, "an overlap re-covers, then appends")
	_, err = producer.Splice("hi", producer.Frame{Type: producer.FrameChunk, From: 3, Seq: 4, Text: "x"})
	require.ErrorContains(t, err, "gap")
	require.Equal(t, "longer", producer.SpliceText("long", "longer"))
	require.Equal(t, "longer", producer.SpliceText("longer", "long"))
}

// A Text's views answer as Slice16 and Len16 do on the same string, at every offset, while the
// Text keeps growing past them.
func TestTextViewsMatchTheStringFunctions(t *testing.T) {
	t.Parallel()
	x := producer.NewText("")
	var s string
	var views []producer.TextView
	var texts []string
	pieces := []string{"héllo ", "😀", strings.Repeat("x日😀", 3000), "e\u0301", "👋🏽 end"}
	for _, p := range pieces {
		x.Append(p)
		s += p
		views = append(views, x.View())
		texts = append(texts, s)
	}
	for i, v := range views {
		want := texts[i]
		require.Equal(t, want, v.String())
		require.Equal(t, producer.Len16(want), v.Len())
		for _, at := range []producer.Seq{0, 1, 6, 7, 8, 5000, 9000, v.Len() - 1, v.Len(), v.Len() + 3} {
			require.Equal(t, producer.Len16(producer.Slice16(want, 0, at)), v.Floor(at), "floor %d", at)
			for _, to := range []producer.Seq{at, at + 1, at + 4097, v.Len()} {
				require.Equal(t, producer.Slice16(want, at, to), v.Slice(at, to), "slice %d→%d", at, to)
			}
		}
	}
}
