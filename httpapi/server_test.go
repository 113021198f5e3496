package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/producer"
)

var secret = []byte("0123456789abcdef0123456789abcdef") //nolint:gochecknoglobals // test key

func token(t testing.TB, sub, scope string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, httpapi.Claims{Scope: scope, RegisteredClaims: jwt.RegisteredClaims{
		Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
	}}).SignedString(secret)
	require.NoError(t, err)
	return tok
}

type client struct {
	t    *testing.T
	base string
}

type reply struct {
	status int
	ctype  string
	body   []byte
}

func (c client) do(method, path, tok string, body []byte) reply {
	c.t.Helper()
	ctype := ""
	if body != nil {
		ctype = "application/json"
	}
	return c.doType(method, path, tok, ctype, body)
}

// doType sends body with the given Content-Type ("" for none).
func (c client) doType(method, path, tok, ctype string, body []byte) reply {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, bytes.NewReader(body))
	require.NoError(c.t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return reply{resp.StatusCode, resp.Header.Get("Content-Type"), b}
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), string(r.body))
	return m
}

func serve(t *testing.T, w *world, change ...func(*httpapi.Config)) client {
	t.Helper()
	c, _ := serveServer(t, w, change...)
	return c
}

// serveServer is serve, with the Server it serves.
func serveServer(t *testing.T, w *world, change ...func(*httpapi.Config)) (client, *httpapi.Server) {
	t.Helper()
	cfg := httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(t), Secret: secret, MaxBodyBytes: 4096}
	for _, f := range change {
		f(&cfg)
	}
	srv, err := httpapi.New(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return client{t: t, base: hs.URL}, srv
}

