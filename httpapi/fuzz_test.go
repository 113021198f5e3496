package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
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
//     a HEAD then gives;
//   - a write with a body that moved the tail (a create, an append, a producer's append, a
//     closing append) reads back, from the tail before it, as exactly that body: the same
//     bytes, or in a JSON stream the same values;
//   - a fork holds a prefix of its source, of the same kind;
//   - an idempotent producer's append (id, epoch, seq) moves a stream's tail at most once.
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
	f.Add([]byte{0, 0, 6, 1, 0, 26, 1, 0, 11, 2, 0, 1, 3, 0, 11, 5, 0, 2}, `[1, {"b": 2}]`, `"x"`)
	f.Add([]byte{0, 0, 0, 2, 0, 0, 2, 0, 0, 5, 0, 0}, "0", "0") // a producer's append at epoch 0, seq 0, sent twice
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte, a, b string) {
		if len(ops) > 3*24 {
			t.Skip("long sequences explore nothing short ones do not")
		}
		prefix := fmt.Sprintf("/v1/stream/fz%d/", run.Add(1))
		paths := []string{prefix + "a", prefix + "b", prefix + "a/c"}
		seen := []string{"-1", "now"}
		timed := false // a create here had a TTL or an expiry
		// taken holds, per path, the producer appends (id, epoch, seq) that moved its tail since
		// the stream there was made: one sent again must not move it a second time.
		taken := map[string]map[string]bool{}
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
		var do doFunc = func(method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
			if method == http.MethodDelete {
				return serveNo5xx(t, h, method, path, admin, hdr, body)
			}
			return serveNo5xx(t, h, method, path, tok, hdr, body)
		}
		for len(ops) >= 3 {
			op, p, v := ops[0], ops[1], ops[2]
			ops = ops[3:]
			path := paths[int(p)%len(paths)]
			ctype := types[int(v)%len(types)]
			// The tail before a write that carries a body, to read that body back from.
			before, sent := "", ""
			switch op % 12 {
			case 0, 1, 3:
				sent = a
			case 2:
				sent = b
			}
			if sent != "" {
				switch head := do(http.MethodHead, path, nil, ""); {
				case head.Code == http.StatusOK:
					before = head.Header().Get("Stream-Next-Offset")
				case head.Code == http.StatusNotFound && op%12 == 0:
					before = "-1" // a create: its body is the stream's first data
				}
			}
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
				hdr := map[string]string{"Content-Type": ctype, "Producer-Id": "p" + value(p), "Producer-Epoch": value(v), "Producer-Seq": value(v + 1)}
				rec = do(http.MethodPost, path, hdr, b)
				if moved := rec.Header().Get("Stream-Next-Offset"); rec.Code < 300 && before != "" && moved != "" && moved != before && !timed {
					key := fmt.Sprintf("%q %q %q", hdr["Producer-Id"], hdr["Producer-Epoch"], hdr["Producer-Seq"])
					if taken[path][key] {
						t.Fatalf("%s: the producer append %s moved the tail again (%d, %q → %q)", path, key, rec.Code, before, moved)
					}
					if taken[path] == nil {
						taken[path] = map[string]bool{}
					}
					taken[path][key] = true
				}
			case 3: // close, with or without a last append
				if v%2 == 0 {
					sent = ""
				}
				rec = do(http.MethodPost, path, map[string]string{"Content-Type": ctype, "Stream-Closed": "true"}, sent)
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
			if op%12 == 7 && rec.Code < 300 || (op%12 == 0 || op%12 == 4) && rec.Code == http.StatusCreated {
				delete(taken, path) // a stream made anew: its producers start afresh
			}
			next := rec.Header().Get("Stream-Next-Offset")
			if next == "" {
				continue
			}
			seen = append(seen, next)
			if sent != "" && before != "" && rec.Code < 300 && next != before && !timed {
				// A write that moved the tail took its body: reading from where the tail was
				// gives that body back as sent, nothing altered, nothing more.
				if got, want, ok := readsBackAs(t, do, path, before, sent); !ok {
					t.Fatalf("%s took %q (%d, %q → %q); read back from %q it is %q, not %q", path, sent, rec.Code, before, next, before, got, want)
				}
			}
			if op%12 == 4 && rec.Code == http.StatusCreated && !timed {
				// A fork holds a prefix of its source: the appends up to the fork offset, and a
				// cut of the next one at a sub-offset.
				source := paths[int(p+1)%len(paths)]
				fork, forkValues, forkJSON, forkOK := readTail(t, do, path, "-1")
				src, srcValues, srcJSON, srcOK := readTail(t, do, source, "-1")
				switch {
				case !forkOK:
					t.Fatalf("the fork %s answered 201, then reads as %s", path, fork)
				case srcOK && forkJSON != srcJSON:
					t.Fatalf("the fork %s (JSON %v) and its source %s (JSON %v) differ in kind", path, forkJSON, source, srcJSON)
				case srcOK && forkJSON && !strings.HasPrefix(jsonValues(srcValues), jsonValues(forkValues)):
					t.Fatalf("the fork %s holds %q, not a prefix of its source %s's %q", path, jsonValues(forkValues), source, jsonValues(srcValues))
				case srcOK && !forkJSON && !strings.HasPrefix(src, fork):
					t.Fatalf("the fork %s holds %q, not a prefix of its source %s's %q", path, fork, source, src)
				}
			}
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

// FuzzAnswerSequence drives the answer routes through random schedules of what a producer and a
// reader may send: create, open, append (with or without expectedSeq: the right one, one past
// the end, one inside the text, a retry of the last append as it was sent), the streaming ingest,
// flush, a reader's cancel, close (complete or with an error) and reads of the view. Each op is
// two bytes of ops: what, and which value. A model of the produced text follows every answer:
//   - no answer is a 5xx;
//   - every producer answer's seq is the model's length, and an append's applied what the model
//     took (idempotent retries absorbed, conflicts refused with 409 and the stream's seq);
//   - nothing is taken once an answer said cancelled (a reader's cancel of the open stream, or
//     one before the open, a flag in the row that a checkpoint reads, as the seed's §6 has it)
//     or once the stream sealed;
//   - once the stream is closed, the view (through the replication reader) holds exactly the
//     produced text, with a terminal status.
func FuzzAnswerSequence(f *testing.F) {
	w := setup(f)
	srv, err := httpapi.New(httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(f), Secret: secret, MaxBodyBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	prod, reader := token(f, "svc", "producer"), token(f, "alice", "")
	f.Add([]byte{0, 0, 1, 0, 2, 0, 2, 1, 9, 0, 2, 2, 3, 0, 4, 0, 7, 0, 5, 0}, "hello ", "wörld 😀")
	f.Add([]byte{0, 0, 1, 0, 2, 1, 2, 3, 9, 0, 2, 4, 6, 0, 2, 1, 3, 1, 5, 1}, "😀a", "b")
	f.Add([]byte{2, 0, 1, 0, 0, 0, 1, 0, 3, 0, 1, 0, 5, 0, 1, 0, 2, 0}, "x", "")
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte, a, b string) {
		if len(ops) > 2*32 {
			t.Skip("long schedules explore nothing short ones do not")
		}
		id := fmt.Sprintf("fa%d", run.Add(1))
		type answer struct {
			Seq       int64 `json:"seq"`
			Applied   int64 `json:"applied"`
			Cancelled bool  `json:"cancelled"`
			Status    string
			Text      string
		}
		do := func(method, path, tok, ctype, body string) (int, answer) {
			rec := serveNo5xx(t, h, method, path, tok, map[string]string{"Content-Type": ctype}, body)
			var ans answer
			_ = json.Unmarshal(rec.Body.Bytes(), &ans)
			return rec.Code, ans
		}
		var (
			created, open, closed, cancelled, asked, failed bool
			text                                            string // the model: what the stream produced
			lastBody                                        string // the last append as sent, for a retry
		)
		// check holds an answer's seq to the model (a 409 says where the stream is too).
		// An answer that says cancelled means the server has seen the reader's cancel: nothing
		// more may be taken.
		check := func(what string, code int, ans answer) {
			if code < 300 || code == http.StatusConflict {
				if ans.Seq != int64(producer.Len16(text)) {
					t.Fatalf("%s answered %d with seq %d; the model holds %d units: %q", what, code, ans.Seq, producer.Len16(text), text)
				}
				if ans.Cancelled && !asked {
					t.Fatalf("%s answered %d cancelled, and no reader asked", what, code)
				}
				cancelled = cancelled || ans.Cancelled
			}
		}
		// push applies an append or an ingest of s at e (nil: the end) to the model, as its answer says.
		push := func(what string, code int, ans answer, s string, e *int64) {
			want, took, ok := modelPushAt(text, s, e)
			switch {
			case code < 300 && (cancelled || closed):
				if ans.Seq != int64(producer.Len16(text)) || ans.Applied != 0 {
					t.Fatalf("%s took text after a cancel or the seal: %d %+v", what, code, ans)
				}
			case code < 300 && ans.Cancelled && ans.Applied == 0:
				// The stream had seen the reader's cancel (a flag set before the open, which a
				// checkpoint since read) before this: it takes nothing and says so, whatever
				// the offset asked.
			case code < 300 && !ok:
				t.Fatalf("%s took %q at %s, which the model refuses there: %+v (model %q)", what, s, at(e), ans, text)
			case code < 300 && ans.Cancelled && ans.Applied < took:
				// The reader's cancel (a flag set before the open, which a checkpoint read) came
				// during this ingest: it took a prefix of its new text, in whole characters.
				part, whole := prefix16(want[len(text):], ans.Applied)
				if !whole {
					t.Fatalf("%s took %d units of %q, not whole characters", what, ans.Applied, want[len(text):])
				}
				text += part
			case code < 300:
				if ans.Applied != took {
					t.Fatalf("%s applied %d, the model %d", what, ans.Applied, took)
				}
				text = want
			case code == http.StatusConflict, code == http.StatusRequestEntityTooLarge:
				// Refused: a conflict, a cancel, the seal, or a body over the bound. Nothing taken.
			case ok && open && !cancelled && !closed && !strings.ContainsRune(s, 0) && utf8.ValidString(s):
				t.Fatalf("%s of %q at %s refused with %d; the model takes it (model %q)", what, s, at(e), code, text)
			}
			check(what, code, ans)
		}
		value := func(v byte) string {
			if v%2 == 0 {
				return a
			}
			return b
		}
		for len(ops) >= 2 {
			op, v := ops[0], ops[1]
			ops = ops[2:]
			switch op % 10 {
			case 0:
				code, _ := do("POST", "/v1/messages", prod, "application/json", fmt.Sprintf(`{"id":%q,"owner":"alice"}`, id))
				if code == http.StatusCreated {
					created = true
				}
			case 1:
				code, ans := do("POST", "/v1/streams/"+id+"/open", prod, "", "")
				if code < 300 {
					if !created || closed {
						t.Fatalf("open answered %d without a message row or after the seal", code)
					}
					open = true
					check("open", code, ans)
				}
			case 2, 9: // append at an expectedSeq the value picks, or a retry of the last one
				s := value(v)
				var e *int64
				n := int64(producer.Len16(text))
				switch v / 2 % 6 {
				case 1:
					e = &n
				case 2:
					e = ptr(n + 1)
				case 3:
					e = ptr(n / 2)
				case 4:
					e = ptr(int64(0))
				}
				body, _ := json.Marshal(map[string]any{"text": s, "expectedSeq": e})
				if op%10 == 9 && lastBody != "" {
					body = []byte(lastBody)
				}
				var sent struct {
					Text        string `json:"text"`
					ExpectedSeq *int64 `json:"expectedSeq"`
				}
				_ = json.Unmarshal(body, &sent) // what the server reads: invalid UTF-8 is U+FFFD by then
				lastBody = string(body)
				code, ans := do("POST", "/v1/streams/"+id+"/append", prod, "application/json", string(body))
				push("append", code, ans, sent.Text, sent.ExpectedSeq)
			case 3: // ingest valid text, at the end or at expectedSeq
				s := strings.ReplaceAll(strings.ToValidUTF8(value(v), "\uFFFD"), "\x00", "")
				path := "/v1/streams/" + id + "/ingest"
				var e *int64
				if v/2%2 == 1 {
					e = ptr(int64(producer.Len16(text)) - int64(v/4%3))
					path += fmt.Sprintf("?expectedSeq=%d", *e)
				}
				code, ans := do("POST", path, prod, "text/plain", s)
				if code == http.StatusBadRequest && e != nil && *e < 0 {
					continue
				}
				push("ingest", code, ans, s, e)
			case 4:
				code, ans := do("POST", "/v1/streams/"+id+"/flush", prod, "", "")
				check("flush", code, ans)
			case 5: // close: complete, or an error
				body := "{}"
				if v%2 == 1 {
					body = `{"error":"the model failed"}`
				}
				code, ans := do("POST", "/v1/streams/"+id+"/close", prod, "application/json", body)
				if code < 300 {
					check("close", code, ans)
					if !closed {
						failed = v%2 == 1
					}
					closed = true
				}
			case 6:
				code, _ := do("POST", "/v1/streams/"+id+"/cancel", reader, "", "")
				// A cancel of an open stream stops it at once; one before the open is a flag in
				// the row that the first checkpoint reads (the seed's §6): either may seal it
				// cancelled.
				cancelled = cancelled || code < 300 && open && !closed
				asked = asked || code < 300
				if code < 300 && !created {
					t.Fatalf("a cancel answered %d without a message row", code)
				}
			case 7, 8:
				if code, ans := do("GET", "/v1/streams/"+id, reader, "", ""); code == http.StatusOK && !strings.HasPrefix(text, ans.Text) {
					t.Fatalf("the view holds %q, not a prefix of the produced %q", ans.Text, text)
				}
			}
		}
		if !open {
			return
		}
		if !closed {
			code, ans := do("POST", "/v1/streams/"+id+"/close", prod, "application/json", "{}")
			if code >= 300 {
				t.Fatalf("the final close answered %d", code)
			}
			check("close", code, ans)
		}
		// The view catches up through the replication reader: wait on its long-poll, a condition.
		for {
			code, ans := do("GET", "/v1/streams/"+id+"?wait=10s&after="+fmt.Sprint(producer.Len16(text)), reader, "", "")
			if code != http.StatusOK {
				t.Fatalf("reading the view answered %d", code)
			}
			if ans.Status == "pending" || ans.Status == "streaming" {
				continue
			}
			if ans.Text != text {
				t.Fatalf("sealed %s, the view holds %q; produced %q", ans.Status, ans.Text, text)
			}
			if want := "complete"; !asked && !failed && ans.Status != want {
				t.Fatalf("sealed %s, want %s", ans.Status, want)
			}
			// A reader joining the sealed stream anywhere gets the rest of the text, whole
			// characters from where it joined, then the end: the join at the view's offset.
			n := int64(producer.Len16(text))
			for _, from := range []int64{0, n / 2, n, n + 3} {
				rec := serveNo5xx(t, h, "GET", fmt.Sprintf("/v1/streams/%s/events?from=%d", id, from), reader, nil, "")
				if rec.Code != http.StatusOK {
					t.Fatalf("events from %d answered %d: %s", from, rec.Code, rec.Body.String())
				}
				joinedAt(t, rec.Body.String(), text, min(from, n), ans.Status)
			}
			return
		}
	})
}

// joinedAt checks an event stream of a sealed stream read from from: an open frame at from
// floored to a character, then frames that hold to the wire contract (streamtest.Replay: chunks
// that follow on one another, durable frames within them, one terminal, last) and spell the
// text from there, ending with the end frame at the text's length with status.
func joinedAt(t *testing.T, body, text string, from int64, status string) {
	t.Helper()
	var frames []producer.Frame
	r := bufio.NewReader(strings.NewReader(body))
	for {
		f, err := streamtest.ReadFrame(r) // strict: one data line per event, a frame's own decoding
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("from %d: %v in %q", from, err, body)
		}
		frames = append(frames, f)
	}
	if len(frames) < 2 || frames[0].Type != producer.FrameOpen {
		t.Fatalf("from %d: not open, chunks, end: %+v", from, frames)
	}
	at := frames[0].From
	if _, whole := prefix16(text, int64(at)); !whole || int64(at) > from || int64(at) < from-1 {
		t.Fatalf("from %d: opened at %d, not %d floored to a character", from, at, from)
	}
	got, end := streamtest.Replay(t, text, frames)
	if got != text || end.Type != producer.FrameEnd || end.Seq != producer.Len16(text) || string(end.Status) != status {
		t.Fatalf("from %d: the frames spell %q and end with %+v; the text is %q, %d units, sealed %s", from, got, end, text, producer.Len16(text), status)
	}
}

