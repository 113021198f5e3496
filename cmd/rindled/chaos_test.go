package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/faultnet"
	"github.com/rindle-sh/rindle-go/internal/natstest"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// The chaos suite (issue 9): real rindled processes on a real PostgreSQL (and a real NATS
// JetStream where two hosts share a stream), each reaching its servers through a fault proxy
// (internal/faultnet), an HTTP producer that retries what it is refused, and SSE readers on
// every instance. Each scenario injects one fault at a moment of a stream's life and then
// checks, at quiescence:
//
//   - no text that a durable frame or a flush acknowledged is lost;
//   - the body is exactly the produced text, or a prefix of it only when the status is
//     interrupted (another host sealed it after this host's lease lapsed, or the host died);
//   - a single host is never sealed by its own sweeper: alone, it always ends complete;
//   - every reader's end frame carries the row's status and length, and its text (cut at the
//     end) is the body;
//   - every live instance's view equals the database.
//
// The table of faults and outcomes is printed (and written to $RINDLE_CHAOS_REPORT).

const chaosTTL = 2 * time.Second

// chaosHost is one rindled process and the proxies it reaches its servers through.
type chaosHost struct {
	*instance
	pg   *faultnet.Proxy
	nats *faultnet.Proxy // nil without a broker
	dead bool
}

type chaosEnv struct {
	t      *testing.T
	bin    string
	db     *pgtest.DB
	socket string
	nats   *natstest.Server
	prod   string
	reader string
	client *http.Client
}

func newChaosEnv(t *testing.T, bin string, broker bool) *chaosEnv {
	t.Helper()
	e := &chaosEnv{t: t, bin: bin, db: pgtest.NewDB(t), client: &http.Client{Timeout: 10 * time.Second}}
	cfg, err := pgconn.ParseConfig(e.db.URL)
	require.NoError(t, err)
	e.socket = fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	// Registered first, so it runs after every process stopped: the slot outlives them.
	t.Cleanup(func() { dropSlot(t, e.db) })
	if broker {
		e.nats = natstest.Start(t)
	}
	e.prod, err = httpapi.NewToken([]byte(testSecret), "svc", httpapi.ProducerScope, time.Hour)
	require.NoError(t, err)
	e.reader, err = httpapi.NewToken([]byte(testSecret), "alice", "", time.Hour)
	require.NoError(t, err)
	return e
}

func (e *chaosEnv) start(name string) *chaosHost {
	t := e.t
	t.Helper()
	pg, err := faultnet.New(faultnet.Unix(e.socket))
	require.NoError(t, err)
	t.Cleanup(pg.Close)
	h := &chaosHost{pg: pg}
	args := []string{"-addr", "127.0.0.1:0", "-slot", e.db.Slot(), "-host-id", name, "-lease-ttl", chaosTTL.String(),
		"-demo", "false", "-drain-timeout", "5s", "-connect-timeout", "2s"}
	if e.nats != nil {
		h.nats, err = faultnet.New(faultnet.TCP(strings.TrimPrefix(e.nats.URL(), "nats://")))
		require.NoError(t, err)
		t.Cleanup(h.nats.Close)
		args = append(args, "-broker-url", "nats://"+h.nats.Addr())
	}
	h.instance = spawn(t, name, e.bin, args, []string{
		fmt.Sprintf("DATABASE_URL=postgres://postgres@%s/%s?sslmode=disable", pg.Addr(), e.db.Name), "RINDLE_JWT_SECRET=" + testSecret})
	eventually.True(t, func() bool { s, _ := e.do(h, "GET", "/readyz", "", ""); return s == http.StatusOK }, "%s never ready", name)
	return h
}

func (e *chaosEnv) kill(h *chaosHost) {
	h.kill(e.t)
	h.dead = true
}

// do sends one request; status 0 means the request failed (a dead instance, a timeout).
func (e *chaosEnv) do(h *chaosHost, method, path, tok, body string) (int, []byte) {
	return request(e.t, e.client, h.base+path, method, tok, body)
}

