package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

// The Durable Streams protocol (PROTOCOL.md of durable-streams/durable-streams) under
// StreamsPrefix. A stream's unit follows its content type: a text or JSON stream's bytes are
// UTF-8 text, and its offsets are our one coordinate, the UTF-16 seq (the view shows it like any
// answer); a stream of any other type is a byte stream, offsets in bytes, with no view row.
// Offsets are fixed-width zero-padded decimals (which sort as the protocol requires). Forks copy
// their source up to the fork point (checkpoint.Fork). Subscriptions are not implemented (see
// the README).
//
// Every append is committed before it is answered (checkpoint.Protocol), so an acknowledged
// append is durable; streams are rows, not live producers, so no restart, drain or sweep ever
// seals one, and any instance serves any stream. Waiting readers on the appending instance
// are woken at once; readers on other instances when the view (CDC) shows the append, and at
// the latest within StreamsPollInterval.

// StreamsPrefix is where protocol streams live; the path after it names the stream.
const StreamsPrefix = "/v1/stream/"

// Protocol headers.
const (
	hNextOffset    = "Stream-Next-Offset"
	hUpToDate      = "Stream-Up-To-Date"
	hClosed        = "Stream-Closed"
	hCursor        = "Stream-Cursor"
	hSeq           = "Stream-Seq"
	hTTL           = "Stream-TTL"
	hExpiresAt     = "Stream-Expires-At"
	hProducerID    = "Producer-Id"
	hProducerEpoch = "Producer-Epoch"
	hProducerSeq   = "Producer-Seq"
)

// Defaults of the protocol's waits.
const (
	DefaultStreamsLongPoll     = 20 * time.Second
	DefaultStreamsSSELifetime  = 60 * time.Second
	DefaultStreamsPollInterval = 2 * time.Second
	streamsReadLimit           = 4096 // appends per catch-up response
	maxStreamPath              = 1024
	// StreamsMaxBodyBytes bounds one protocol append (or create) body.
	StreamsMaxBodyBytes = 8 << 20
)

// Streams is the protocol's store: checkpoint.Protocol.
type Streams interface {
	Create(ctx context.Context, in checkpoint.CreateStream) (checkpoint.StreamMeta, bool, error)
	Head(ctx context.Context, path string) (checkpoint.StreamMeta, error)
	Read(ctx context.Context, path string, from producer.Seq, limit int, touch bool) (checkpoint.StreamMeta, string, producer.Seq, error)
	Append(ctx context.Context, in checkpoint.AppendStream) (checkpoint.AppendOutcome, error)
	Delete(ctx context.Context, path string) error
}

var _ Streams = (*checkpoint.Protocol)(nil)

// changes wakes the readers waiting on a stream when this instance changed it, and keeps the
// stream's last append here: a reader woken at exactly its start takes it from memory, so one
// append fans out to every waiting reader without a read of the store each (the live plane of
// the protocol); a reader anywhere else reads the store.
type changes struct {
	mu   sync.Mutex
	ch   map[string]chan struct{}
	last map[string]appended
}

// appended is one committed append (or close): the stored text of [from, to).
type appended struct {
	inc      int64 // the stream's incarnation
	from, to producer.Seq
	text     string
	closed   bool
}

func (c *changes) lastAppend(path string) (appended, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.last[path]
	return a, ok
}

// committed records a committed append and wakes the waiting readers.
func (c *changes) committed(path string, a appended) {
	c.mu.Lock()
	if c.last == nil {
		c.last = map[string]appended{}
	}
	c.last[path] = a
	c.mu.Unlock()
	c.notify(path)
}

// forget drops the last append of a stream that was deleted or created anew.
func (c *changes) forget(path string) {
	c.mu.Lock()
	delete(c.last, path)
	c.mu.Unlock()
	c.notify(path)
}

func (c *changes) wait(path string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = map[string]chan struct{}{}
	}
	ch, ok := c.ch[path]
	if !ok {
		ch = make(chan struct{})
		c.ch[path] = ch
	}
	return ch
}

