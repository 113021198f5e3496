package producer

import "unsafe"

// Text is append-only UTF-8 text addressed by UTF-16 offsets, with the sparse offset index the
// live plane keeps for its own buffer: appending costs what is appended, however long the text
// grows. The durable view keeps each message's text in one, so applying a checkpoint appends
// instead of copying the whole text, and a join finds its offset without scanning from the
// start. A Text is not safe for concurrent use; its Views are.
type Text struct{ t text16 }

// NewText returns a Text holding s, which must be valid UTF-8.
func NewText(s string) *Text {
	x := &Text{}
	x.t.append(s)
	return x
}

// TextOf returns a Text that starts with s's bytes, without copying them: the Text holds s's
// memory until an Append, which copies it to an array of its own (s's bytes are never written).
// A view of a sealed message holds its text once this way.
func TextOf(s string) *Text {
	x := &Text{}
	if s == "" {
		return x
	}
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	x.t.b = b[:len(b):len(b)] // full: the first Append reallocates
	x.t.index(0)
	return x
}

// Append adds s, which must be valid UTF-8, and returns its UTF-16 length.
func (x *Text) Append(s string) Seq { return x.t.append(s) }

// Len is the text's length in UTF-16 code units.
func (x *Text) Len() Seq { return x.t.n }

// View is an immutable snapshot of the text as it is now. It shares memory with the Text:
// Append only ever writes past a View's end.
func (x *Text) View() TextView {
	b, marks := x.t.b, x.t.marks
	return TextView{t: text16{b: b[:len(b):len(b)], n: x.t.n, marks: marks[:len(marks):len(marks)]}}
}

// TextView is an immutable snapshot of a Text. Its zero value is the empty text.
type TextView struct{ t text16 }

// Len is the length in UTF-16 code units, in O(1).
func (v TextView) Len() Seq { return v.t.n }

// Bytes is the text's size in memory: its UTF-8 bytes from the view's start.
func (v TextView) Bytes() int { return len(v.t.b) }

// String is the text, without a copy: the bytes it shares are never written again.
func (v TextView) String() string {
	if len(v.t.b) == 0 {
		return ""
	}
	return unsafe.String(&v.t.b[0], len(v.t.b))
}

// Slice is the text between two offsets, each moved down to a character boundary (as Slice16
// does), found through the index: O(log n) plus at most a few KiB scanned, and no copy.
func (v TextView) Slice(from, to Seq) string {
	_, a := v.t.locate(from)
	_, b := v.t.locate(to)
	if b < a {
		b = a
	}
	return v.String()[a:b]
}

// Floor moves at down to a character boundary, clamped to [0, Len].
func (v TextView) Floor(at Seq) Seq {
	seq, _ := v.t.locate(at)
	return seq
}