func TestHTTPRoutesAndErrors(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	alice := token(t, "alice", "")
	mallory := token(t, "mallory", "")

	// Create, and the errors around it.
	r := c.do("POST", "/v1/messages", prod, []byte(`{"id":"m1","owner":"alice","role":"assistant"}`))
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.Equal(t, "m1", r.json(t)["id"])
	r = c.do("POST", "/v1/messages", prod, []byte(`{"id":"m1","owner":"alice"}`))
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "application/problem+json", r.ctype, "errors are RFC 9457 problem details")
	require.Equal(t, http.StatusUnauthorized, c.do("POST", "/v1/messages", "", []byte(`{"owner":"a"}`)).status)
	require.Equal(t, http.StatusUnauthorized, c.do("POST", "/v1/messages", "not-a-jwt", []byte(`{"owner":"a"}`)).status)
	r = c.do("POST", "/v1/messages", alice, []byte(`{"owner":"a"}`))
	require.Equal(t, http.StatusForbidden, r.status, "producer routes need the producer scope")

	// Open; a second open is a 409 with the reason.
	r = c.do("POST", "/v1/streams/m1/open", prod, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r = c.do("POST", "/v1/streams/m1/open", prod, nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Contains(t, r.json(t)["detail"], "already open")

	// Append, and its 400s, 404 and 413.
	r = c.do("POST", "/v1/streams/m1/append", prod, []byte(`{"text":"hello 😀"}`))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.EqualValues(t, 8, r.json(t)["seq"])
	r = c.do("POST", "/v1/streams/m1/append", prod, []byte("{\"text\":\"bad \xff\"}"))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.json(t)["detail"], "not valid UTF-8")
	require.Equal(t, http.StatusBadRequest, c.do("POST", "/v1/streams/m1/append", prod, []byte(`not json`)).status)
	require.Equal(t, http.StatusNotFound, c.do("POST", "/v1/streams/nope/append", prod, []byte(`{"text":"x"}`)).status)
	r = c.do("POST", "/v1/streams/m1/append", prod, []byte(`{"text":"`+strings.Repeat("x", 5000)+`"}`))
	require.Equal(t, http.StatusRequestEntityTooLarge, r.status, "oversized bodies are refused and nothing is pushed")

	// Flush makes it durable; the long-poll sees it.
	r = c.do("POST", "/v1/streams/m1/flush", prod, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.EqualValues(t, 8, r.json(t)["durableSeq"])
	r = c.do("GET", "/v1/streams/m1?after=0&wait=10s", alice, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, "hello 😀", r.json(t)["text"])
	// Parameters that break the documented schema are refused by it: 422 problem details that
	// name the parameter.
	r = c.do("GET", "/v1/streams/m1?after=abc&wait=1s", alice, nil)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	require.Contains(t, string(r.body), "query.after")
	require.Equal(t, http.StatusUnprocessableEntity, c.do("GET", "/v1/streams/m1?after=-1&wait=1s", alice, nil).status)
	require.Equal(t, http.StatusUnprocessableEntity, c.do("GET", "/v1/streams/m1?after=1&wait=soon", alice, nil).status)

	// Denied and missing answer identically, on the JSON route and the SSE route alike.
	denied := c.do("GET", "/v1/streams/m1", mallory, nil)
	missing := c.do("GET", "/v1/streams/ghost", mallory, nil)
	require.Equal(t, http.StatusForbidden, denied.status)
	require.Equal(t, denied, missing, "a denial must not reveal existence")
	deniedSSE := c.do("GET", "/v1/streams/m1/events", mallory, nil)
	missingSSE := c.do("GET", "/v1/streams/ghost/events", mallory, nil)
	require.Equal(t, http.StatusForbidden, deniedSSE.status)
	require.Equal(t, deniedSSE, missingSSE)
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/v1/streams/m1/events", "", nil).status)
	r = c.do("GET", "/v1/streams/m1/events?from=-2", alice, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "application/problem+json", r.ctype)

	// Cancel by the owner: the producer here sees it at once. Its next append is refused with
	// 409 and says so (with where the stream is), and every answer carries the flag.
	require.Equal(t, http.StatusAccepted, c.do("POST", "/v1/streams/m1/cancel", alice, nil).status)
	require.Equal(t, http.StatusForbidden, c.do("POST", "/v1/streams/m1/cancel", mallory, nil).status)
	r = c.do("POST", "/v1/streams/m1/append", prod, []byte(`{"text":" more"}`))
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	require.Equal(t, true, r.json(t)["cancelled"])
	require.EqualValues(t, 8, r.json(t)["seq"])
	r = c.do("POST", "/v1/streams/m1/flush", prod, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, true, r.json(t)["cancelled"])
	st, _ := w.plane.Stream("m1")
	require.True(t, st.Cancelled())

	// Close seals (cancelled, since the reader asked); the view follows.
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m1/close", prod, []byte(`{}`)).status)
	require.Equal(t, http.StatusConflict, c.do("POST", "/v1/streams/m1/append", prod, []byte(`{"text":"late"}`)).status)
	m, err := w.view.Wait(t.Context(), "m1", 0)
	for err == nil && !m.Status.Terminal() {
		m, err = w.view.Wait(t.Context(), "m1", m.Seq)
	}
	require.NoError(t, err)
	require.Equal(t, producer.StatusCancelled, m.Status)
	require.Equal(t, "hello 😀", m.Text, "nothing pushed after the cancel was kept")

	// An SSE read of the sealed stream is served whole.
	r = c.do("GET", "/v1/streams/m1/events", alice, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "text/event-stream; charset=utf-8", r.ctype)
	require.Contains(t, string(r.body), `"type":"end","seq":8,"status":"cancelled"`)
	require.Equal(t, http.StatusConflict, c.do("POST", "/v1/streams/m1/cancel", alice, nil).status, "a sealed stream cannot be cancelled")
	// EventSource cannot set headers: the token may come as ?access_token=, checked the same way.
	viaQuery := c.do("GET", "/v1/streams/m1/events?access_token="+alice, "", nil)
	require.Equal(t, r.status, viaQuery.status)
	require.Equal(t, r.body, viaQuery.body)
	require.Equal(t, deniedSSE, c.do("GET", "/v1/streams/ghost/events?access_token="+mallory, "", nil))
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/v1/streams/m1/events?access_token=not-a-jwt", "", nil).status)
	require.Equal(t, http.StatusForbidden, c.do("GET", "/v1/streams/m1/events?access_token="+alice, mallory, nil).status,
		"the Authorization header wins over the query")
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/v1/streams/m1?access_token="+alice, "", nil).status,
		"only the event stream takes a token in its URL")

	require.Equal(t, http.StatusOK, c.do("GET", "/healthz", "", nil).status)
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	r := c.do("GET", "/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(r.body, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	for path, method := range map[string]string{
		"/v1/messages": "post", "/v1/streams/{id}/open": "post", "/v1/streams/{id}/append": "post",
		"/v1/streams/{id}/flush": "post", "/v1/streams/{id}/close": "post", "/v1/streams/{id}/cancel": "post",
		"/v1/streams/{id}": "get", "/v1/streams/{id}/events": "get", "/healthz": "get",
	} {
		require.Contains(t, doc.Paths[path], method, "%s %s", method, path)
	}
	// What generators rely on: append takes JSON only, the event stream's frames are typed and
	// discriminated, offsets are integers, the token is the security scheme, not a parameter.
	body := string(r.body)
	require.NotContains(t, body, "application/octet-stream")
	require.NotContains(t, body, `"name":"Authorization"`)
	var full struct {
		Components struct {
			Schemas map[string]struct {
				Discriminator *struct{ PropertyName string } `json:"discriminator"`
				OneOf         []any                          `json:"oneOf"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(r.body, &full))
	frame := full.Components.Schemas["Frame"]
	require.NotNil(t, frame.Discriminator)
	require.Equal(t, "type", frame.Discriminator.PropertyName)
	require.Len(t, frame.OneOf, 6)

	// The docs page and its script come from the binary: nothing from a CDN.
	page := c.do("GET", "/docs", "", nil)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, string(page.body), `src="/docs/redoc.standalone.js"`)
	require.NotRegexp(t, `src="https?://`, string(page.body))
	js := c.do("GET", "/docs/redoc.standalone.js", "", nil)
	require.Equal(t, http.StatusOK, js.status)
	require.Greater(t, len(js.body), 100_000)
}

func TestNewRefusesABadConfigByField(t *testing.T) {
	t.Parallel()
	w := setup(t)
	base := httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(t), Secret: secret}
	for field, change := range map[string]func(*httpapi.Config){
		"Plane":          func(c *httpapi.Config) { c.Plane = nil },
		"Messages":       func(c *httpapi.Config) { c.Messages = nil },
		"Secret":         func(c *httpapi.Config) { c.Secret = []byte("short") },
		"MaxWait":        func(c *httpapi.Config) { c.MaxWait = -1 },
		"MaxIngestBytes": func(c *httpapi.Config) { c.MaxIngestBytes = -1 },
		"AllowedOrigins": func(c *httpapi.Config) { c.AllowedOrigins = []string{"app.example"} },
	} {
		cfg := base
		change(&cfg)
		_, err := httpapi.New(cfg)
		var ce *httpapi.ConfigError
		require.ErrorAs(t, err, &ce, field)
		require.Equal(t, field, ce.Field)
	}
}

// A verified token is remembered, but its expiry and not-before still hold on every use: a
// remembered token stops working the moment it expires, a token signed with another key is
// never taken for a remembered one, and an expired one is refused whether or not it was seen.
func TestRememberedTokensStillExpire(t *testing.T) {
	t.Parallel()
	w := setup(t)
	cfg := httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(t), Secret: secret}
	srv, err := httpapi.New(cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	now := time.Now()
	httpapi.SetNow(srv, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	c := client{t: t, base: hs.URL}
	sign := func(key []byte, exp, nbf time.Time) string {
		rc := jwt.RegisteredClaims{Subject: "svc", ExpiresAt: jwt.NewNumericDate(exp)}
		if !nbf.IsZero() {
			rc.NotBefore = jwt.NewNumericDate(nbf)
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, httpapi.Claims{Scope: "producer", RegisteredClaims: rc}).SignedString(key)
		require.NoError(t, err)
		return tok
	}
	create := func(id, tok string) int {
		return c.do("POST", "/v1/messages", tok, []byte(`{"id":"`+id+`","owner":"alice"}`)).status
	}
	tok := sign(secret, now.Add(time.Minute), time.Time{})
	require.Equal(t, http.StatusCreated, create("a1", tok))
	require.Equal(t, http.StatusCreated, create("a2", tok), "remembered")
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	r := c.do("POST", "/v1/messages", tok, []byte(`{"id":"a3","owner":"alice"}`))
	require.Equal(t, http.StatusUnauthorized, r.status, "remembered, but expired: %s", r.body)
	require.Contains(t, string(r.body), "expired")

	// Another key's signature over the same claims is another token: verified, and refused.
	forged := sign([]byte("another key, also 32 bytes long!"), now.Add(time.Minute), time.Time{})
	require.Equal(t, http.StatusUnauthorized, create("a4", forged))
	// Not yet valid: refused (and not remembered), then valid once its time comes.
	later := sign(secret, now.Add(time.Hour), now.Add(time.Minute))
	require.Equal(t, http.StatusUnauthorized, create("a5", later))
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	require.Equal(t, http.StatusCreated, create("a6", later))
}
