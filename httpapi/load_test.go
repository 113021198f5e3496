package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Load figures for the README and closing notes. Run them alone, once:
//
//	go test ./httpapi -run '^$' -bench 'SSE' -benchtime 1x
//
// Everything runs in one process on loopback (server, Postgres aside, and every client), so
// the figures include the clients' own cost: they are upper bounds for the server.

// loadServer serves the full API (auth, join, SSE) for a stream m that alice may read.
func loadServer(b *testing.B, queue int) (*world, *producer.LiveStream, string, string) {
	b.Helper()
	w := setup(b)
	if queue > 0 {
		var err error
		w.plane, err = producer.New(producer.Config{Committer: w.store, Authorize: allow, MaxQueuedFrames: queue})
		require.NoError(b, err)
		b.Cleanup(w.plane.Close)
	}
	srv, err := httpapi.New(httpapi.Config{Plane: w.plane, View: w.view, Messages: w.catalog(b), Secret: secret,
		MaxEventStreams: 1 << 20, MaxEventStreamsPerSubject: 1 << 20}) // one subject reads thousands of streams here
	require.NoError(b, err)
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	_, err = w.db.Pool.Exec(b.Context(), "INSERT INTO messages (id, owner) VALUES ('m', 'alice')")
	require.NoError(b, err)
	st, err := w.plane.Open(b.Context(), producer.OpenStreamInput{StreamID: "m"})
	require.NoError(b, err)
	return w, st, strings.TrimPrefix(hs.URL, "http://"), token(b, "alice", "")
}

// sseConn opens the event stream of m over a raw connection and reads up to the open frame.
func sseConn(b *testing.B, addr, tok string) (net.Conn, *bufio.Reader) {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(b, err)
	_, err = fmt.Fprintf(c, "GET /v1/streams/m/events?access_token=%s HTTP/1.1\r\nHost: x\r\n\r\n", url.QueryEscape(tok))
	require.NoError(b, err)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16<<10), nil) //nolint:bodyclose // the body is the connection, which the caller closes
	require.NoError(b, err)
	require.Equal(b, http.StatusOK, resp.StatusCode)
	r := bufio.NewReader(resp.Body) // dechunked
	ev, err := streamtest.ReadSSE(r)
	require.NoError(b, err)
	require.Contains(b, ev.Data, `"type":"open"`)
	return c, r
}

// BenchmarkSSEIdleSubscribers holds idle event streams open and reports the memory each costs
// (Go heap and stacks, server and client ends together) and how many were held.
func BenchmarkSSEIdleSubscribers(b *testing.B) {
	const n = 8000 // two descriptors each in one process, under this machine's 20000
	_, _, addr, tok := loadServer(b, 0)
	var conns []net.Conn
	b.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range b.N {
		before := memInUse()
		for range n {
			c, _ := sseConn(b, addr, tok) // the reader is dropped: an idle client keeps only its socket
			conns = append(conns, c)
		}
		after := memInUse()
		b.ReportMetric(float64(n), "subscribers")
		b.ReportMetric(float64(after-before)/n, "B/subscriber")
	}
}

func memInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// BenchmarkSSEFanoutLatency pushes numbered deltas for 10 s at a steady rate (30/s, a typical
// model; 100/s, a fast one) into one stream read by 1000 SSE clients, and reports push → client
// latency percentiles over every delivery.
func BenchmarkSSEFanoutLatency(b *testing.B) {
	for _, rate := range []int{30, 100} {
		b.Run(fmt.Sprintf("readers=1000/rate=%d", rate), func(b *testing.B) { fanout(b, 1000, rate) })
	}
}

func fanout(b *testing.B, readers, rate int) {
	deltas := rate * 10
	_, st, addr, tok := loadServer(b, 4096)
	for range b.N {
		pushedAt := make([]atomic.Int64, deltas)
		lat := make([][]time.Duration, readers)
		var stale atomic.Int64
		var wg sync.WaitGroup
		for i := range readers {
			c, r := sseConn(b, addr, tok)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for {
					ev, err := streamtest.ReadSSE(r)
					if err != nil {
						return
					}
					if ev.Data == "" {
						continue
					}
					now := time.Now().UnixNano()
					var f producer.Frame
					if json.Unmarshal([]byte(ev.Data), &f) != nil {
						return
					}
					switch f.Type {
					case producer.FrameChunk:
						for _, d := range strings.Split(strings.TrimSuffix(f.Text, ";"), ";") {
							k, err := strconv.Atoi(d)
							if err == nil && k < deltas {
								lat[i] = append(lat[i], time.Duration(now-pushedAt[k].Load()))
							}
						}
					case producer.FrameStale:
						stale.Add(1)
						return
					case producer.FrameEnd:
						return
					}
				}
			}()
		}
		b.ResetTimer()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		for k := range deltas {
			<-tick.C
			pushedAt[k].Store(time.Now().UnixNano())
			require.NoError(b, st.Push(strconv.Itoa(k)+";"))
		}
		tick.Stop()
		require.NoError(b, st.Close(context.Background()))
		wg.Wait()
		b.StopTimer()
		var all []time.Duration
		for _, l := range lat {
			all = append(all, l...)
		}
		slices.Sort(all)
		require.Zero(b, stale.Load(), "no reader fell behind")
		require.Len(b, all, readers*deltas, "every reader got every delta")
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-µs")
		b.ReportMetric(float64(len(all))/float64(deltas)*float64(rate), "deliveries/s")
	}
}
