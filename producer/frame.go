package producer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// FrameType names one member of the frame union (docs/DESIGN.md §4).
type FrameType string

// The frame types. A subscription ends with exactly one of FrameEnd, FrameStale or FrameAbsent.
const (
	FrameOpen    FrameType = "open"    // join accepted at From
	FrameChunk   FrameType = "chunk"   // produced text [From, Seq)
	FrameDurable FrameType = "durable" // the store holds the prefix through Seq
	FrameEnd     FrameType = "end"     // sealed; Seq is the durable length at seal time
	FrameStale   FrameType = "stale"   // fall back to the durable plane
	FrameAbsent  FrameType = "absent"  // nothing to serve here
)

// Status is the value of a message row's status column.
type Status string

// The statuses. StatusPending is the app's own pre-stream status; StatusStreaming marks a live
// producer; the other four are terminal.
const (
	StatusPending     Status = "pending"
	StatusStreaming   Status = "streaming"
	StatusComplete    Status = "complete"
	StatusCancelled   Status = "cancelled"
	StatusError       Status = "error"
	StatusInterrupted Status = "interrupted"
)

// Terminal reports whether s is one of the four sealed statuses.
func (s Status) Terminal() bool {
	switch s {
	case StatusComplete, StatusCancelled, StatusError, StatusInterrupted:
		return true
	}
	return false
}

// Frame is one message of a subscription. Which fields are meaningful depends on Type, exactly as
// in the seed's union; JSON encoding writes only those, with the seed's field names.
type Frame struct {
	Type       FrameType
	StreamID   string // open
	From       Seq    // open, chunk
	Seq        Seq    // open, chunk, durable, end
	DurableSeq Seq    // open, stale
	Ended      bool   // open
	Text       string // chunk: len16(Text) == Seq-From
	Status     Status // end
	Error      string // end, omitted when empty
	FloorSeq   Seq    // stale
}

// Terminal reports whether f ends its subscription.
func (f Frame) Terminal() bool {
	return f.Type == FrameEnd || f.Type == FrameStale || f.Type == FrameAbsent
}

// ResumePoint is the offset a reader that has consumed f may rejoin at: the SSE event id. Open
// resumes at From; chunk, durable and end at Seq; stale and absent have none.
func (f Frame) ResumePoint() (Seq, bool) {
	switch f.Type {
	case FrameOpen:
		return f.From, true
	case FrameChunk, FrameDurable, FrameEnd:
		return f.Seq, true
	}
	return 0, false
}

// MarshalJSON encodes f as the seed's wire frame.
func (f Frame) MarshalJSON() ([]byte, error) {
	return f.AppendJSON(nil), nil
}

// AppendJSON appends the wire JSON of f to dst. It allocates only to grow dst, so encoding one
// frame for many subscribers costs no garbage per subscriber.
func (f Frame) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, string(f.Type))
	num := func(name string, v Seq) {
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		dst = strconv.AppendInt(dst, int64(v), 10)
	}
	switch f.Type {
	case FrameOpen:
		dst = append(dst, `,"streamId":`...)
		dst = appendJSONString(dst, f.StreamID)
		num("from", f.From)
		num("seq", f.Seq)
		num("durableSeq", f.DurableSeq)
		dst = append(dst, `,"ended":`...)
		dst = strconv.AppendBool(dst, f.Ended)
	case FrameChunk:
		num("from", f.From)
		num("seq", f.Seq)
		dst = append(dst, `,"text":`...)
		dst = appendJSONString(dst, f.Text)
	case FrameDurable:
		num("seq", f.Seq)
	case FrameEnd:
		num("seq", f.Seq)
		dst = append(dst, `,"status":`...)
		dst = appendJSONString(dst, string(f.Status))
		if f.Error != "" {
			dst = append(dst, `,"error":`...)
			dst = appendJSONString(dst, f.Error)
		}
	case FrameStale:
		num("floorSeq", f.FloorSeq)
		num("durableSeq", f.DurableSeq)
	}
	return append(dst, '}')
}

