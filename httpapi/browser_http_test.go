package httpapi_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
)

func send(t *testing.T, method, url string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func TestCORS(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w, func(cfg *httpapi.Config) { cfg.AllowedOrigins = []string{"https://app.example"} })
	preflight := func(origin string) *http.Response {
		return send(t, http.MethodOptions, c.base+"/v1/streams/m/events", http.Header{
			"Origin": {origin}, "Access-Control-Request-Method": {"GET"},
			"Access-Control-Request-Headers": {"authorization, last-event-id"},
		})
	}
	resp := preflight("https://app.example")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
	require.Contains(t, allowed, "authorization")
	require.Contains(t, allowed, "last-event-id")

	resp = preflight("https://evil.example")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "an origin not allowed gets no grant")

	resp = send(t, http.MethodGet, c.base+"/healthz", http.Header{"Origin": {"https://app.example"}})
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	exposed := resp.Header.Get("Access-Control-Expose-Headers")
	for _, h := range []string{httpapi.HostHeader, "Retry-After", "Www-Authenticate"} {
		require.Contains(t, exposed, h)
	}

	// Nothing configured: no cross-origin grant at all.
	plain := serve(t, w)
	resp = send(t, http.MethodGet, plain.base+"/healthz", http.Header{"Origin": {"https://app.example"}})
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))

	_, err := httpapi.New(httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(t), Secret: secret, AllowedOrigins: []string{"app.example"}})
	require.ErrorContains(t, err, "AllowedOrigins")
}

func TestEventSourceStopsAfterTheEnd(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	openHTTP(t, c, w, "m")
	prod, alice := token(t, "svc", "producer"), token(t, "alice", "")
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/append", prod, []byte(`{"text":"done"}`)).status)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/close", prod, nil).status)

	// A read asks browsers for a reconnect delay first.
	resp := send(t, http.MethodGet, c.base+"/v1/streams/m/events", http.Header{"Authorization": {"Bearer " + alice}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	ev, err := streamtest.ReadSSE(bufio.NewReader(resp.Body))
	require.NoError(t, err)
	require.Equal(t, "2000", ev.Retry)

	// A reconnect at the sealed end: 204, which stops EventSource; before the end it reads on.
	resp = send(t, http.MethodGet, c.base+"/v1/streams/m/events", http.Header{"Authorization": {"Bearer " + alice}, "Last-Event-Id": {"4"}})
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp = send(t, http.MethodGet, c.base+"/v1/streams/m/events", http.Header{"Authorization": {"Bearer " + alice}, "Last-Event-Id": {"2"}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), `"type":"end"`)
}

func TestErrorsForBrowsersAndStrangers(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)

	// 401 carries the RFC 6750 challenge.
	resp := send(t, http.MethodGet, c.base+"/v1/streams/m", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, `Bearer realm="rindle"`, resp.Header.Get("WWW-Authenticate"))
	resp = send(t, http.MethodGet, c.base+"/v1/streams/m", http.Header{"Authorization": {"Bearer nope"}})
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`)

	// Unknown routes and methods are problem details too.
	r := c.do("GET", "/v1/nowhere", "", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "application/problem+json", r.ctype)
	r = c.do("DELETE", "/v1/messages", "", nil)
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	require.Equal(t, "application/problem+json", r.ctype)

	// A 503 says the database is away, and nothing about where it is.
	dead, err := pgxpool.New(t.Context(), w.db.URL)
	require.NoError(t, err)
	dead.Close()
	c = serve(t, w, func(cfg *httpapi.Config) { cfg.Messages = catalogOn(t, dead) })
	r = c.do("GET", "/v1/streams/m", token(t, "alice", ""), nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	for _, leak := range []string{"host=", "user=", "postgres", ".s.PGSQL", "closed pool"} {
		require.NotContains(t, string(r.body), leak)
	}
	// Every 503 says when to retry (issue 19): create, open, the view and the event stream.
	prod := token(t, "svc", "producer")
	for _, probe := range []struct{ method, path, tok, body string }{
		{"POST", "/v1/messages", prod, `{"id":"x","owner":"alice"}`},
		{"POST", "/v1/streams/x/open", prod, ""},
		{"GET", "/v1/streams/m", token(t, "alice", ""), ""},
		{"GET", "/v1/streams/m/events", token(t, "alice", ""), ""},
	} {
		req, err := http.NewRequestWithContext(t.Context(), probe.method, c.base+probe.path, strings.NewReader(probe.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+probe.tok)
		if probe.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, probe.path)
		require.NotEmpty(t, resp.Header.Get("Retry-After"), probe.path)
	}
}
