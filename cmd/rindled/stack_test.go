package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// stack drives docker-compose.yml through the `docker compose` CLI, as an operator does.
// Each method that can fail the test takes the (sub)test it serves: a subtest failing through
// its parent's t would end the parent's goroutine from the wrong one, and skip the rest.
type stack struct {
	root string
}

// compose runs `docker compose ARGS` in the repository and fails the test on an error, with
// every container's recent logs taken at once: a service that exited at start (`up --wait`
// failing) says why only until the stack goes down, and later subtests take it down.
func (s *stack) compose(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.try(args...)
	if err != nil {
		logs, _ := s.try("--profile", "scale", "logs", "--no-color", "--timestamps", "--tail", "200")
		t.Fatalf("docker compose %s: %v\n%s\n--- logs:\n%s", strings.Join(args, " "), err, out, logs)
	}
	return out
}

// try runs `docker compose ARGS`, bounded by 15 minutes but not by the test's context, which
// is cancelled before cleanups run (they take the stack down).
func (s *stack) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"compose"}, args...)...)
	cmd.Dir = s.root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// token signs a token inside the service's container, with the stack's own secret.
func (s *stack) token(t *testing.T, service string, flags ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "docker", append([]string{"compose", "exec", "-T", service, "/rindled", "token"}, flags...)...)
	cmd.Dir = s.root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "docker compose exec %s rindled token: %s", service, stderr.String())
	return strings.TrimSpace(string(out))
}

// within polls cond until it holds, bounded by the test binary's deadline (eventually.True):
// the condition is a container's or a replication stream's progress, which no event of ours
// signals. A failure names what was waited for and the condition's last answer.
func within(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last lastWhy
	eventually.True(t, func() bool {
		ok, why := cond()
		last.why = why
		if !ok {
			time.Sleep(200 * time.Millisecond) // a poll runs docker or HTTP against the stack: pace it
		}
		return ok
	}, "%s; last: %v", what, &last)
}

// lastWhy is a condition's last answer, read when a failure message is formatted.
type lastWhy struct{ why string }

func (l *lastWhy) String() string { return l.why }

