package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 22: the Durable Streams protocol under the chaos suite's faults. An idempotent producer
// appends n numbered pieces, retrying each (same Producer-Id, epoch and seq) until one answer
// acknowledges it, while its rindled is killed with an append in flight (kill -9, then another
// process takes over) and while its database path is cut under an append (every connection
// dropped, the commit's reply possibly lost). Faults fire at append counts. Afterwards the
// stream holds every piece exactly once, in order: an acknowledged append is never lost, and a
// retried one whose first try committed is never stored twice.
func TestChaosProtocolIdempotentAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rindled processes through fault proxies")
	}
	e := newChaosEnv(t, buildRindled(t), false)
	h := e.start("ds-1")
	const path, n = "/v1/stream/chaos-idempotent", 60
	send := func(h *chaosHost, method string, header map[string]string, body string) (int, http.Header, string) {
		req, err := http.NewRequestWithContext(t.Context(), method, h.base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+e.prod)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			return 0, nil, err.Error() // the instance died or stopped answering
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	st, _, body := send(h, "PUT", map[string]string{"Content-Type": "text/plain"}, "")
	require.Equal(t, http.StatusCreated, st, body)

	var want strings.Builder
	faults := map[int]string{}
	for seq := range n {
		piece := fmt.Sprintf("<%03d>", seq)
		want.WriteString(piece)
		header := map[string]string{"Content-Type": "text/plain", "Producer-Id": "chaos", "Producer-Epoch": "0", "Producer-Seq": strconv.Itoa(seq)}
		switch seq {
		case 20: // kill -9 with this append in flight, then a new process serves the retries
			answered := make(chan int, 1)
			go func() { st, _, _ := send(h, "POST", header, piece); answered <- st }()
			e.kill(h)
			faults[seq] = fmt.Sprintf("kill -9 under the append: its first answer %d", <-answered)
			h = e.start("ds-2")
		case 40: // the database path cut under the append: connections dropped mid-commit
			answered := make(chan int, 1)
			go func() { st, _, _ := send(h, "POST", header, piece); answered <- st }()
			h.pg.Cut()
			st := <-answered
			h.pg.Restore()
			faults[seq] = fmt.Sprintf("database cut under the append: its first answer %d", st)
		}
		for tries := 0; ; tries++ {
			require.Less(t, tries, 200, "append %d was never acknowledged", seq)
			st, h2, body := send(h, "POST", header, piece)
			if st == http.StatusOK || st == http.StatusNoContent {
				require.Equal(t, strconv.Itoa(seq), h2.Get("Producer-Seq"), "the acknowledgement names the producer's seq")
				break
			}
			require.Contains(t, []int{0, http.StatusServiceUnavailable}, st, "append %d: only an unreachable database is retried: %s", seq, body)
		}
	}
	st, _, got := send(h, "GET", nil, "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, want.String(), got, "every acknowledged append exactly once, in order")
	for seq, f := range faults {
		t.Logf("append %d: %s", seq, f)
	}
}
