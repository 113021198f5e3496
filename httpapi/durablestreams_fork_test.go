package httpapi_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
)

// fork is the header set of a fork of src (a path under /v1/stream/), at offset off when not
// empty, with a content type when ct is not empty.
func fork(src, ct, off string) http.Header {
	h := http.Header{"Stream-Forked-From": {src}}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	if off != "" {
		h.Set("Stream-Fork-Offset", off)
	}
	return h
}

// Issue 22: a fork copies its source up to the fork point and then lives its own life; the
// source's deletion while the fork lives is soft (410, its path held), and the last fork's
// deletion collects it.
func TestStreamsForkLifecycle(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer admin")
	const src, f, g = "/v1/stream/conv", "/v1/stream/conv-edit", "/v1/stream/conv-edit-again"
	r := c.ds("PUT", src, prod, text("text/plain"), "héllo")
	require.Equal(t, http.StatusCreated, r.status)
	mid := r.h.Get("Stream-Next-Offset")
	require.Equal(t, http.StatusNoContent, c.ds("POST", src, prod, text("text/plain"), " wörld").status)

	r = c.ds("PUT", f, prod, fork(src, "", mid), "")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	requireOffset(t, offsetSeq(t, mid), r.h.Get("Stream-Next-Offset"), "a fork keeps its source's positions")
	require.NotEqual(t, mid, r.h.Get("Stream-Next-Offset"), "and names itself in the offsets it hands out")
	require.Equal(t, "text/plain", r.h.Get("Content-Type"), "the type is inherited")
	for k := range r.h {
		require.False(t, strings.HasPrefix(k, "Stream-Fork"), "forks are transparent: no %s", k)
	}
	require.Equal(t, http.StatusOK, c.ds("PUT", f, prod, fork(src, "", mid), "").status, "the same fork again is confirmed")
	require.Equal(t, http.StatusConflict, c.ds("PUT", f, prod, fork(src, "", "0000000000000000"), "").status, "another fork point is another stream")

	require.Equal(t, http.StatusNoContent, c.ds("POST", f, prod, text("text/plain"), " there").status)
	require.Equal(t, http.StatusNoContent, c.ds("POST", src, prod, text("text/plain"), "!").status)
	require.Equal(t, "héllo there", c.ds("GET", f, prod, nil, "").body, "the fork sees none of the source's later appends")
	require.Equal(t, "héllo wörld!", c.ds("GET", src, prod, nil, "").body, "nor the source the fork's")
	require.Equal(t, " there", c.ds("GET", f+"?offset="+mid, prod, nil, "").body, "reads past the fork point are the fork's own")

	// A forked answer is an ordinary message: its text is in the messages row's chunks.
	var seq int64
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), "SELECT seq FROM messages WHERE id = $1", checkpoint.ProtocolMessageID("conv-edit")).Scan(&seq))
	require.EqualValues(t, len("hello there"), seq)

	r = c.ds("PUT", g, prod, fork(f, "text/plain", ""), "")
	require.Equal(t, http.StatusCreated, r.status, r.body)

	// The middle of the chain is deleted: soft, since g is a fork of it.
	require.Equal(t, http.StatusNoContent, c.ds("DELETE", f, prod, nil, "").status)
	for _, m := range []string{"HEAD", "GET", "POST", "DELETE"} {
		require.Equal(t, http.StatusGone, c.ds(m, f, prod, text("text/plain"), "x").status, m)
	}
	require.Equal(t, http.StatusConflict, c.ds("PUT", f, prod, text("text/plain"), "").status, "its path stays taken")
	require.Equal(t, http.StatusConflict, c.ds("PUT", "/v1/stream/other", prod, fork(f, "", ""), "").status, "a deleted stream is not forked")
	require.Equal(t, "héllo there", c.ds("GET", g, prod, nil, "").body, "the fork of it still reads everything")

	require.Equal(t, http.StatusNoContent, c.ds("DELETE", g, prod, nil, "").status)
	require.Equal(t, http.StatusNotFound, c.ds("HEAD", g, prod, nil, "").status)
	require.Equal(t, http.StatusNotFound, c.ds("HEAD", f, prod, nil, "").status, "the last fork's delete collects its soft-deleted source")
	r = c.ds("PUT", f, prod, text("text/plain"), "new")
	require.Equal(t, http.StatusCreated, r.status, "and frees its path")
	require.Equal(t, "new", c.ds("GET", f, prod, nil, "").body)
	require.Equal(t, "héllo wörld!", c.ds("GET", src, prod, nil, "").body, "the root was never touched")

	var rows int
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM ds_streams WHERE deleted_at IS NOT NULL").Scan(&rows))
	require.Zero(t, rows, "nothing soft-deleted is left behind")
}

