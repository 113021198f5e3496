package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
)

// dsReply is a protocol answer: status, headers, body.
type dsReply struct {
	status int
	h      http.Header
	body   string
}

// dsClient bounds each protocol request, so a request that never ends fails its test naming
// itself instead of hanging the binary until its timeout. The bound is a backstop far above
// any answer's time (an SSE read here ends by the stream's close), not a measurement.
var dsClient = &http.Client{Timeout: 2 * time.Minute} //nolint:gochecknoglobals // shared by the tests, safe for concurrent use

// ds sends a protocol request with headers.
func (c client) ds(method, path, tok string, header http.Header, body string) dsReply {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := dsClient.Do(req)
	require.NoError(c.t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err, "%s %s", method, path)
	return dsReply{resp.StatusCode, resp.Header, string(b)}
}

func text(ct string) http.Header { return http.Header{"Content-Type": {ct}} }

// offsetPattern is an offset the server hands out: the stream's incarnation (never 0), then
// the position.
var offsetPattern = regexp.MustCompile(`^([0-9]{16})-([0-9]{16})$`)

// offsetSeq is the position an offset the server handed out names.
func offsetSeq(t *testing.T, offset string) int {
	t.Helper()
	m := offsetPattern.FindStringSubmatch(offset)
	require.NotNil(t, m, "%q is not an offset the server hands out", offset)
	inc, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	require.Positive(t, inc, "%q names no stream", offset)
	seq, err := strconv.Atoi(m[2])
	require.NoError(t, err)
	return seq
}

// requireOffset: offset is one the server hands out, at seq.
func requireOffset(t *testing.T, seq int, offset string, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, seq, offsetSeq(t, offset), msgAndArgs...)
}

// serveStreams serves the protocol with a poll interval longer than any wait in these tests:
// a reader is woken by its own instance's append or by the view, or not at all.
func serveStreams(t *testing.T, w *world) client {
	t.Helper()
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	require.NoError(t, err)
	return serve(t, w, func(c *httpapi.Config) {
		c.Streams = streams
		c.StreamsLongPoll = 3 * time.Second
		c.StreamsPollInterval = time.Hour
	})
}

