package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// hostile is a rindled process under attack, and what the test reads of it from outside: its
// descriptors and memory (from /proc), its metrics, its answers to raw requests.
type hostile struct {
	t    *testing.T
	in   *instance
	addr string
}

// raw sends bytes as a request on a new connection and returns the answer's status (0 when
// the server closed the connection without one). The minute bounds a hang only.
func (h *hostile) raw(req string) int {
	h.t.Helper()
	conn, err := net.Dial("tcp", h.addr)
	require.NoError(h.t, err)
	defer conn.Close()
	require.NoError(h.t, conn.SetDeadline(time.Now().Add(time.Minute)))
	_, err = io.WriteString(conn, req)
	require.NoError(h.t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(h.t, resp.Body.Close())
	return resp.StatusCode
}

// rawRequest spells a request with a body by hand, so any byte may go anywhere.
func rawRequest(method, target, tok, ctype, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: rindle\r\nConnection: close\r\n", method, target)
	if tok != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", tok)
	}
	if ctype != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", ctype)
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

func (h *hostile) fds() int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", h.in.cmd.Process.Pid))
	require.NoError(h.t, err)
	return len(entries)
}

func (h *hostile) rssKiB() int {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.in.cmd.Process.Pid))
	require.NoError(h.t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			require.NoError(h.t, err)
			return n
		}
	}
	h.t.Fatal("no VmRSS")
	return 0
}

// series counts the metric series /metrics exposes.
func (h *hostile) series() int {
	resp, err := http.Get("http://" + h.addr + "/metrics")
	require.NoError(h.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	n := 0
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) > 0 && line[0] != '#' {
			n++
		}
	}
	return n
}

