package httpapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
)

// FuzzHTTPSurface sends arbitrary requests through the whole handler on a real PostgreSQL: any
// route, any method, any path bytes, any header value, any body. Whatever comes in, the answer
// is never a 5xx (the database is up, so not even a 503) and nothing panics. Reads that wait
// (event streams, long-polls) are left out: their waits are bounded by the client, not the
// input.
func FuzzHTTPSurface(f *testing.F) {
	w := setup(f)
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(f), Secret: secret, Streams: streams, MaxBodyBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	prod, reader := token(f, "svc", "producer"), token(f, "alice", "")
	for _, seed := range []struct {
		route             uint8
		method, path, hdr string
		body              []byte
	}{
		{0, "POST", "/v1/messages", "application/json", []byte(`{"id":"m","owner":"alice"}`)},
		{1, "POST", "/v1/streams/m/open", "", nil},
		{1, "POST", "/v1/streams/m/append", "application/json", []byte(`{"text":"a\u0000b","expectedSeq":0}`)},
		{1, "POST", "/v1/streams/m/ingest", "text/plain", []byte("x\xffy")},
		{2, "GET", "/v1/streams/m", "", nil},
		{1, "PUT", "/v1/stream/a%00b", "text/plain", []byte("x")},
		{1, "POST", "/v1/stream/p", ";;;", []byte("x")},
		{1, "GET", "/v1/stream/p?offset=-1", "", nil},
		{3, "DELETE", "/v1/stream/p", "", nil},
	} {
		f.Add(seed.route, seed.method, seed.path, seed.hdr, seed.body)
	}
	f.Fuzz(func(t *testing.T, who uint8, method, path, hdr string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.Contains(path, "events") || strings.Contains(path, "live=") || strings.Contains(path, "wait=") {
			t.Skip("not a path, or a read that waits")
		}
		req, err := http.NewRequestWithContext(t.Context(), method, "http://rindle"+path, bytes.NewReader(body))
		if err != nil {
			t.Skip("not a request net/http would parse")
		}
		switch who % 3 {
		case 0:
			req.Header.Set("Authorization", "Bearer "+prod)
		case 1:
			req.Header.Set("Authorization", "Bearer "+reader)
		}
		for _, h := range []string{"Content-Type", "Stream-Seq", "Stream-TTL", "Producer-Id", "Last-Event-ID", "If-None-Match"} {
			if hdr != "" && (int(who)/3)%7 == len(h)%7 {
				req.Header.Set(h, hdr)
			}
		}
		if hdr != "" && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", hdr)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q (%q, %q): %d %s", method, path, hdr, body, rec.Code, rec.Body.String())
		}
	})
}
