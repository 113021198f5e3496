package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/producer"
)

// Issue 19: text and names the database cannot store are input errors (400), refused before
// the live plane or the database sees them; the stream they were aimed at can still be sealed.
func TestUnstorableTextAndNamesAreRefusedWith400(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	openHTTP(t, c, w, "m")
	st, _ := w.plane.Stream("m")

	// U+0000 in an append, in every spelling JSON has for it: 400, nothing pushed.
	r := c.do("POST", "/v1/streams/m/append", prod, []byte(`{"text":"a\u0000b"}`))
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	require.Contains(t, r.json(t)["detail"], "U+0000")
	require.Zero(t, st.Seq())

	// A raw NUL byte in an ingest body: what came before it is pushed, the rest refused.
	r = c.doType("POST", "/v1/streams/m/ingest", prod, "text/plain", []byte("ok\x00lost"))
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	require.Contains(t, r.json(t)["detail"], "U+0000")
	require.Equal(t, producer.Seq(2), st.Seq(), "ok was pushed")
	// An ingest with no Content-Type is refused whole.
	r = c.doType("POST", "/v1/streams/m/ingest", prod, "", []byte("x"))
	require.Equal(t, http.StatusUnsupportedMediaType, r.status, string(r.body))

	// Ids, owners and the like holding U+0000: 400, not the 503 of an outage.
	for _, body := range []string{`{"id":"a\u0000b","owner":"alice"}`, `{"id":"n1","owner":"al\u0000ice"}`, `{"id":"n2","owner":"alice","chatId":"\u0000"}`} {
		r = c.do("POST", "/v1/messages", prod, []byte(body))
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r.body)
	}
	reader := token(t, "alice", "")
	for _, probe := range []struct{ method, path, tok string }{
		{"POST", "/v1/streams/a%00b/open", prod},
		{"POST", "/v1/streams/a%FFb/open", prod},
		{"POST", "/v1/streams/a%00b/append", prod},
		{"POST", "/v1/streams/a%00b/close", prod},
		{"POST", "/v1/streams/a%00b/cancel", reader},
		{"GET", "/v1/streams/a%00b", reader},
		{"GET", "/v1/streams/a%FFb", reader},
		{"GET", "/v1/streams/a%00b/events", reader},
		{"POST", "/v1/streams/a%00b/ingest", prod},
		{"PUT", "/v1/stream/a%00b", prod},
		{"GET", "/v1/stream/a%FFb", prod},
		{"PUT", "/v1/stream/a%2Fb", prod},
	} {
		body := []byte(`{"text":"x"}`)
		r = c.doType(probe.method, probe.path, probe.tok, "text/plain", body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s %s: %s", probe.method, probe.path, r.body)
	}
	// A Stream-TTL past what the database can represent, and a content type that is not one.
	for _, h := range []http.Header{
		{"Content-Type": {"text/plain"}, "Stream-Ttl": {"9223372036854775807"}},
		{"Content-Type": {";;;"}},
	} {
		require.Equal(t, http.StatusBadRequest, c.ds("PUT", "/v1/stream/ttl", prod, h, "").status, fmt.Sprint(h))
	}

	// The stream those requests aimed at still seals, with what it took.
	r = c.do("POST", "/v1/streams/m/close", prod, []byte(`{"error":"model said \u0000"}`))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	text, status := w.db.DurableText(t, "m")
	require.Equal(t, "ok", text)
	require.Equal(t, "error", status)
}

// rawConn sends a request's head by hand over a fresh connection, so a test can stall its body.
func rawConn(t *testing.T, base, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = io.WriteString(conn, head)
	require.NoError(t, err)
	return conn, bufio.NewReader(conn)
}

// stalledAnswer is the answer to a stalled request: its status, and whether it said
// Connection: close.
type stalledAnswer struct {
	status int
	close  bool
}

// answerAndClose reads one response from a stalled request and then waits for the server to
// close the connection. The minute is a hang bound: before these limits, nothing ever came.
func answerAndClose(t *testing.T, conn net.Conn, br *bufio.Reader) stalledAnswer {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "the server answers a stalled request")
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closes the connection")
	return stalledAnswer{resp.StatusCode, resp.Close}
}

