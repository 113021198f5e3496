// Command rindle-load measures a running rindled from another process, as its users reach it:
// over loopback HTTP, with every client in this process and the server in its own. It owns the
// load figures that depend on the two being apart (SSE push → client latency, the server's CPU
// per delivered frame, memory per idle subscriber, a thundering herd of joins); the in-process
// benchmarks (go test -bench) own the rest.
//
// By default it builds rindled and runs every scenario -runs times, each scenario of each
// repetition against a fresh rindled on a fresh private cluster in a temporary directory (memory figures are deltas
// inside the process, and a process that already ran other scenarios holds their heap and
// stacks), printing each figure's min / median / max:
//
//	go run ./cmd/rindle-load
//
// With -floor it also runs each scenario, in turn within the same run, against a floor server
// (floor.go): bare net/http answering the same routes from memory in its own process. Its
// figures are what the machine costs any server for the scenario; rindled's excess over them is
// rindled's own.
//
// The machine is shared and noisy: compare figures measured side by side in one run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

type config struct {
	rindled     string
	runs        int
	scenarios   string
	readers     int
	rate        int
	seconds     int
	idle        int
	joiners     int
	joinLength  int
	keepWorkDir bool
	serverArgs  string
	floor       bool
	directFloor bool
	fresh       bool
	longMiB     int
	edgeReaders int
	edgeAppends int
	edgeEvery   time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.rindled, "rindled", "", "the rindled binary to start; empty builds ./cmd/rindled")
	flag.IntVar(&c.runs, "runs", 3, "repetitions of every scenario")
	flag.StringVar(&c.scenarios, "scenarios", "fanout,idle,join", "comma-separated: fanout, idle, join, long, edge (nginx in front, rindled only)")
	flag.IntVar(&c.readers, "readers", 1000, "fanout: SSE readers of one stream")
	flag.IntVar(&c.rate, "rate", 100, "fanout: deltas per second")
	flag.IntVar(&c.seconds, "seconds", 10, "fanout: how long the producer pushes")
	flag.IntVar(&c.idle, "idle", 10000, "idle: subscribers held open")
	flag.IntVar(&c.joiners, "joiners", 1000, "join: readers joining one long stream at once")
	flag.IntVar(&c.joinLength, "join-length", 100000, "join: the stream's length in UTF-16 units before they join")
	flag.IntVar(&c.edgeReaders, "edge-readers", 10000, "edge: long-poll readers of one stream through nginx")
	flag.IntVar(&c.edgeAppends, "edge-appends", 20, "edge: appends the producer makes")
	flag.DurationVar(&c.edgeEvery, "edge-every", 2*time.Second, "edge: the interval between appends")
	flag.IntVar(&c.longMiB, "long-mib", 10, "long: the answer's size in MiB, ingested in one request and sealed")
	flag.BoolVar(&c.fresh, "fresh", true, "start fresh servers (and a fresh private cluster) for every scenario of every repetition, so no figure comes from a warm process or from a scenario run before it; -fresh=false reuses one server for everything")
	flag.BoolVar(&c.keepWorkDir, "keep", false, "keep the work directory (server log, cluster)")
	flag.StringVar(&c.serverArgs, "server-args", "", "extra rindled flags, space-separated (-debug-addr 127.0.0.1:6060 to profile it)")
	flag.BoolVar(&c.floor, "floor", false, "also run every scenario against the floor server (bare net/http from memory, in its own process) and print its figures beside rindled's")
	flag.BoolVar(&c.directFloor, "direct-floor", false, "also run every scenario against the direct-write floor server (the floor server writing each frame straight to every reader's socket from the append, in its own process)")
	floorServer := flag.Bool("floor-server", false, "run as the floor server (what -floor starts)")
	direct := flag.Bool("floor-direct", false, "with -floor-server: write frames directly (what -direct-floor starts)")
	flag.Parse()
	if *floorServer {
		if err := serveFloor(*direct); err != nil {
			fmt.Fprintln(os.Stderr, "rindle-load floor server:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rindle-load:", err)
		os.Exit(1)
	}
}