// notifyAll wakes every waiting reader.
func (c *changes) notifyAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for path, ch := range c.ch {
		close(ch)
		delete(c.ch, path)
	}
}

func (c *changes) notify(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.ch[path]; ok {
		close(ch)
		delete(c.ch, path)
	}
}

// formatOffset is the protocol offset of seq in the stream with incarnation inc: 16 digits of
// each, joined by a hyphen. A path deleted and created again hands out offsets that never name
// the old stream's, so nothing keyed by path and offset (an HTTP cache above all) can answer
// for one stream with the other's body.
//
// Not the reference server's underscore: offsets are opaque, but the published Yjs server
// (@durable-streams/y-durable-streams) adds 1 to the second part of an offset with an underscore
// to read past a snapshot. That suits the reference, which reads whole messages from an offset
// inside one; here it would start inside an append and hand Yjs a torn update.
func formatOffset(inc int64, seq producer.Seq) string { return fmt.Sprintf("%016d-%016d", inc, seq) }

// offsetPattern: our two parts (incarnation, a hyphen, offset); one part (offset), the form
// this server handed out before incarnations; or the reference server's two parts with an
// underscore (read sequence, then offset), which clients write by hand for the start
// (0000000000000000_0000000000000000). Only ours names a stream.
var offsetPattern = regexp.MustCompile(`^(?:([0-9]{16})([-_]))?([0-9]{16})$`)

// offset is a parsed offset parameter.
type offset struct {
	inc int64 // the incarnation that handed it out; 0 for none
	seq producer.Seq
	now bool // the tail
}

// parseOffset reads an offset parameter: -1 (or absent) is the start, now the tail.
func parseOffset(raw string, present bool) (offset, error) {
	switch {
	case !present || raw == "-1":
		return offset{}, nil // the start, named by no stream
	case raw == "now":
		return offset{now: true}, nil
	}
	m := offsetPattern.FindStringSubmatch(raw)
	if m == nil {
		return offset{}, fmt.Errorf("offset %q is not an offset this server handed out (16 digits, a hyphen, 16 digits), -1 or now", raw)
	}
	var o offset
	first, err := strconv.ParseInt(m[1], 10, 64)
	switch {
	case m[1] == "":
	case err != nil:
		return offset{}, fmt.Errorf("offset %q: %w", raw, err)
	case m[2] == "-":
		o.inc = first
	case first != 0:
		// The reference's form past its first read sequence: no offset this server hands out.
		return offset{}, fmt.Errorf("offset %q is not an offset this server handed out: in the reference server's form, only a read sequence of zeros is taken", raw)
	}
	n, err := strconv.ParseInt(m[3], 10, 64)
	if err != nil {
		return offset{}, fmt.Errorf("offset %q: %w", raw, err)
	}
	o.seq = producer.Seq(n)
	return o, nil
}

// mediaType is a content type's type/subtype, lowercased.
func mediaType(ct string) string {
	if t, _, err := mime.ParseMediaType(ct); err == nil {
		return strings.ToLower(t)
	}
	return strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
}

func sameType(a, b string) bool { return mediaType(a) == mediaType(b) }

func isJSON(ct string) bool { return mediaType(ct) == "application/json" }

// jsonSpace is JSON's white space (RFC 8259): not Unicode's, whose U+00A0 and U+0085 are not
// JSON and must be refused as such, not taken for an empty body.
const jsonSpace = " \t\r\n"

