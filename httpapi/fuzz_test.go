package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// FuzzStreamsSequence drives the Durable Streams surface through sequences of requests on three
// paths of its own: creates (with TTLs, expiries and content types from the input), appends
// (plain, as an idempotent producer, closing), forks at offsets the server gave or the input made
// up, reads (plain, long-poll and SSE), HEADs, conditional reads and deletes. Each op is three
// bytes of ops: what, which path (or fork source), which value (from a, b, the offsets seen, or a
// list of awkward ones). Whatever the sequence:
//   - no answer is a 5xx;
//   - an offset the server hands out is one it reads from at once (200, or 404/410 when the
//     stream is gone);
//   - a write that succeeded (a create, a fork, a plain append, a close) answered the tail that
//     a HEAD then gives.
//
// A live read's wait ends by the server's own bounds, set to a nanosecond here: a long-poll at
// the tail answers 204 and an SSE response ends, as they do when their time is up.
func FuzzStreamsSequence(f *testing.F) {
	w := setup(f)
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(f), Secret: secret, Streams: streams, MaxBodyBytes: 4096,
		StreamsLongPoll: time.Nanosecond, StreamsSSELifetime: time.Nanosecond})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	tok, admin := token(f, "svc", "producer"), token(f, "ops", "producer admin") // only an admin deletes
	f.Add([]byte{0, 0, 0, 1, 0, 0, 5, 0, 0, 4, 1, 9, 1, 1, 0, 7, 0, 0, 5, 1, 9, 4, 2, 9}, "hello", "text/plain")
	f.Add([]byte{0, 0, 1, 2, 0, 2, 2, 0, 2, 3, 0, 0, 4, 1, 9, 7, 0, 0, 0, 0, 0, 6, 1, 0}, `{"a":1}`, "application/json")
	f.Add([]byte{0, 0, 0, 1, 0, 0, 4, 2, 10, 5, 2, 2, 1, 2, 0, 7, 0, 0, 5, 2, 10, 0, 0, 0, 10, 2, 2, 11, 2, 2, 3, 2, 0}, "fork me", "text/plain")
	f.Add([]byte{0, 0, 3, 1, 0, 0, 8, 0, 9, 5, 0, 6, 0, 1, 4, 4, 2, 5, 5, 2, 8}, "\xff\x00bytes", "application/octet-stream")
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte, a, b string) {
		if len(ops) > 3*24 {
			t.Skip("long sequences explore nothing short ones do not")
		}
		prefix := fmt.Sprintf("/v1/stream/fz%d/", run.Add(1))
		paths := []string{prefix + "a", prefix + "b", prefix + "a/c"}
		seen := []string{"-1", "now"}
		timed := false // a create here had a TTL or an expiry
		odd := []string{"", "0", "-1", "now", "1", "-5", "99999999999999999999", "0000000000000001-0000000000000000", "abc", "1.5", " 3", "true", "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z"}
		types := []string{"text/plain", "application/json", "application/octet-stream", "text/plain; charset=utf-8", ""}
		value := func(v byte) string {
			switch v % 4 {
			case 0:
				return a
			case 1:
				return b
			case 2:
				return seen[int(v/4)%len(seen)]
			}
			return odd[int(v/4)%len(odd)]
		}
		do := func(method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
			req := httptest.NewRequestWithContext(t.Context(), method, "http://rindle"+path, strings.NewReader(body))
			if method == http.MethodDelete {
				req.Header.Set("Authorization", "Bearer "+admin)
			} else {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			for k, v := range hdr {
				if v != "" { // an empty value is no header: a fork at the source's end, a read without a tag
					req.Header.Set(k, v)
				}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %s %q %q: %d %s", method, path, hdr, body, rec.Code, rec.Body.String())
			}
			return rec
		}
		for len(ops) >= 3 {
			op, p, v := ops[0], ops[1], ops[2]
			ops = ops[3:]
			path := paths[int(p)%len(paths)]
			ctype := types[int(v)%len(types)]
			var rec *httptest.ResponseRecorder
			switch op % 12 {
			case 0: // create, with a TTL or an expiry from the input
				hdr := map[string]string{"Content-Type": ctype}
				switch v % 3 {
				case 1:
					hdr["Stream-TTL"] = value(v / 3)
				case 2:
					hdr["Stream-Expires-At"] = value(v / 3)
				}
				timed = timed || v%3 != 0
				rec = do(http.MethodPut, path, hdr, a)
			case 1: // append
				rec = do(http.MethodPost, path, map[string]string{"Content-Type": ctype, "Stream-Seq": value(v)}, a)
			case 2: // an idempotent producer's append
				rec = do(http.MethodPost, path, map[string]string{"Content-Type": ctype, "Producer-Id": "p" + value(p), "Producer-Epoch": value(v), "Producer-Seq": value(v + 1)}, b)
			case 3: // close, with or without a last append
				body := ""
				if v%2 == 1 {
					body = a
				}
				rec = do(http.MethodPost, path, map[string]string{"Content-Type": ctype, "Stream-Closed": "true"}, body)
			case 4: // fork another path, at an offset, with a sub-offset when v's top bit is set
				sub := ""
				if v&0x80 != 0 {
					sub = value(v + 1)
				}
				rec = do(http.MethodPut, path, map[string]string{"Content-Type": ctype, "Stream-Forked-From": strings.TrimPrefix(paths[int(p+1)%len(paths)], "/v1/stream"), "Stream-Fork-Offset": value(v), "Stream-Fork-Sub-Offset": sub}, "")
			case 5, 9: // read at an offset
				rec = do(http.MethodGet, path+"?offset="+url.QueryEscape(value(v)), nil, "")
			case 6:
				rec = do(http.MethodHead, path, nil, "")
			case 7:
				rec = do(http.MethodDelete, path, nil, "")
			case 8: // a conditional read
				rec = do(http.MethodGet, path+"?offset=-1", map[string]string{"If-None-Match": value(v)}, "")
			case 10:
				rec = do(http.MethodGet, path+"?live=long-poll&offset="+url.QueryEscape(value(v))+"&cursor="+url.QueryEscape(value(p)), nil, "")
			case 11:
				rec = do(http.MethodGet, path+"?live=sse&offset="+url.QueryEscape(value(v))+"&cursor="+url.QueryEscape(value(p)), nil, "")
			}
			next := rec.Header().Get("Stream-Next-Offset")
			if next == "" {
				continue
			}
			seen = append(seen, next)
			if wrote := op%12 <= 1 || op%12 == 3 || op%12 == 4; wrote && rec.Code < 300 && !timed {
				// A create, a fork, a plain append or a close that succeeded answered the tail
				// (unless a stream here may have expired since: a TTL of 1 is a second).
				if head := do(http.MethodHead, path, nil, ""); head.Header().Get("Stream-Next-Offset") != next {
					t.Fatalf("%s answered %q, then HEAD answered %d %q", path, next, head.Code, head.Header().Get("Stream-Next-Offset"))
				}
			}
			if again := do(http.MethodGet, path+"?offset="+url.QueryEscape(next), nil, ""); again.Code != http.StatusOK && again.Code != http.StatusNotFound && again.Code != http.StatusGone {
				t.Fatalf("the offset %q that %s gave reads as %d: %s", next, path, again.Code, again.Body.String())
			}
		}
	})
}