// Issue 12: a protocol stream's life on the durable plane's tables, with the protocol's answers
// for each bad request, and auth on.
func TestStreamsProtocolRoundTrip(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod, alice := token(t, "svc", "producer"), token(t, "alice", "")
	const p = "/v1/stream/chat/42"

	require.Equal(t, http.StatusUnauthorized, c.ds("PUT", p, "", text("text/plain"), "x").status, "auth stays on")
	require.Equal(t, http.StatusForbidden, c.ds("PUT", p, alice, text("text/plain"), "x").status, "writing needs the producer scope")

	r := c.ds("PUT", p, prod, text("text/plain"), "héllo 😀")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	requireOffset(t, 8, r.h.Get("Stream-Next-Offset"), "offsets are UTF-16 units: 😀 is two")
	require.Equal(t, "nosniff", r.h.Get("X-Content-Type-Options"))
	require.Equal(t, http.StatusOK, c.ds("PUT", p, prod, text("text/plain"), "").status, "the same configuration again: 200")
	require.Equal(t, http.StatusConflict, c.ds("PUT", p, prod, text("application/json"), "").status, "another configuration: 409")

	r = c.ds("POST", p, prod, text("text/plain"), " wörld")
	require.Equal(t, http.StatusNoContent, r.status, r.body)
	requireOffset(t, 14, r.h.Get("Stream-Next-Offset"))
	for _, bad := range []struct {
		why    string
		h      http.Header
		body   string
		status int
	}{
		{"binary is refused: it has no UTF-16 offsets", text("text/plain"), "\xff\xfe", http.StatusBadRequest},
		{"a NUL byte is refused", text("text/plain"), "a\x00b", http.StatusBadRequest},
		{"an empty append", text("text/plain"), "", http.StatusBadRequest},
		{"another content type", text("application/json"), `{"a":1}`, http.StatusConflict},
		{"no content type", http.Header{}, "x", http.StatusBadRequest},
		{"half the producer headers", http.Header{"Content-Type": {"text/plain"}, "Producer-Id": {"p"}}, "x", http.StatusBadRequest},
	} {
		require.Equal(t, bad.status, c.ds("POST", p, prod, bad.h, bad.body).status, bad.why)
	}

	// The text is in the durable plane's tables, where the CDC reader and the view see it.
	var stored, status string
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), `SELECT string_agg(c.text, '' ORDER BY c.seq), min(m.status) FROM messages m
		JOIN message_chunks c ON c.stream_id = m.id WHERE m.id = $1`, checkpoint.ProtocolMessageID("chat/42")).Scan(&stored, &status))
	require.Equal(t, "héllo 😀 wörld", stored, "nothing of the refused appends was kept")
	require.Equal(t, "pending", status, "open, and no live producer's: no drain or sweep seals it")

	r = c.ds("GET", p+"?offset=-1", prod, nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "héllo 😀 wörld", r.body)
	require.Equal(t, "true", r.h.Get("Stream-Up-To-Date"))
	require.Empty(t, r.h.Get("Stream-Closed"))
	etag := r.h.Get("ETag")
	require.Equal(t, http.StatusNotModified, c.ds("GET", p+"?offset=-1", prod, http.Header{"If-None-Match": {etag}}, "").status)
	require.Equal(t, " wörld", c.ds("GET", p+"?offset=0000000000000008", prod, nil, "").body)
	require.Equal(t, http.StatusBadRequest, c.ds("GET", p+"?offset=8", prod, nil, "").status, "an offset this server never handed out")
	require.Equal(t, http.StatusNotFound, c.ds("GET", p, alice, nil, "").status, "a reader who is not its creator")

	r = c.ds("HEAD", p, prod, nil, "")
	require.Equal(t, http.StatusOK, r.status)
	requireOffset(t, 14, r.h.Get("Stream-Next-Offset"))
	require.Equal(t, "no-store", r.h.Get("Cache-Control"))

	r = c.ds("POST", p, prod, http.Header{"Stream-Closed": {"true"}}, "")
	require.Equal(t, http.StatusNoContent, r.status)
	require.Equal(t, "true", r.h.Get("Stream-Closed"))
	r = c.ds("POST", p, prod, text("text/plain"), "late")
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "true", r.h.Get("Stream-Closed"))
	requireOffset(t, 14, r.h.Get("Stream-Next-Offset"))
	r = c.ds("GET", p+"?offset=0000000000000014", prod, nil, "")
	require.Equal(t, "true", r.h.Get("Stream-Closed"), "EOF: an empty read at the end of a closed stream")
	require.NotEqual(t, etag, c.ds("GET", p+"?offset=-1", prod, nil, "").h.Get("ETag"), "the ETag changes with closure")

	require.Equal(t, http.StatusForbidden, c.ds("DELETE", p, prod, nil, "").status, "deleting needs the admin scope")
	admin := token(t, "ops", "admin")
	require.Equal(t, http.StatusNoContent, c.ds("DELETE", p, admin, nil, "").status)
	require.Equal(t, http.StatusNotFound, c.ds("GET", p, prod, nil, "").status)
	require.Equal(t, http.StatusNotFound, c.ds("DELETE", p, admin, nil, "").status)
}

func TestStreamsIdempotentProducer(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/producer"
	require.Equal(t, http.StatusCreated, c.ds("PUT", p, prod, text("text/plain"), "").status)
	send := func(epoch, seq, body string) dsReply {
		return c.ds("POST", p, prod, http.Header{"Content-Type": {"text/plain"}, "Producer-Id": {"w1"},
			"Producer-Epoch": {epoch}, "Producer-Seq": {seq}}, body)
	}
	require.Equal(t, http.StatusOK, send("0", "0", "a").status)
	r := send("0", "0", "a")
	require.Equal(t, http.StatusNoContent, r.status, "a retry after a lost answer is absorbed")
	require.Equal(t, "0", r.h.Get("Producer-Seq"))
	r = send("0", "2", "c")
	require.Equal(t, http.StatusConflict, r.status, "a gap")
	require.Equal(t, "1", r.h.Get("Producer-Expected-Seq"))
	require.Equal(t, http.StatusOK, send("0", "1", "b").status)
	require.Equal(t, http.StatusOK, send("1", "0", "d").status, "a restarted producer's new epoch")
	r = send("0", "2", "zombie")
	require.Equal(t, http.StatusForbidden, r.status, "the old epoch is fenced")
	require.Equal(t, "1", r.h.Get("Producer-Epoch"))
	require.Equal(t, http.StatusBadRequest, send("2", "5", "x").status, "a new epoch starts at 0")
	require.Equal(t, "abd", c.ds("GET", p, prod, nil, "").body)
}

func TestStreamsJSONMode(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/events"
	require.Equal(t, http.StatusCreated, c.ds("PUT", p, prod, text("application/json"), `{"kind": "open"}`).status)
	r := c.ds("POST", p, prod, text("application/json"), `[{"kind":"delta","text":"é😀"}, [1, 2]]`)
	require.Equal(t, http.StatusNoContent, r.status, r.body)
	require.JSONEq(t, `[{"kind":"open"},{"kind":"delta","text":"é😀"},[1,2]]`, c.ds("GET", p, prod, nil, "").body)
	require.Equal(t, http.StatusBadRequest, c.ds("POST", p, prod, text("application/json"), `[]`).status, "an empty batch")
	require.Equal(t, http.StatusBadRequest, c.ds("POST", p, prod, text("application/json"), `{"a":`).status, "not JSON")
	tail := r.h.Get("Stream-Next-Offset")
	require.Equal(t, "[]", c.ds("GET", p+"?offset="+tail, prod, nil, "").body)
}

