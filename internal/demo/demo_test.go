package demo_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/demo"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestAnswerYieldsValidMultilingualPiecesAtItsRate(t *testing.T) {
	var pieces []string
	astral := false
	for p, err := range demo.Answer(t.Context(), 7, 2000, 0) {
		require.NoError(t, err)
		require.True(t, utf8.ValidString(p))
		n := utf8.RuneCountInString(p)
		require.True(t, n >= 1 && n <= 6, "a piece of %d code points", n)
		for _, r := range p {
			astral = astral || utf16.RuneLen(r) == 2
		}
		pieces = append(pieces, p)
	}
	require.Len(t, pieces, 2000)
	require.True(t, astral, "the answer carries surrogate pairs in UTF-16")
	again := []string{}
	for p, err := range demo.Answer(t.Context(), 7, 2000, 0) {
		require.NoError(t, err)
		again = append(again, p)
	}
	require.Equal(t, pieces, again, "a seed reproduces the answer")

	// Paced: a cancelled context ends the answer with its cause, early.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	var last error
	for _, err := range demo.Answer(ctx, 1, 1000, 10*time.Millisecond) {
		if last = err; err != nil {
			break
		}
		if n++; n == 3 {
			cancel()
		}
	}
	require.ErrorIs(t, last, context.Canceled)
	require.Equal(t, 3, n)
}

// demoWorld is a demo on a real plane and database, served by a test server.
type demoWorld struct {
	db    *pgtest.DB
	plane *producer.Plane
	demo  *demo.Demo
	url   string
}

func serveDemo(t *testing.T, cfg demo.Config) *demoWorld {
	t.Helper()
	db := pgtest.NewDB(t)
	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	plane, err := producer.New(producer.Config{Committer: store,
		Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }})
	require.NoError(t, err)
	t.Cleanup(plane.Close)
	cfg.Plane = plane
	cfg.Messages, err = checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: checkpoint.PoolDB(db.Pool)})
	require.NoError(t, err)
	cfg.Mint = func(sub string, _ time.Duration) (string, error) { return "token-for-" + sub, nil }
	d, err := demo.New(cfg)
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	mux := http.NewServeMux()
	d.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &demoWorld{db: db, plane: plane, demo: d, url: srv.URL}
}

func TestStartRefusesBadParametersAndTooManyAnswers(t *testing.T) {
	w := serveDemo(t, demo.Config{MaxRunning: 1})
	db, plane, d, srvURL := w.db, w.plane, w.demo, w.url

	post := func(query string) (int, map[string]any) {
		resp, err := http.Post(srvURL+"/demo/answers"+query, "", nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	for _, q := range []string{"?tokens=0", "?tokens=abc", "?tokens=1e3", "?rate=-1", "?rate=999999", "?tokens=10%20"} {
		status, body := post(q)
		require.Equal(t, http.StatusBadRequest, status, q)
		require.Contains(t, body["detail"], "must be an integer in", q)
	}
	status, started := post("?tokens=1000&rate=20")
	require.Equal(t, http.StatusCreated, status)
	require.True(t, strings.HasPrefix(started["id"].(string), "demo-"))
	require.Equal(t, "token-for-"+started["owner"].(string), started["token"], "a reader token for the answer's owner")
	var owner string
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT owner FROM messages WHERE id = $1", started["id"]).Scan(&owner))
	require.Equal(t, started["owner"], owner)
	status, body := post("")
	require.Equal(t, http.StatusTooManyRequests, status, "one answer at a time here")
	require.Contains(t, body["detail"], "already streaming")

	resp, err := http.Get(srvURL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	resp, err = http.Get(srvURL + "/nope")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the page is at / only")

	require.NoError(t, plane.Drain(t.Context()))
	d.Stop()
	_, status2 := db.DurableText(t, started["id"].(string))
	require.Equal(t, "interrupted", status2, "a drain seals a running answer with what it produced")
}

// Anyone may start a demo answer, so the demo keeps the rows of at most MaxKept finished ones:
// past it the oldest are deleted (issue 19: every row was kept forever).
func TestTheDemoKeepsABoundedNumberOfAnswers(t *testing.T) {
	w := serveDemo(t, demo.Config{MaxRunning: 1, MaxKept: 2})
	db, plane, d, srvURL := w.db, w.plane, w.demo, w.url
	rows := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM messages WHERE id LIKE 'demo-%'").Scan(&n))
		return n
	}
	for i := range 4 {
		// One answer at a time (MaxRunning 1): a 429 means the last one has not finished yet.
		eventually.True(t, func() bool {
			resp, err := http.Post(srvURL+"/demo/answers?tokens=2&rate=2000", "", nil)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode == http.StatusCreated
		}, "answer %d", i)
	}
	eventually.True(t, func() bool {
		resp, err := http.Post(srvURL+"/demo/answers?tokens=2&rate=2000", "", nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated
	})
	require.NoError(t, plane.Drain(t.Context()))
	d.Stop()
	require.Equal(t, 2, rows(), "the two newest finished answers are kept")
}
