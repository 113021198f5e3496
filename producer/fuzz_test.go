package producer_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// framesFromBytes decodes fuzz input into a relayed frame sequence: each op is 4 bytes (type,
// from, span, text selector), so the fuzzer explores offsets, gaps, overlaps and terminals.
func framesFromBytes(data []byte) []producer.Frame {
	const alphabet = "ab😀é"
	var out []producer.Frame
	for i := 0; i+4 <= len(data) && len(out) < 64; i += 4 {
		kind, a, b, c := data[i]%8, producer.Seq(data[i+1]%40)-2, producer.Seq(data[i+2]%12), int(data[i+3])
		switch kind {
		case 0:
			out = append(out, producer.Frame{Type: producer.FrameOpen, StreamID: "s", From: a, Seq: a + b, DurableSeq: b})
		case 1, 2, 3:
			var text strings.Builder
			for j := 0; producer.Len16(text.String()) < b; j++ {
				text.WriteString(string([]rune(alphabet)[(c+j)%4]))
			}
			seq := a + producer.Len16(text.String())
			if c%7 == 0 {
				seq++ // a lying span
			}
			out = append(out, producer.Frame{Type: producer.FrameChunk, From: a, Seq: seq, Text: text.String()})
		case 4:
			out = append(out, producer.Frame{Type: producer.FrameDurable, Seq: a})
		case 5:
			out = append(out, producer.Frame{Type: producer.FrameEnd, Seq: a, Status: producer.StatusComplete})
		case 6:
			out = append(out, producer.Frame{Type: producer.FrameStale, FloorSeq: a})
		default:
			out = append(out, producer.Frame{Type: producer.FrameType("x" + strconv.Itoa(c))})
		}
	}
	return out
}

// FuzzConform feeds arbitrary relayed sequences through the conform pass and checks that what
// comes out is always a legal subscription: open first (or a bare stale/absent), contiguous
// chunks that span their offsets and never split a surrogate pair, durable within the delivered
// prefix and monotone, an end that claims no more than was delivered, and nothing after the one
// terminal.
func FuzzConform(f *testing.F) {
	f.Add(uint8(0), []byte{0, 2, 0, 0, 1, 2, 3, 1, 4, 5, 0, 0, 5, 5, 0, 0})
	f.Add(uint8(3), []byte{1, 5, 4, 2, 1, 3, 6, 1, 2, 9, 1, 7})
	f.Add(uint8(1), []byte{0, 9, 0, 0, 5, 2, 0, 0})
	f.Add(uint8(0), []byte{1, 2, 2, 2, 1, 3, 4, 3})
	f.Fuzz(func(t *testing.T, from uint8, data []byte) {
		join := producer.Seq(from % 20)
		c := producer.NewConform("s", join, nil)
		var out []producer.Frame
		for _, fr := range framesFromBytes(data) {
			out = append(out, c.Feed(fr)...)
		}
		out = append(out, c.End()...)
		require.NotEmpty(t, out)
		last := out[len(out)-1]
		require.True(t, last.Terminal())
		if out[0].Type != producer.FrameOpen {
			require.Len(t, out, 1)
			return
		}
		require.LessOrEqual(t, out[0].From, join)
		pos, dur := out[0].From, producer.Seq(0)
		text := ""
		for i, fr := range out[1:] {
			if i < len(out)-2 {
				require.False(t, fr.Terminal())
			}
			switch fr.Type {
			case producer.FrameChunk:
				require.Equal(t, pos, fr.From)
				require.Equal(t, fr.Seq-fr.From, producer.Len16(fr.Text))
				require.True(t, utf8.ValidString(fr.Text))
				text += fr.Text
				pos = fr.Seq
			case producer.FrameDurable:
				require.GreaterOrEqual(t, fr.Seq, dur)
				require.LessOrEqual(t, fr.Seq, pos)
				dur = fr.Seq
			case producer.FrameEnd:
				require.LessOrEqual(t, fr.Seq, pos)
			case producer.FrameOpen:
				t.Fatal("second open")
			}
		}
		require.Equal(t, pos, c.Pos())
	})
}

