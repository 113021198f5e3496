package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
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
	p := &dsProducer{t: t, client: e.client, token: e.prod, base: h.base, path: "/v1/stream/chaos-idempotent"}
	p.run(60, func(seq int, inFlight func() int) string {
		switch seq {
		case 20: // kill -9 with this append in flight, then a new process serves the retries
			answered := make(chan int, 1)
			go func() { answered <- inFlight() }()
			e.kill(h)
			h = e.start("ds-2")
			p.base = h.base
			return fmt.Sprintf("kill -9 under the append: its first answer %d", <-answered)
		case 40: // the database path cut under the append: connections dropped mid-commit
			answered := make(chan int, 1)
			go func() { answered <- inFlight() }()
			h.pg.Cut()
			st := <-answered
			h.pg.Restore()
			return fmt.Sprintf("database cut under the append: its first answer %d", st)
		}
		return ""
	})
	p.verify()
}

// Issue 22: the same producer while PostgreSQL itself crashes (every server process killed at
// once, fsync and synchronous commit on, recovery from the WAL at restart): twice inside an
// append's transaction (waiting for the stream's lock; with its chunk written, before COMMIT), once between appends (the next append meets a dead database), and once
// after the last acknowledgement, so the final read comes from a recovered server. Every
// acknowledged append is there exactly once, in order.
func TestChaosProtocolPostgresCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rindled on a private cluster that it crashes")
	}
	ctx := t.Context()
	c := pgtest.PrivateCluster(t, pgcluster.Config{Durable: true})
	prod, err := httpapi.NewToken([]byte(testSecret), "svc", httpapi.ProducerScope, time.Hour)
	require.NoError(t, err)
	in := spawn(t, "ds-crash", buildRindled(t), []string{"-addr", "127.0.0.1:0", "-host-id", "ds-crash", "-demo", "false", "-connect-timeout", "2s"},
		[]string{"DATABASE_URL=postgres://postgres@/postgres?sslmode=disable&host=" + c.SocketDir, "RINDLE_JWT_SECRET=" + testSecret})
	p := &dsProducer{t: t, client: &http.Client{Timeout: 10 * time.Second}, token: prod, base: in.base, path: "/v1/stream/chaos-crash"}
	crash := func() {
		require.NoError(t, c.Crash())
	}
	restart := func() {
		require.NoError(t, c.Restart(ctx))
	}
	// underLock sends the append while a transaction of the test's holds a row lock it needs,
	// and crashes PostgreSQL once the append waits on that lock: the crash lands inside the
	// append's transaction, at a point the lock chooses.
	underLock := func(lock string, inFlight func() int) int {
		conn, err := pgx.Connect(ctx, c.URL)
		require.NoError(t, err)
		defer func() { _ = conn.Close(context.Background()) }()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		tag, err := tx.Exec(ctx, lock)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), "the lock holds the stream's row")
		answered := make(chan int, 1)
		go func() { answered <- inFlight() }()
		watch, err := pgx.Connect(ctx, c.URL)
		require.NoError(t, err)
		for waiting := 0; waiting == 0; {
			require.NoError(t, watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query NOT LIKE '%pg_stat_activity%'").Scan(&waiting))
		}
		_ = watch.Close(ctx)
		crash()
		st := <-answered
		require.Contains(t, []int{0, http.StatusServiceUnavailable}, st, "an append the crash interrupted is not acknowledged")
		return st
	}
	p.run(60, func(seq int, inFlight func() int) string {
		switch seq {
		case 15: // the crash while the append waits for the stream's row lock, before it reads
			st := underLock("SELECT 1 FROM ds_streams WHERE path = 'chaos-crash' FOR UPDATE", inFlight)
			restart()
			return fmt.Sprintf("PostgreSQL crashed while the append waited for the stream's lock: its answer %d", st)
		case 45: // the crash after the append inserted its chunk, before its COMMIT
			st := underLock("SELECT 1 FROM messages WHERE id = 'ds/chaos-crash' FOR UPDATE", inFlight)
			restart()
			return fmt.Sprintf("PostgreSQL crashed with the append's chunk written, before its COMMIT: its answer %d", st)
		case 30: // crashed before the append: it meets a dead database
			crash()
			st := inFlight()
			require.Contains(t, []int{0, http.StatusServiceUnavailable}, st, "an append to a dead database is refused as retryable")
			restart()
			return fmt.Sprintf("PostgreSQL down before the append: its answer %d", st)
		}
		return ""
	})
	crash()
	restart()
	p.verify()
	log, err := os.ReadFile(c.LogFile())
	require.NoError(t, err)
	require.Equal(t, 4, strings.Count(string(log), "not properly shut down"), "four crashes, four recoveries")
}

// dsProducer is one idempotent Durable Streams producer: it appends numbered pieces (same
// Producer-Id, epoch and seq on every retry) until each is acknowledged, then verifies.
type dsProducer struct {
	t                 *testing.T
	client            *http.Client
	token, base, path string
	want              strings.Builder
	faults            map[int]string
}

func (p *dsProducer) send(method string, header map[string]string, body string) (int, http.Header, string) {
	req, err := http.NewRequestWithContext(p.t.Context(), method, p.base+p.path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+p.token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err.Error() // the instance died or stopped answering
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// run creates the stream and appends n pieces. Before append seq is retried, fault(seq,
// inFlight) may inject a fault, sending the append once (inFlight) while it does; what it
// returns is logged by verify. Only an unreachable database or instance is retried.
func (p *dsProducer) run(n int, fault func(seq int, inFlight func() int) string) {
	t := p.t
	for tries := 0; ; tries++ {
		require.Less(t, tries, 200, "the stream was never created")
		st, _, body := p.send("PUT", map[string]string{"Content-Type": "text/plain"}, "")
		if st == http.StatusCreated || st == http.StatusOK {
			break
		}
		require.Contains(t, []int{0, http.StatusServiceUnavailable}, st, body)
	}
	p.faults = map[int]string{}
	for seq := range n {
		piece := fmt.Sprintf("<%03d>", seq)
		p.want.WriteString(piece)
		header := map[string]string{"Content-Type": "text/plain", "Producer-Id": "chaos", "Producer-Epoch": "0", "Producer-Seq": strconv.Itoa(seq)}
		if f := fault(seq, func() int { st, _, _ := p.send("POST", header, piece); return st }); f != "" {
			p.faults[seq] = f
		}
		for tries := 0; ; tries++ {
			require.Less(t, tries, 200, "append %d was never acknowledged", seq)
			st, h2, body := p.send("POST", header, piece)
			if st == http.StatusOK || st == http.StatusNoContent {
				require.Equal(t, strconv.Itoa(seq), h2.Get("Producer-Seq"), "the acknowledgement names the producer's seq")
				break
			}
			require.Contains(t, []int{0, http.StatusServiceUnavailable}, st, "append %d: only an unreachable database is retried: %s", seq, body)
		}
	}
}

// verify reads the stream (retrying while the database comes back): every acknowledged append
// exactly once, in order.
func (p *dsProducer) verify() {
	t := p.t
	for tries := 0; ; tries++ {
		require.Less(t, tries, 200, "the stream never became readable")
		st, _, got := p.send("GET", nil, "")
		if st == http.StatusOK {
			require.Equal(t, p.want.String(), got, "every acknowledged append exactly once, in order")
			break
		}
		require.Contains(t, []int{0, http.StatusServiceUnavailable}, st, got)
	}
	for seq, f := range p.faults {
		t.Logf("append %d: %s", seq, f)
	}
}