// server is the rindled under load.
type server struct {
	base, producer, reader string
	bin, data, work        string // rindled's binary, data directory and work directory
	pid                    int
	floor                  bool // the bare net/http floor server, not rindled
	client                 *http.Client
}

func run(ctx context.Context, c config) error {
	work, err := os.MkdirTemp("", "rindle-load-")
	if err != nil {
		return err
	}
	// As root, rindled runs PostgreSQL as the postgres user, who must reach the cluster.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	if c.keepWorkDir {
		fmt.Println("work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	bin := c.rindled
	if bin == "" {
		bin = filepath.Join(work, "rindled")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/rindle-sh/rindle-go/cmd/rindled")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build rindled: %w", err)
		}
	}
	// target is a server the scenarios run against, and the prefix of its figures' names.
	type target struct {
		prefix string
		srv    *server
	}
	// servers starts rindled (and the floor server, with -floor) in a directory of its own.
	servers := func(dir string) ([]target, func(), error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		srv, stopServer, err := start(ctx, bin, dir, strings.Fields(c.serverArgs))
		if err != nil {
			return nil, nil, err
		}
		targets := []target{{"", srv}}
		stops := []func(){stopServer}
		stopAll := func() {
			for _, stop := range slices.Backward(stops) {
				stop()
			}
		}
		for _, f := range []struct {
			on     bool
			direct bool
			prefix string
		}{{c.floor, false, "[floor] "}, {c.directFloor, true, "[direct floor] "}} {
			if !f.on {
				continue
			}
			floor, stopFloor, err := startFloor(ctx, f.direct)
			if err != nil {
				stopAll()
				return nil, nil, err
			}
			targets, stops = append(targets, target{f.prefix, floor}), append(stops, stopFloor)
		}
		return targets, stopAll, nil
	}
	var targets []target
	stopServers := func() {}
	defer func() { stopServers() }()
	if !c.fresh {
		if targets, stopServers, err = servers(work); err != nil {
			return err
		}
	}

	figures := map[string][]float64{}
	var order []string
	record := func(name string, v float64) {
		if _, ok := figures[name]; !ok {
			order = append(order, name)
		}
		figures[name] = append(figures[name], v)
	}
	for r := range c.runs {
		for _, sc := range strings.Split(c.scenarios, ",") {
			if c.fresh {
				stopServers()
				stopServers = func() {}
				if targets, stopServers, err = servers(filepath.Join(work, fmt.Sprintf("run%d-%s", r+1, strings.TrimSpace(sc)))); err != nil {
					return err
				}
			}
			// Side by side: each scenario against each server in turn, within one run.
			for _, t := range targets {
				id := fmt.Sprintf("%s-%d", sc, r)
				rec := func(name string, v float64) { record(t.prefix+name, v) }
				var err error
				switch strings.TrimSpace(sc) {
				case "fanout":
					err = fanout(ctx, t.srv, c, id, rec)
				case "idle":
					err = idle(ctx, t.srv, c, id, rec)
				case "join":
					err = join(ctx, t.srv, c, id, rec)
				case "long":
					err = long(ctx, t.srv, c, id, rec)
				case "edge":
					err = edge(ctx, t.srv, c, id, rec)
				default:
					return fmt.Errorf("unknown scenario %q", sc)
				}
				if err != nil {
					return fmt.Errorf("run %d, %s%s: %w", r+1, t.prefix, sc, err)
				}
			}
		}
	}
	fmt.Printf("\n%-60s %12s %12s %12s   (%d runs)\n", "figure", "min", "median", "max", c.runs)
	for _, name := range order {
		lo, mid, hi := spread(figures[name])
		fmt.Printf("%-60s %12.3f %12.3f %12.3f\n", name, lo, mid, hi)
	}
	printRatios(os.Stdout, figures, order)
	return nil
}