// chaosRun is what the HTTP producer saw.
type chaosRun struct {
	mu        sync.Mutex
	produced  strings.Builder
	acked     producer.Seq // the highest durableSeq an append, flush or close answered
	refused   int          // 503s: nothing taken, retried
	fenced    bool         // 409: sealed by another writer
	died      bool         // the instance stopped answering
	closed    bool         // close answered 200
	statuses  map[int]int
	maxAppend time.Duration
}

func (r *chaosRun) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.produced.String()
}

func (r *chaosRun) ack(body []byte) {
	var out struct {
		DurableSeq producer.Seq `json:"durableSeq"`
	}
	if json.Unmarshal(body, &out) == nil && out.DurableSeq > r.acked {
		r.acked = out.DurableSeq
	}
}

// retryable answers are 503 (suspended, not durable yet, database away) and 0 (a timeout).
func retryable(status int) bool { return status == http.StatusServiceUnavailable || status == 0 }

// open creates the message and opens it on h, retrying what was refused for a while.
func (e *chaosEnv) open(h *chaosHost, id string) {
	t := e.t
	late := eventually.Late(t)
	for {
		s, b := e.do(h, "POST", "/v1/messages", e.prod, fmt.Sprintf(`{"id":%q,"owner":"alice"}`, id))
		if s == http.StatusCreated || s == http.StatusConflict {
			break
		}
		require.True(t, retryable(s), "create %s: %d %s", id, s, b)
		require.False(t, passed(late), "create %s: still refused at the test binary's deadline: %d %s", id, s, b)
		time.Sleep(100 * time.Millisecond)
	}
	for {
		s, b := e.do(h, "POST", "/v1/streams/"+id+"/open", e.prod, "")
		if s == http.StatusOK {
			return
		}
		require.True(t, retryable(s), "open %s: %d %s", id, s, b)
		require.False(t, passed(late), "open %s: still refused at the test binary's deadline: %d %s", id, s, b)
		time.Sleep(100 * time.Millisecond)
	}
}

// passed reports whether late (an eventually.Late bound) has fired, without waiting.
func passed(late <-chan time.Time) bool {
	select {
	case <-late:
		return true
	default:
		return false
	}
}