// serveNo5xx sends one request with tok and the headers in hdr (an empty value is no header:
// a fork at the source's end, a read without a tag) through h, and fails t on a 5xx.
func serveNo5xx(t *testing.T, h http.Handler, method, path, tok string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, "http://rindle"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range hdr {
		if v != "" {
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

// readsBackAs reads path from offset to its tail and reports whether what it holds there is
// sent: the same bytes, or in a JSON stream the same values (an array body flattened one level,
// as the protocol appends it). It returns what it read and what it wanted, each as one string.
func readsBackAs(t *testing.T, do doFunc, path, offset, sent string) (string, string, bool) {
	t.Helper()
	got, values, isJSON, ok := readTail(t, do, path, offset)
	switch {
	case !ok:
		return got, sent, false
	case !isJSON:
		return got, sent, got == sent
	}
	var want []json.RawMessage
	switch trimmed := strings.Trim(sent, " \t\r\n"); {
	case trimmed == "":
		// Nothing: a create's body of JSON white space makes an empty JSON stream.
	case json.Unmarshal([]byte(sent), &want) != nil || !strings.HasPrefix(trimmed, "["):
		want = []json.RawMessage{json.RawMessage(sent)}
	}
	return jsonValues(values), jsonValues(want), jsonValues(values) == jsonValues(want)
}

// doFunc is FuzzStreamsSequence's request: method, path, headers, body.
type doFunc func(method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder

// readTail reads path from offset to its tail, page by page: the bytes, and in a JSON stream
// the values (each page is an array of them). ok is false when a page did not answer 200 with
// what its type promises; got then says what came.
func readTail(t *testing.T, do doFunc, path, offset string) (got string, values []json.RawMessage, isJSON, ok bool) {
	t.Helper()
	var data []byte
	for range 64 {
		rec := do(http.MethodGet, path+"?offset="+url.QueryEscape(offset), nil, "")
		if rec.Code != http.StatusOK {
			return fmt.Sprintf("%d %s", rec.Code, rec.Body.String()), nil, false, false
		}
		isJSON = strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json")
		if isJSON {
			var page []json.RawMessage
			if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
				return rec.Body.String(), nil, true, false
			}
			values = append(values, page...)
		}
		data = append(data, rec.Body.Bytes()...)
		next := rec.Header().Get("Stream-Next-Offset")
		if rec.Header().Get("Stream-Up-To-Date") == "true" || next == offset {
			break
		}
		offset = next
	}
	return string(data), values, isJSON, true
}

// jsonValues is values, each compacted, one per line: equal for the same values as sent.
func jsonValues(values []json.RawMessage) string {
	var out strings.Builder
	for _, v := range values {
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			c.Write(v)
		}
		out.Write(c.Bytes())
		out.WriteByte('\n')
	}
	return out.String()
}

func ptr[T any](v T) *T { return &v }

// at says where an append asked to go: an expectedSeq, or the end.
func at(e *int64) string {
	if e == nil {
		return "the end"
	}
	return fmt.Sprint(*e)
}

// prefix16 is the prefix of s that is n UTF-16 units long, false when n falls inside a character.
func prefix16(s string, n int64) (string, bool) {
	part := producer.Slice16(s, 0, producer.Seq(n))
	return part, int64(producer.Len16(part)) == n
}

// modelPushAt is LiveStream.PushAt's rule on a string: s placed at e (nil: the end) of text. It
// returns the new text, the UTF-16 units new, and false when s cannot start at e (past the end,
// inside a surrogate pair, or different text already there).
func modelPushAt(text, s string, e *int64) (string, int64, bool) {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return text, 0, false
	}
	n := int64(producer.Len16(text))
	if e == nil || *e == n {
		return text + s, int64(producer.Len16(s)), true
	}
	before, whole := prefix16(text, *e)
	if *e > n || *e < 0 || !whole {
		return text, 0, false
	}
	held := text[len(before):]
	if len(s) <= len(held) {
		return text, 0, held[:len(s)] == s
	}
	if s[:len(held)] != held {
		return text, 0, false
	}
	return text + s[len(held):], int64(producer.Len16(s[len(held):])), true
}
