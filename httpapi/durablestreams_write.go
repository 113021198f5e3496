package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rindle-sh/rindle-go/checkpoint"
)

// The protocol's writes: create (PUT), append (POST, with idempotent producers), delete.

func (s *Server) streamCreate(w http.ResponseWriter, r *http.Request, path string, c *who) {
	fork, err := s.parseFork(r, c)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errForkSourceHidden) {
			status = http.StatusNotFound // as a missing source answers: a narrowed token learns nothing
		}
		streamProblem(w, status, err.Error())
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		if _, _, err := mime.ParseMediaType(ct); err != nil {
			streamProblem(w, http.StatusBadRequest, fmt.Sprintf("Content-Type %q is not a media type: %v", ct, err))
			return
		}
	}
	// The body's encoding follows the type: a fork without one takes its source's.
	bodyType := ct
	switch {
	case ct == "" && fork != nil:
		if src, err := s.cfg.Streams.Head(r.Context(), fork.Source); err == nil {
			bodyType = src.ContentType
		} // else the store refuses the fork, and the body is never stored
	case ct == "":
		ct, bodyType = "application/octet-stream", "application/octet-stream"
	}
	in := checkpoint.CreateStream{Path: path, Owner: c.p.Subject, ContentType: ct, Closed: closedHeader(r), SameType: sameType,
		Binary: !textual(bodyType), Fork: fork}
	if fork != nil {
		fork.Cut = cutter(bodyType)
	}
	ttl, exp := r.Header.Get(hTTL), r.Header.Get(hExpiresAt)
	if ttl != "" && exp != "" {
		streamProblem(w, http.StatusBadRequest, "Stream-TTL and Stream-Expires-At exclude each other")
		return
	}
	if ttl != "" {
		n, err := strconv.ParseInt(ttl, 10, 64)
		if !ttlPattern.MatchString(ttl) || err != nil || n > maxStreamTTL {
			streamProblem(w, http.StatusBadRequest, fmt.Sprintf("Stream-TTL must be a whole number of seconds from 1 to %d (100 years), in decimal without a sign or leading zeros", maxStreamTTL))
			return
		}
		if n == 0 {
			streamProblem(w, http.StatusBadRequest, "Stream-TTL is 0: the stream would be gone as it was made (leave the header out for a stream that does not expire)")
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
		if !t.After(time.Now()) {
			streamProblem(w, http.StatusBadRequest, "Stream-Expires-At is not in the future: the stream would be gone as it was made")
			return
		}
		in.ExpiresAt = &t
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	text, err := encodeBody(bodyType, body, true)
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
	h.Set(hNextOffset, formatOffset(m.Incarnation, m.Tail))
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

// Fork headers.
const (
	hForkedFrom     = "Stream-Forked-From"
	hForkOffset     = "Stream-Fork-Offset"
	hForkSubOffset  = "Stream-Fork-Sub-Offset"
	maxForkSubRaw   = 16
	forkSubOffsetRE = `^(0|[1-9][0-9]*)$`
)

var errForkSourceHidden = errors.New("no such stream to fork")

var subOffsetPattern = regexp.MustCompile(forkSubOffsetRE)

// parseFork reads a create's fork headers: nil without Stream-Forked-From. The source is a
// stream path as the caller names it (with or without StreamsPrefix), in the caller's tenant.
func (s *Server) parseFork(r *http.Request, c *who) (*checkpoint.Fork, error) {
	from, off, sub := r.Header.Get(hForkedFrom), r.Header.Values(hForkOffset), r.Header.Values(hForkSubOffset)
	if from == "" {
		if len(off) > 0 || len(sub) > 0 {
			return nil, errors.New(hForkOffset + " and " + hForkSubOffset + " need " + hForkedFrom)
		}
		return nil, nil
	}
	src := strings.TrimPrefix(from, StreamsPrefix)
	if u, err := url.Parse(from); err == nil && u.IsAbs() {
		src = strings.TrimPrefix(u.Path, StreamsPrefix)
	}
	src = strings.TrimPrefix(src, "/")
	if src == "" || strings.Contains(src, "..") || len(src) > maxStreamPath || unstorable(hForkedFrom, src) != nil {
		return nil, fmt.Errorf("%s %q does not name a stream", hForkedFrom, from)
	}
	if !c.mayTouch(src) {
		return nil, errForkSourceHidden
	}
	f := &checkpoint.Fork{Source: c.key(src)}
	if len(off) > 0 {
		o, err := parseOffset(off[0], true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", hForkOffset, err)
		}
		if !o.now { // -1 parses as 0, the start; now leaves the default, the tail
			f.Offset, f.OffsetIncarnation = &o.seq, o.inc
		}
	}
	if len(sub) > 0 {
		n, err := strconv.ParseInt(sub[0], 10, 64)
		if len(sub[0]) > maxForkSubRaw || !subOffsetPattern.MatchString(sub[0]) || err != nil || n > maxSafeInteger {
			return nil, fmt.Errorf("%s is a non-negative integer without leading zeros, not %q", hForkSubOffset, sub[0])
		}
		if n > 0 && f.Offset == nil {
			return nil, errors.New(hForkSubOffset + " counts into the append at " + hForkOffset + ", which it needs")
		}
		f.SubOffset = n
	}
	return f, nil
}

// cutter cuts an append's stored form after n of the units a sub-offset counts: messages for
// JSON, bytes otherwise (never inside a UTF-8 character of a text stream).
func cutter(ct string) func(stored string, n int64) (string, bool) {
	switch {
	case isJSON(ct):
		return func(stored string, n int64) (string, bool) {
			var msgs []json.RawMessage
			if err := json.Unmarshal([]byte(decodeText(ct, stored)), &msgs); err != nil || n > int64(len(msgs)) {
				return "", false
			}
			var b strings.Builder
			for _, m := range msgs[:n] {
				b.Write(m)
				b.WriteByte(',')
			}
			return b.String(), true
		}
	case textual(ct):
		return func(stored string, n int64) (string, bool) {
			if n > int64(len(stored)) || (n < int64(len(stored)) && !utf8.RuneStart(stored[n])) {
				return "", false
			}
			return stored[:n], true
		}
	}
	return func(stored string, n int64) (string, bool) {
		if n > int64(len(stored)) {
			return "", false
		}
		return stored[:n], true
	}
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
		if _, _, err := mime.ParseMediaType(ct); err != nil {
			streamProblem(w, http.StatusBadRequest, fmt.Sprintf("Content-Type %q is not a media type: %v", ct, err))
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
	h.Set(hNextOffset, formatOffset(out.Incarnation, out.Tail))
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
		s.streamChanges.committed(path, appended{inc: out.Incarnation, from: out.From, to: out.Tail, text: in.Text, closed: out.Closed})
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