// produce pushes n deltas to id on h, one every interval, flushing every 16, retrying every
// refused delta until it is taken; fault runs before delta k. Then it closes, retrying a 503.
func (e *chaosEnv) produce(h *chaosHost, id string, n, pad int, interval time.Duration, fault func(k int), run *chaosRun) {
	run.statuses = map[int]int{}
	for k := range n {
		if fault != nil {
			fault(k)
		}
		d := delta(k)
		if pad > len(d) {
			d = strings.Repeat("x", pad-len(d)) + d
		}
		body, _ := json.Marshal(map[string]string{"text": d})
		for {
			start := time.Now()
			s, b := e.do(h, "POST", "/v1/streams/"+id+"/append", e.prod, string(body))
			run.mu.Lock()
			run.statuses[s]++
			run.maxAppend = max(run.maxAppend, time.Since(start))
			switch {
			case s == http.StatusOK:
				run.produced.WriteString(d)
				run.ack(b)
			case s == http.StatusConflict:
				run.fenced = true
			case s == 0 && h.dead:
				run.died = true
			case retryable(s):
				run.refused++
			default:
				run.mu.Unlock()
				e.t.Errorf("append %s: %d %s", id, s, b)
				return
			}
			run.mu.Unlock()
			if s == http.StatusOK || run.fenced || run.died {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if run.fenced || run.died {
			return
		}
		if k%16 == 15 {
			if s, b := e.do(h, "POST", "/v1/streams/"+id+"/flush", e.prod, ""); s == http.StatusOK {
				run.mu.Lock()
				run.ack(b)
				run.mu.Unlock()
			}
		}
		time.Sleep(interval)
	}
	late := eventually.Late(e.t)
	for !passed(late) {
		s, b := e.do(h, "POST", "/v1/streams/"+id+"/close", e.prod, "{}")
		run.mu.Lock()
		run.statuses[s]++
		switch {
		case s == http.StatusOK:
			run.closed = true
			run.ack(b)
		case s == http.StatusConflict:
			run.fenced = true
		case s == 0 && h.dead:
			run.died = true
		}
		done := run.closed || run.fenced || run.died
		run.mu.Unlock()
		if done {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Errorf("close %s never answered 200 or 409 before the test binary's deadline", id)
}

// chaosReader is one SSE reader's frames.
type chaosReader struct {
	host   *chaosHost
	label  string
	held   string
	frames []producer.Frame
	err    error
}

// read joins id on h at from (holding held) and reads to a terminal frame.
func (e *chaosEnv) read(h *chaosHost, id string, held string) *chaosReader {
	r := &chaosReader{host: h, label: fmt.Sprintf("%s@%d", h.name, producer.Len16(held)), held: held}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/streams/%s/events?from=%d", h.base, id, producer.Len16(held)), nil)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Authorization", "Bearer "+e.reader)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.err = fmt.Errorf("status %d", resp.StatusCode)
		return r
	}
	br := bufio.NewReader(resp.Body)
	for {
		ev, err := streamtest.ReadSSE(br)
		if err != nil {
			r.err = fmt.Errorf("after %d frames: %w", len(r.frames), err)
			return r
		}
		if ev.Data == "" {
			continue
		}
		var f producer.Frame
		if err := json.Unmarshal([]byte(ev.Data), &f); err != nil {
			r.err = err
			return r
		}
		r.frames = append(r.frames, f)
		if f.Terminal() {
			return r
		}
	}
}

// chaosOutcome is one row of the report.
type chaosOutcome struct {
	scenario, fault, status    string
	produced, body, acked      producer.Seq
	refused, ends, stales, cut int
	fenced, killed             bool
	maxAppend                  time.Duration
	verdict                    string
}

type chaosReport struct {
	mu   sync.Mutex
	rows []chaosOutcome
}

func (r *chaosReport) add(o chaosOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, o)
}

func (r *chaosReport) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.SortFunc(r.rows, func(a, b chaosOutcome) int { return strings.Compare(a.scenario, b.scenario) })
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %-58s %-11s %8s %8s %8s %7s %5s %6s %4s %9s  %s\n",
		"scenario", "fault", "status", "produced", "body", "acked", "refused", "ends", "stales", "cut", "maxappend", "verdict")
	for _, o := range r.rows {
		fmt.Fprintf(&b, "%-28s %-58s %-11s %8d %8d %8d %7d %5d %6d %4d %9s  %s\n",
			o.scenario, o.fault, o.status, o.produced, o.body, o.acked, o.refused, o.ends, o.stales, o.cut, o.maxAppend.Round(time.Millisecond), o.verdict)
	}
	return b.String()
}