// A reader waiting on one instance is answered when another instance appends: no instance
// hosts a protocol stream, and the append reaches the waiting instance through CDC and its view.
func TestStreamsLongPollSeesAnotherInstancesAppend(t *testing.T) {
	t.Parallel()
	w := setup(t)
	a, b := serveStreams(t, w), serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/across"
	r := a.ds("PUT", p, prod, text("text/plain"), "one")
	require.Equal(t, http.StatusCreated, r.status)
	tail := r.h.Get("Stream-Next-Offset")
	got := make(chan dsReply, 1)
	go func() { got <- b.ds("GET", p+"?live=long-poll&offset="+tail, prod, nil, "") }()
	time.Sleep(100 * time.Millisecond) // let it wait; the result does not depend on it
	require.Equal(t, http.StatusNoContent, a.ds("POST", p, prod, text("text/plain"), " two").status)
	select {
	case r := <-got:
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, " two", r.body)
		require.NotEmpty(t, r.h.Get("Stream-Cursor"))
	case <-eventually.Late(t):
		t.Fatal("the long-poll on the other instance never saw the append")
	}
	r = b.ds("GET", p+"?live=long-poll&offset=now", prod, nil, "")
	require.Equal(t, http.StatusNoContent, r.status, "nothing new before the timeout")
	require.Equal(t, "true", r.h.Get("Stream-Up-To-Date"))
}

// A protocol stream outlives what seals live streams: a drain (SIGTERM) and another host's
// sweep.
func TestStreamsOutliveDrainAndSweep(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/outlives"
	require.Equal(t, http.StatusCreated, c.ds("PUT", p, prod, text("text/plain"), "before").status)
	require.NoError(t, w.plane.Drain(t.Context()))
	sweeper, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(w.db.Pool), HostID: "another-host"})
	require.NoError(t, err)
	_, err = sweeper.SweepOnce(t.Context())
	require.NoError(t, err)
	r := c.ds("HEAD", p, prod, nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.h.Get("Stream-Closed"))
	require.Equal(t, http.StatusNoContent, c.ds("POST", p, prod, text("text/plain"), " after").status)
	require.Equal(t, "before after", c.ds("GET", p, prod, nil, "").body)
}

func TestStreamsSSE(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/sse"
	require.Equal(t, http.StatusCreated, c.ds("PUT", p, prod, text("text/plain"), "line1\r\nevent: control\rdata: x").status)
	require.Equal(t, http.StatusNoContent, c.ds("POST", p, prod, http.Header{"Stream-Closed": {"true"}}, "").status)
	r := c.ds("GET", p+"?live=sse&offset=-1", prod, nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "text/event-stream", r.h.Get("Content-Type"))
	events := strings.Split(strings.TrimSpace(r.body), "\n\n")
	require.Len(t, events, 2, "one data event, one control event, then the server closes: %q", r.body)
	require.Equal(t, "event: data\ndata:line1\ndata:event: control\ndata:data: x", events[0], "every line terminator starts a data line: nothing is injected")
	require.True(t, bytes.HasPrefix([]byte(events[1]), []byte("event: control\ndata:{")))
	require.Contains(t, events[1], `"streamClosed":true`)
	// SSE data cannot hold a CR, so an SSE client reads LF in its place (the README says so); a
	// catch-up read returns the text as it was appended.
	require.Equal(t, "line1\r\nevent: control\rdata: x", c.ds("GET", p+"?offset=-1", prod, nil, "").body)
	require.Equal(t, http.StatusBadRequest, c.ds("GET", p+"?live=sse", prod, nil, "").status, "a live read needs an offset")
}

// A waiting SSE reader on the appending instance gets each append as it commits (from memory),
// in order, then the close.
func TestStreamsSSEFollowsAppendsLive(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/live"
	require.Equal(t, http.StatusCreated, c.ds("PUT", p, prod, text("text/plain"), "a").status)
	req, err := http.NewRequestWithContext(t.Context(), "GET", c.base+p+"?live=sse&offset=now", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+prod)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			require.NoError(t, err)
			if line == "\n" {
				return strings.Join(lines, "\n")
			}
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
	}
	require.Contains(t, readEvent(), `"upToDate":true`, "the first control event, at the tail")
	for _, piece := range []string{"b", "cé", "😀"} {
		require.Equal(t, http.StatusNoContent, c.ds("POST", p, prod, text("text/plain"), piece).status)
		require.Equal(t, "event: data\ndata:"+piece, readEvent())
		require.Contains(t, readEvent(), "event: control")
	}
	require.Equal(t, http.StatusNoContent, c.ds("POST", p, prod, http.Header{"Stream-Closed": {"true"}}, "").status)
	last := readEvent()
	require.Contains(t, last, `"streamClosed":true`)
	require.Regexp(t, `"streamNextOffset":"[0-9]{15}[1-9]-0000000000000006"`, last)
}

