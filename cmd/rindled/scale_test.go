package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/natstest"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// The scale-out test (docs/DESIGN.md §8): three rindled processes on one PostgreSQL and one NATS
// JetStream server, all on loopback. A producer on one instance, readers on the others joining
// at random offsets mid-answer through the relay; then kill -9 of the producer's instance, of
// the CDC leader, and a broker restart, each mid-answer. Contract S is checked for every reader
// and every instance's view is compared with the database.

// instance is one rindled process.
type instance struct {
	name string
	base string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cluster is the deployment under test.
type cluster struct {
	t      *testing.T
	bin    string
	db     *pgtest.DB
	nats   *natstest.Server
	prod   string // producer token
	reader string // alice's token
}

func buildRindled(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rindled")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

func (c *cluster) start(name string) *instance {
	t := c.t
	t.Helper()
	in := spawn(t, name, c.bin, []string{"-addr", "127.0.0.1:0", "-slot", c.db.Slot(), "-broker-url", c.nats.URL(),
		"-host-id", name, "-lease-ttl", "2s", "-demo", "false", "-drain-timeout", "5s"},
		[]string{"DATABASE_URL=" + c.db.URL, "RINDLE_JWT_SECRET=" + testSecret})
	eventually.True(t, func() bool { return c.status(in, "GET", "/readyz", "", "") == http.StatusOK })
	return in
}

// spawn runs the rindled binary bin with args and env (added to this process's) and returns
// once it says where it listens. Cleanup sends SIGTERM (SIGKILL after 20 s) and, when the test
// failed, logs everything it printed.
func spawn(t *testing.T, name, bin string, args, env []string) *instance {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in := &instance{name: name, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = in.logs
	require.NoError(t, cmd.Start())
	urls := make(chan string, 1)
	go func() {
		defer close(in.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, _ = in.logs.Write(append(sc.Bytes(), '\n'))
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-in.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-in.done
		}
		if t.Failed() {
			t.Logf("--- logs of %s:\n%s", name, in.logs.String())
		}
	})
	select {
	case in.base = <-urls:
	case <-in.done:
		t.Fatalf("%s exited: %s", name, in.logs.String())
	case <-eventually.Late(t):
		t.Fatalf("%s never listened: %s", name, in.logs.String())
	}
	return in
}

// kill is kill -9: no drain, no seal, no goodbye to the database or the broker.
func (in *instance) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, in.cmd.Process.Signal(syscall.SIGKILL))
	<-in.done
}

func (c *cluster) do(in *instance, method, path, tok, body string) (int, []byte) {
	return request(c.t, http.DefaultClient, in.base+path, method, tok, body)
}

// request sends one request with a bearer token and a JSON body (if any). Status 0 means the
// request failed (a dead instance, a timeout); the body then says why.
func request(t *testing.T, client *http.Client, url, method, tok, body string) (int, []byte) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *cluster) status(in *instance, method, path, tok, body string) int {
	s, _ := c.do(in, method, path, tok, body)
	return s
}