// TestComposeStackServes brings docker-compose.yml up in a container runtime and checks it as an
// operator would (issue 26): every health check green, the README's walkthrough against the
// composed rindled, the view (through CDC) showing the text, a restart of PostgreSQL mid-stream
// losing nothing acknowledged, the scale profile serving a reader on one instance from a
// producer on another, a checkpoint's trace at the collector and rindled's metrics in
// Prometheus, and `down -v` leaving nothing behind. .ci/compose runs it where a runtime works.
func TestComposeStackServes(t *testing.T) {
	if os.Getenv("RINDLE_COMPOSE_TEST") == "" {
		t.Skip("needs a container runtime: .ci/compose runs it (RINDLE_COMPOSE_TEST=1)")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	s := &stack{root: root}
	s.try("--profile", "scale", "down", "-v", "--remove-orphans") //nolint:errcheck // a previous run's leftovers, if any

	// The default stack. Jaeger's image is the one pulled from a registry; where there is none
	// (RINDLE_COMPOSE_JAEGER unset), the rest is named, as the README says.
	p, err := loadCompose(t, nil)
	require.NoError(t, err)
	services := p.ServiceNames()
	if os.Getenv("RINDLE_COMPOSE_JAEGER") == "" {
		services = slices.DeleteFunc(services, func(n string) bool { return n == "jaeger" })
	}
	slices.Sort(services)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.try("--profile", "scale", "logs", "--no-color", "--tail", "60")
			t.Logf("logs:\n%s", out)
		}
		s.try("--profile", "scale", "down", "-v", "--remove-orphans") //nolint:errcheck // best effort after a failure
	})
	s.compose(t, append([]string{"up", "--detach", "--wait", "--wait-timeout", "600"}, services...)...)
	s.healthy(t, services)

	const api = "http://127.0.0.1:8080"
	producerToken := s.token(t, "rindled", "-sub", "svc", "-scope", "producer")
	alice := s.token(t, "rindled", "-sub", "alice")

	// The README's walkthrough, as written, with the composed rindled signing its tokens.
	t.Run("README walkthrough", func(t *testing.T) {
		body := strings.ReplaceAll(readmeRecipes(t), "go run ./cmd/rindled", "docker compose exec -T rindled /rindled")
		sh := "set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body + "\nwait\n"
		cmd := exec.CommandContext(t.Context(), "bash", "-c", sh)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NotRegexp(t, `"status":\s*[45]\d\d`, string(out), "every answer is a success")
		// The view is the CDC reader's: it shows each answer once replication carried it.
		for _, id := range []string{"m1", "m2"} {
			viewShows(t, api, alice, id, "hello 😀")
		}
	})

	t.Run("PostgreSQL restarts mid-stream", func(t *testing.T) {
		const id = "restart"
		st, b := request(t, http.DefaultClient, api+"/v1/messages", "POST", producerToken, `{"id":"`+id+`","owner":"alice"}`)
		require.Equal(t, http.StatusCreated, st, "%s", b)
		st, b = request(t, http.DefaultClient, api+"/v1/streams/"+id+"/open", "POST", producerToken, "")
		require.Equal(t, http.StatusOK, st, "%s", b)
		var want strings.Builder
		seq, attempts := 0, 0
		push := func(text string) {
			body, _ := json.Marshal(map[string]any{"text": text, "expectedSeq": seq})
			within(t, "append "+text, func() (bool, string) {
				attempts++
				st, b := request(t, http.DefaultClient, api+"/v1/streams/"+id+"/append", "POST", producerToken, string(body))
				switch {
				case st == http.StatusOK:
					var a struct{ Seq int }
					require.NoError(t, json.Unmarshal(b, &a))
					seq = a.Seq
					want.WriteString(text)
					return true, ""
				case retryable(st):
					return false, fmt.Sprintf("%d %s", st, b)
				}
				t.Fatalf("append: %d %s", st, b)
				return false, ""
			})
		}
		for i := range 20 {
			push(fmt.Sprintf("before %d é😀. ", i))
		}
		st, b = request(t, http.DefaultClient, api+"/v1/streams/"+id+"/flush", "POST", producerToken, "")
		require.Equal(t, http.StatusOK, st, "%s", b)
		require.Contains(t, string(b), fmt.Sprintf(`"durableSeq":%d`, seq), "acknowledged durable before the restart")

		started := func() (string, error) {
			return s.try("exec", "-T", "postgres", "psql", "-U", "rindle", "-d", "rindle", "-Atc", "SELECT pg_postmaster_start_time()")
		}
		before, err := started()
		require.NoError(t, err, "%s", before)
		s.compose(t, "restart", "postgres")
		within(t, "PostgreSQL is back, restarted", func() (bool, string) {
			now, err := started()
			return err == nil && now != before, now
		})
		for i := range 20 {
			push(fmt.Sprintf("after %d. ", i))
		}
		within(t, "close", func() (bool, string) {
			st, b := request(t, http.DefaultClient, api+"/v1/streams/"+id+"/close", "POST", producerToken, "")
			if st == http.StatusOK {
				return true, ""
			}
			require.True(t, retryable(st), "close: %d %s", st, b)
			return false, fmt.Sprintf("%d %s", st, b)
		})
		viewShows(t, api, alice, id, want.String())
		t.Logf("40 appends took %d attempts (a 503 while the database was away is retried)", attempts)
	})

	t.Run("a checkpoint's trace reaches the collector and metrics reach Prometheus", func(t *testing.T) {
		within(t, "the collector logs a checkpoint span of stream m1", func() (bool, string) {
			out, err := s.try("logs", "--no-color", "otel-collector")
			return err == nil && strings.Contains(out, "rindle.checkpoint") && strings.Contains(out, "rindle.stream_id=m1"), "no span yet"
		})
		for _, q := range []string{`sum(otelcol_receiver_accepted_spans) > 0`, `sum(rindle_checkpoint_duration_seconds_count{job="rindled"}) > 0`} {
			within(t, "Prometheus answers "+q, func() (bool, string) {
				return promHas(t, q)
			})
		}
	})

	t.Run("the scale profile serves a reader on one instance from a producer on another", func(t *testing.T) {
		s.compose(t, "--profile", "scale", "up", "--detach", "--wait", "--wait-timeout", "600", "nats", "rindled-1", "rindled-2", "rindled-3", "proxy")
		s.healthy(t, []string{"nats", "rindled-1", "rindled-2", "rindled-3", "proxy"})
		const proxy = "http://127.0.0.1:8081"
		on := func(host, path string) string { return proxy + path + "?host=" + host }
		p := s.token(t, "rindled-1", "-sub", "svc", "-scope", "producer")
		const id = "scaled"
		st, b := request(t, http.DefaultClient, on("rindled-1", "/v1/messages"), "POST", p, `{"id":"`+id+`","owner":"alice"}`)
		require.Equal(t, http.StatusCreated, st, "%s", b)
		st, b = request(t, http.DefaultClient, on("rindled-1", "/v1/streams/"+id+"/open"), "POST", p, "")
		require.Equal(t, http.StatusOK, st, "%s", b)

		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", on("rindled-2", "/v1/streams/"+id+"/events"), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "rindled-1", resp.Header.Get(httpapi.HostHeader), "the stream is hosted on rindled-1")
		r := bufio.NewReader(resp.Body)
		var frames []producer.Frame
		next := func() producer.Frame {
			f, err := streamtest.ReadFrame(r)
			require.NoError(t, err)
			frames = append(frames, f)
			return f
		}
		const live = "from rindled-1, live on rindled-2 😀"
		st, b = request(t, http.DefaultClient, on("rindled-1", "/v1/streams/"+id+"/append"), "POST", p, `{"text":"`+live+`"}`)
		require.Equal(t, http.StatusOK, st, "%s", b)
		// The text arrives on rindled-2 while the stream is still open on rindled-1.
		text := ""
		for !strings.Contains(text, live) {
			f := next()
			require.False(t, f.Terminal(), "the stream ended before its text arrived: %+v", frames)
			if f.Type == producer.FrameChunk {
				text, err = producer.Splice(text, f)
				require.NoError(t, err)
			}
		}
		st, b = request(t, http.DefaultClient, on("rindled-1", "/v1/streams/"+id+"/close"), "POST", p, "")
		require.Equal(t, http.StatusOK, st, "%s", b)
		for !next().Terminal() {
		}
		text, end := streamtest.Replay(t, "", frames)
		require.Equal(t, producer.FrameEnd, end.Type)
		require.Equal(t, live, text)
	})

	t.Run("down -v leaves nothing behind", func(t *testing.T) {
		s.compose(t, "--profile", "scale", "down", "-v", "--remove-orphans")
		for _, kind := range [][]string{{"ps", "-a", "-q"}, {"volume", "ls", "-q"}, {"network", "ls", "-q"}} {
			out, err := exec.CommandContext(t.Context(), "docker", append(kind, "--filter", "label=com.docker.compose.project=rindle")...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Empty(t, strings.TrimSpace(string(out)), "docker %s: the project left these behind", strings.Join(kind, " "))
		}
	})
}