// verify waits for quiescence and checks every promise; it fills the outcome.
func (e *chaosEnv) verify(id string, run *chaosRun, readers []*chaosReader, live []*chaosHost, o *chaosOutcome, singleHost bool) {
	t := e.t
	t.Helper()
	var body, status string
	eventually.True(t, func() bool {
		body, status = e.db.DurableText(t, id)
		return producer.Status(status).Terminal()
	}, "%s never sealed (status %s)", id, status)
	produced := run.text()
	o.status, o.produced, o.body, o.acked = status, producer.Len16(produced), producer.Len16(body), run.acked
	o.refused, o.fenced, o.maxAppend = run.refused, run.fenced, run.maxAppend

	// No acknowledged text lost, P, and the body's relation to the produced text.
	for _, r := range readers {
		for _, f := range r.frames {
			if f.Type == producer.FrameDurable && f.Seq > o.acked {
				o.acked = f.Seq
			}
		}
	}
	require.True(t, strings.HasPrefix(produced, body), "%s: the body is not a prefix of the produced text", id)
	require.GreaterOrEqual(t, o.body, o.acked, "%s: acknowledged text was lost: %d acknowledged, %d in the body", id, o.acked, o.body)
	switch status {
	case "complete":
		require.Equal(t, produced, body, "%s: a complete stream holds the whole produced text", id)
	case "interrupted":
		require.False(t, singleHost && !o.killed, "%s: a single healthy host sealed its own stream interrupted", id)
	default:
		t.Fatalf("%s: status %s", id, status)
	}
	if run.closed {
		require.Equal(t, "complete", status, "%s: close answered 200, so the row is complete", id)
	}

	// Readers: S, and the end frame is what the row holds.
	for _, r := range readers {
		if r.err != nil {
			require.True(t, r.host.dead, "%s: reader %s: %v", id, r.label, r.err)
			o.cut++ // its instance was killed
			continue
		}
		got, last := streamtest.Replay(t, r.held, r.frames)
		switch last.Type {
		case producer.FrameEnd:
			o.ends++
			require.Equal(t, status, string(last.Status), "%s: reader %s was told %s, the row says %s", id, r.label, last.Status, status)
			require.Equal(t, o.body, last.Seq, "%s: reader %s: the end's seq is not the row's", id, r.label)
			require.Equal(t, body, producer.Slice16(got, 0, last.Seq), "%s: reader %s: S", id, r.label)
		case producer.FrameStale:
			o.stales++ // it falls back to the durable plane, which P keeps a prefix
		default:
			t.Fatalf("%s: reader %s ended with %s", id, r.label, last.Type)
		}
	}

	// Every live instance's view equals the database.
	for _, h := range live {
		var got struct{ Text, Status string }
		eventually.True(t, func() bool {
			s, b := e.do(h, "GET", "/v1/streams/"+id, e.reader, "")
			return s == http.StatusOK && json.Unmarshal(b, &got) == nil && got.Status == status && got.Text == body
		}, "%s: the view on %s: %d units %s; the database: %d units %s", id, h.name, producer.Len16(got.Text), got.Status, o.body, status)
	}
	o.verdict = "ok"
}

// scenario runs one answer of n deltas with the given fault, readers on every host.
type chaosScenario struct {
	name, fault string
	hosts       int // rindled processes (two or more share a NATS broker)
	n           int // deltas
	inject      func(e *chaosEnv, hosts []*chaosHost, k int)
	beforeOpen  func(e *chaosEnv, hosts []*chaosHost)
	killed      bool // the producer's host is killed: its readers are cut
	deltaBytes  int  // pad each delta to about this many bytes (0: a few characters)
	noise       int  // more streams produced on the same host meanwhile, checked at the end too
	// appendBound, when set, is the longest any append may take: a producer that waits for a
	// sick broker would wait for the whole fault.
	appendBound time.Duration
}