// serveWatchedStreams is serveStreams with the instance fed by checkpoint.Protocol.Watch, as
// rindled does; it returns once the watcher listens. A subject holds one waiting read at a
// time there, so a test can tell when its reader waits.
func serveWatchedStreams(t *testing.T, w *world) client {
	t.Helper()
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	require.NoError(t, err)
	c, srv := serveServer(t, w, func(c *httpapi.Config) {
		c.Streams, c.StreamsLongPoll, c.StreamsPollInterval, c.MaxEventStreamsPerSubject = streams, 30*time.Second, time.Hour, 1
	})
	listening := make(chan struct{})
	var once sync.Once
	ctx, stop := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = streams.Watch(ctx, func(path string) {
			once.Do(func() { close(listening) })
			srv.StreamChanged(path)
		}, 0, nil)
	}()
	t.Cleanup(func() { stop(); <-watched })
	<-listening
	return c
}

// Issue 22: a byte stream has no view row, so another instance's append reaches a reader
// waiting here through PostgreSQL's notifications, not at the next poll (an hour here): the
// long-poll is answered with the bytes. Before notifications it ended in 204 at its deadline.
func TestStreamsLongPollSeesAnotherInstancesByteAppend(t *testing.T) {
	t.Parallel()
	w := setup(t)
	a, b := serveStreams(t, w), serveWatchedStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/bytes-across"
	octets := text("application/octet-stream")
	r := a.ds("PUT", p, prod, octets, "\x00\x01")
	require.Equal(t, http.StatusCreated, r.status)
	got := waitingLongPoll(t, b, p, r.h.Get("Stream-Next-Offset"), prod)
	require.Equal(t, http.StatusNoContent, a.ds("POST", p, prod, octets, "\xff\x00\xfe").status)
	r = <-got
	require.Equal(t, http.StatusOK, r.status, "the long-poll on the other instance ended without the append")
	require.Equal(t, "\xff\x00\xfe", r.body)
	requireOffset(t, 5, r.h.Get("Stream-Next-Offset"))
}

// A stream deleted on one instance ends the long-polls waiting on it on another at once: 404,
// not the 204 of their deadline (30 s) or the poll's (an hour). A byte stream's delete notifies
// (checkpoint.ByteStreamChannel); a text stream's reaches the view through CDC, whose dropped
// entry wakes the waiter.
func TestStreamsLongPollHearsAnotherInstancesDelete(t *testing.T) {
	t.Parallel()
	w := setup(t)
	a, b := serveStreams(t, w), serveWatchedStreams(t, w)
	prod := token(t, "svc", "producer admin")
	for _, ct := range []string{"text/plain", "application/octet-stream"} {
		p := "/v1/stream/gone-" + strings.ReplaceAll(ct, "/", "-")
		r := a.ds("PUT", p, prod, text(ct), "x")
		require.Equal(t, http.StatusCreated, r.status)
		got := waitingLongPoll(t, b, p, r.h.Get("Stream-Next-Offset"), prod)
		require.Equal(t, http.StatusNoContent, a.ds("DELETE", p, prod, nil, "").status)
		r = <-got
		require.Equal(t, http.StatusNotFound, r.status, "%s: the long-poll on the other instance did not hear of the delete: %s", ct, r.body)
	}
}

// waitingLongPoll starts a long-poll of path at offset on c (served by serveWatchedStreams,
// which lets a subject hold one waiting read) and returns once it is in flight: the long-poll
// holds the subject's one waiting read, so a probe gets 429. The probe reads from the start,
// so when it does get the slot it answers at once.
func waitingLongPoll(t *testing.T, c client, path, offset, tok string) <-chan dsReply {
	t.Helper()
	got := make(chan dsReply, 1)
	go func() {
		for { // a 429 here is the probe below holding the slot for a moment
			if r := c.ds("GET", path+"?live=long-poll&offset="+offset, tok, nil, ""); r.status != http.StatusTooManyRequests {
				got <- r
				return
			}
		}
	}()
	eventually.True(t, func() bool {
		return c.ds("GET", path+"?live=long-poll&offset=-1", tok, nil, "").status == http.StatusTooManyRequests
	}, "the long-poll never started waiting")
	return got
}
