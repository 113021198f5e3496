package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/internal/edgetest"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// startEdge runs `rindled edge-auth` and nginx (deploy/nginx-edge.conf.tmpl) in front of the
// rindled at origin. Without nginx the test skips, unless RINDLE_REQUIRE_NGINX is set (as
// .ci/run sets it), where it fails.
func startEdge(t *testing.T, origin *started) *edgetest.Edge {
	t.Helper()
	if _, err := edgetest.Binary(); err != nil {
		if os.Getenv("RINDLE_REQUIRE_NGINX") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	logs, logw := io.Pipe()
	over := make(chan error, 1)
	go func() {
		over <- run(ctx, []string{"edge-auth", "-addr", "127.0.0.1:0"}, origin.env, logw, io.Discard)
		_ = logw.Close()
	}()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-over)
	})
	var authURL string
	lines := bufio.NewScanner(logs)
	for lines.Scan() {
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			authURL = m[1]
			break
		}
	}
	require.NotEmpty(t, authURL, "edge-auth never said where it listens")
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	e, err := edgetest.Start(edgetest.Config{Dir: t.TempDir(), Origin: strings.TrimPrefix(origin.base, "http://"),
		EdgeAuth: strings.TrimPrefix(authURL, "http://")})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

// edgeToken signs a token in tenant for sub; n makes each reader's token its own.
func edgeToken(t *testing.T, tenant, sub, scope, stream string, n int) string {
	t.Helper()
	tok, err := auth.Sign([]byte(testSecret), auth.TokenClaims{Tenant: tenant, Scope: scope, Stream: stream,
		RegisteredClaims: jwt.RegisteredClaims{Subject: sub, ID: fmt.Sprint(n)}}, time.Hour)
	require.NoError(t, err)
	return tok
}