// outage cuts h's database path for d, in the background.
func outage(h *chaosHost, d time.Duration) {
	h.pg.Cut()
	time.AfterFunc(d, h.pg.Restore)
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rindled processes through fault proxies")
	}
	bin := buildRindled(t)
	report := &chaosReport{}
	scenarios := []chaosScenario{
		{name: "db-0.3s-mid", fault: "database down 0.3 s mid-stream", hosts: 1, n: 120,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 50 {
					outage(hs[0], 300*time.Millisecond)
				}
			}},
		{name: "db-2s-mid", fault: "database down 2 s mid-stream", hosts: 1, n: 120,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 40 {
					outage(hs[0], 2*time.Second)
				}
			}},
		{name: "db-ttl+1-mid", fault: "database down TTL+1 s mid-stream, one host", hosts: 1, n: 120,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 30 {
					outage(hs[0], chaosTTL+time.Second)
				}
			}},
		{name: "db-ttl+1-partition", fault: "producer's host cut off TTL+1 s, another host sweeps", hosts: 2, n: 120,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 30 {
					outage(hs[0], chaosTTL+time.Second)
				}
			}},
		{name: "db-0.3s-open", fault: "database down 0.3 s as the stream opens", hosts: 1, n: 60,
			beforeOpen: func(_ *chaosEnv, hs []*chaosHost) { outage(hs[0], 300*time.Millisecond) }},
		{name: "db-2s-open", fault: "database down 2 s as the stream opens", hosts: 1, n: 60,
			beforeOpen: func(_ *chaosEnv, hs []*chaosHost) { outage(hs[0], 2*time.Second) }},
		{name: "db-0.3s-close", fault: "database down 0.3 s as the stream closes", hosts: 1, n: 60,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 59 {
					time.AfterFunc(20*time.Millisecond, func() { outage(hs[0], 300*time.Millisecond) })
				}
			}},
		{name: "db-ttl+1-close", fault: "database down TTL+1 s as the stream closes", hosts: 1, n: 60,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 59 {
					time.AfterFunc(20*time.Millisecond, func() { outage(hs[0], chaosTTL+time.Second) })
				}
			}},
		{name: "lease-row-lock", fault: "lease row held FOR UPDATE for 5 s, one host", hosts: 1, n: 300,
			inject: func(e *chaosEnv, hs []*chaosHost, k int) {
				if k == 30 {
					go e.lockLease(hs[0].name, 5*time.Second)
				}
			}},
		{name: "terminate-backends", fault: "pg_terminate_backend of the pool and the walsender", hosts: 1, n: 120,
			inject: func(e *chaosEnv, _ []*chaosHost, k int) {
				if k == 40 || k == 80 {
					_, err := e.db.Pool.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", e.db.Name)
					require.NoError(e.t, err)
				}
			}},
		{name: "kill-9-producer", fault: "kill -9 of the producer's host, another host sweeps", hosts: 2, n: 120, killed: true,
			inject: func(e *chaosEnv, hs []*chaosHost, k int) {
				if k == 60 {
					e.kill(hs[0])
				}
			}},
		{name: "nats-stops-answering", fault: "producer's NATS blackholed 8 s, 12 streams of 2 KB deltas", hosts: 2, n: 400,
			deltaBytes: 2 << 10, noise: 11, appendBound: 2 * time.Second,
			inject: func(_ *chaosEnv, hs []*chaosHost, k int) {
				if k == 10 {
					hs[0].nats.Blackhole()
					time.AfterFunc(8*time.Second, hs[0].nats.Restore)
				}
			}},
	}
	t.Run("Faults", func(t *testing.T) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				runChaos(t, bin, sc, report)
			})
		}
	})
	out := report.String()
	fmt.Print("chaos suite:\n" + out)
	if path := os.Getenv("RINDLE_CHAOS_REPORT"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
	}
}

func runChaos(t *testing.T, bin string, sc chaosScenario, report *chaosReport) {
	e := newChaosEnv(t, bin, sc.hosts > 1)
	o := chaosOutcome{scenario: sc.name, fault: sc.fault, verdict: "FAILED", killed: sc.killed}
	defer func() { report.add(o) }()
	var hosts []*chaosHost
	for i := range sc.hosts {
		hosts = append(hosts, e.start(string(rune('A'+i))))
	}
	a := hosts[0]
	id := "chaos-" + sc.name
	if sc.beforeOpen != nil {
		sc.beforeOpen(e, hosts)
	}
	e.open(a, id)

	run := &chaosRun{}
	var readers []*chaosReader
	var rmu sync.Mutex
	var rwg sync.WaitGroup
	join := func(h *chaosHost, held string) {
		rwg.Go(func() {
			r := e.read(h, id, held)
			rmu.Lock()
			readers = append(readers, r)
			rmu.Unlock()
		})
	}
	for _, h := range hosts {
		join(h, "")
	}
	inject := func(k int) {
		if k == sc.n/3 {
			// Late joiners at a point the producer has made, on every instance.
			text := run.text()
			for _, h := range hosts {
				join(h, producer.Slice16(text, 0, producer.Len16(text)/2))
			}
		}
		if sc.inject != nil {
			sc.inject(e, hosts, k)
		}
	}
	noise := make([]*chaosRun, sc.noise)
	var nwg sync.WaitGroup
	for i := range noise {
		noise[i] = &chaosRun{}
		nid := fmt.Sprintf("%s-noise-%d", id, i)
		e.open(a, nid)
		nwg.Go(func() { e.produce(a, nid, sc.n, sc.deltaBytes, 20*time.Millisecond, nil, noise[i]) })
	}
	e.produce(a, id, sc.n, sc.deltaBytes, 20*time.Millisecond, inject, run)
	nwg.Wait()
	rwg.Wait()
	for i, r := range noise {
		body, status := e.db.DurableText(t, fmt.Sprintf("%s-noise-%d", id, i))
		require.Equal(t, "complete", status)
		require.Equal(t, r.text(), body)
		run.maxAppend = max(run.maxAppend, r.maxAppend)
	}
	var live []*chaosHost
	for _, h := range hosts {
		if !h.dead {
			live = append(live, h)
		}
	}
	e.verify(id, run, readers, live, &o, sc.hosts == 1)
	if sc.appendBound > 0 && run.maxAppend > sc.appendBound {
		o.verdict = "FAILED"
		t.Fatalf("%s: an append took %s: the producer waited for the fault", id, run.maxAppend)
	}
}

