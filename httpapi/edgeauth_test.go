package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
)

// TestEdgeAuthAnswersTheCache: what EdgeAuth tells an HTTP cache for each kind of request. A
// missing or bad token is refused (401 with the challenge) and a non-admin naming a tenant gets
// 403, so the cache refuses them itself; an admin's malformed tenant passes with no key, for the
// origin's 400; a protocol read gets a key naming its tenant and either
// the producer class or its subject; a write, a route other than the protocol's, or a token
// narrowed to another stream gets no key (the cache passes it to the origin uncached); and a
// cache that forgets the original request's URI or method is told so (400).
func TestEdgeAuthAnswersTheCache(t *testing.T) {
	t.Parallel()
	edge, err := httpapi.NewEdgeAuth(httpapi.EdgeAuthConfig{Secret: secret})
	require.NoError(t, err)
	_, err = httpapi.NewEdgeAuth(httpapi.EdgeAuthConfig{Secret: []byte("short")})
	require.ErrorContains(t, err, "Secret")

	ask := func(method, uri string, header http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		for k, v := range header {
			req.Header[k] = v
		}
		if method != "" {
			req.Header.Set("X-Original-Method", method)
		}
		if uri != "" {
			req.Header.Set("X-Original-URI", uri)
		}
		rec := httptest.NewRecorder()
		edge.ServeHTTP(rec, req)
		return rec
	}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	const read = "/v1/stream/room/1?offset=0000000000000004&live=long-poll&cursor=7"
	reader := tenantToken(t, "a", "alice", "", "")

	for _, c := range []struct {
		name, method, uri string
		header            http.Header
		status            int
		key               string
	}{
		{"no token", "GET", read, nil, 401, ""},
		{"a bad token", "GET", read, bearer(reader + "x"), 401, ""},
		{"a reader", "GET", read, bearer(reader), 204, "t=a&s=alice"},
		{"a reader, token in the query", "GET", read + "&access_token=" + reader, nil, 204, "t=a&s=alice"},
		{"a reader's HEAD", "HEAD", "/v1/stream/room/1", bearer(reader), 204, "t=a&s=alice"},
		{"a subject needing escapes", "GET", read, bearer(tenantToken(t, "a", "a&p", "", "")), 204, "t=a&s=a%26p"},
		{"the default tenant", "GET", read, bearer(tenantToken(t, "", "alice", "", "")), 204, "t=&s=alice"},
		{"a producer", "GET", read, bearer(tenantToken(t, "a", "app", "producer", "")), 204, "t=a&p"},
		{"an admin in another tenant", "GET", read, http.Header{"Authorization": {"Bearer " + tenantToken(t, "a", "ops", "admin", "")}, "Rindle-Tenant": {"b"}}, 204, "t=b&p"},
		{"a reader naming a tenant", "GET", read, http.Header{"Authorization": {"Bearer " + reader}, "Rindle-Tenant": {"b"}}, 403, ""},
		{"an admin naming a malformed tenant", "GET", read, http.Header{"Authorization": {"Bearer " + tenantToken(t, "a", "ops", "admin", "")}, "Rindle-Tenant": {"b\x00"}}, 204, ""},
		{"a token narrowed to this stream", "GET", read, bearer(tenantToken(t, "a", "alice", "", "room/1")), 204, "t=a&s=alice"},
		{"a token narrowed to another stream", "GET", read, bearer(tenantToken(t, "a", "alice", "", "room/2")), 204, ""},
		{"an append", "POST", "/v1/stream/room/1", bearer(reader), 204, ""},
		{"another route", "GET", "/v1/streams/x/events", bearer(reader), 204, ""},
		{"no original URI", "GET", "", bearer(reader), 400, ""},
		{"no original method", "", read, bearer(reader), 400, ""},
	} {
		rec := ask(c.method, c.uri, c.header)
		require.Equal(t, c.status, rec.Code, "%s: %s", c.name, rec.Body)
		require.Equal(t, c.key, rec.Header().Get(httpapi.EdgeKeyHeader), c.name)
		if c.status == 401 {
			require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer", c.name)
		}
	}
}
