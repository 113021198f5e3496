package producer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/clocktest"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

func TestAppendSSE(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		frame producer.Frame
		want  string
	}{
		{producer.Frame{Type: producer.FrameOpen, StreamID: "m", From: 0, Seq: 3}, "id: 0\ndata: {\"type\":\"open\",\"streamId\":\"m\",\"from\":0,\"seq\":3,\"durableSeq\":0,\"ended\":false}\n\n"},
		{chunk(3, 5, "a\nb"), "id: 5\ndata: {\"type\":\"chunk\",\"from\":3,\"seq\":5,\"text\":\"a\\nb\"}\n\n"},
		{durable(4), "id: 4\ndata: {\"type\":\"durable\",\"seq\":4}\n\n"},
		{end(5), "id: 5\ndata: {\"type\":\"end\",\"seq\":5,\"status\":\"complete\"}\n\n"},
		{stale(1, 2), "data: {\"type\":\"stale\",\"floorSeq\":1,\"durableSeq\":2}\n\n"},
		{producer.Frame{Type: producer.FrameAbsent}, "data: {\"type\":\"absent\"}\n\n"},
	} {
		require.Equal(t, tc.want, string(producer.AppendSSE(nil, tc.frame)))
	}
}

func TestParseResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, lastEventID, from string
		want                    producer.Seq
		err                     string
	}{
		{"Neither", "", "", 0, ""},
		{"FromOnly", "", "12", 12, ""},
		{"LastEventIDWins", "40", "12", 40, ""},
		{"LastEventIDZero", "0", "12", 0, ""},
		{"MalformedFrom", "", "12abc", 0, `from "12abc"`},
		{"NegativeFrom", "", "-3", 0, `from "-3"`},
		{"FractionalFrom", "", "1.5", 0, `from "1.5"`},
		{"MalformedLastEventID", "x", "12", 0, `Last-Event-ID "x"`},
		{"Overflow", "", "99999999999999999999", 0, "from"},
		{"Huge", "", strings.Repeat("9", 100), 0, "from"},
		{"Spaces", "", " 5", 0, "from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := producer.ParseResume(tc.lastEventID, tc.from)
			if tc.err != "" {
				var re *producer.ResumeError
				require.ErrorAs(t, err, &re)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// sseServer serves a plane's streams the way httpapi will: parse the resume point, subscribe,
// write SSE.
func sseServer(t *testing.T, plane *producer.Plane, cfg producer.SSEConfig) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, err := producer.ResumeFromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sub, err := plane.Subscribe(r.Context(), producer.SubscribeInput{StreamID: r.URL.Query().Get("id"), From: from})
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		_ = producer.WriteSSE(r.Context(), w, sub, cfg)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

func TestSSEHeadersKeepAliveAndIDs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	require.NoError(t, s.Push("hi"))
	keepAlive := clocktest.New()
	srv := sseServer(t, w.plane, producer.SSEConfig{Clock: keepAlive})
	resp := get(t, srv.URL+"?id=m&from=1", "")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache, no-transform", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))
	r := bufio.NewReader(resp.Body)
	ev, err := streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Equal(t, "1", ev.ID, "open's id is its from, even at a small offset")
	ev, err = streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Equal(t, "2", ev.ID)
	require.JSONEq(t, `{"type":"chunk","from":1,"seq":2,"text":"i"}`, ev.Data)
	// Idle: the keep-alive comment, on the clock's cadence.
	eventually.True(t, func() bool { return keepAlive.Pending() > 0 })
	keepAlive.Advance(producer.DefaultKeepAlive)
	ev, err = streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Equal(t, ": ping", ev.Comment)
	require.NoError(t, s.Close(t.Context()))
	for {
		ev, err = streamtest.ReadSSE(r)
		require.NoError(t, err)
		var f producer.Frame
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &f))
		if f.Type == producer.FrameEnd {
			require.Equal(t, "2", ev.ID)
			break
		}
	}
	_, err = streamtest.ReadSSE(r)
	require.ErrorIs(t, err, io.EOF, "the response ends after end")
}