// FuzzUTF16Replay pushes arbitrary text in arbitrary pieces and joins readers at arbitrary
// offsets: every reader's held prefix plus its frames is the produced text (S), and every chunk
// edge is a character boundary of the produced text.
func FuzzUTF16Replay(f *testing.F) {
	f.Add("héllo wörld 👋🏽 naïve e\u0301 日本語 🚀", []byte{3, 1, 7, 2, 9}, []byte{0, 1, 2, 3, 9, 40})
	f.Add("😀😀😀", []byte{1, 1, 1}, []byte{1, 3, 5})
	f.Add("", []byte{}, []byte{0})
	f.Add(strings.Repeat("x😀", 600), []byte{200, 17, 255}, []byte{1, 255, 77})
	f.Fuzz(func(t *testing.T, text string, cuts, joins []byte) {
		// Pushed text is storable text: valid UTF-8 without U+0000 (a push refuses the rest).
		text = strings.ReplaceAll(strings.ToValidUTF8(text, "\uFFFD"), "\x00", "\uFFFD")
		// Pruned, as pgproto3 prunes: past 8 KiB (already across the 4 KiB offset index) more
		// text adds cost, not coverage.
		if len(text) > 8<<10 {
			text = strings.ToValidUTF8(text[:8<<10], "")
		}
		// Readers drain only at the end: a queue that holds every push keeps them on the live
		// leg, so S is what is checked (an overflowing reader's stale is checked as a prefix).
		w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 5; c.MaxQueuedFrames = 1 << 16 })
		s := w.open(t, "m")
		var pieces []string
		rest := text
		for i := 0; rest != ""; i++ {
			n := 1
			if len(cuts) > 0 {
				n = int(cuts[i%len(cuts)])%16 + 1
			}
			// Cut on a rune boundary: a pushed delta is always valid UTF-8.
			k := 0
			for r := 0; r < n && k < len(rest); r++ {
				_, size := utf8.DecodeRuneInString(rest[k:])
				k += size
			}
			pieces = append(pieces, rest[:k])
			rest = rest[k:]
		}
		type reader struct {
			held string
			sub  *producer.Subscription
		}
		var readers []reader
		total := producer.Len16(text)
		produced := ""
		for i, p := range pieces {
			require.NoError(t, s.Push(p))
			produced += p
			if len(joins) > 0 && i%3 == 0 && len(readers) < 16 {
				at := producer.Seq(joins[(i/3)%len(joins)]) * total / 255
				readers = append(readers, reader{held: producer.Slice16(text, 0, at), sub: w.subscribe(t, "m", at)})
			}
		}
		require.NoError(t, s.Close(t.Context()))
		readers = append(readers, reader{held: "", sub: w.subscribe(t, "m", 0)})
		// The character boundaries of the text, in UTF-16 offsets, computed once: checking each
		// frame against them stays linear however many frames arrive.
		boundary := make([]bool, total+1)
		boundary[0] = true
		at16 := producer.Seq(0)
		for _, r := range text {
			at16 += producer.Len16(string(r))
			boundary[at16] = true
		}
		for _, r := range readers {
			frames := streamtest.Collect(t, r.sub)
			var got strings.Builder
			pos := producer.Seq(-1)
			for _, fr := range frames {
				switch fr.Type {
				case producer.FrameOpen:
					require.True(t, boundary[fr.From], "open at %d is inside a surrogate pair", fr.From)
					require.LessOrEqual(t, fr.From, producer.Len16(r.held))
					got.WriteString(producer.Slice16(r.held, 0, fr.From))
					pos = fr.From
				case producer.FrameChunk:
					require.Equal(t, pos, fr.From, "chunks continue the delivered prefix")
					require.True(t, boundary[fr.Seq], "chunk ends inside a surrogate pair at %d", fr.Seq)
					require.Equal(t, fr.Seq-fr.From, producer.Len16(fr.Text))
					got.WriteString(fr.Text)
					pos = fr.Seq
				}
			}
			if frames[len(frames)-1].Type == producer.FrameStale {
				require.True(t, strings.HasPrefix(text, got.String()), "a dropped reader holds a prefix")
				continue
			}
			require.Equal(t, text, got.String())
		}
		stored, _ := w.store.get("m")
		require.Equal(t, text, stored)
	})
}