// encodeBody turns a request body into the stream's stored form: a byte stream's bytes as they
// are; the UTF-8 text itself; or for JSON, each message compacted and followed by a comma (an
// array is flattened one level).
func encodeBody(ct string, body []byte, put bool) (string, error) {
	if !textual(ct) {
		return string(body), nil
	}
	if bytes.IndexByte(body, 0) >= 0 {
		return "", errors.New("the body contains a NUL byte, which a text stream cannot hold (a byte stream can: create it with a type that is not text or JSON)")
	}
	if !isJSON(ct) {
		if !utf8.Valid(body) {
			return "", errors.New("the body is not UTF-8 text, which a " + mediaType(ct) + " stream holds (offsets are UTF-16 units; a byte stream holds any bytes)")
		}
		return string(body), nil
	}
	if len(bytes.Trim(body, jsonSpace)) == 0 {
		if put {
			return "", nil
		}
		return "", errors.New("the body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("the body is not valid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("the body is not one JSON value")
	}
	var msgs []json.RawMessage
	if t := bytes.Trim(v, jsonSpace); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &msgs); err != nil {
			return "", fmt.Errorf("the body is not valid JSON: %w", err)
		}
		if len(msgs) == 0 && !put {
			return "", errors.New("an empty JSON array appends nothing")
		}
	} else {
		msgs = []json.RawMessage{v}
	}
	var b strings.Builder
	for _, m := range msgs {
		var c bytes.Buffer
		if err := json.Compact(&c, m); err != nil {
			return "", fmt.Errorf("the body is not valid JSON: %w", err)
		}
		b.Write(c.Bytes())
		b.WriteByte(',')
	}
	return b.String(), nil
}

// decodeText turns stored text back into a response body.
func decodeText(ct, text string) string {
	if isJSON(ct) {
		return "[" + strings.TrimSuffix(text, ",") + "]"
	}
	return text
}

// cursor is the protocol's collapsing cursor: 20-second intervals since 2024-10-09, always past
// the client's.
func cursor(client string) string {
	epoch := time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)
	n := int64(time.Since(epoch) / (20 * time.Second))
	if c, err := strconv.ParseInt(client, 10, 64); err == nil && c >= n {
		n = c + 1 + rand.Int64N(180) // 1-3600 s of jitter, in intervals
	}
	return strconv.FormatInt(n, 10)
}

// maxStreamTTL bounds Stream-TTL (100 years of seconds): past it the expiry is out of
// PostgreSQL's range, and a create would be taken and then fail every read.
const maxStreamTTL = 100 * 365 * 24 * 3600

var ttlPattern = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

func streamProblem(w http.ResponseWriter, status int, detail string) {
	writeProblem(w, huma.NewError(status, detail))
}

// serveStreams routes a protocol request.
func (s *Server) serveStreams(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "cross-origin")
	path := strings.TrimPrefix(r.URL.Path, StreamsPrefix)
	switch {
	case path == "" || strings.Contains(path, ".."):
		streamProblem(w, http.StatusBadRequest, "a stream path (without ..) is required after "+StreamsPrefix)
		return
	case len(path) > maxStreamPath:
		streamProblem(w, http.StatusBadRequest, fmt.Sprintf("a stream path is at most %d bytes", maxStreamPath))
		return
	case strings.Contains(strings.ToLower(r.URL.EscapedPath()), "%2f"):
		// a%2Fb and a/b would otherwise name one stream (the path is matched decoded).
		streamProblem(w, http.StatusBadRequest, "a stream path may not hold an encoded slash (%2F): use / to nest")
		return
	}
	if err := unstorable("the stream path", path); err != nil {
		streamProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	ah := eventsAuth(r)
	c, err := s.caller(ah.Authorization, ah.Tenant)
	if err != nil {
		writeProblem(w, err)
		return
	}
	switch {
	case !c.mayTouch(path):
		// As a missing stream answers: a narrowed token learns nothing of other paths.
		streamProblem(w, http.StatusNotFound, "no such stream")
		return
	case r.Method == http.MethodDelete && !c.p.Has(AdminScope):
		writeProblem(w, huma.Error403Forbidden("deleting a stream needs the admin scope"))
		return
	case (r.Method == http.MethodPut || r.Method == http.MethodPost) && !c.producer():
		writeProblem(w, huma.Error403Forbidden("writing a stream needs the producer scope"))
		return
	}
	path = c.key(path)
	switch r.Method {
	case http.MethodPut:
		s.streamCreate(w, r, path, c)
	case http.MethodPost:
		s.streamAppend(w, r, path)
	case http.MethodDelete:
		s.streamDelete(w, r, path)
	case http.MethodHead:
		s.streamHead(w, r, path, c)
	case http.MethodGet:
		s.streamRead(w, r, path, c)
	default:
		h.Set("Allow", "GET, HEAD, PUT, POST, DELETE")
		streamProblem(w, http.StatusMethodNotAllowed, r.Method+" is not a stream operation")
	}
}