// healthy checks that each named service runs with a green health check, and that the
// one-shot secret service completed.
func (s *stack) healthy(t *testing.T, services []string) {
	t.Helper()
	out := s.compose(t, "ps", "--all", "--format", "json")
	seen := map[string]bool{}
	for line := range strings.Lines(out) {
		var c struct {
			Service, State, Health string
			ExitCode               int
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		require.NoError(t, json.Unmarshal([]byte(line), &c), "%s", line)
		seen[c.Service] = true
		if !slices.Contains(services, c.Service) {
			continue
		}
		if c.Service == "secret" {
			require.Equal(t, 0, c.ExitCode, "the secret service")
			continue
		}
		require.Equal(t, "running", c.State, c.Service)
		require.Equal(t, "healthy", c.Health, c.Service)
	}
	for _, name := range services {
		require.True(t, seen[name], "%s is not in docker compose ps", name)
	}
}

// viewShows waits until the view of id is complete and holds want.
func viewShows(t *testing.T, api, tok, id, want string) {
	t.Helper()
	within(t, "the view of "+id, func() (bool, string) {
		st, b := request(t, http.DefaultClient, api+"/v1/streams/"+id, "GET", tok, "")
		var v struct{ Text, Status string }
		if st == http.StatusOK {
			require.NoError(t, json.Unmarshal(b, &v))
		}
		return st == http.StatusOK && v.Status == "complete" && v.Text == want, fmt.Sprintf("%d %s", st, b)
	})
}

// promHas reports whether Prometheus's instant query q returns a sample.
func promHas(t *testing.T, q string) (bool, string) {
	req, err := http.NewRequestWithContext(t.Context(), "GET", "http://127.0.0.1:9090/api/v1/query", nil)
	require.NoError(t, err)
	req.URL.RawQuery = url.Values{"query": {q}}.Encode()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []json.RawMessage
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return false, err.Error()
	}
	return len(r.Data.Result) > 0, fmt.Sprintf("%d results", len(r.Data.Result))
}