// The keep-alive pings only after KeepAlive without a write: frames written within the period
// push the ping back to KeepAlive after the last of them.
func TestSSEKeepAliveOnlyWhenIdle(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	keepAlive := clocktest.New()
	srv := sseServer(t, w.plane, producer.SSEConfig{Clock: keepAlive})
	resp := get(t, srv.URL+"?id=m", "")
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	ev, err := streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Equal(t, "0", ev.ID, "the open frame")
	eventually.True(t, func() bool { return keepAlive.Pending() > 0 })
	keepAlive.Advance(producer.DefaultKeepAlive / 2)
	require.NoError(t, s.Push("a"))
	ev, err = streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Equal(t, "1", ev.ID)
	// The period ends with a write half a period old: no ping, a new period to its end.
	keepAlive.Advance(producer.DefaultKeepAlive / 2)
	eventually.True(t, func() bool { return keepAlive.Pending() > 0 })
	require.NoError(t, s.Push("b"))
	ev, err = streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Empty(t, ev.Comment, "no ping while frames flow")
	require.Equal(t, "2", ev.ID)
	// Idle for a whole KeepAlive: the ping.
	keepAlive.Advance(producer.DefaultKeepAlive)
	eventually.True(t, func() bool { return keepAlive.Pending() > 0 })
	keepAlive.Advance(producer.DefaultKeepAlive)
	ev, err = streamtest.ReadSSE(r)
	require.NoError(t, err)
	require.Equal(t, ": ping", ev.Comment)
}

func TestSSEBadResumeIs400(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	srv := sseServer(t, w.plane, producer.SSEConfig{})
	resp := get(t, srv.URL+"?id=m&from=-1", "")
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestSSEReconnectsWithLastEventIDKeepSplice drops the connection at random points while the
// answer streams, and reconnects the way EventSource does: with the last id seen.
func TestSSEReconnectsWithLastEventIDKeepSplice(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 7 })
	s := w.open(t, "m")
	srv := sseServer(t, w.plane, producer.SSEConfig{})
	var produced strings.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	pushed := 0
	// push produces up to n more deltas and seals the stream after the 400th, so production
	// interleaves with reading deterministically: some deltas land between connections (the
	// replay serves them), some while a connection is open (the live tail does).
	push := func(n int) {
		for ; n > 0 && pushed < 400; n-- {
			d := fmt.Sprintf("tok%d😀 ", pushed)
			produced.WriteString(d)
			require.NoError(t, s.Push(d))
			pushed++
		}
		if pushed == 400 {
			pushed++
			require.NoError(t, s.Close(t.Context()))
		}
	}
	text, lastID := "", ""
	reconnects := 0
	for ended := false; !ended; reconnects++ {
		push(rng.IntN(10))
		resp := get(t, srv.URL+"?id=m", lastID)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		r := bufio.NewReader(resp.Body)
		budget := 2 + rng.IntN(6)
		for i := range budget {
			if i == 1 {
				push(3 + rng.IntN(8)) // enough frames that the rest of the budget never waits forever
			}
			ev, err := streamtest.ReadSSE(r)
			require.NoError(t, err)
			var f producer.Frame
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &f))
			if at, ok := f.ResumePoint(); ok {
				require.Equal(t, strconv.FormatInt(int64(at), 10), ev.ID)
				lastID = ev.ID
			} else {
				require.False(t, ev.HasID, "no id on %s", f.Type)
			}
			if f.Type == producer.FrameOpen {
				text = producer.Slice16(text, 0, f.From)
			}
			text, err = producer.Splice(text, f)
			require.NoError(t, err)
			if f.Type == producer.FrameEnd {
				ended = true
				break
			}
			require.NotEqual(t, producer.FrameStale, f.Type)
			require.NotEqual(t, producer.FrameAbsent, f.Type)
		}
		resp.Body.Close()
	}
	require.Equal(t, produced.String(), text)
	require.Greater(t, reconnects, 20)
}

