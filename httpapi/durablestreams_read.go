package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

// The protocol's reads: HEAD, catch-up, long-poll and SSE.

func metaHeaders(h http.Header, m checkpoint.StreamMeta) {
	h.Set("Content-Type", m.ContentType)
	if m.TTL != nil {
		h.Set(hTTL, strconv.FormatInt(*m.TTL, 10))
	}
	if m.ExpiresAt != nil {
		h.Set(hExpiresAt, m.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
}

func (s *Server) streamHead(w http.ResponseWriter, r *http.Request, path string, c *who) {
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
	h.Set(hNextOffset, formatOffset(m.Incarnation, m.Tail))
	h.Set("Cache-Control", "no-store")
	if m.Closed {
		h.Set(hClosed, "true")
	}
	w.WriteHeader(http.StatusOK)
}

// streamRead serves catch-up, long-poll and SSE reads.
func (s *Server) streamRead(w http.ResponseWriter, r *http.Request, path string, c *who) {
	q := r.URL.Query()
	raw, present := q.Get("offset"), q.Has("offset")
	o, err := parseOffset(raw, present)
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
	from, now := o.seq, o.now
	own, err := m.Position(o.inc, from)
	if err != nil {
		s.streamError(w, "read stream", err)
		return
	}
	if now {
		from = m.Tail
	}
	// The answer names the incarnation of the stream it was read from: when that is no longer
	// this one, the read ends (streamLongPoll, streamSSE) rather than answer from another.
	rd := read{path: path, from: from, inc: m.Incarnation, own: own}
	if from > m.Tail {
		streamProblem(w, http.StatusBadRequest, "the offset is past the stream's end")
		return
	}
	if isJSON(m.ContentType) && from > 0 && from < m.Tail {
		// A JSON read starts at a message's boundary (every offset this server hands out is
		// one): from inside a message its body would not be JSON. One append says which.
		_, first, _, err := s.cfg.Streams.Read(r.Context(), path, from, 1, false)
		if err != nil {
			s.streamError(w, "read stream", err)
			return
		}
		if first != "" && !json.Valid([]byte(decodeText(m.ContentType, first))) {
			streamProblem(w, http.StatusBadRequest, "the offset is inside a JSON message: read from an offset this server handed out")
			return
		}
	}
	if live != "" {
		release, err := s.waiting.acquire(c.subject())
		if err != nil {
			writeProblem(w, err)
			return
		}
		defer release()
	}
	switch live {
	case "sse":
		s.streamSSE(w, r, rd, m)
	case "long-poll":
		s.streamLongPoll(w, r, rd)
	default:
		s.streamCatchUp(w, r, rd, now)
	}
}

// read is one read request: its stream's path, where it starts, the stream's incarnation when
// the read began, and whether the request's offset was one that incarnation handed out.
type read struct {
	path string
	from producer.Seq
	inc  int64
	own  bool
}

// errReincarnated: the path was deleted and created again while a read of it went on.
var errReincarnated = &checkpoint.OffsetError{Gone: true, Reason: "the stream was deleted and created again while this read went on; read the new one from -1"}

// check is a read's next read of the store, refused when it found another incarnation.
func (rd read) check(m checkpoint.StreamMeta, err error) error {
	if err == nil && m.Incarnation != rd.inc {
		return errReincarnated
	}
	return err
}

// etag names a response's range, the stream's incarnation (a path deleted and created again
// is another stream: its tags must not match the old one's) and whether it reached a closed
// end.
func etag(path string, inc int64, from, to producer.Seq, closed bool) string {
	t := fmt.Sprintf(`"%x:%x:%d:%d`, hashPath(path), inc, from, to)
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
	if a, ok := s.streamChanges.lastAppend(path); ok && prev != nil && a.inc == prev.Incarnation && a.from == from && (a.to > from || a.closed) {
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

func (s *Server) writeRead(w http.ResponseWriter, r *http.Request, rd read, m checkpoint.StreamMeta, text string, end producer.Seq, live, now bool) {
	h := w.Header()
	metaHeaders(h, m)
	h.Set(hNextOffset, formatOffset(m.Incarnation, end))
	if !rd.own {
		// An answer at an offset this stream did not hand out (-1, a hand-written one, an
		// ancestor's) may be the same request as one another stream at this path answered
		// once: a cache in front (deploy/nginx-edge.conf.tmpl) must not keep it. Answers at
		// the stream's own offsets have keys no other stream's share.
		h.Set("X-Accel-Expires", "0")
	}
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
		tag := etag(rd.path, m.Incarnation, rd.from, end, closed)
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

func (s *Server) streamCatchUp(w http.ResponseWriter, r *http.Request, rd read, now bool) {
	m, text, end, err := s.readFrom(r.Context(), rd.path, rd.from, true)
	if err := rd.check(m, err); err != nil {
		s.streamError(w, "read stream", err)
		return
	}
	s.writeRead(w, r, rd, m, text, end, false, now)
}

// waiter is one live reader's way of waiting for the stream to move past its offset.
type waiter struct {
	s        *Server
	path, id string // the stream's path and message row
	useView  bool   // false after a view wake that brought nothing (a lagging or stale entry)
	binary   bool   // a byte stream: no view row to wait on
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
	if wt.useView && !wt.binary {
		go func() {
			_, err := wt.s.cfg.View.WaitFunc(vctx, wt.id, func(m ivm.Message) bool { return m.Seq > from || m.Status.Terminal() })
			// The view found the message moved, or could not find it (deleted, perhaps on
			// another instance): either way the store says what the reader gets. A wake that
			// brings nothing stops the view's use (moved), so an error that persists is no loop.
			if err == nil || vctx.Err() == nil {
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

func (s *Server) streamLongPoll(w http.ResponseWriter, r *http.Request, rd read) {
	deadline := time.NewTimer(s.cfg.StreamsLongPoll)
	defer deadline.Stop()
	var prev *checkpoint.StreamMeta
	from := rd.from
	wt := &waiter{s: s, path: rd.path, id: checkpoint.ProtocolMessageID(rd.path), useView: true}
	for touch := true; ; touch = false {
		m, text, end, err := s.liveRead(r.Context(), rd.path, from, prev, touch)
		if err := rd.check(m, err); err != nil {
			s.streamError(w, "read stream", err)
			return
		}
		prev, wt.binary = &m, m.Binary
		if end > from {
			s.writeRead(w, r, rd, m, text, end, true, false)
			return
		}
		wt.moved(touch)
		if m.Closed || !wt.wait(r.Context(), from, deadline.C) {
			h := w.Header()
			metaHeaders(h, m)
			h.Del("Content-Type")
			h.Set(hNextOffset, formatOffset(m.Incarnation, m.Tail))
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
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, rd read, m0 checkpoint.StreamMeta) {
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
	path, from := rd.path, rd.from
	wt := &waiter{s: s, path: path, id: checkpoint.ProtocolMessageID(path), useView: true}
	for touch := true; ; touch = false {
		m, text, end, err := s.liveRead(ctx, path, from, prev, touch)
		if rd.check(m, err) != nil {
			return // deleted (perhaps created again) or unreachable: the client reconnects and learns which
		}
		prev, wt.binary = &m, m.Binary
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
			ctl := control{StreamNextOffset: formatOffset(m.Incarnation, end), UpToDate: upToDate, StreamClosed: closed}
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