// TestHostileClients runs one rindled process against what anonymous clients, token holders and
// models can send (issue 19): bodies that trickle or never come, connections that say nothing,
// floods of Host headers, U+0000 and invalid UTF-8 in every field of every route, and more
// waiting reads than a subject may hold. Afterwards the process holds no more descriptors than
// before, its metrics have no more series than a fixed set, no answer was a 5xx, and the
// stream every request aimed at still seals with its text.
func TestHostileClients(t *testing.T) {
	db := pgtest.NewDB(t)
	t.Cleanup(func() { dropSlot(t, db) }) // after the process stopped: the slot outlives it
	bin := buildRindled(t)
	in := spawn(t, "hostile", bin, []string{"-addr", "127.0.0.1:0", "-slot", db.Slot(), "-demo", "false",
		"-body-timeout", "1s", "-ingest-idle-timeout", "1s", "-idle-timeout", "2s", "-max-event-streams-per-subject", "4"},
		[]string{"DATABASE_URL=" + db.URL, "RINDLE_JWT_SECRET=" + testSecret})
	h := &hostile{t: t, in: in, addr: strings.TrimPrefix(in.base, "http://")}
	mint := func(sub, scope string) string {
		tok, err := httpapi.NewToken([]byte(testSecret), sub, scope, time.Hour)
		require.NoError(t, err)
		return tok
	}
	prod, alice := mint("svc", "producer"), mint("alice", "")
	require.Equal(t, http.StatusCreated, h.raw(rawRequest("POST", "/v1/messages", prod, "application/json", `{"id":"m","owner":"alice"}`)))
	require.Equal(t, http.StatusOK, h.raw(rawRequest("POST", "/v1/streams/m/open", prod, "", "")))
	require.Equal(t, http.StatusOK, h.raw(rawRequest("POST", "/v1/streams/m/append", prod, "application/json", `{"text":"kept "}`)))
	require.Equal(t, http.StatusCreated, h.raw(rawRequest("PUT", "/v1/stream/p", prod, "text/plain", "kept")))
	baseFDs, baseSeries := h.fds(), h.series()

	// 1. Connections that trickle a body, or say nothing at all, anonymous or not.
	var wg sync.WaitGroup
	heads := []string{
		"POST /v1/stream/x HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\nabc",
		"POST /v1/streams/m/ingest HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\nabc",
		"POST /v1/streams/m/append HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + prod + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
		"POST /v1/streams/m/ingest HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + prod + "\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n",
		"POST /v1/stream/p HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + prod + "\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nx",
		"GET /v1/streams/m HTTP/1.1\r\nHo",
		"",
	}
	for i := range 210 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, heads[i%len(heads)])
			// Wait for the server to let go (an answer, then EOF); the bound only ends a hang.
			_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Errorf("connection %d (%q…) was never let go: %v", i, heads[i%len(heads)][:min(30, len(heads[i%len(heads)]))], err)
			}
		})
	}
	wg.Wait()
	eventually.True(t, func() bool { return h.fds() <= baseFDs+8 },
		"the server holds no descriptor for the stalled connections (base %d)", baseFDs)

	// 2. Floods of Host headers, paths and methods: the second flood, all new values, adds no
	// series (the first may add the fixed combinations of method class, route and status).
	flood := func(round int) int {
		for i := range 300 {
			v := round*1000 + i
			h.raw(fmt.Sprintf("GET /v1/streams/m%d HTTP/1.1\r\nHost: h%d.example:%d\r\nConnection: close\r\n\r\n", v, v, 1000+v))
			h.raw(fmt.Sprintf("BREW%d /nowhere/%d HTTP/1.1\r\nHost: h%d.example\r\nConnection: close\r\n\r\n", v, v, v))
		}
		return h.series()
	}
	first := flood(1)
	require.LessOrEqual(t, flood(2), first+4, "series grew with the requests' values (%d before any flood)", baseSeries)

	// 3. U+0000 and invalid UTF-8 in every field of every route: an input error, never a 5xx.
	var statuses []string
	check := func(what, req string) {
		if s := h.raw(req); s >= 500 || s == 0 {
			statuses = append(statuses, fmt.Sprintf("%s: %d", what, s))
		}
	}
	for _, bad := range []struct{ name, json, raw, esc string }{
		{"NUL", `\u0000`, "\x00", "%00"},
		{"invalid UTF-8", "\xff\xfe", "\xff\xfe", "%FF%FE"},
	} {
		for _, body := range []string{`{"id":"a` + bad.json + `b","owner":"alice"}`, `{"id":"n` + bad.name[:1] + `","owner":"a` + bad.json + `"}`,
			`{"id":"c` + bad.name[:1] + `","owner":"alice","chatId":"` + bad.json + `","role":"` + bad.json + `"}`} {
			check(bad.name+" create", rawRequest("POST", "/v1/messages", prod, "application/json", body))
		}
		for _, route := range []string{"open", "append", "flush", "close", "cancel", "ingest"} {
			check(bad.name+" path "+route, rawRequest("POST", "/v1/streams/a"+bad.esc+"b/"+route, prod, "application/json", `{}`))
		}
		for _, target := range []string{"/v1/streams/a" + bad.esc + "b", "/v1/streams/a" + bad.esc + "b/events", "/v1/streams/m?after=" + bad.esc,
			"/v1/streams/m/events?from=" + bad.esc, "/v1/stream/a" + bad.esc + "b", "/v1/stream/p?offset=" + bad.esc, "/v1/stream/p?live=" + bad.esc} {
			check(bad.name+" GET "+target, rawRequest("GET", target, alice, "", ""))
			check(bad.name+" GET (producer) "+target, rawRequest("GET", target, prod, "", ""))
		}
		check(bad.name+" append text", rawRequest("POST", "/v1/streams/m/append", prod, "application/json", `{"text":"x`+bad.json+`y"}`))
		check(bad.name+" ingest body", rawRequest("POST", "/v1/streams/m/ingest", prod, "text/plain", "x"+bad.raw+"y"))
		check(bad.name+" close error", rawRequest("POST", "/v1/streams/m/flush", prod, "application/json", `{"error":"`+bad.json+`"}`))
		check(bad.name+" Last-Event-ID", rawRequest("GET", "/v1/streams/m/events", alice, "", "", "Last-Event-ID: 1"+bad.raw))
		check(bad.name+" protocol create", rawRequest("PUT", "/v1/stream/q"+bad.esc, prod, "text/plain", "x"))
		check(bad.name+" protocol content type", rawRequest("PUT", "/v1/stream/ct", prod, "text/"+bad.raw, "x"))
		check(bad.name+" protocol append", rawRequest("POST", "/v1/stream/p", prod, "text/plain", "x"+bad.raw))
		check(bad.name+" Stream-Seq", rawRequest("POST", "/v1/stream/p", prod, "text/plain", "x", "Stream-Seq: 1"+bad.raw))
		check(bad.name+" Producer-Id", rawRequest("POST", "/v1/stream/p", prod, "text/plain", "x", "Producer-Id: p"+bad.raw, "Producer-Epoch: 0", "Producer-Seq: 0"))
		check(bad.name+" Stream-TTL", rawRequest("PUT", "/v1/stream/ttl", prod, "text/plain", "", "Stream-TTL: 9223372036854775807"+bad.raw))
		check(bad.name+" token", rawRequest("GET", "/v1/streams/m", "x"+bad.raw, "", ""))
		check(bad.name+" token subject", rawRequest("GET", "/v1/streams/m", mint("al"+bad.raw+"ice", ""), "", ""))
	}
	require.Empty(t, statuses, "answers that were 5xx (or none) while the database was up")

	// 4. More waiting reads than a subject may hold: 429, with the rest still served.
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	codes := map[int]int{}
	for range 6 {
		conn, err := net.Dial("tcp", h.addr)
		require.NoError(t, err)
		held = append(held, conn)
		_, err = io.WriteString(conn, "GET /v1/streams/m/events HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+alice+"\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		codes[resp.StatusCode]++
		if resp.StatusCode != http.StatusOK {
			require.NoError(t, resp.Body.Close())
		} // an event stream's body stays open: it is the held read (closed with its connection)
	}
	require.Equal(t, map[int]int{http.StatusOK: 4, http.StatusTooManyRequests: 2}, codes)

	// 5. The stream every request aimed at still seals, with what it took.
	require.Equal(t, http.StatusOK, h.raw(rawRequest("POST", "/v1/streams/m/close", prod, "application/json", `{}`)))
	text, status := db.DurableText(t, "m")
	require.Equal(t, "complete", status)
	require.True(t, strings.HasPrefix(text, "kept "), text)
	t.Logf("descriptors %d at the start, %d at the end; series %d then %d; RSS %d KiB", baseFDs, h.fds(), baseSeries, h.series(), h.rssKiB())
}