// TestSSESlowClientIsDroppedWithStale stops reading while the producer keeps writing: the
// socket fills, the handler blocks in Write, the subscriber's bounded queue overflows, and the
// client, once it reads again, finds stale at the end instead of an unbounded backlog.
func TestSSESlowClientIsDroppedWithStale(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.MaxQueuedFrames = 4; c.CheckpointChars = 1 << 30 })
	s := w.open(t, "m")
	srv := sseServer(t, w.plane, producer.SSEConfig{})
	resp := get(t, srv.URL+"?id=m", "")
	defer resp.Body.Close()
	big := strings.Repeat("x", 64<<10)
	for range 400 { // 25 MiB: more than any loopback socket buffers
		require.NoError(t, s.Push(big))
	}
	r := bufio.NewReader(resp.Body)
	var last producer.Frame
	frames := 0
	for {
		ev, err := streamtest.ReadSSE(r)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &last))
		frames++
		if last.Terminal() {
			break
		}
	}
	require.Equal(t, producer.FrameStale, last.Type)
	require.Less(t, frames, 400, "the backlog was bounded, not delivered whole")
}

// The live plane's shared encoding of a frame is exactly what AppendSSE makes of it, for every
// reader.
func TestSharedEncodingIsTheFramesSSE(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	subs := []*producer.Subscription{w.subscribe(t, "m", 0), w.subscribe(t, "m", 0), w.subscribe(t, "m", 0)}
	for _, d := range []string{"héllo", " 😀", "\n\"quoted\"\t", "\u2028end"} {
		require.NoError(t, s.Push(d))
	}
	require.NoError(t, s.Close(t.Context()))
	for _, sub := range subs {
		shared := 0
		for {
			f, enc, err := sub.NextEncoded(t.Context())
			if err != nil {
				break
			}
			if enc != nil {
				shared++
				require.Equal(t, string(producer.AppendSSE(nil, f)), string(enc))
			}
		}
		require.Positive(t, shared, "live frames carry their encoding")
	}
}

// flushCounter is a ResponseWriter that counts its flushes.
type flushCounter struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	flushes int
}

func (f *flushCounter) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ResponseRecorder.Write(b)
}

func (f *flushCounter) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	f.ResponseRecorder.Flush()
}

func (f *flushCounter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes
}

// blockingReader has no frame until its context ends.
type blockingReader struct{}

func (blockingReader) Next(ctx context.Context) (producer.Frame, error) {
	<-ctx.Done()
	return producer.Frame{}, context.Cause(ctx)
}

func (blockingReader) Close() {}

// The head (status, headers, retry) goes out in the same flush as the frames already queued, as
// a join's are; with nothing queued, it is flushed at once, so the client sees the stream open.
func TestSSEHeadGoesWithTheFirstFrames(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	require.NoError(t, s.Push("hello"))
	require.NoError(t, s.Close(t.Context()))
	sub, err := w.plane.Subscribe(t.Context(), producer.SubscribeInput{StreamID: "m"})
	require.NoError(t, err)
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	require.NoError(t, producer.WriteSSE(t.Context(), rec, sub, producer.SSEConfig{Retry: time.Second}))
	require.Equal(t, 1, rec.count(), "head, open, chunk and end in one flush")
	body := rec.Body.String()
	require.True(t, strings.HasPrefix(body, "retry: 1000\n\nid: 0\n"), body)
	require.Contains(t, body, `"text":"hello"`)
	require.Contains(t, body, `"type":"end"`)

	idle := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- producer.WriteSSE(ctx, idle, blockingReader{}, producer.SSEConfig{Retry: time.Second}) }()
	eventually.True(t, func() bool { return idle.count() == 1 }, "the head is flushed without waiting for a frame")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, http.StatusOK, idle.Code)
	require.Equal(t, "retry: 1000\n\n", idle.Body.String())
}