// Every fork request the protocol refuses, and what it gets.
func TestStreamsForkRefusals(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const src = "/v1/stream/fsrc"
	r := c.ds("PUT", src, prod, text("text/plain"), "añb")
	require.Equal(t, http.StatusCreated, r.status)
	end := r.h.Get("Stream-Next-Offset")
	require.Equal(t, http.StatusNoContent, c.ds("POST", src, prod, text("text/plain"), "cd").status)
	jsrc := "/v1/stream/fjson"
	require.Equal(t, http.StatusCreated, c.ds("PUT", jsrc, prod, text("application/json"), `[{"a":1},{"b":2}]`).status)

	sub := func(h http.Header, n string) http.Header { h.Set("Stream-Fork-Sub-Offset", n); return h }
	for _, tc := range []struct {
		name   string
		h      http.Header
		status int
	}{
		{"an unknown source", fork("/v1/stream/nope", "", ""), http.StatusNotFound},
		{"an offset past the end", fork(src, "", "0000000000000099"), http.StatusBadRequest},
		{"an offset a later stream handed out", fork(src, "", "9999999999999999-0000000000000000"), http.StatusBadRequest},
		{"the reference's form past its first read sequence", fork(src, "", "0000000000000001_0000000000000000"), http.StatusBadRequest},
		{"an offset inside an append", fork(src, "", "0000000000000001"), http.StatusBadRequest},
		{"a malformed offset", fork(src, "", "12"), http.StatusBadRequest},
		{"another content type", fork(src, "application/json", ""), http.StatusConflict},
		{"a sub-offset without a fork offset", sub(fork(src, "", ""), "1"), http.StatusBadRequest},
		{"a sub-offset without a source", sub(text("text/plain"), "0"), http.StatusBadRequest},
		{"a malformed sub-offset", sub(fork(src, "", "0000000000000000"), "01"), http.StatusBadRequest},
		{"a sub-offset inside a UTF-8 character", sub(fork(src, "", "0000000000000000"), "2"), http.StatusBadRequest},
		{"a sub-offset past the append", sub(fork(src, "", end), "3"), http.StatusBadRequest},
		{"a JSON sub-offset past the messages", sub(fork(jsrc, "", "0000000000000000"), "3"), http.StatusBadRequest},
	} {
		r := c.ds("PUT", "/v1/stream/f-"+strings.ReplaceAll(tc.name, " ", "-"), prod, tc.h, "")
		require.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.body)
		require.Contains(t, r.h.Get("Content-Type"), "problem+json", tc.name)
	}
	var n int
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM ds_streams").Scan(&n))
	require.Equal(t, 2, n, "no refused fork left a row")

	// The sub-offsets that are taken: bytes of text (whole characters), messages of JSON.
	r = c.ds("PUT", "/v1/stream/f-sub", prod, sub(fork(src, "", "0000000000000000_0000000000000000"), "3"), "!")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, "añ!", c.ds("GET", "/v1/stream/f-sub", prod, nil, "").body)
	r = c.ds("PUT", "/v1/stream/f-jsub", prod, sub(fork(jsrc, "", "0000000000000000"), "1"), "")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.JSONEq(t, `[{"a":1}]`, c.ds("GET", "/v1/stream/f-jsub", prod, nil, "").body)
}

// Issue 22: a stream whose type is not text or JSON holds bytes: any bytes, offsets in bytes,
// no view row; a text stream still refuses bytes that are not UTF-8, and says why.
func TestStreamsByteStreams(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const p = "/v1/stream/audio"
	blob := []byte{0x00, 0xff, 0xfe, 'a', 0x80, 0x00}
	r := c.ds("PUT", p, prod, text("application/octet-stream"), string(blob))
	require.Equal(t, http.StatusCreated, r.status, r.body)
	requireOffset(t, 6, r.h.Get("Stream-Next-Offset"), "offsets are bytes")
	require.Equal(t, http.StatusNoContent, c.ds("POST", p, prod, text("application/octet-stream"), "\xc3").status)
	r = c.ds("GET", p, prod, nil, "")
	require.Equal(t, append(blob, 0xc3), []byte(r.body), "the bytes come back exactly")
	requireOffset(t, 7, r.h.Get("Stream-Next-Offset"))
	require.Equal(t, []byte{0x80, 0x00, 0xc3}, []byte(c.ds("GET", p+"?offset=0000000000000004", prod, nil, "").body))

	var views int
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM messages WHERE id = $1", checkpoint.ProtocolMessageID("audio")).Scan(&views))
	require.Zero(t, views, "a byte stream is not an answer: no messages row, no view")

	// A fork of a byte stream is one, cut in bytes.
	h := fork(p, "", "0000000000000006")
	h.Set("Stream-Fork-Sub-Offset", "1")
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/audio-2", prod, h, "").status)
	require.Equal(t, append(blob, 0xc3), []byte(c.ds("GET", "/v1/stream/audio-2", prod, nil, "").body))

	// SSE sends bytes as base64 (the fork is closed first, so the read ends).
	require.Equal(t, http.StatusNoContent, c.ds("POST", "/v1/stream/audio-2", prod, http.Header{"Stream-Closed": {"true"}}, "").status)
	sse := c.ds("GET", "/v1/stream/audio-2?live=sse&offset=0000000000000004", prod, nil, "")
	require.Equal(t, "base64", sse.h.Get("Stream-SSE-Data-Encoding"))
	require.Contains(t, sse.body, "data:"+base64.StdEncoding.EncodeToString([]byte{0x80, 0x00, 0xc3}))

	r = c.ds("PUT", "/v1/stream/notes", prod, text("text/plain"), "\xff")
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.body, "not UTF-8", "a text stream says why it refuses bytes")
	require.Equal(t, http.StatusConflict, c.ds("POST", p, prod, text("text/plain"), "x").status, "a byte stream's type is its own")
}

