package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Defaults of the Config fields that bound what one client can hold.
const (
	// DefaultBodyTimeout bounds reading a whole request body (every route but ingest).
	DefaultBodyTimeout = 30 * time.Second
	// DefaultIngestIdleTimeout bounds the pause between two reads of an ingest body.
	DefaultIngestIdleTimeout = 30 * time.Second
	// DefaultMaxEventStreams bounds the waiting reads (event streams, protocol SSE and
	// long-polls) one instance holds.
	DefaultMaxEventStreams = 16384
	// DefaultMaxEventStreamsPerSubject bounds the waiting reads of one token subject.
	DefaultMaxEventStreamsPerSubject = 256
)

// guard bounds what a request may hold before its handler decides anything: its body must
// arrive within BodyTimeout (ingest: with no pause longer than IngestIdleTimeout, which ingest
// rolls itself), and a refusal answered before the body was read closes the connection, so a
// client cannot keep a descriptor by trickling a body nobody will read. net/http already bounds
// the header (ReadHeaderTimeout) and idle keep-alives (IdleTimeout), which rindled sets.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return w, r
	}
	rc := http.NewResponseController(w)
	if !isIngest(r) {
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	}
	body := &guardedBody{ReadCloser: r.Body, rc: rc}
	r2 := r.WithContext(r.Context()) // a shallow copy: only the body changes
	r2.Body = body
	return &refusalWriter{ResponseWriter: w, body: body}, r2
}

func isIngest(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/streams/") && strings.HasSuffix(r.URL.Path, "/ingest")
}

// guardedBody clears the read deadline once the body is read to its end, so a handler that
// then waits (a long-poll) is not cut by it, and remembers whether it was.
type guardedBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	mu   sync.Mutex
	done bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.mu.Lock()
		if !b.done {
			b.done = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *guardedBody) read() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// refusalWriter adds Connection: close to an error answered while the body is still unread.
type refusalWriter struct {
	http.ResponseWriter
	body *guardedBody
}

func (w *refusalWriter) WriteHeader(status int) {
	if status >= http.StatusBadRequest && !w.body.read() {
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the connection's deadlines and flushes.
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the response (SSE through the protocol routes).
func (w *refusalWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// waiters counts the waiting reads each subject holds, and all of them: a token holder cannot
// pin an unbounded number of event streams, and the instance has a ceiling of its own.
type waiters struct {
	mu         sync.Mutex
	total      int
	perSubject map[string]int
	max, each  int
}

// acquire takes a slot for subject, or answers 429 with Retry-After. release gives it back.
func (ws *waiters) acquire(subject string) (release func(), err error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.total >= ws.max:
		return nil, tooMany(fmt.Sprintf("this instance holds %d waiting reads, its limit: retry later, or on another instance", ws.total))
	case ws.perSubject[subject] >= ws.each:
		return nil, tooMany(fmt.Sprintf("this token's subject holds %d waiting reads on this instance, its limit: close some first", ws.perSubject[subject]))
	}
	ws.total++
	ws.perSubject[subject]++
	var once sync.Once
	return func() {
		once.Do(func() {
			ws.mu.Lock()
			defer ws.mu.Unlock()
			ws.total--
			if ws.perSubject[subject]--; ws.perSubject[subject] == 0 {
				delete(ws.perSubject, subject)
			}
		})
	}, nil
}

func tooMany(detail string) error {
	return huma.ErrorWithHeaders(huma.NewError(http.StatusTooManyRequests, detail),
		http.Header{"Retry-After": {strconv.Itoa(int(DefaultSSERetry.Seconds()))}})
}
