package httpapi_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Issue 9, item 8: while the database is away, a reader can still join a stream that is live on
// this very instance (its owner is known in memory), a stranger is still refused the same way,
// and the answer names this instance.
func TestReaderJoinsALocalStreamWhileTheDatabaseIsAway(t *testing.T) {
	t.Parallel()
	w := setup(t)
	apiPool, err := pgxpool.New(t.Context(), w.db.URL)
	require.NoError(t, err)
	c := serve(t, w, func(cfg *httpapi.Config) { cfg.Messages = catalogOn(t, apiPool); cfg.HostID = "host-a" })
	prod, alice, mallory := token(t, "svc", "producer"), token(t, "alice", ""), token(t, "mallory", "")
	require.Equal(t, http.StatusCreated, c.do("POST", "/v1/messages", prod, []byte(`{"id":"m1","owner":"alice"}`)).status)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m1/open", prod, nil).status)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m1/append", prod, []byte(`{"text":"live text"}`)).status)

	apiPool.Close() // every query of the API now fails, as against a dead database

	req, err := http.NewRequestWithContext(t.Context(), "GET", c.base+"/v1/streams/m1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "host-a", resp.Header.Get(httpapi.HostHeader))
	br := bufio.NewReader(resp.Body)
	var got []producer.Frame
	text := ""
	for producer.Len16(text) < 9 {
		ev, err := streamtest.ReadSSE(br)
		require.NoError(t, err)
		if ev.Data == "" {
			continue
		}
		var f producer.Frame
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &f))
		got = append(got, f)
		if f.Type == producer.FrameChunk {
			require.Equal(t, producer.Len16(text), f.From, "contiguous chunks")
			text += f.Text
		}
	}
	require.Equal(t, producer.FrameOpen, got[0].Type)
	require.Equal(t, "live text", text)
	// A stranger is not answered from memory: a denial reads the row, as a missing id does, so
	// the two cannot be told apart, not even while the database is away (both 503).
	stranger := c.do("GET", "/v1/streams/m1/events", mallory, nil)
	missing := c.do("GET", "/v1/streams/nothing-here/events", mallory, nil)
	require.Equal(t, http.StatusServiceUnavailable, stranger.status)
	require.Equal(t, missing.status, stranger.status)
	require.Equal(t, string(missing.body), string(stranger.body))
}

// catalogOn is the default mapping's catalog on its own pool, which a test can close to play a
// dead database.
func catalogOn(t *testing.T, pool *pgxpool.Pool) *checkpoint.Catalog {
	t.Helper()
	cat, err := checkpoint.NewCatalog(checkpoint.CatalogConfig{DB: checkpoint.PoolDB(pool)})
	require.NoError(t, err)
	return cat
}
