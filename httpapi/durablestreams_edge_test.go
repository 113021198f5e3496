package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 22, item 4: what an outside run found the protocol accepting, and what each gets now.
func TestStreamsRefuseWhatTheyCannotHonour(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := token(t, "svc", "producer")

	h := text("text/plain")
	h.Set("Stream-Expires-At", "2020-01-01T00:00:00Z")
	r := c.ds("PUT", "/v1/stream/past", prod, h, "x")
	require.Equal(t, http.StatusBadRequest, r.status, "a create already expired is refused, not answered 201 and then 404")
	require.Contains(t, r.body, "not in the future")
	require.Equal(t, http.StatusNotFound, c.ds("HEAD", "/v1/stream/past", prod, nil, "").status, "and made nothing")
	// Found by FuzzStreamsSequence: a TTL of 0 is a stream idle for 0 seconds, gone as it is made.
	h = text("text/plain")
	h.Set("Stream-TTL", "0")
	r = c.ds("PUT", "/v1/stream/zero", prod, h, "x")
	require.Equal(t, http.StatusBadRequest, r.status, "a create whose TTL is 0 is refused, not answered 201 and then 404")
	require.Contains(t, r.body, "Stream-TTL is 0")
	require.Equal(t, http.StatusNotFound, c.ds("HEAD", "/v1/stream/zero", prod, nil, "").status, "and made nothing")
	h.Set("Stream-TTL", "1")
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/zero", prod, h, "x").status, "a TTL of 1 second is a stream")

	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/ok", prod, text("text/plain"), "x").status)
	r = c.ds("POST", "/v1/stream/ok", prod, text("text/plain; ===="), "y")
	require.Equal(t, http.StatusBadRequest, r.status, "an append's malformed content type is refused")
	require.Contains(t, r.body, "not a media type")
	require.Equal(t, "x", c.ds("GET", "/v1/stream/ok", prod, nil, "").body, "and appended nothing")

	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/j", prod, text("application/json"), `[{"a":1},{"b":"x"}]`).status)
	r = c.ds("GET", "/v1/stream/j?offset=0000000000000003", prod, nil, "")
	require.Equal(t, http.StatusBadRequest, r.status, "a JSON read from inside a message: %s", r.body)
	require.Contains(t, r.body, "inside a JSON message")
	r = c.ds("GET", "/v1/stream/j?offset=0000000000000008", prod, nil, "")
	require.Equal(t, http.StatusOK, r.status, "a message boundary inside an append is a boundary")
	require.JSONEq(t, `[{"b":"x"}]`, r.body)
	r = c.ds("GET", "/v1/stream/j?offset=0000000000000003&live=long-poll", prod, nil, "")
	require.Equal(t, http.StatusBadRequest, r.status, "live reads too")

	// A JSON create's body of JSON white space makes an empty stream; other white space (here
	// U+00A0 and U+0085, which Unicode calls space and JSON does not) is not JSON: 400, and
	// nothing is made, rather than a 201 that dropped the body.
	require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/blank", prod, text("application/json"), " \t\r\n").status)
	require.Equal(t, "[]", c.ds("GET", "/v1/stream/blank", prod, nil, "").body)
	for name, body := range map[string]string{"nbsp": "\u00a0", "nel": "\u0085", "nbsp-value": "\u00a01"} {
		r = c.ds("PUT", "/v1/stream/"+name, prod, text("application/json"), body)
		require.Equal(t, http.StatusBadRequest, r.status, "%q: %s", body, r.body)
		require.Contains(t, r.body, "not valid JSON")
		require.Equal(t, http.StatusNotFound, c.ds("HEAD", "/v1/stream/"+name, prod, nil, "").status, "and made nothing")
		r = c.ds("POST", "/v1/stream/blank", prod, text("application/json"), body)
		require.Equal(t, http.StatusBadRequest, r.status, "an append of %q: %s", body, r.body)
		require.Contains(t, r.body, "not valid JSON")
	}
	require.Equal(t, "[]", c.ds("GET", "/v1/stream/blank", prod, nil, "").body, "and appended nothing")
}