// spread is the min, median and max of v.
func spread(v []float64) (lo, mid, hi float64) {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[0], v[len(v)/2], v[len(v)-1]
}

// printRatios prints rindled's figures divided by each floor's, taken within each repetition
// (the two ran side by side in it), then their min / median / max across the repetitions.
func printRatios(w io.Writer, figures map[string][]float64, order []string) {
	header := false
	for _, prefix := range []string{"[floor] ", "[direct floor] "} {
		for _, name := range order {
			ours, theirs := figures[name], figures[prefix+name]
			if strings.HasPrefix(name, "[") || len(theirs) == 0 || len(theirs) != len(ours) {
				continue
			}
			ratios := make([]float64, 0, len(ours))
			for i := range ours {
				if theirs[i] != 0 {
					ratios = append(ratios, ours[i]/theirs[i])
				}
			}
			if len(ratios) == 0 {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\n%-60s %12s %12s %12s\n", "rindled ÷ floor, within each run", "min", "median", "max")
				header = true
			}
			lo, mid, hi := spread(ratios)
			fmt.Fprintf(w, "%-60s %12.3f %12.3f %12.3f\n", name+" ÷ "+strings.TrimSpace(prefix), lo, mid, hi)
		}
	}
}

var listening = regexp.MustCompile(`url=(http://\S+)`)

// start runs rindled on a private cluster in work and mints its tokens.
func start(ctx context.Context, bin, work string, extra []string) (*server, func(), error) {
	data := filepath.Join(work, "data")
	logf, err := os.Create(filepath.Join(work, "rindled.log"))
	if err != nil {
		return nil, nil, err
	}
	// Its readers share one token subject, thousands at a time: lift the per-subject and total
	// caps on waiting reads past what any scenario opens.
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-data", data, "-demo", "false",
		"-max-event-streams", "1000000", "-max-event-streams-per-subject", "1000000"}, extra...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, _ = logf.Write(append(sc.Bytes(), '\n'))
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
	}()
	srv := &server{pid: cmd.Process.Pid, bin: bin, data: data, work: work, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	select {
	case srv.base = <-urls:
	case <-time.After(90 * time.Second):
		stop()
		return nil, nil, fmt.Errorf("rindled never listened; see %s", logf.Name())
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
	token := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, bin, append([]string{"token", "-data", data}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	if srv.producer, err = token("-sub", "load", "-scope", "producer"); err != nil {
		stop()
		return nil, nil, fmt.Errorf("producer token: %w", err)
	}
	if srv.reader, err = token("-sub", "alice"); err != nil {
		stop()
		return nil, nil, fmt.Errorf("reader token: %w", err)
	}
	return srv, stop, nil
}

// call sends one JSON request as the producer and decodes a JSON answer into out (if any).
func (s *server) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.producer)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// openStream creates a message alice owns and opens its stream.
func (s *server) openStream(ctx context.Context, id string) error {
	if err := s.call(ctx, http.MethodPost, "/v1/messages", map[string]any{"id": id, "owner": "alice"}, nil); err != nil {
		return err
	}
	return s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/open", nil, nil)
}

// subscribe opens an event stream over its own connection and reads its response head.
func (s *server) subscribe(id string, from int) (net.Conn, *bufio.Reader, error) {
	u, err := url.Parse(s.base)
	if err != nil {
		return nil, nil, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	q := "access_token=" + url.QueryEscape(s.reader)
	if from >= 0 {
		q += "&from=" + strconv.Itoa(from)
	}
	if _, err := fmt.Fprintf(c, "GET /v1/streams/%s/events?%s HTTP/1.1\r\nHost: %s\r\n\r\n", id, q, u.Host); err != nil {
		c.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4<<10), nil) //nolint:bodyclose // the body is the connection, which the caller closes
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, nil, fmt.Errorf("events: %s", resp.Status)
	}
	return c, bufio.NewReader(resp.Body), nil
}

