package producer

import (
	"bytes"
	"strings"
	"testing"
)

// The arena's encodings are AppendSSE's bytes for every kind of frame, from small to over the
// slab, escape-heavy ones at their six-byte bound included, and no frame's bytes change when
// later frames are encoded or when a reader appends to the bytes it holds.
func TestFrameArenaEncodesEachFrameApart(t *testing.T) {
	var a frameArena
	texts := []string{
		"tok ",
		"h\u00e9llo \U0001F600",
		strings.Repeat("\x01", 170), // 6 bytes each: just under the large-frame cut
		strings.Repeat("\x1f\"\\", 300),
		strings.Repeat("x", 5000), // its own buffer
		"\u2028\xff",
		"",
	}
	type held struct {
		q    *queued
		want []byte
	}
	var all []held
	seq := Seq(0)
	for round := range 40 {
		for _, text := range texts {
			f := Frame{Type: FrameChunk, From: seq, Seq: seq + Len16(text), Text: text}
			if round%3 == 1 {
				f = Frame{Type: FrameDurable, Seq: seq}
			}
			seq = f.Seq
			q := a.encode(f)
			if q.f != f {
				t.Fatalf("frame %+v, want %+v", q.f, f)
			}
			want := AppendSSE(nil, f)
			if !bytes.Equal(q.sse, want) {
				t.Fatalf("encoding %q, want %q", q.sse, want)
			}
			if len(q.sse) > sseBound(f) {
				t.Fatalf("encoding of %d bytes over its bound %d", len(q.sse), sseBound(f))
			}
			// A reader appending to the bytes it holds must not write into the next frame's.
			if n := len(all); n > 0 {
				_ = append(all[n-1].q.sse, "garbage"...)
			}
			all = append(all, held{q, want})
		}
	}
	for i, h := range all {
		if !bytes.Equal(h.q.sse, h.want) {
			t.Fatalf("frame %d changed after later encodes: %q, want %q", i, h.q.sse, h.want)
		}
	}
}
