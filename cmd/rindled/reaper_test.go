package main

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// Issue 22, retention: a running rindled removes an expired protocol stream that nobody
// touches again, and counts it.
func TestTheReaperRemovesExpiredStreamsNobodyTouches(t *testing.T) {
	db := pgtest.NewDB(t)
	srv := startRindled(t, db, "-streams-reap-interval", "10ms")
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"token", "-sub", "svc", "-scope", "producer"}, srv.env, &out, io.Discard))
	tok := strings.TrimSpace(out.String())
	for path, ttl := range map[string]string{"brief": "1", "kept": "3600"} {
		req, err := http.NewRequestWithContext(t.Context(), "PUT", srv.base+"/v1/stream/"+path, strings.NewReader("x"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Stream-TTL", ttl)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, path)
	}
	// "brief" was last touched an hour ago, as far as its row says (a TTL of 0, which would be
	// expired at once, is refused), and nobody touches it again.
	_, err := db.Pool.Exec(t.Context(), "UPDATE ds_streams SET accessed_at = accessed_at - interval '1 hour' WHERE path = 'brief'")
	require.NoError(t, err)
	// A condition, not a clock: the row goes at the reaper's next round, however late.
	eventually.True(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM ds_streams WHERE path = 'brief'").Scan(&n))
		return n == 0
	})
	var kept int
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM ds_streams WHERE path = 'kept'").Scan(&kept))
	require.Equal(t, 1, kept, "a stream within its TTL stays")
	st, metrics := request(t, http.DefaultClient, srv.base+"/metrics", "GET", "", "")
	require.Equal(t, http.StatusOK, st)
	require.Regexp(t, regexp.MustCompile(`rindle_streams_reaped_total\{[^}]*kind="stream"[^}]*\} [1-9]`), string(metrics))
}

func TestReaperSettingsRefuseNegativeDurations(t *testing.T) {
	for _, flag := range []string{"-streams-reap-interval", "-streams-producer-retention"} {
		err := run(t.Context(), []string{flag, "-1s"}, envOf(map[string]string{"RINDLE_JWT_SECRET": testSecret}), io.Discard, io.Discard)
		require.ErrorContains(t, err, "want 0 (off) or a positive duration", flag)
	}
}