// dropSlot drops db's slot once its processes are gone. A walsender whose client vanished can
// hold the slot for a moment; it is terminated until the slot can be dropped.
func dropSlot(t *testing.T, db *pgtest.DB) {
	ctx := context.Background()
	late := eventually.Late(t)
	for {
		_, _ = db.Pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", db.Slot())
		_, _ = db.Pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", db.Slot())
		var left int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", db.Slot()).Scan(&left); err == nil && left == 0 {
			return
		}
		if passed(late) {
			t.Errorf("slot %s could not be dropped before the test binary's deadline", db.Slot())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockLease holds host's lease row FOR UPDATE for d from another session.
func (e *chaosEnv) lockLease(host string, d time.Duration) {
	ctx := context.Background()
	tx, err := e.db.Pool.Begin(ctx)
	if err != nil {
		e.t.Errorf("lock lease: %v", err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT * FROM rindle_hosts WHERE host = $1 FOR UPDATE", host); err != nil {
		e.t.Errorf("lock lease: %v", err)
		return
	}
	time.Sleep(d)
}

// Issue 9, item 7: start-up against a database (or broker) address that accepts connections
// and never answers fails within the connect timeout, with an error that says so, instead of
// hanging for minutes.
func TestStartFailsFastAgainstAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	runFor := func(t *testing.T, args []string, env map[string]string) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- run(t.Context(), args, envOf(env), io.Discard, io.Discard) }()
		select {
		case err := <-done:
			return err
		case <-eventually.Late(t):
			t.Fatal("rindled hung against a server that never answers")
		}
		return nil
	}
	t.Run("Database", func(t *testing.T) {
		t.Parallel()
		hole, err := faultnet.New(faultnet.TCP("127.0.0.1:1"))
		require.NoError(t, err)
		t.Cleanup(hole.Close)
		hole.Blackhole()
		err = runFor(t, []string{"-addr", "127.0.0.1:0", "-connect-timeout", "1s"},
			map[string]string{"DATABASE_URL": "postgres://rindle@" + hole.Addr() + "/rindle?sslmode=disable", "RINDLE_JWT_SECRET": testSecret})
		require.ErrorContains(t, err, "connect to the database (within 1s)")
		require.ErrorContains(t, err, "timeout")
	})
	t.Run("Broker", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDB(t)
		hole, err := faultnet.New(faultnet.TCP("127.0.0.1:1"))
		require.NoError(t, err)
		t.Cleanup(hole.Close)
		hole.Blackhole()
		err = runFor(t, []string{"-addr", "127.0.0.1:0", "-slot", db.Slot(), "-broker-url", "nats://" + hole.Addr()},
			map[string]string{"DATABASE_URL": db.URL, "RINDLE_JWT_SECRET": testSecret})
		require.ErrorContains(t, err, "broker: connect")
	})
}
