package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

// The Durable Streams protocol (PROTOCOL.md of durable-streams/durable-streams) under
// StreamsPrefix, for text content: a stream's bytes are UTF-8 text, and its offsets are our
// one coordinate, the UTF-16 seq, as a fixed-width zero-padded decimal (which sorts as the
// protocol requires). Binary content (bytes that are not UTF-8) is refused: it has no UTF-16
// offsets. Forks and subscriptions are not implemented (see the README).
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
	created  time.Time // the stream's incarnation
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

func (c *changes) notify(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.ch[path]; ok {
		close(ch)
		delete(c.ch, path)
	}
}

// formatOffset is the protocol offset of seq: 16 zero-padded digits.
func formatOffset(seq producer.Seq) string { return fmt.Sprintf("%016d", seq) }

var offsetPattern = regexp.MustCompile(`^[0-9]{16}$`)

// parseOffset reads an offset parameter: -1 (or absent) is the start, now the tail.
func parseOffset(raw string, present bool) (seq producer.Seq, now bool, err error) {
	switch {
	case !present || raw == "-1":
		return 0, false, nil
	case raw == "now":
		return 0, true, nil
	case offsetPattern.MatchString(raw):
		n, err := strconv.ParseInt(raw, 10, 64)
		return producer.Seq(n), false, err
	}
	return 0, false, fmt.Errorf("offset %q is not an offset this server handed out (16 digits), -1 or now", raw)
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

// encodeBody turns a request body into the stream's stored form: the UTF-8 text itself, or for
// JSON, each message compacted and followed by a comma (an array is flattened one level).
func encodeBody(ct string, body []byte, put bool) (string, error) {
	if bytes.IndexByte(body, 0) >= 0 {
		return "", errors.New("the body contains a NUL byte, which a text stream cannot hold")
	}
	if !isJSON(ct) {
		if !utf8.Valid(body) {
			return "", errors.New("the body is not UTF-8 text: this server stores text streams only (offsets are UTF-16 units)")
		}
		return string(body), nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
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
	if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '[' {
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
	c, err := s.claims(eventsAuth(r))
	if err != nil {
		writeProblem(w, err)
		return
	}
	write := r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodDelete
	if write && !c.has(ProducerScope) {
		writeProblem(w, huma.Error403Forbidden("writing a stream needs the producer scope"))
		return
	}
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
	switch {
	case errors.Is(err, checkpoint.ErrStreamNotFound):
		streamProblem(w, http.StatusNotFound, "no such stream")
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
		w.Header().Set(hNextOffset, formatOffset(closed.Tail))
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

// mayRead: the stream's owner, or the producer scope.
func mayRead(c *Claims, m checkpoint.StreamMeta) bool {
	return c.has(ProducerScope) || (m.Owner != "" && m.Owner == c.Subject)
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

func (s *Server) streamCreate(w http.ResponseWriter, r *http.Request, path string, c *Claims) {
	if r.Header.Get("Stream-Forked-From") != "" {
		streamProblem(w, http.StatusNotImplemented, "forks are not implemented")
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		streamProblem(w, http.StatusBadRequest, fmt.Sprintf("Content-Type %q is not a media type: %v", ct, err))
		return
	}
	in := checkpoint.CreateStream{Path: path, Owner: c.Subject, ContentType: ct, Closed: closedHeader(r), SameType: sameType}
	ttl, exp := r.Header.Get(hTTL), r.Header.Get(hExpiresAt)
	if ttl != "" && exp != "" {
		streamProblem(w, http.StatusBadRequest, "Stream-TTL and Stream-Expires-At exclude each other")
		return
	}
	if ttl != "" {
		n, err := strconv.ParseInt(ttl, 10, 64)
		if !ttlPattern.MatchString(ttl) || err != nil || n > maxStreamTTL {
			streamProblem(w, http.StatusBadRequest, fmt.Sprintf("Stream-TTL must be a non-negative integer of seconds, at most %d (100 years)", maxStreamTTL))
			return
		}
		in.TTL = &n
	}
	if exp != "" {
		t, err := time.Parse(time.RFC3339Nano, exp)
		if err != nil {
			streamProblem(w, http.StatusBadRequest, "Stream-Expires-At must be an RFC 3339 time")
			return
		}
		in.ExpiresAt = &t
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	text, err := encodeBody(ct, body, true)
	if err != nil {
		streamProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	in.Text = text
	m, created, err := s.cfg.Streams.Create(r.Context(), in)
	if err != nil {
		s.streamError(w, "create stream", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", m.ContentType)
	h.Set(hNextOffset, formatOffset(m.Tail))
	if m.Closed {
		h.Set(hClosed, "true")
	}
	if created {
		h.Set("Location", streamURL(r))
		w.WriteHeader(http.StatusCreated)
		s.streamChanges.forget(path)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func streamURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path}).String()
}

var intPattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,15})$`)

const maxSafeInteger = 1<<53 - 1

func parseProducer(r *http.Request) (*checkpoint.ProducerRef, error) {
	id, epoch, seq := r.Header.Values(hProducerID), r.Header.Get(hProducerEpoch), r.Header.Get(hProducerSeq)
	if len(id) == 0 && epoch == "" && seq == "" {
		return nil, nil
	}
	if len(id) == 0 || epoch == "" || seq == "" {
		return nil, errors.New("Producer-Id, Producer-Epoch and Producer-Seq go together")
	}
	if id[0] == "" {
		return nil, errors.New("Producer-Id must not be empty")
	}
	if len(id[0]) > maxProducerHeader {
		return nil, fmt.Errorf("Producer-Id is at most %d bytes", maxProducerHeader)
	}
	if err := unstorable("Producer-Id", id[0]); err != nil {
		return nil, err
	}
	ref := &checkpoint.ProducerRef{ID: id[0]}
	for _, f := range []struct {
		raw string
		to  *int64
	}{{epoch, &ref.Epoch}, {seq, &ref.Seq}} {
		n, err := strconv.ParseInt(f.raw, 10, 64)
		if !intPattern.MatchString(f.raw) || err != nil || n > maxSafeInteger {
			return nil, fmt.Errorf("producer epoch and seq are integers from 0 to 2^53-1, not %q", f.raw)
		}
		*f.to = n
	}
	return ref, nil
}

// maxProducerHeader bounds Producer-Id and Stream-Seq: they are stored with the stream, and an
// unbounded header would let one request store (and every later append compare) kilobytes.
const maxProducerHeader = 256

func (s *Server) streamAppend(w http.ResponseWriter, r *http.Request, path string) {
	ref, err := parseProducer(r)
	if err != nil {
		streamProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	if sseq := r.Header.Get(hSeq); len(sseq) > maxProducerHeader || unstorable(hSeq, sseq) != nil {
		streamProblem(w, http.StatusBadRequest, fmt.Sprintf("%s is at most %d bytes of text without U+0000", hSeq, maxProducerHeader))
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	closing := closedHeader(r)
	ct := r.Header.Get("Content-Type")
	in := checkpoint.AppendStream{Path: path, ContentType: ct, Close: closing, StreamSeq: r.Header.Get(hSeq), Producer: ref, SameType: sameType}
	if len(body) == 0 {
		if !closing {
			streamProblem(w, http.StatusBadRequest, "an append needs a body (or "+hClosed+": true to close)")
			return
		}
	} else {
		if ct == "" {
			streamProblem(w, http.StatusBadRequest, "an append needs a Content-Type")
			return
		}
		// Encoded by the request's type: when it is not the stream's, the store refuses it
		// (409). A body that cannot be encoded travels raw with the reason, so the store
		// answers in the protocol's order (closed, then type, then the body) and writes nothing.
		text, err := encodeBody(ct, body, false)
		if err != nil {
			text, in.Invalid = string(body), err
		}
		in.Text = text
	}
	out, err := s.cfg.Streams.Append(r.Context(), in)
	if err != nil {
		s.streamError(w, "append", err)
		return
	}
	h := w.Header()
	h.Set(hNextOffset, formatOffset(out.Tail))
	if out.Closed {
		h.Set(hClosed, "true")
	}
	status := http.StatusNoContent
	if ref != nil {
		h.Set(hProducerEpoch, strconv.FormatInt(out.ProducerEpoch, 10))
		h.Set(hProducerSeq, strconv.FormatInt(out.ProducerSeq, 10))
		if !out.Duplicate && in.Text != "" {
			status = http.StatusOK // new data; a close-only answers 204 like any close
		}
	}
	if !out.Duplicate && !out.AlreadyClosed {
		s.streamChanges.committed(path, appended{created: out.Created, from: out.Tail - producer.Len16(in.Text), to: out.Tail, text: in.Text, closed: out.Closed})
	}
	w.WriteHeader(status)
}

func (s *Server) streamDelete(w http.ResponseWriter, r *http.Request, path string) {
	if err := s.cfg.Streams.Delete(r.Context(), path); err != nil {
		s.streamError(w, "delete stream", err)
		return
	}
	s.streamChanges.forget(path)
	w.WriteHeader(http.StatusNoContent)
}

func metaHeaders(h http.Header, m checkpoint.StreamMeta) {
	h.Set("Content-Type", m.ContentType)
	if m.TTL != nil {
		h.Set(hTTL, strconv.FormatInt(*m.TTL, 10))
	}
	if m.ExpiresAt != nil {
		h.Set(hExpiresAt, m.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
}

func (s *Server) streamHead(w http.ResponseWriter, r *http.Request, path string, c *Claims) {
	m, err := s.cfg.Streams.Head(r.Context(), path)
	if err == nil && !mayRead(c, m) {
		err = checkpoint.ErrStreamNotFound
	}
	if err != nil {
		s.streamError(w, "stream metadata", err)
		return
	}
	h := w.Header()
	metaHeaders(h, m)
	h.Set(hNextOffset, formatOffset(m.Tail))
	h.Set("Cache-Control", "no-store")
	if m.Closed {
		h.Set(hClosed, "true")
	}
	w.WriteHeader(http.StatusOK)
}

// streamRead serves catch-up, long-poll and SSE reads.
func (s *Server) streamRead(w http.ResponseWriter, r *http.Request, path string, c *Claims) {
	q := r.URL.Query()
	raw, present := q.Get("offset"), q.Has("offset")
	from, now, err := parseOffset(raw, present)
	if err != nil {
		streamProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	live := q.Get("live")
	if live != "" && live != "long-poll" && live != "sse" {
		streamProblem(w, http.StatusBadRequest, "live is long-poll or sse")
		return
	}
	if live != "" && !present {
		streamProblem(w, http.StatusBadRequest, "a live read ("+live+") needs an offset")
		return
	}
	m, err := s.cfg.Streams.Head(r.Context(), path)
	if err == nil && !mayRead(c, m) {
		err = checkpoint.ErrStreamNotFound
	}
	if err != nil {
		s.streamError(w, "read stream", err)
		return
	}
	if now {
		from = m.Tail
	}
	if from > m.Tail {
		streamProblem(w, http.StatusBadRequest, "the offset is past the stream's end")
		return
	}
	if live != "" {
		release, err := s.waiting.acquire(c.Subject)
		if err != nil {
			writeProblem(w, err)
			return
		}
		defer release()
	}
	switch live {
	case "sse":
		s.streamSSE(w, r, path, from, m)
	case "long-poll":
		s.streamLongPoll(w, r, path, from)
	default:
		s.streamCatchUp(w, r, path, from, now)
	}
}

// etag names a response's range, the stream's incarnation (a path deleted and created again
// is another stream: its tags must not match the old one's) and whether it reached a closed
// end.
func etag(path string, created time.Time, from, to producer.Seq, closed bool) string {
	t := fmt.Sprintf(`"%x:%x:%d:%d`, hashPath(path), created.UnixNano(), from, to)
	if closed {
		t += ":c"
	}
	return t + `"`
}

func hashPath(p string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(p); i++ {
		h ^= uint64(p[i])
		h *= 1099511628211
	}
	return h
}

// liveRead is a waiting reader's next read: this instance's last append when it starts where
// the reader is (prev, the reader's last read, supplies the rest of the metadata), else the
// store.
func (s *Server) liveRead(ctx context.Context, path string, from producer.Seq, prev *checkpoint.StreamMeta, touch bool) (checkpoint.StreamMeta, string, producer.Seq, error) {
	if a, ok := s.streamChanges.lastAppend(path); ok && prev != nil && a.created.Equal(prev.Created) && a.from == from && (a.to > from || a.closed) {
		m := *prev
		m.Tail, m.Closed = a.to, a.closed
		return m, a.text, a.to, nil
	}
	return s.readFrom(ctx, path, from, touch)
}

// readFrom reads what the stream holds past from; touch renews a sliding TTL.
func (s *Server) readFrom(ctx context.Context, path string, from producer.Seq, touch bool) (m checkpoint.StreamMeta, text string, end producer.Seq, err error) {
	return s.cfg.Streams.Read(ctx, path, from, streamsReadLimit, touch)
}

func (s *Server) writeRead(w http.ResponseWriter, r *http.Request, path string, from producer.Seq, m checkpoint.StreamMeta, text string, end producer.Seq, live, now bool) {
	h := w.Header()
	metaHeaders(h, m)
	h.Set(hNextOffset, formatOffset(end))
	upToDate := end >= m.Tail
	if upToDate {
		h.Set(hUpToDate, "true")
	}
	closed := upToDate && m.Closed
	if closed {
		h.Set(hClosed, "true")
	}
	if live && !closed {
		h.Set(hCursor, cursor(r.URL.Query().Get("cursor")))
	}
	if now {
		h.Set("Cache-Control", "no-store")
	} else {
		h.Set("Cache-Control", "private, max-age=60, stale-while-revalidate=300")
		tag := etag(path, m.Created, from, end, closed)
		h.Set("ETag", tag)
		if inm := r.Header.Get("If-None-Match"); inm != "" && inm == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, decodeText(m.ContentType, text))
	}
}

func (s *Server) streamCatchUp(w http.ResponseWriter, r *http.Request, path string, from producer.Seq, now bool) {
	m, text, end, err := s.readFrom(r.Context(), path, from, true)
	if err != nil {
		s.streamError(w, "read stream", err)
		return
	}
	s.writeRead(w, r, path, from, m, text, end, false, now)
}

// waiter is one live reader's way of waiting for the stream to move past its offset.
type waiter struct {
	s        *Server
	path, id string // the stream's path and message row
	useView  bool   // false after a view wake that brought nothing (a lagging or stale entry)
	byView   bool   // the last wake came from the view
}

// wait waits for this instance's next change to the stream; the view (fed by CDC) showing the
// stream past from or closed, which is how another instance's append arrives; the poll
// interval, a safety net; or the deadline. It reports false when ctx or the deadline ended it.
func (wt *waiter) wait(ctx context.Context, from producer.Seq, deadline <-chan time.Time) bool {
	t := time.NewTimer(wt.s.cfg.StreamsPollInterval)
	defer t.Stop()
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	viewed := make(chan struct{})
	if wt.useView {
		go func() {
			_, err := wt.s.cfg.View.WaitFunc(vctx, wt.id, func(m ivm.Message) bool { return m.Seq > from || m.Status.Terminal() })
			if err == nil {
				close(viewed)
			}
		}()
	}
	wt.byView = false
	select {
	case <-wt.s.streamChanges.wait(wt.path):
		return true
	case <-viewed:
		wt.byView = true
		return true
	case <-t.C:
		return true
	case <-deadline:
		return false
	case <-ctx.Done():
		return false
	}
}

// moved records whether the read after a wake brought anything: a view wake that did not
// stops consulting the view (no busy loop on a stale entry) until a read moves again.
func (wt *waiter) moved(yes bool) {
	switch {
	case yes:
		wt.useView = true
	case wt.byView:
		wt.useView = false
	}
}

func (s *Server) streamLongPoll(w http.ResponseWriter, r *http.Request, path string, from producer.Seq) {
	deadline := time.NewTimer(s.cfg.StreamsLongPoll)
	defer deadline.Stop()
	var prev *checkpoint.StreamMeta
	wt := &waiter{s: s, path: path, id: checkpoint.ProtocolMessageID(path), useView: true}
	for touch := true; ; touch = false {
		m, text, end, err := s.liveRead(r.Context(), path, from, prev, touch)
		if err != nil {
			s.streamError(w, "read stream", err)
			return
		}
		prev = &m
		if end > from {
			s.writeRead(w, r, path, from, m, text, end, true, false)
			return
		}
		wt.moved(touch)
		if m.Closed || !wt.wait(r.Context(), from, deadline.C) {
			h := w.Header()
			metaHeaders(h, m)
			h.Del("Content-Type")
			h.Set(hNextOffset, formatOffset(m.Tail))
			h.Set(hUpToDate, "true")
			if m.Closed {
				h.Set(hClosed, "true")
			} else {
				h.Set(hCursor, cursor(r.URL.Query().Get("cursor")))
			}
			h.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
}

// sseLines splits on every SSE line terminator (CRLF, CR, LF), so no payload can end a data
// line early and inject an event of its own.
var sseLines = strings.NewReplacer("\r\n", "\n", "\r", "\n") //nolint:gochecknoglobals // immutable, safe for concurrent use

// sseEvent writes an SSE event whose data may span lines.
func sseEvent(b *bytes.Buffer, event, data string) {
	b.WriteString("event: " + event + "\n")
	for _, line := range strings.Split(sseLines.Replace(data), "\n") {
		b.WriteString("data:" + line + "\n")
	}
	b.WriteString("\n")
}

// textual: the protocol sends text/* and JSON streams as text in SSE, others in base64.
func textual(ct string) bool {
	t := mediaType(ct)
	return strings.HasPrefix(t, "text/") || t == "application/json"
}

type control struct {
	StreamNextOffset string `json:"streamNextOffset"`
	StreamCursor     string `json:"streamCursor,omitempty"`
	UpToDate         bool   `json:"upToDate,omitempty"`
	StreamClosed     bool   `json:"streamClosed,omitempty"`
}

// streamSSE serves an SSE read; m0 is the stream as the read's authorization found it.
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, path string, from producer.Seq, m0 checkpoint.StreamMeta) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		streamProblem(w, http.StatusInternalServerError, "the connection cannot stream")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	b64 := !textual(m0.ContentType)
	if b64 {
		h.Set("Stream-SSE-Data-Encoding", "base64")
	}
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	ctx := r.Context()
	lifetime := time.NewTimer(s.cfg.StreamsSSELifetime)
	defer lifetime.Stop()
	first := true
	cur := r.URL.Query().Get("cursor")
	var prev *checkpoint.StreamMeta
	wt := &waiter{s: s, path: path, id: checkpoint.ProtocolMessageID(path), useView: true}
	for touch := true; ; touch = false {
		m, text, end, err := s.liveRead(ctx, path, from, prev, touch)
		if err != nil {
			return // deleted or unreachable: the client reconnects and learns which
		}
		prev = &m
		wt.moved(touch || end > from || m.Closed)
		var b bytes.Buffer
		upToDate := end >= m.Tail
		closed := upToDate && m.Closed
		if end > from || first || closed {
			if end > from {
				data := decodeText(m.ContentType, text)
				if b64 {
					data = base64.StdEncoding.EncodeToString([]byte(data))
				}
				sseEvent(&b, "data", data)
			}
			ctl := control{StreamNextOffset: formatOffset(end), UpToDate: upToDate, StreamClosed: closed}
			if !closed {
				cur = cursor(cur)
				ctl.StreamCursor = cur
			}
			raw, _ := json.Marshal(ctl)
			sseEvent(&b, "control", string(raw))
			if _, err := w.Write(b.Bytes()); err != nil {
				return
			}
			flusher.Flush()
			first = false
		}
		from = end
		if closed {
			return
		}
		if !upToDate {
			continue // more than one read holds: no wait
		}
		if !wt.wait(ctx, from, lifetime.C) {
			return
		}
	}
}