// nextFrame reads the next data frame of an event stream.
func nextFrame(r *bufio.Reader) (producer.Frame, error) {
	for {
		ev, err := streamtest.ReadSSE(r)
		if err != nil {
			return producer.Frame{}, err
		}
		if ev.Data == "" {
			continue
		}
		var f producer.Frame
		return f, json.Unmarshal([]byte(ev.Data), &f)
	}
}

// nextLive reads the next data frame of a live event stream for the fan-out's readers: its type
// and, for a chunk, its text (valid until the next read). A thousand readers decoding every
// frame with encoding/json (100,000 frames a second) spend CPU of the 2 cores that the servers
// measured beside them need, so it reads lines in place and takes a chunk's text straight out
// of the frame the servers write ({"type":"chunk",…,"text":"…"}, nothing escaped); any other
// shape it decodes fully.
func nextLive(r *bufio.Reader, long *[]byte) (producer.FrameType, []byte, error) {
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) { // a long line (a catch-up): gather it
			*long = append((*long)[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				*long = append(*long, line...)
			}
			line = *long
		}
		if err != nil {
			return "", nil, err
		}
		d, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte("data: "))
		if !ok {
			continue // id, retry, a comment or the blank line ending an event
		}
		if rest, ok := bytes.CutPrefix(d, []byte(`{"type":"`)); ok {
			if typ, rest, ok := bytes.Cut(rest, []byte(`"`)); ok {
				if string(typ) != string(producer.FrameChunk) {
					return producer.FrameType(typ), nil, nil
				}
				if _, text, ok := bytes.Cut(rest, []byte(`,"text":"`)); ok {
					if text, ok = bytes.CutSuffix(text, []byte(`"}`)); ok && !bytes.ContainsAny(text, `"\`) {
						return producer.FrameChunk, text, nil
					}
				}
			}
		}
		var f producer.Frame
		if err := json.Unmarshal(d, &f); err != nil {
			return "", nil, fmt.Errorf("frame %.60q: %w", d, err)
		}
		return f.Type, []byte(f.Text), nil
	}
}

// nextType reads the next data frame of an event stream and returns only its type, without
// decoding the rest: a herd of readers each decoding a long catch-up chunk would measure this
// process's JSON decoder, not the server.
func nextType(r *bufio.Reader) (producer.FrameType, error) {
	for {
		ev, err := streamtest.ReadSSE(r)
		if err != nil {
			return "", err
		}
		if ev.Data == "" {
			continue
		}
		rest, ok := strings.CutPrefix(ev.Data, `{"type":"`)
		typ, _, found := strings.Cut(rest, `"`)
		if !ok || !found {
			return "", fmt.Errorf("a frame without a leading type: %.40q", ev.Data)
		}
		return producer.FrameType(typ), nil
	}
}

// atoi parses a non-negative decimal number without allocating.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// cpuSeconds is the server process's user+system CPU time so far.
func (s *server) cpuSeconds() (float64, error) { return processCPU(s.pid) }

// processCPU is a process's user+system CPU time so far, in seconds.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// rss is the server process's resident memory in bytes.
func (s *server) rss() (float64, error) { return s.status("VmRSS:") }

// status reads one memory figure, in bytes, from the server process's /proc status.
func (s *server) status(field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, s.pid)
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Microseconds()) / 1000
}

// fanout pushes numbered deltas over HTTP at a steady rate into one stream read by K SSE
// readers, at K=1 and K=readers. It records push → client latency (the push timed just before
// its append request leaves) and the server's CPU per delta at both K, whose ratio says how the
// cost of a delta grows with its audience.
func fanout(ctx context.Context, s *server, c config, id string, record func(string, float64)) error {
	var perDelta [2]float64
	for i, k := range []int{1, c.readers} {
		r, err := fanoutOnce(ctx, s, c, fmt.Sprintf("%s-k%d", id, k), k)
		if err != nil {
			return err
		}
		perDelta[i] = r.cpuPerDelta
		if k == c.readers {
			record(fmt.Sprintf("fanout K=%d %d/s: push→client p50 ms", k, c.rate), pct(r.lat, 0.50))
			record(fmt.Sprintf("fanout K=%d %d/s: push→client p99 ms", k, c.rate), pct(r.lat, 0.99))
			record(fmt.Sprintf("fanout K=%d %d/s: push→client max ms", k, c.rate), pct(r.lat, 1))
			record(fmt.Sprintf("fanout K=%d %d/s: due→client p99 ms", k, c.rate), pct(r.latDue, 0.99))
			record(fmt.Sprintf("fanout K=%d: server CPU ns per frame", k), r.cpuPerDelta/float64(k)*1e9)
			record(fmt.Sprintf("fanout K=%d: client CPU ns per frame", k), r.clientCPUPerDelta/float64(k)*1e9)
			record(fmt.Sprintf("fanout K=%d %d/s: pushes per second achieved", k, c.rate), r.rate)
		}
	}
	record(fmt.Sprintf("fanout: CPU per delta, K=%d ÷ K=1", c.readers), perDelta[1]/perDelta[0])
	return nil
}

// fanoutResult is one fan-out run's figures.
type fanoutResult struct {
	lat    []time.Duration // each delivery, from its append's request (sorted)
	latDue []time.Duration // each delivery, from when the schedule had its append due (sorted)
	// cpuPerDelta is the server's CPU seconds per delta, clientCPUPerDelta this process's
	// (its readers and producer); rate the appends per second made.
	cpuPerDelta, clientCPUPerDelta, rate float64
}

// fanoutOnce runs one producer appending c.rate deltas a second for c.seconds to readers
// subscribers of one stream. Append k is due at k/c.rate seconds from the first; each is made
// once the last was answered, at once when it is already due: a server whose append waits for
// its fan-out falls behind the schedule, and its deliveries' delay from their due time
// (latDue) says so, where their delay from the request (lat) would come from a lighter load.
func fanoutOnce(ctx context.Context, s *server, c config, id string, readers int) (fanoutResult, error) {
	var res fanoutResult
	if err := s.openStream(ctx, id); err != nil {
		return res, err
	}
	deltas := c.rate * c.seconds
	pushedAt := make([]int64, deltas) // read once the readers are done
	type delivery struct {
		k  int
		at int64
	}
	got := make([][]delivery, readers)
	var failed atomic.Value
	var wg sync.WaitGroup
	for i := range readers {
		conn, r, err := s.subscribe(id, -1)
		if err != nil {
			return res, fmt.Errorf("reader %d: %w", i, err)
		}
		wg.Go(func() {
			defer conn.Close()
			var long []byte
			for {
				typ, text, err := nextLive(r, &long)
				if err != nil {
					failed.Store(fmt.Errorf("reader %d: %w", i, err))
					return
				}
				now := time.Now().UnixNano()
				switch typ {
				case producer.FrameChunk:
					// The text is the deltas' numbers, each ended by ';'.
					for d := range bytes.SplitSeq(bytes.TrimSuffix(text, []byte(";")), []byte(";")) {
						if k, ok := atoi(d); ok && k < deltas {
							got[i] = append(got[i], delivery{k, now})
						}
					}
				case producer.FrameStale:
					failed.Store(fmt.Errorf("reader %d fell behind (stale)", i))
					return
				case producer.FrameEnd:
					return
				}
			}
		})
	}
	cpu0, err := s.cpuSeconds()
	if err != nil {
		return res, err
	}
	own0, err := processCPU(os.Getpid())
	if err != nil {
		return res, err
	}
	every := time.Second / time.Duration(c.rate)
	first := time.Now()
	seq := 0
	for k := range deltas {
		due := first.Add(time.Duration(k) * every)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		text := strconv.Itoa(k) + ";"
		pushedAt[k] = time.Now().UnixNano()
		if err := s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/append", map[string]any{"text": text, "expectedSeq": seq}, nil); err != nil {
			return res, err
		}
		seq += len(text)
	}
	if deltas > 1 {
		res.rate = float64(deltas-1) / time.Duration(pushedAt[deltas-1]-pushedAt[0]).Seconds()
	}
	cpu1, err := s.cpuSeconds()
	if err != nil {
		return res, err
	}
	own1, err := processCPU(os.Getpid())
	if err != nil {
		return res, err
	}
	if err := s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/close", map[string]any{}, nil); err != nil {
		return res, err
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return res, err
	}
	for _, ds := range got {
		for _, d := range ds {
			res.lat = append(res.lat, time.Duration(d.at-pushedAt[d.k]))
			res.latDue = append(res.latDue, time.Duration(d.at-first.Add(time.Duration(d.k)*every).UnixNano()))
		}
	}
	if len(res.lat) != readers*deltas {
		return res, fmt.Errorf("%d deliveries, want %d", len(res.lat), readers*deltas)
	}
	slices.Sort(res.lat)
	slices.Sort(res.latDue)
	res.cpuPerDelta = (cpu1 - cpu0) / float64(deltas)
	res.clientCPUPerDelta = (own1 - own0) / float64(deltas)
	return res, nil
}

