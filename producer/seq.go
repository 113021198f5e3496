package producer

import (
	"unicode/utf8"
	"unsafe"
)

// Seq is an offset into a response, counted in UTF-16 code units: what JavaScript's
// string.length counts, so that browser clients and this server agree on every offset. A rune
// outside the Basic Multilingual Plane (most emoji) counts 2; everything else counts 1.
type Seq int64

// Len16 returns the length of s in UTF-16 code units. An invalid UTF-8 byte counts as one unit,
// the U+FFFD a decoder would put in its place.
func Len16(s string) Seq {
	var n Seq
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// runeLen16 is the UTF-16 length of the rune that s starts with, and its UTF-8 size.
func runeLen16(s []byte) (units Seq, size int) {
	if s[0] < utf8.RuneSelf {
		return 1, 1
	}
	r, size := utf8.DecodeRune(s)
	if r > 0xFFFF {
		return 2, size
	}
	return 1, size
}

// Slice16 returns the part of s between the UTF-16 offsets from and to, each moved down to the
// nearest rune boundary so that no result starts or ends inside a surrogate pair. Offsets are
// clamped to [0, Len16(s)].
func Slice16(s string, from, to Seq) string {
	var t text16
	t.b = unsafe.Slice(unsafe.StringData(s), len(s)) // read only: locate never writes
	t.n = Len16(s)
	_, a := t.locate(from)
	_, b := t.locate(to)
	if b < a {
		b = a
	}
	return s[a:b]
}

// markEvery is how many UTF-8 bytes separate two entries of a text16's offset index. Locating an
// offset scans at most this many bytes past the nearest mark.
const markEvery = 4096

// mark pairs a UTF-16 offset with the byte offset of the same rune boundary in a text16's buffer.
type mark struct {
	seq Seq
	off int
}

// text16 is the retained text of a stream: UTF-8 bytes addressed by UTF-16 offsets. A sparse index
// of rune boundaries keeps locating an offset O(log n + markEvery) however long the text grows,
// which matters because every checkpoint and every join slices by offset.
type text16 struct {
	b     []byte
	from  Seq // offset of b[0]
	n     Seq // offset of the end of b
	marks []mark
}

// append adds s, which must be valid UTF-8, and returns its UTF-16 length.
func (t *text16) append(s string) Seq {
	start := len(t.b)
	if need := start + len(s); need > cap(t.b) {
		// Double, as append does only for small slices: past 256 bytes it grows by about a
		// quarter, and a long answer arriving in pieces would reallocate (and leave behind)
		// about five times its size on the way.
		b := make([]byte, start, max(need, 2*cap(t.b)))
		copy(b, t.b)
		t.b = b
	}
	t.b = append(t.b, s...)
	return t.index(start)
}

// index extends the offset index and the length over b[start:], just added, and returns its
// UTF-16 length.
func (t *text16) index(start int) Seq {
	last := 0
	if len(t.marks) > 0 {
		last = t.marks[len(t.marks)-1].off
	}
	n := t.n
	for i := start; i < len(t.b); {
		if i-last >= markEvery {
			t.marks = append(t.marks, mark{seq: n, off: i})
			last = i
		}
		u, size := runeLen16(t.b[i:])
		n += u
		i += size
	}
	added := n - t.n
	t.n = n
	return added
}

// locate returns the largest rune boundary at or below at (clamped to [from, n]) and its byte
// offset in b.
func (t *text16) locate(at Seq) (Seq, int) {
	if at <= t.from {
		return t.from, 0
	}
	if at >= t.n {
		return t.n, len(t.b)
	}
	seq, off := t.from, 0
	lo, hi := 0, len(t.marks)
	for lo < hi {
		mid := (lo + hi) / 2
		if t.marks[mid].seq <= at {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo > 0 {
		seq, off = t.marks[lo-1].seq, t.marks[lo-1].off
	}
	for off < len(t.b) {
		u, size := runeLen16(t.b[off:])
		if seq+u > at {
			break
		}
		seq += u
		off += size
	}
	return seq, off
}

// string is the retained text without a copy. Its bytes are never written again: append only
// writes past the end (a reallocation copies them) and trimTo moves the kept text to a new array.
func (t *text16) string() string {
	if len(t.b) == 0 {
		return ""
	}
	return unsafe.String(&t.b[0], len(t.b))
}

// slice copies the text between two offsets, each moved down to a rune boundary.
func (t *text16) slice(from, to Seq) string {
	_, a := t.locate(from)
	_, b := t.locate(to)
	return string(t.b[a:b])
}

// trimTo drops the text below floor (moved down to a rune boundary, so a surrogate pair is kept
// whole) and releases its memory.
func (t *text16) trimTo(floor Seq) {
	seq, off := t.locate(floor)
	if off == 0 {
		return
	}
	t.b = append([]byte(nil), t.b[off:]...)
	t.from = seq
	kept := t.marks[:0]
	for _, m := range t.marks {
		if m.off > off {
			kept = append(kept, mark{seq: m.seq, off: m.off - off})
		}
	}
	t.marks = kept
}