// leader is the application_name of the replication connection that holds the slot.
func (c *cluster) leader() string {
	var name string
	err := c.db.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT application_name FROM pg_stat_replication r
		JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1), '')`, c.db.Slot()).Scan(&name)
	require.NoError(c.t, err)
	return strings.TrimPrefix(name, "rindled-cdc ")
}

// answer produces a message on in: n deltas, one every interval, each "k" then multi-byte text
// and ';' so readers can time every delta. It returns the push times and the produced text
// through a channel closed when production stops (after close, or when stop is closed).
type answer struct {
	id       string
	mu       sync.Mutex
	produced string
	acked    int // deltas the producer's instance answered 200 to
	pushedAt []time.Time
	ended    chan struct{}
}

// after waits until at least n deltas were acknowledged: phases are placed by how far the
// answer got, not by sleeps, so a slow machine moves the test's steps with the answer.
func (a *answer) after(t *testing.T, n int) {
	t.Helper()
	eventually.True(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.acked >= n
	}, "%s: %d deltas acknowledged", a.id, n)
}

func (a *answer) text() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.produced
}

func delta(k int) string { return fmt.Sprintf("%dé😀;", k) }

func (c *cluster) produce(in *instance, id string, n int, interval time.Duration, closeAtEnd bool) *answer {
	t := c.t
	require.Equal(t, http.StatusCreated, c.status(in, "POST", "/v1/messages", c.prod, fmt.Sprintf(`{"id":%q,"owner":"alice"}`, id)))
	require.Equal(t, http.StatusOK, c.status(in, "POST", "/v1/streams/"+id+"/open", c.prod, ""))
	a := &answer{id: id, ended: make(chan struct{})}
	go func() {
		defer close(a.ended)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for k := range n {
			<-tick.C
			body, _ := json.Marshal(map[string]string{"text": delta(k)})
			a.mu.Lock()
			a.pushedAt = append(a.pushedAt, time.Now())
			a.mu.Unlock()
			if s, _ := c.do(in, "POST", "/v1/streams/"+id+"/append", c.prod, string(body)); s != http.StatusOK {
				return // the instance died
			}
			a.mu.Lock()
			a.produced += delta(k)
			a.acked++
			a.mu.Unlock()
		}
		if closeAtEnd {
			c.status(in, "POST", "/v1/streams/"+id+"/close", c.prod, "{}")
		}
	}()
	return a
}

// read is one SSE reader: it joins id on in at from, holding held (the produced text's prefix
// it had), and reads to the end. It returns its final text (cut at the end frame's durable
// seq), the end frame and per-delta latencies.
type readResult struct {
	label   string
	text    string
	end     producer.Frame
	latency []time.Duration
	chunks  int // chunk frames: one per delta or so from a live tail, one per checkpoint from the view
	host    string
	err     error
}

func (c *cluster) read(in *instance, a *answer, held string, from producer.Seq) readResult {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/streams/%s/events?from=%d", in.base, a.id, from), nil)
	if err != nil {
		return readResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.reader)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return readResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readResult{err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	res := readResult{host: resp.Header.Get(httpapi.HostHeader)}
	r := bufio.NewReader(resp.Body)
	var frames []producer.Frame
	var arrivals []time.Time
	for {
		ev, err := streamtest.ReadSSE(r)
		if err != nil {
			return readResult{err: fmt.Errorf("after %d frames: %w", len(frames), err)}
		}
		if ev.Data == "" {
			continue
		}
		var f producer.Frame
		if err := json.Unmarshal([]byte(ev.Data), &f); err != nil {
			return readResult{err: err}
		}
		frames = append(frames, f)
		arrivals = append(arrivals, time.Now())
		if f.Terminal() {
			break
		}
	}
	// Contract S, frame by frame.
	text, end := streamtest.Replay(c.t, held, frames)
	if end.Type == producer.FrameEnd {
		text = producer.Slice16(text, 0, end.Seq)
	}
	res.text, res.end = text, end
	// Latency of each delta completed by a live chunk after the join.
	a.mu.Lock()
	pushed := slices.Clone(a.pushedAt)
	a.mu.Unlock()
	acc := held
	if frames[0].Type == producer.FrameOpen {
		acc = producer.Slice16(held, 0, frames[0].From)
	}
	done := strings.Count(acc, ";")
	for i, f := range frames {
		if f.Type != producer.FrameChunk {
			continue
		}
		res.chunks++
		acc, _ = producer.Splice(acc, f)
		for n := strings.Count(acc, ";"); done < n; done++ {
			if i > 1 && done < len(pushed) { // frames[1] may be the durable prefix: not live
				res.latency = append(res.latency, arrivals[i].Sub(pushed[done]))
			}
		}
	}
	return res
}

// joinSomewhere starts a reader on in at a random offset of what a has produced so far.
func (c *cluster) joinSomewhere(rng *rand.Rand, in *instance, a *answer, out chan<- readResult) {
	produced := a.text()
	runes := []rune(produced)
	held := string(runes[:rng.IntN(len(runes)+1)])
	go func() {
		r := c.read(in, a, held, producer.Len16(held))
		r.label = fmt.Sprintf("%s joined on %s at %d", a.id, in.name, producer.Len16(held))
		out <- r
	}()
}

// fromStart starts a reader on in at offset 0.
func (c *cluster) fromStart(in *instance, a *answer, label string, out chan<- readResult) {
	go func() {
		r := c.read(in, a, "", 0)
		r.label = label
		out <- r
	}()
}

// collect takes n results and checks each against the durable text and status of id.
func (c *cluster) collect(results <-chan readResult, n int, id string, status producer.Status) map[string]readResult {
	t := c.t
	t.Helper()
	byLabel := map[string]readResult{}
	for range n {
		var r readResult
		select {
		case r = <-results:
		case <-eventually.Late(t):
			t.Fatalf("a reader of %s never ended", id)
		}
		require.NoError(t, r.err, r.label)
		body, got := c.db.DurableText(t, id)
		require.Equal(t, string(status), got, r.label)
		require.Equal(t, producer.FrameEnd, r.end.Type, r.label)
		require.Equal(t, status, r.end.Status, r.label)
		require.Equal(t, body, r.text, "%s: S, the reader ends with the durable text", r.label)
		byLabel[r.label] = r
	}
	return byLabel
}

// viewsAgree checks every instance's view of ids against the database.
func (c *cluster) viewsAgree(ids []string, ins ...*instance) {
	t := c.t
	t.Helper()
	for _, id := range ids {
		body, status := c.db.DurableText(t, id)
		for _, in := range ins {
			var got struct{ Text, Status string }
			eventually.True(t, func() bool {
				s, b := c.do(in, "GET", "/v1/streams/"+id, c.reader, "")
				return s == http.StatusOK && json.Unmarshal(b, &got) == nil && got.Status == status && got.Text == body
			}, "the view of %s on %s: %q %s, database %q %s", id, in.name, got.Text, got.Status, body, status)
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func TestScaleOutThreeInstancesOneBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three rindled processes")
	}
	db := pgtest.NewDB(t)
	c := &cluster{t: t, bin: buildRindled(t), db: db, nats: natstest.Start(t)}
	var err error
	c.prod, err = httpapi.NewToken([]byte(testSecret), "svc", httpapi.ProducerScope, time.Hour)
	require.NoError(t, err)
	c.reader, err = httpapi.NewToken([]byte(testSecret), "alice", "", time.Hour)
	require.NoError(t, err)

	// B first, so B's reader takes the slot: the producer's instance and the CDC leader differ.
	b := c.start("B")
	eventually.True(t, func() bool { return c.leader() == "B" })
	a, cc := c.start("A"), c.start("C")
	rng := rand.New(rand.NewPCG(11, 12))

	// 1. A produces; readers on A (same instance) and on B and C (relayed) join mid-answer.
	m1 := c.produce(a, "m1", 400, 10*time.Millisecond, true)
	results := make(chan readResult, 32)
	c.fromStart(a, m1, "same", results)
	c.fromStart(b, m1, "cross-B", results)
	c.fromStart(cc, m1, "cross-C", results)
	for i := range 8 {
		m1.after(t, 30+i*40+rng.IntN(20)) // 8 joins spread over the 400 deltas
		c.joinSomewhere(rng, []*instance{b, cc}[rng.IntN(2)], m1, results)
	}
	<-m1.ended
	got := c.collect(results, 11, "m1", producer.StatusComplete)
	require.Equal(t, "A", got["cross-B"].host, "Rindle-Host names the producing instance")
	same, cross := got["same"].latency, slices.Concat(got["cross-B"].latency, got["cross-C"].latency)
	require.NotEmpty(t, same)
	require.NotEmpty(t, cross)
	t.Logf("FIGURE push → reader latency, same instance: p50 %v p99 %v (n=%d); cross-instance via NATS: p50 %v p99 %v (n=%d)",
		percentile(same, .5), percentile(same, .99), len(same), percentile(cross, .5), percentile(cross, .99), len(cross))
	c.viewsAgree([]string{"m1"}, a, b, cc)

	// 2. kill -9 the producer's instance mid-answer: the sweeper on B or C seals the stream
	// interrupted once A's lease lapses, and every reader (relayed) ends with the durable text.
	m2 := c.produce(a, "m2", 1000, 10*time.Millisecond, true)
	for i := range 6 {
		m2.after(t, 20+i*30+rng.IntN(15))
		c.joinSomewhere(rng, []*instance{b, cc}[rng.IntN(2)], m2, results)
	}
	m2.after(t, 250) // well before its 1000th delta
	a.kill(t)
	c.collect(results, 6, "m2", producer.StatusInterrupted)
	c.viewsAgree([]string{"m1", "m2"}, b, cc)

	// 3. A new instance joins (bootstrapping its view from a snapshot), then the CDC leader B is
	// killed mid-answer: another instance takes the slot and every remaining view stays equal to
	// the database.
	a2 := c.start("A2")
	c.viewsAgree([]string{"m1", "m2"}, a2)
	m3 := c.produce(cc, "m3", 400, 10*time.Millisecond, true)
	for i := range 4 {
		m3.after(t, 20+i*30+rng.IntN(15))
		c.joinSomewhere(rng, []*instance{a2, cc}[rng.IntN(2)], m3, results)
	}
	m3.after(t, 150) // mid-answer: 400 deltas
	require.Equal(t, "B", c.leader())
	killed := time.Now()
	b.kill(t)
	var failover time.Duration
	eventually.True(t, func() bool {
		l := c.leader()
		failover = time.Since(killed)
		return l == "C" || l == "A2"
	}, "no instance took the slot over")
	t.Logf("FIGURE CDC failover (kill -9 of the leader → another instance streaming the slot): %v", failover.Round(time.Millisecond))
	<-m3.ended
	c.collect(results, 4, "m3", producer.StatusComplete)
	c.viewsAgree([]string{"m1", "m2", "m3"}, a2, cc)

	// 4. The broker restarts mid-answer: nothing is lost.
	m4 := c.produce(cc, "m4", 400, 10*time.Millisecond, true)
	c.fromStart(a2, m4, "broker-restart-A2", results)
	c.fromStart(cc, m4, "broker-restart-C", results)
	m4.after(t, 120) // mid-answer: 400 deltas
	c.joinSomewhere(rng, a2, m4, results)
	c.nats.Restart(500 * time.Millisecond)
	c.joinSomewhere(rng, a2, m4, results)
	<-m4.ended
	c.collect(results, 4, "m4", producer.StatusComplete)
	c.viewsAgree([]string{"m1", "m2", "m3", "m4"}, a2, cc)

	// 5. After the restart the relay is back: a reader on A2 of a stream produced on C gets the
	// live tail (a chunk per delta or so), not the view's checkpoint-sized chunks.
	m5 := c.produce(cc, "m5", 200, 10*time.Millisecond, true)
	c.fromStart(a2, m5, "after-restart", results)
	<-m5.ended
	after := c.collect(results, 1, "m5", producer.StatusComplete)["after-restart"]
	require.Greater(t, after.chunks, 100, "the relayed live tail, not the view")
	c.viewsAgree([]string{"m5"}, a2, cc)
}