func edgeDo(t *testing.T, method, url, tok, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" || method == http.MethodPut {
		req.Header.Set("Content-Type", "text/plain")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// TestEdgeCacheCollapsesLongPollsAndKeepsTenantsApart: nginx in front of rindled, with
// edge-auth checking every request. Readers of one path in two tenants long-poll through it while
// each tenant's producer appends; every reader gets exactly its own tenant's text, and the
// readers waiting at one offset reach the origin together as a few requests, not one each. A
// request without a token is refused at the edge without reaching the origin; a subject that does
// not own the stream, and a token narrowed to another stream, are refused by the origin even at
// an offset the cache holds for the owner; a stream deleted and created again is read afresh from
// the start.
func TestEdgeCacheCollapsesLongPollsAndKeepsTenantsApart(t *testing.T) {
	origin := startRindled(t, pgtest.NewDB(t))
	edge := startEdge(t, origin)
	const path, appends = "/v1/stream/room/1", 12
	readersOf := map[string]int{"a": 60, "b": 20}
	url := edge.URL + path
	producers, incarnation := map[string]string{}, map[string]string{}
	for tenant := range readersOf {
		producers[tenant] = edgeToken(t, tenant, "app", "producer", "", 0)
		status, h, body := edgeDo(t, http.MethodPut, url, producers[tenant], "")
		require.Equal(t, http.StatusCreated, status, body)
		incarnation[tenant], _, _ = strings.Cut(h.Get("Stream-Next-Offset"), "-")
	}
	part := func(tenant string, k int) string { return fmt.Sprintf("<%s:%02d>", tenant, k) }
	want := func(tenant string) string {
		var b strings.Builder
		for k := range appends {
			b.WriteString(part(tenant, k))
		}
		return b.String()
	}

	// The readers, each its own token and connection, all the stream owner's subject.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	type result struct {
		tenant, text string
		err          error
	}
	results := make(chan result, 100)
	var progress sync.Map // tenant → *[]int: how many appends each reader holds
	var readers sync.WaitGroup
	for tenant, n := range readersOf {
		for i := range n {
			tok := edgeToken(t, tenant, "app", "", "", i+1)
			readers.Go(func() {
				text, err := edgetest.Reader{Client: client, URL: url, Token: tok, Want: len(want(tenant))}.Read(t.Context())
				results <- result{tenant, text, err}
			})
		}
		progress.Store(tenant, nil)
	}
	// Each tenant's producer appends while the readers read (whether a reader is waiting at an
	// append's offset or arrives after it only moves requests between the lock and the cache).
	for k := range appends {
		for tenant := range readersOf {
			status, _, body := edgeDo(t, http.MethodPost, url, producers[tenant], part(tenant, k))
			require.Equal(t, http.StatusNoContent, status, body)
		}
	}
	readers.Wait()
	close(results)
	for r := range results {
		require.NoError(t, r.err, "tenant %s read %q", r.tenant, r.text)
		require.Equal(t, want(r.tenant), r.text, "a reader of tenant %s", r.tenant)
	}

	reqs, err := edge.Requests()
	require.NoError(t, err)
	sent, err := edge.OriginRequests()
	require.NoError(t, err)
	longPolls := func(uris []string) (n int) {
		for _, u := range uris {
			if strings.HasPrefix(u, path+"?") && strings.Contains(u, "live=long-poll") {
				n++
			}
		}
		return n
	}
	var uris []string
	hits := 0
	for _, r := range reqs {
		uris = append(uris, r.URI)
		if r.Cache == "HIT" && strings.Contains(r.URI, "live=long-poll") {
			hits++
		}
	}
	polls, pollsAtOrigin := longPolls(uris), longPolls(sent)
	t.Logf("%d long-polls by %d readers over %d appends: %d reached the origin, %d answered from the cache", polls, readersOf["a"]+readersOf["b"], appends*2, pollsAtOrigin, hits)
	require.Positive(t, hits, "the cache answered long-polls")
	require.Less(t, pollsAtOrigin, polls/2, "the readers' long-polls collapsed at the edge")

	// A request without a token, or with a bad one, is refused at the edge: 401, never at the origin.
	status, h, _ := edgeDo(t, http.MethodGet, url+"?offset=0000000000000000&live=long-poll", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
	status, _, _ = edgeDo(t, http.MethodGet, url+"?offset=0000000000000000&live=long-poll", producers["a"]+"x", "")
	require.Equal(t, http.StatusUnauthorized, status)
	reqs, err = edge.Requests()
	require.NoError(t, err)
	for _, r := range reqs[len(reqs)-2:] {
		require.Equal(t, http.StatusUnauthorized, r.Status)
	}
	after, err := edge.OriginRequests()
	require.NoError(t, err)
	require.Len(t, after, len(sent), "a refused request reached the origin")

	// At an offset the cache holds for the owner (the first append's end), another subject of the
	// same tenant and a token narrowed to another stream get the origin's 404, not the entry.
	offset := fmt.Sprintf("%s-%016d", incarnation["a"], len(part("a", 0)))
	for _, tok := range []string{edgeToken(t, "a", "mallory", "", "", 1), edgeToken(t, "a", "app", "", "room/2", 1)} {
		status, _, body := edgeDo(t, http.MethodGet, url+"?offset="+offset+"&live=long-poll", tok, "")
		require.Equal(t, http.StatusNotFound, status, body)
	}

	// Deleted and created again, the path is read afresh from the start (never from the cache).
	admin := edgeToken(t, "a", "ops", "admin", "", 0)
	status, _, body := edgeDo(t, http.MethodDelete, url, admin, "")
	require.Equal(t, http.StatusNoContent, status, body)
	status, _, body = edgeDo(t, http.MethodPut, url, producers["a"], "again")
	require.Equal(t, http.StatusCreated, status, body)
	text, err := edgetest.Reader{Client: client, URL: url, Token: edgeToken(t, "a", "app", "", "", 99), Want: len("again")}.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, "again", text)

	// Nor is it answered from the entries of the stream the path named before. The cache holds
	// the answer at the offset where "again" ends (a long-poll there, with data past it); the
	// path is deleted and created again with a stream of the same length, which gains other
	// data; a long-poll at the offset the new stream hands out for that end reads the new data.
	reader := edgeToken(t, "a", "app", "", "", 100)
	// recreate deletes the path, creates "again" there, appends more, and says where "again" ends.
	recreate := func(more string) string {
		status, _, body := edgeDo(t, http.MethodDelete, url, admin, "")
		require.Equal(t, http.StatusNoContent, status, body)
		status, h, body := edgeDo(t, http.MethodPut, url, producers["a"], "again")
		require.Equal(t, http.StatusCreated, status, body)
		status, _, body = edgeDo(t, http.MethodPost, url, producers["a"], more)
		require.Equal(t, http.StatusNoContent, status, body)
		return h.Get("Stream-Next-Offset")
	}
	longPoll := func(offset, tok string) (int, http.Header, string) {
		return edgeDo(t, http.MethodGet, url+"?offset="+offset+"&live=long-poll", tok, "")
	}
	oldEnd := recreate("+old")
	// Asked again until the cache answers (an entry lives 5 s: a stalled machine may let one
	// lapse between two requests).
	for cached := false; !cached; {
		status, h, body := longPoll(oldEnd, reader)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "+old", body)
		cached = h.Get("X-Edge-Cache") == "HIT"
	}
	newEnd := recreate("+new")
	status, _, body = longPoll(newEnd, reader)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "+new", body, "a reader of the new stream was answered from the old one's entry")
	// The old stream's offset, asked of the new stream, is refused: 410. (Asked by the key class
	// that cached it, within 5 s, it is the old stream's answer, from the cache: a reader of
	// the old stream reads what the old stream held.)
	status, _, body = longPoll(oldEnd, producers["a"])
	require.Equal(t, http.StatusGone, status, body)

	// An offset that names no stream (hand-written, the start's form) is answered, never kept:
	// the same request once named another stream's position.
	unnamed := fmt.Sprintf("0000000000000000_%016d", len("again"))
	for range 2 {
		status, h, body := longPoll(unnamed, reader)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "+new", body)
		require.Equal(t, "MISS", h.Get("X-Edge-Cache"), "an answer at an offset naming no stream was kept")
	}
}