// A client cannot hold a connection by trickling a body: the whole body must arrive within
// BodyTimeout, an ingest may pause at most IngestIdleTimeout between reads, and a refusal
// decided before the body was read closes the connection.
func TestSlowBodiesAndEarlyRefusalsLetTheConnectionGo(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w, func(cfg *httpapi.Config) {
		cfg.BodyTimeout, cfg.IngestIdleTimeout = 300*time.Millisecond, 300*time.Millisecond
		streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
		require.NoError(t, err)
		cfg.Streams = streams
	})
	prod := token(t, "svc", "producer")
	openHTTP(t, c, w, "m")

	// A JSON body that stops after one byte.
	conn, br := rawConn(t, c.base, "POST /v1/streams/m/append HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+prod+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	ans := answerAndClose(t, conn, br)
	require.GreaterOrEqual(t, ans.status, 400)
	require.Less(t, ans.status, 500)

	// An ingest that sends some text and then pauses: what came is pushed, then 408.
	conn, br = rawConn(t, c.base, "POST /v1/streams/m/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+prod+
		"\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
	ans = answerAndClose(t, conn, br)
	require.Equal(t, http.StatusRequestTimeout, ans.status)
	st, _ := w.plane.Stream("m")
	require.Equal(t, producer.Seq(3), st.Seq())

	// Anonymous, with a body it will never finish: 401, and the connection goes.
	for _, path := range []string{"/v1/stream/anon", "/v1/streams/m/ingest"} {
		conn, br = rawConn(t, c.base, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\nabc")
		ans = answerAndClose(t, conn, br)
		require.Equal(t, http.StatusUnauthorized, ans.status, path)
		require.True(t, ans.close, "%s: the refusal says Connection: close", path)
	}

	// The stream is still whole and can be sealed.
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/close", prod, nil).status)
	text, status := w.db.DurableText(t, "m")
	require.Equal(t, "abc", text)
	require.Equal(t, "complete", status)
}

// One token subject cannot hold more waiting reads than its cap, nor the instance more than
// its own: past either, 429 with Retry-After; a slot comes back when its reader leaves.
func TestEventStreamsAreCappedPerSubjectAndInAll(t *testing.T) {
	t.Parallel()
	w := setup(t)
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	require.NoError(t, err)
	c := serve(t, w, func(cfg *httpapi.Config) {
		cfg.MaxEventStreams, cfg.MaxEventStreamsPerSubject = 3, 2
		cfg.Streams = streams
	})
	prod := token(t, "svc", "producer")
	openHTTP(t, c, w, "m")
	// open starts a waiting read and answers its status and Retry-After; leave ends it.
	open := func(tok, path string) (status int, retryAfter string, leave func()) {
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		leave = func() { cancel(); _ = resp.Body.Close() }
		t.Cleanup(leave)
		return resp.StatusCode, resp.Header.Get("Retry-After"), leave
	}
	alice, bob := token(t, "alice", ""), token(t, "svc2", "producer")
	first, _, leave := open(alice, "/v1/streams/m/events")
	require.Equal(t, http.StatusOK, first)
	second, _, _ := open(alice, "/v1/streams/m/events")
	require.Equal(t, http.StatusOK, second)
	third, retry, _ := open(alice, "/v1/streams/m/events")
	require.Equal(t, http.StatusTooManyRequests, third, "alice's cap")
	require.NotEmpty(t, retry)
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/s", prod, text("text/plain"), "x").status)
	fourth, _, _ := open(bob, "/v1/stream/s?offset=-1&live=sse")
	require.Equal(t, http.StatusOK, fourth, "another subject has room")
	fifth, _, _ := open(bob, "/v1/stream/s?offset=-1&live=long-poll")
	require.Equal(t, http.StatusTooManyRequests, fifth, "the instance's cap")
	// alice's first reader leaves: its slot comes back (once the server sees it go).
	leave()
	eventually.True(t, func() bool {
		status, _, leave := open(bob, "/v1/stream/s?offset=-1&live=sse")
		defer leave()
		return status == http.StatusOK
	})
}

// A path deleted and created again is another stream: a client's ETag from the old one must not
// answer 304 for the new one's content, even when it is the same range. And Producer-Id and
// Stream-Seq are bounded (they are stored with the stream).
func TestProtocolIncarnationsAndBoundedHeaders(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/e", prod, text("text/plain"), "same").status)
	first := c.ds("GET", "/v1/stream/e?offset=0000000000000000", prod, nil, "")
	require.Equal(t, http.StatusOK, first.status)
	tag := first.h.Get("ETag")
	require.NotEmpty(t, tag)
	require.Equal(t, http.StatusNotModified, c.ds("GET", "/v1/stream/e?offset=0000000000000000", prod, http.Header{"If-None-Match": {tag}}, "").status)
	require.Equal(t, http.StatusNoContent, c.ds("DELETE", "/v1/stream/e", token(t, "ops", "admin"), nil, "").status)
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/e", prod, text("text/plain"), "same").status)
	again := c.ds("GET", "/v1/stream/e?offset=0000000000000000", prod, http.Header{"If-None-Match": {tag}}, "")
	require.Equal(t, http.StatusOK, again.status, "the old incarnation's tag does not match the new stream")
	require.NotEqual(t, tag, again.h.Get("ETag"))

	long := strings.Repeat("p", 257)
	for _, h := range []http.Header{
		{"Content-Type": {"text/plain"}, "Producer-Id": {long}, "Producer-Epoch": {"0"}, "Producer-Seq": {"0"}},
		{"Content-Type": {"text/plain"}, "Stream-Seq": {long}},
	} {
		require.Equal(t, http.StatusBadRequest, c.ds("POST", "/v1/stream/e", prod, h, "x").status)
	}
}

// A catch-up read of a long stream is paged (about checkpoint.ProtocolReadBytes a response), so
// one request cannot make the server hold the whole stream; a reader following
// Stream-Next-Offset gets it all.
func TestProtocolCatchUpIsPaged(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/long", prod, text("text/plain"), "").status)
	piece := strings.Repeat("x", 3000) // under the test server's 4096-byte body limit
	var want strings.Builder
	for want.Len() < 3*checkpoint.ProtocolReadBytes {
		require.Equal(t, http.StatusNoContent, c.ds("POST", "/v1/stream/long", prod, text("text/plain"), piece).status)
		want.WriteString(piece)
	}
	var got strings.Builder
	offset, pages := "-1", 0
	for {
		r := c.ds("GET", "/v1/stream/long?offset="+offset, prod, nil, "")
		require.Equal(t, http.StatusOK, r.status)
		require.LessOrEqual(t, len(r.body), checkpoint.ProtocolReadBytes+len(piece), "one page")
		got.WriteString(r.body)
		pages++
		offset = r.h.Get("Stream-Next-Offset")
		if r.h.Get("Stream-Up-To-Date") == "true" {
			break
		}
	}
	require.Equal(t, want.String(), got.String())
	require.GreaterOrEqual(t, pages, 3)
}