// FuzzFrameJSON round-trips arbitrary frames through JSON and checks the SSE encoding: one data
// line, no raw newline, the id line exactly when the frame has a resume point.
func FuzzFrameJSON(f *testing.F) {
	f.Add(uint8(1), "m1", int64(0), int64(5), "hello\n\"😀\u2028\x01", "")
	f.Add(uint8(3), "", int64(4), int64(4), "", "boom")
	f.Add(uint8(0), "chat:1", int64(3), int64(9), "", "")
	f.Fuzz(func(t *testing.T, kind uint8, id string, a, b int64, text, errMsg string) {
		types := []producer.FrameType{producer.FrameOpen, producer.FrameChunk, producer.FrameDurable, producer.FrameEnd, producer.FrameStale, producer.FrameAbsent}
		fr := producer.Frame{Type: types[int(kind)%len(types)]}
		id = strings.ToValidUTF8(id, "\uFFFD")
		text = strings.ToValidUTF8(text, "\uFFFD")
		errMsg = strings.ToValidUTF8(errMsg, "\uFFFD")
		switch fr.Type {
		case producer.FrameOpen:
			fr.StreamID, fr.From, fr.Seq, fr.DurableSeq, fr.Ended = id, producer.Seq(a), producer.Seq(b), producer.Seq(a), b%2 == 0
		case producer.FrameChunk:
			fr.From, fr.Text = producer.Seq(a), text
			fr.Seq = fr.From + producer.Len16(text)
		case producer.FrameDurable:
			fr.Seq = producer.Seq(a)
		case producer.FrameEnd:
			fr.Seq, fr.Status, fr.Error = producer.Seq(a), producer.StatusError, errMsg
		case producer.FrameStale:
			fr.FloorSeq, fr.DurableSeq = producer.Seq(a), producer.Seq(b)
		}
		data, err := json.Marshal(fr)
		require.NoError(t, err)
		require.True(t, json.Valid(data))
		require.False(t, bytes.ContainsAny(data, "\r\n"))
		var back producer.Frame
		require.NoError(t, json.Unmarshal(data, &back))
		require.Equal(t, fr, back)
		if fr.Type == producer.FrameEnd && fr.Error == "" {
			require.NotContains(t, string(data), `"error":`)
		}
		ev := string(producer.AppendSSE(nil, fr))
		lines := strings.Split(strings.TrimSuffix(ev, "\n\n"), "\n")
		at, ok := fr.ResumePoint()
		if ok {
			require.Len(t, lines, 2)
			require.Equal(t, "id: "+strconv.FormatInt(int64(at), 10), lines[0])
		} else {
			require.Len(t, lines, 1)
		}
		require.Equal(t, "data: "+string(fr.AppendJSON(nil)), lines[len(lines)-1])
	})
}

// FuzzParseResume: any header or query string never panics, and comes out as an error or a
// non-negative offset; the join then clamps it to [0, seq].
func FuzzParseResume(f *testing.F) {
	for _, s := range []string{"", "0", "12", "-1", "1.5", "12abc", "99999999999999999999", " 3", "٣"} {
		f.Add(s, "")
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, lastEventID, from string) {
		at, err := producer.ParseResume(lastEventID, from)
		if err != nil {
			return
		}
		require.GreaterOrEqual(t, at, producer.Seq(0))
		w := newWorld(t, nil)
		s := w.open(t, "m")
		require.NoError(t, s.Push("a😀b"))
		sub := w.subscribe(t, "m", at)
		open, err := sub.Next(t.Context())
		require.NoError(t, err)
		require.GreaterOrEqual(t, open.From, producer.Seq(0))
		require.LessOrEqual(t, open.From, producer.Seq(4))
		sub.Close()
	})
}

func TestLocateAcrossTheOffsetIndex(t *testing.T) {
	t.Parallel()
	// Long enough to cross many index marks, with pairs straddling them.
	var b strings.Builder
	for i := 0; b.Len() < 5*4096; i++ {
		b.WriteString([]string{"a", "é", "日", "😀"}[i%4])
	}
	text := b.String()
	runes := []rune(text)
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	for i := 0; i < len(text); {
		n := min(1000, len(text)-i)
		for i+n < len(text) && !utf8.RuneStart(text[i+n]) {
			n-- // cut where the next rune starts
		}
		require.NoError(t, s.Push(text[i:i+n]))
		i += n
	}
	for _, at := range []producer.Seq{0, 1, 4095, 4096, 4097, 8191, 8193, producer.Len16(text) - 1} {
		sub := w.subscribe(t, "m", at)
		_, err := sub.Next(t.Context())
		require.NoError(t, err)
		f, err := sub.Next(t.Context())
		require.NoError(t, err)
		// Reference: walk runes.
		var seq producer.Seq
		k := 0
		for k < len(runes) {
			u := producer.Seq(1)
			if runes[k] > 0xFFFF {
				u = 2
			}
			if seq+u > at {
				break
			}
			seq += u
			k++
		}
		require.Equal(t, seq, f.From, "at %d", at)
		require.Equal(t, string(runes[k:]), f.Text, "at %d", at)
		sub.Close()
	}
}
