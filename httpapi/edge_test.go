package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

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