// Appends racing on one stream each get their own range: every one is stored exactly once and
// the offsets they were answered tile the stream. (Reading the tail in the statement that waits
// for the stream's lock saw a tail from before the append it waited for: the conformance
// suite's concurrent writers caught it.)
func TestStreamsConcurrentAppendsEachLandOnce(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	for _, ct := range []string{"text/plain", "application/octet-stream"} {
		p := "/v1/stream/race-" + strings.ReplaceAll(ct, "/", "-")
		require.Equal(t, http.StatusCreated, c.ds("PUT", p, prod, text(ct), "").status)
		const writers = 12
		var wg sync.WaitGroup
		ends := make([]string, writers)
		for i := range writers {
			wg.Go(func() {
				r := c.ds("POST", p, prod, text(ct), fmt.Sprintf("<%02d>", i))
				require.Equal(t, http.StatusNoContent, r.status, r.body)
				ends[i] = r.h.Get("Stream-Next-Offset")
			})
		}
		wg.Wait()
		body := c.ds("GET", p, prod, nil, "").body
		require.Len(t, body, 4*writers, ct)
		for i := range writers {
			tag := fmt.Sprintf("<%02d>", i)
			require.Equal(t, 1, strings.Count(body, tag), "%s: %s once", ct, tag)
			end := offsetSeq(t, ends[i])
			require.Equal(t, tag, body[end-4:end], "%s: the offset %s answered for %s ends it", ct, ends[i], tag)
		}
	}
}

// Deleting the two forks of a soft-deleted source at once collects the source: whichever
// delete locks it second sees the first's.
func TestStreamsForksDeletedTogetherCollectTheirSource(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer admin")
	for round := range 8 {
		src := fmt.Sprintf("/v1/stream/together-%d", round)
		require.Equal(t, http.StatusCreated, c.ds("PUT", src, prod, text("text/plain"), "x").status)
		forks := []string{src + "-a", src + "-b"}
		for _, f := range forks {
			require.Equal(t, http.StatusCreated, c.ds("PUT", f, prod, fork(src, "", ""), "").status)
		}
		require.Equal(t, http.StatusNoContent, c.ds("DELETE", src, prod, nil, "").status)
		var wg sync.WaitGroup
		for _, f := range forks {
			wg.Go(func() { require.Equal(t, http.StatusNoContent, c.ds("DELETE", f, prod, nil, "").status) })
		}
		wg.Wait()
		require.Equal(t, http.StatusNotFound, c.ds("HEAD", src, prod, nil, "").status, "round %d", round)
	}
	var left int
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM ds_streams").Scan(&left))
	require.Zero(t, left)
}

// A fork taken while appends land copies a prefix of its source that ends at an append's
// boundary, and answers that boundary as its offset: never half an append, never a gap.
func TestStreamsForkUnderConcurrentAppends(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")
	const src = "/v1/stream/busy"
	require.Equal(t, http.StatusCreated, c.ds("PUT", src, prod, text("text/plain"), "").status)
	const appends, forks = 120, 12
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range appends {
			r := c.ds("POST", src, prod, text("text/plain"), fmt.Sprintf("[%03d]", i))
			require.Equal(t, http.StatusNoContent, r.status, r.body)
		}
	}()
	tails := map[string]string{}
	for i := range forks {
		f := fmt.Sprintf("%s-f%d", src, i)
		r := c.ds("PUT", f, prod, fork(src, "", ""), "")
		require.Equal(t, http.StatusCreated, r.status, r.body)
		tails[f] = r.h.Get("Stream-Next-Offset")
	}
	<-done
	whole := c.ds("GET", src, prod, nil, "").body
	require.Len(t, whole, 5*appends)
	for f, tail := range tails {
		body := c.ds("GET", f, prod, nil, "").body
		require.True(t, strings.HasPrefix(whole, body), "%s is a prefix of its source", f)
		require.Zero(t, len(body)%5, "%s ends at an append's boundary: %q", f, body)
		requireOffset(t, len(body), tail, "%s answered the offset it copied to", f)
	}
}
