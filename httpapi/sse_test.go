package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// TestSSEJoinSurvivesReconnectsWithLastEventID serves joins over real HTTP and drops the
// connection at random points while the answer streams, reconnecting the way EventSource does.
func TestSSEJoinSurvivesReconnectsWithLastEventID(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		from, err := producer.ResumeFromRequest(r)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		j, err := httpapi.Join(r.Context(), w.view, w.plane, nil, r.URL.Query().Get("id"), from)
		if err != nil {
			http.Error(rw, "forbidden", http.StatusForbidden)
			return
		}
		_ = producer.WriteSSE(r.Context(), rw, j, producer.SSEConfig{})
	}))
	defer srv.Close()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('m')")
	require.NoError(t, err)
	s, err := w.plane.Open(ctx, producer.OpenStreamInput{StreamID: "m"})
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(3, 4))
	var produced strings.Builder
	pushed := 0
	push := func(n int) {
		for ; n > 0 && pushed < 300; n-- {
			d := fmt.Sprintf("t%d😀 ", pushed)
			produced.WriteString(d)
			require.NoError(t, s.Push(d))
			pushed++
		}
		if pushed == 300 {
			pushed++
			require.NoError(t, s.Close(ctx))
		}
	}
	text, lastID, reconnects := "", "", 0
	for ended := false; !ended; reconnects++ {
		push(rng.IntN(12))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?id=m", nil)
		require.NoError(t, err)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		// Closed however this connection's reads end (a failed assertion too): the server's
		// Close waits for its handler, which ends when the client goes.
		func() {
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			r := bufio.NewReader(resp.Body)
			n, midway := 2+rng.IntN(6), false
			for i := 0; i < n; {
				if i == 1 && !midway {
					push(3 + rng.IntN(8))
					midway = true
				}
				if midway && pushed <= 300 && text == produced.String() {
					// Everything pushed has arrived and the end is not due: a reader that
					// moved onto the live tail late gets the deltas it missed as one chunk,
					// so fewer frames than deltas can come, and waiting for more would wait
					// forever.
					break
				}
				ev, err := streamtest.ReadSSE(r)
				require.NoError(t, err)
				if ev.Data == "" {
					continue // a keep-alive comment (a loaded machine can be silent that long)
				}
				i++
				id, data := ev.ID, ev.Data
				var f producer.Frame
				require.NoError(t, json.Unmarshal([]byte(data), &f))
				if id != "" {
					lastID = id
				}
				if f.Type == producer.FrameOpen {
					require.LessOrEqual(t, f.From, producer.Len16(text))
					text = producer.Slice16(text, 0, f.From)
				}
				text, err = producer.Splice(text, f)
				require.NoError(t, err)
				require.NotEqual(t, producer.FrameStale, f.Type)
				if f.Type == producer.FrameEnd {
					ended = true
					return
				}
			}
		}()
	}
	require.Equal(t, produced.String(), text)
	require.Greater(t, reconnects, 20)
}
