package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
)

// BenchmarkExistenceOracle is the timing probe: can a caller tell, by how long a refusal takes,
// whether an id it may not read exists? Each iteration sends four reads of the durable view
// side by side, so the machine's noise falls on all of them alike, and reports each one's mean:
//
//   - cross/live: a tenant-b reader asks for tenant a's live stream;
//   - cross/missing: the same reader asks for an id that exists nowhere;
//   - stranger/live: a tenant-a reader who does not own it asks for the live stream;
//   - stranger/missing: the same reader asks for a missing id.
//
// Every one is answered 403 with one body; the ratios live/missing should be 1 within noise.
//
//	go test ./httpapi -run '^$' -bench ExistenceOracle -count 3
func BenchmarkExistenceOracle(b *testing.B) {
	w := setup(b)
	srv, err := httpapi.New(httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(b), Secret: secret})
	require.NoError(b, err)
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	prod := tenantToken(b, "a", "svc", "producer", "")
	do := func(method, path, tok, body string) (int, string) {
		req, err := http.NewRequestWithContext(b.Context(), method, hs.URL+path, strings.NewReader(body))
		require.NoError(b, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		require.NoError(b, err)
		return resp.StatusCode, string(got)
	}
	st, body := do("POST", "/v1/messages", prod, `{"id":"live","owner":"alice"}`)
	require.Equal(b, http.StatusCreated, st, body)
	st, body = do("POST", "/v1/streams/live/open", prod, "")
	require.Equal(b, http.StatusOK, st, body)
	probes := []struct {
		name, tok, id string
		total         time.Duration
	}{
		{name: "cross/live", tok: tenantToken(b, "b", "alice", "", ""), id: "live"},
		{name: "cross/missing", tok: tenantToken(b, "b", "alice", "", ""), id: "missing"},
		{name: "stranger/live", tok: tenantToken(b, "a", "mallory", "", ""), id: "live"},
		{name: "stranger/missing", tok: tenantToken(b, "a", "mallory", "", ""), id: "missing"},
	}
	var first string
	for i := range probes {
		st, body := do("GET", "/v1/streams/"+probes[i].id, probes[i].tok, "")
		require.Equal(b, http.StatusForbidden, st)
		if first == "" {
			first = body
		}
		require.Equal(b, first, body, "one body for every refusal")
	}
	b.ResetTimer()
	for range b.N {
		for i := range probes {
			start := time.Now()
			_, _ = do("GET", "/v1/streams/"+probes[i].id, probes[i].tok, "")
			probes[i].total += time.Since(start)
		}
	}
	for _, p := range probes {
		b.ReportMetric(float64(p.total.Nanoseconds())/float64(b.N), p.name+"-ns")
	}
	b.ReportMetric(float64(probes[0].total)/float64(probes[1].total), "cross-live/missing")
	b.ReportMetric(float64(probes[2].total)/float64(probes[3].total), "stranger-live/missing")
}
