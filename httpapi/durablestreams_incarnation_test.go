package httpapi_test

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
)

// Issue 23: an offset names the stream that handed it out (its incarnation, then the position),
// so a path deleted and created again never answers the old stream's offsets as its own, and
// nothing keyed by path and offset (an HTTP cache) can answer for one with the other's body.
func TestStreamsOffsetsNameTheirStream(t *testing.T) {
	t.Parallel()
	w := setup(t)
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	require.NoError(t, err)
	c, srv := serveServer(t, w, func(c *httpapi.Config) {
		c.Streams = streams
		c.StreamsLongPoll = time.Hour // only a wake ends a wait
		c.StreamsPollInterval = time.Hour
	})
	prod := token(t, "svc", "producer admin")
	const p = "/v1/stream/again"
	r := c.ds("PUT", p, prod, text("text/plain"), "first")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	oldEnd := r.h.Get("Stream-Next-Offset")
	requireOffset(t, 5, oldEnd)
	require.Equal(t, http.StatusNoContent, c.ds("DELETE", p, prod, nil, "").status)
	r = c.ds("PUT", p, prod, text("text/plain"), "again")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	newEnd := r.h.Get("Stream-Next-Offset")
	requireOffset(t, 5, newEnd)
	require.Greater(t, newEnd, oldEnd, "the new stream's offsets sort after the old one's")
	require.Equal(t, http.StatusNoContent, c.ds("POST", p, prod, text("text/plain"), "+new").status)

	for _, live := range []string{"", "&live=long-poll", "&live=sse"} {
		r = c.ds("GET", p+"?offset="+oldEnd+live, prod, nil, "")
		require.Equal(t, http.StatusGone, r.status, "the old stream's offset%s: %s", live, r.body)
		require.Contains(t, r.body, "created again")
	}

	// Its own offsets read, and may be kept by a cache in front.
	r = c.ds("GET", p+"?offset="+newEnd, prod, nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "+new", r.body)
	require.Empty(t, r.h.Get("X-Accel-Expires"))
	requireOffset(t, 9, r.h.Get("Stream-Next-Offset"))
	// Offsets naming no stream (a hand-written start, the form before incarnations) read too,
	// and carry X-Accel-Expires: 0: the same request once named the old stream's position.
	for _, o := range []string{"-1", "0000000000000000_0000000000000005", "0000000000000005"} {
		r = c.ds("GET", p+"?offset="+o, prod, nil, "")
		require.Equal(t, http.StatusOK, r.status, o)
		require.Equal(t, "0", r.h.Get("X-Accel-Expires"), o)
		requireOffset(t, 9, r.h.Get("Stream-Next-Offset"), o)
	}
	r = c.ds("GET", p+"?offset=9999999999999999-0000000000000005", prod, nil, "")
	require.Equal(t, http.StatusBadRequest, r.status, "a later stream's offset: %s", r.body)

	// A fork reads its ancestors' offsets up to where it shares their data, and hands out its own.
	const src, f, g = "/v1/stream/line", "/v1/stream/line-f", "/v1/stream/line-g"
	r = c.ds("PUT", src, prod, text("text/plain"), "abc")
	require.Equal(t, http.StatusCreated, r.status)
	at3 := r.h.Get("Stream-Next-Offset")
	r = c.ds("POST", src, prod, text("text/plain"), "def")
	require.Equal(t, http.StatusNoContent, r.status)
	at6 := r.h.Get("Stream-Next-Offset")
	r = c.ds("PUT", f, prod, fork(src, "", at6), "")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	fAt6 := r.h.Get("Stream-Next-Offset")
	require.Equal(t, http.StatusNoContent, c.ds("POST", f, prod, text("text/plain"), "ghi").status)
	r = c.ds("PUT", g, prod, fork(f, "", at3), "")
	require.Equal(t, http.StatusCreated, r.status, "a fork at its source's source's offset: %s", r.body)
	require.Equal(t, http.StatusNoContent, c.ds("POST", g, prod, text("text/plain"), "xyz").status)
	for _, tc := range []struct {
		stream, offset, want string
	}{
		{f, at3, "defghi"}, {f, at6, "ghi"}, {f, fAt6, "ghi"},
		{g, at3, "xyz"}, // the grandparent's offset, at the fork point
	} {
		r = c.ds("GET", tc.stream+"?offset="+tc.offset, prod, nil, "")
		require.Equal(t, http.StatusOK, r.status, "%s at %s: %s", tc.stream, tc.offset, r.body)
		require.Equal(t, tc.want, r.body, "%s at %s", tc.stream, tc.offset)
	}
	for _, tc := range []struct{ stream, offset string }{
		{g, at6},  // the grandparent's, past where g shares its data
		{g, fAt6}, // the parent's, past the fork point
	} {
		r = c.ds("GET", tc.stream+"?offset="+tc.offset, prod, nil, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s at %s: %s", tc.stream, tc.offset, r.body)
		require.Contains(t, r.body, "fork point")
	}
	r = c.ds("PUT", "/v1/stream/line-h", prod, fork(src, "", newEnd), "")
	require.Equal(t, http.StatusBadRequest, r.status, "a fork at another stream's offset: %s", r.body)
	require.Contains(t, r.body, "another stream")

	// A long-poll waiting at the stream's tail while another instance deletes the path and
	// creates it again (with data past that offset), then wakes this one: the reader is answered
	// 410 (or 404), not with the new stream's data under the old stream's offsets.
	same := func(a, b string) bool { return a == b }
	for round := range 3 {
		r = c.ds("GET", p, prod, nil, "")
		tail := r.h.Get("Stream-Next-Offset")
		done := make(chan dsReply, 1)
		go func() { done <- c.ds("GET", p+"?offset="+tail+"&live=long-poll", prod, nil, "") }()
		for httpapi.StreamsWaitedOn(srv) == 0 {
			runtime.Gosched()
		}
		require.NoError(t, streams.Delete(t.Context(), "again"))
		_, _, err := streams.Create(t.Context(), checkpoint.CreateStream{Path: "again", ContentType: "text/plain", SameType: same,
			Text: fmt.Sprintf("a longer stream than before, round %d", round)})
		require.NoError(t, err)
		srv.StreamChanged("again")
		r = <-done
		// 410 when it reads after the create; 404 if the view's news of the delete woke it
		// before (CDC may be that quick). Never the new stream's data.
		require.Contains(t, []int{http.StatusGone, http.StatusNotFound}, r.status, "round %d: %s", round, r.body)
	}
}