// wireFrame is the decoding shape: pointers tell a missing field from a zero one.
type wireFrame struct {
	Type       FrameType `json:"type"`
	StreamID   *string   `json:"streamId"`
	From       *Seq      `json:"from"`
	Seq        *Seq      `json:"seq"`
	DurableSeq *Seq      `json:"durableSeq"`
	Ended      *bool     `json:"ended"`
	Text       *string   `json:"text"`
	Status     *Status   `json:"status"`
	Error      *string   `json:"error"`
	FloorSeq   *Seq      `json:"floorSeq"`
}

// UnmarshalJSON decodes a wire frame, refusing an unknown type or a missing required field.
func (f *Frame) UnmarshalJSON(data []byte) error {
	var w wireFrame
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	var missing string
	need := func(ok bool, name string) {
		if !ok && missing == "" {
			missing = name
		}
	}
	out := Frame{Type: w.Type}
	switch w.Type {
	case FrameOpen:
		need(w.StreamID != nil, "streamId")
		need(w.From != nil, "from")
		need(w.Seq != nil, "seq")
		need(w.DurableSeq != nil, "durableSeq")
		need(w.Ended != nil, "ended")
	case FrameChunk:
		need(w.From != nil, "from")
		need(w.Seq != nil, "seq")
		need(w.Text != nil, "text")
	case FrameDurable:
		need(w.Seq != nil, "seq")
	case FrameEnd:
		need(w.Seq != nil, "seq")
		need(w.Status != nil, "status")
	case FrameStale:
		need(w.FloorSeq != nil, "floorSeq")
		need(w.DurableSeq != nil, "durableSeq")
	case FrameAbsent:
	default:
		return fmt.Errorf("frame: unknown type %q", w.Type)
	}
	if missing != "" {
		return fmt.Errorf("frame: %s frame has no %q", w.Type, missing)
	}
	if w.StreamID != nil {
		out.StreamID = *w.StreamID
	}
	if w.From != nil {
		out.From = *w.From
	}
	if w.Seq != nil {
		out.Seq = *w.Seq
	}
	if w.DurableSeq != nil {
		out.DurableSeq = *w.DurableSeq
	}
	if w.Ended != nil {
		out.Ended = *w.Ended
	}
	if w.Text != nil {
		out.Text = *w.Text
	}
	if w.Status != nil {
		out.Status = *w.Status
	}
	if w.Error != nil {
		out.Error = *w.Error
	}
	if w.FloorSeq != nil {
		out.FloorSeq = *w.FloorSeq
	}
	*f = out
	return nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Control characters, quotes and backslashes are
// escaped, so a frame never contains a raw newline (the SSE data line depends on it); invalid
// UTF-8 becomes U+FFFD as encoding/json does; U+2028 and U+2029 are escaped for JavaScript
// consumers that eval.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Splice applies one frame to the text a reader holds, the way a client does: a chunk replaces
// everything from its From onward, so an exact overlap re-covers and appends (contract S is this
// function applied to the durable text at the join offset). Frames other than chunk leave the
// text alone. A chunk that starts past the end of text is a gap and an error.
func Splice(text string, f Frame) (string, error) {
	if f.Type != FrameChunk {
		return text, nil
	}
	n := Len16(text)
	if f.From > n {
		return text, fmt.Errorf("splice: chunk %d→%d leaves a gap after %d", f.From, f.Seq, n)
	}
	if f.From < 0 {
		return text, fmt.Errorf("splice: chunk starts at negative offset %d", f.From)
	}
	return Slice16(text, 0, f.From) + f.Text, nil
}

// SpliceText merges two views of one response. Contract P makes every view a prefix of the
// produced text, so the longer one is the merge.
func SpliceText(a, b string) string {
	if Len16(b) > Len16(a) {
		return b
	}
	return a
}