// idle holds N subscribers of a live stream open and records the server's resident memory per
// subscriber, then pushes one delta and records how long until every one of them has it.
func idle(ctx context.Context, s *server, c config, id string, record func(string, float64)) error {
	if err := s.openStream(ctx, id); err != nil {
		return err
	}
	runtimeSettle()
	before, err := s.rss()
	if err != nil {
		return err
	}
	readers := make([]*bufio.Reader, c.idle)
	conns := make([]net.Conn, c.idle)
	defer func() {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	for i := range c.idle {
		conn, r, err := s.subscribe(id, -1)
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		conns[i], readers[i] = conn, r
		if f, err := nextFrame(r); err != nil {
			return fmt.Errorf("subscriber %d: no open frame: %w", i, err)
		} else if f.Type != producer.FrameOpen {
			return fmt.Errorf("subscriber %d: a %s frame where the open frame belongs", i, f.Type)
		}
	}
	runtimeSettle()
	after, err := s.rss()
	if err != nil {
		return err
	}
	record(fmt.Sprintf("idle N=%d: server RSS KiB per subscriber", c.idle), (after-before)/float64(c.idle)/1024)

	start := time.Now()
	if err := s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/append", map[string]any{"text": "wake"}, nil); err != nil {
		return err
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for _, r := range readers {
		wg.Go(func() {
			if f, err := nextFrame(r); err != nil || f.Type != producer.FrameChunk {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		return fmt.Errorf("%d subscribers did not get the delta", n)
	}
	record(fmt.Sprintf("idle N=%d: one delta to all, ms", c.idle), float64(time.Since(start).Microseconds())/1000)
	return s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/close", map[string]any{}, nil)
}

// runtimeSettle gives the server a moment to finish accepting and to return freed memory.
func runtimeSettle() { time.Sleep(2 * time.Second) }

// join builds one long live stream, waits until its text is durable and in the view, then
// starts J readers at once from offset 0 and records the time to each one's first chunk.
func join(ctx context.Context, s *server, c config, id string, record func(string, float64)) error {
	if err := s.openStream(ctx, id); err != nil {
		return err
	}
	piece := strings.Repeat("a long answer, ", 72)[:1000]
	seq := 0
	for seq < c.joinLength {
		if err := s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/append", map[string]any{"text": piece, "expectedSeq": seq}, nil); err != nil {
			return err
		}
		seq += len(piece)
	}
	var st struct {
		DurableSeq int `json:"durableSeq"`
	}
	if err := s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/flush", map[string]any{}, &st); err != nil {
		return err
	}
	if st.DurableSeq != seq {
		return fmt.Errorf("flush made %d of %d durable", st.DurableSeq, seq)
	}
	if err := s.waitView(ctx, id, seq); err != nil {
		return err
	}
	firsts := make([]time.Duration, c.joiners)
	var failed atomic.Value
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range c.joiners {
		wg.Go(func() {
			<-gate
			t0 := time.Now()
			conn, r, err := s.subscribe(id, 0)
			if err != nil {
				failed.Store(err)
				return
			}
			defer conn.Close()
			for {
				typ, err := nextType(r)
				if err != nil {
					failed.Store(err)
					return
				}
				if typ == producer.FrameChunk {
					firsts[i] = time.Since(t0)
					return
				}
			}
		})
	}
	cpu0, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	close(gate)
	wg.Wait()
	cpu1, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	if err, ok := failed.Load().(error); ok {
		return err
	}
	record(fmt.Sprintf("join J=%d: server CPU µs per join", c.joiners), (cpu1-cpu0)/float64(c.joiners)*1e6)
	slices.Sort(firsts)
	record(fmt.Sprintf("join J=%d at 0 of %d units: first chunk p50 ms", c.joiners, seq), pct(firsts, 0.50))
	record(fmt.Sprintf("join J=%d at 0 of %d units: first chunk p99 ms", c.joiners, seq), pct(firsts, 0.99))
	return s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/close", map[string]any{}, nil)
}

// waitView long-polls the view until it holds seq units of id, so the joins read the view.
func (s *server) waitView(ctx context.Context, id string, seq int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/streams/%s?after=%d&wait=5s", s.base, id, seq-1), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+s.reader)
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		var v struct {
			Seq int `json:"seq"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err == nil && v.Seq >= seq {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the view never reached %d units of %s", seq, id)
}

// long ingests one answer of c.longMiB MiB in a single request, seals it, and waits until the
// view shows it complete at its full length: the server's peak resident memory (VmHWM) over the
// whole life of the answer, less its peak before it, divided by the answer's size. Meaningful
// only on a fresh server (the default; not with -fresh=false): VmHWM never falls.
func long(ctx context.Context, s *server, c config, id string, record func(string, float64)) error {
	if s.floor {
		return nil // the floor server stores nothing
	}
	size := c.longMiB << 20
	piece := []byte(strings.Repeat("a long answer, <b>with markup</b> & more. ", 64))
	text := bytes.Repeat(piece, size/len(piece)+1)[:size]
	before, err := s.peakRSS()
	if err != nil {
		return err
	}
	if err := s.openStream(ctx, id); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/streams/"+id+"/ingest", bytes.NewReader(text))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.producer)
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("ingest: %s: %s", resp.Status, b)
	}
	if err := s.call(ctx, http.MethodPost, "/v1/streams/"+id+"/close", map[string]any{}, nil); err != nil {
		return err
	}
	if err := s.waitView(ctx, id, size); err != nil {
		return err
	}
	after, err := s.peakRSS()
	if err != nil {
		return err
	}
	now, err := s.rss()
	if err != nil {
		return err
	}
	record(fmt.Sprintf("long %d MiB answer: peak RSS added, MiB", c.longMiB), (after-before)/(1<<20))
	record(fmt.Sprintf("long %d MiB answer: peak RSS added ÷ answer size", c.longMiB), (after-before)/float64(size))
	record(fmt.Sprintf("long %d MiB answer: RSS after it, MiB", c.longMiB), now/(1<<20))
	return nil
}

// peakRSS is the server process's peak resident memory so far (VmHWM), in bytes.
func (s *server) peakRSS() (float64, error) { return s.status("VmHWM:") }
