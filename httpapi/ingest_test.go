package httpapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/producer"
)

func TestStreamingIngestPushesEachPieceAsItArrives(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id, owner) VALUES ('m', 'alice')")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/open", prod, nil).status)
	st, _ := w.plane.Stream("m")

	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/streams/m/ingest", pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+prod)
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the test closes it on receipt
		if err != nil {
			panic(err)
		}
		done <- resp
	}()
	emoji := []byte("😀")
	_, _ = pw.Write([]byte("first "))
	eventually.True(t, func() bool { return st.Seq() == 6 }, "pushed before the body ended")
	_, _ = pw.Write(emoji[:2]) // a character split across writes
	_, _ = pw.Write(emoji[2:])
	_, _ = pw.Write([]byte(" last"))
	require.NoError(t, pw.Close())
	resp := <-done
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, producer.Seq(13), st.Seq())
	require.NoError(t, st.Close(ctx))
	text, _ := w.db.DurableText(t, "m")
	require.Equal(t, "first 😀 last", text)
}

func TestStreamingIngestStopsAtInvalidUTF8AndKeepsWhatCameBefore(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	_, err := w.db.Pool.Exec(t.Context(), "INSERT INTO messages (id, owner) VALUES ('m', 'alice')")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/open", prod, nil).status)
	r := c.doType("POST", "/v1/streams/m/ingest", prod, "text/plain; charset=utf-8", []byte("good \xff bad"))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.json(t)["detail"], "after 5 code units")
	st, _ := w.plane.Stream("m")
	require.Equal(t, producer.Seq(5), st.Seq(), "the valid prefix was pushed, the rest refused")
	require.Equal(t, http.StatusForbidden, c.do("POST", "/v1/streams/m/ingest", token(t, "alice", ""), []byte("x")).status)
	require.Equal(t, http.StatusNotFound, c.doType("POST", "/v1/streams/other/ingest", prod, "text/plain", []byte("x")).status)
}

func TestReadyzAndMetrics(t *testing.T) {
	t.Parallel()
	w := setup(t)
	var ready atomic.Bool
	c := serve(t, w, func(cfg *httpapi.Config) {
		cfg.Ready = func(context.Context) error {
			if !ready.Load() {
				return errors.New("cdc is 12 MB behind")
			}
			return nil
		}
		cfg.Metrics = http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("rindle_up 1\n")) })
	})
	r := c.do("GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Contains(t, r.json(t)["detail"], "cdc is 12 MB behind")
	ready.Store(true)
	require.Equal(t, http.StatusOK, c.do("GET", "/readyz", "", nil).status)
	r = c.do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "rindle_up 1\n", string(r.body))
}