// streamError answers a store error.
func (s *Server) streamError(w http.ResponseWriter, op string, err error) {
	var closed *checkpoint.StreamClosedError
	var perr *checkpoint.ProducerError
	var ferr *checkpoint.ForkError
	var oerr *checkpoint.OffsetError
	switch {
	case errors.Is(err, checkpoint.ErrStreamNotFound):
		streamProblem(w, http.StatusNotFound, "no such stream")
	case errors.Is(err, checkpoint.ErrStreamExists) && errors.Is(err, checkpoint.ErrStreamGone):
		streamProblem(w, http.StatusConflict, "this path's stream was deleted while forks of it exist: it cannot be created again until they are gone")
	case errors.Is(err, checkpoint.ErrStreamGone):
		streamProblem(w, http.StatusGone, "the stream was deleted; forks of it still exist")
	case errors.As(err, &oerr):
		status, detail := http.StatusBadRequest, oerr.Reason
		if oerr.Gone {
			status, detail = http.StatusGone, detail+"; read this stream from -1"
		}
		streamProblem(w, status, detail)
	case errors.As(err, &ferr):
		status := http.StatusBadRequest
		switch {
		case ferr.NotFound:
			status = http.StatusNotFound
		case ferr.Gone:
			status = http.StatusConflict
		}
		streamProblem(w, status, ferr.Reason)
	case errors.Is(err, checkpoint.ErrStreamExists):
		streamProblem(w, http.StatusConflict, "a stream with another configuration exists at this path")
	case errors.As(err, new(*checkpoint.InvalidBodyError)):
		streamProblem(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, checkpoint.ErrContentTypeMismatch):
		streamProblem(w, http.StatusConflict, "the content type is not the stream's")
	case errors.Is(err, checkpoint.ErrSeqRegression):
		streamProblem(w, http.StatusConflict, hSeq+" must increase")
	case errors.As(err, &closed):
		w.Header().Set(hClosed, "true")
		w.Header().Set(hNextOffset, formatOffset(closed.Incarnation, closed.Tail))
		streamProblem(w, http.StatusConflict, "the stream is closed")
	case errors.As(err, &perr):
		status := http.StatusBadRequest // checkpoint.EpochNotAtZero
		switch perr.Kind {
		case checkpoint.StaleEpoch:
			status = http.StatusForbidden
			w.Header().Set(hProducerEpoch, strconv.FormatInt(perr.Epoch, 10))
		case checkpoint.SeqGap:
			status = http.StatusConflict
			w.Header().Set("Producer-Expected-Seq", strconv.FormatInt(perr.Expected, 10))
			w.Header().Set("Producer-Received-Seq", strconv.FormatInt(perr.Received, 10))
		}
		streamProblem(w, status, perr.Reason)
	case errors.Is(err, context.Canceled):
		// The client left.
	default:
		writeProblem(w, s.unavailable(op, err))
	}
}

// mayRead: the stream's owner, or a producer (in the caller's tenant: path is its key).
func mayRead(c *who, m checkpoint.StreamMeta) bool {
	return c.producer() || (m.Owner != "" && m.Owner == c.p.Subject)
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, StreamsMaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			streamProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds %d bytes", StreamsMaxBodyBytes))
		} else {
			streamProblem(w, http.StatusBadRequest, "the body could not be read")
		}
		return nil, false
	}
	return body, true
}

func closedHeader(r *http.Request) bool { return strings.EqualFold(r.Header.Get(hClosed), "true") }
