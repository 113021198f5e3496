package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testSecret = "0123456789abcdef0123456789abcdef"

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// listening finds the address in rindled's "listening" log line.
var listening = regexp.MustCompile(`url=(http://\S+)`)

// slotDrops remembers the databases whose slot a cleanup already drops.
var slotDrops sync.Map //nolint:gochecknoglobals // test bookkeeping

// started is a rindled serving on loopback against a test database.
type started struct {
	base string
	env  func(string) string
	done chan error         // run's result, once
	over chan struct{}      // closed when run has returned
	stop context.CancelFunc // SIGTERM
}

// startRindled runs the server with args on a free port and waits until it says where it
// listens. Cleanup stops it and drops its slot.
func startRindled(t *testing.T, db *pgtest.DB, args ...string) *started {
	t.Helper()
	env := envOf(map[string]string{"DATABASE_URL": db.URL, "RINDLE_JWT_SECRET": testSecret})
	ctx, signal := context.WithCancel(context.Background())
	logs, logw := io.Pipe()
	s := &started{env: env, done: make(chan error, 1), over: make(chan struct{}), stop: signal}
	go func() {
		defer close(s.over)
		s.done <- run(ctx, append([]string{"-addr", "127.0.0.1:0", "-slot", db.Slot()}, args...), env, logw, io.Discard)
		_ = logw.Close()
	}()
	dropSlotAfter(t, db)
	t.Cleanup(func() {
		signal()
		<-s.over
	})
	lines := bufio.NewScanner(logs)
	for lines.Scan() {
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			s.base = m[1]
			break
		}
	}
	require.NotEmpty(t, s.base, "rindled never said where it listens")
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	return s
}

// dropSlotAfter drops db's slot once the test is over. Registered by the first instance on db,
// so it runs after every instance stopped: the slot outlives the servers; it is dropped
// (waiting for the walsender to let go) so the test database can be dropped.
func dropSlotAfter(t *testing.T, db *pgtest.DB) {
	t.Helper()
	if _, registered := slotDrops.LoadOrStore(db.Name, true); registered {
		return
	}
	t.Cleanup(func() {
		r, err := cdc.New(cdc.Config{ConnString: db.URL, Slot: db.Slot(), Publisher: gochannel.NewGoChannel(gochannel.Config{}, nil)})
		require.NoError(t, err)
		require.NoError(t, r.DropSlot(context.Background()))
	})
}

// A start-up held up names what it waits on, again while it waits, and says when it listens
// how long it took. The hold-up is the real one seen when instances start together: another
// holds the migrations' advisory lock.
func TestSlowStartUpSaysWhatItWaitsOn(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	other, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer other.Close(context.Background())
	_, err = other.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrations.LockKey))
	require.NoError(t, err)

	env := envOf(map[string]string{"DATABASE_URL": db.URL, "RINDLE_JWT_SECRET": testSecret})
	s, err := parse("rindled", []string{"-addr", "127.0.0.1:0", "-slot", db.Slot(), "-log-format", "json"}, env, io.Discard, nil)
	require.NoError(t, err)
	dropSlotAfter(t, db)
	logs, logw := io.Pipe()
	// A warning every millisecond: the test waits on the lines, not on a clock.
	in := &server{s: s, logger: s.logger(logw), hostID: "slow-start", slowStart: time.Millisecond}
	serveCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		defer in.stop()
		done <- in.serve(serveCtx)
		_ = logw.Close()
	}()
	defer func() {
		stop()
		if err := <-done; !t.Failed() {
			require.NoError(t, err)
		}
	}()

	lines := bufio.NewScanner(logs)
	next := func() map[string]any {
		require.True(t, lines.Scan(), "the log ended: %v", lines.Err())
		var line map[string]any
		require.NoError(t, json.Unmarshal(lines.Bytes(), &line), "%s", lines.Text())
		return line
	}
	var warned int
	for warned < 2 { // twice: it keeps saying so while it waits
		line := next()
		// Connecting may take longer than a millisecond too, and say so: wait for the lock.
		if line["msg"] == "start-up is still waiting" && strings.Contains(line["step"].(string), "migrating the database") {
			require.Equal(t, "WARN", line["level"])
			require.Contains(t, line["step"], "advisory lock")
			require.NotEmpty(t, line["waited"])
			warned++
		}
		require.NotEqual(t, "rindled listening", line["msg"], "it listened while the lock was held")
	}
	// What an operator would look for, as migrations.LockKey's comment says. The warning names
	// the step as it begins, a moment before the lock is asked for: wait until it is.
	eventually.True(t, func() bool {
		var waiting bool
		require.NoError(t, other.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND classid = 29289 AND objid = 1852075109 AND NOT granted)`).Scan(&waiting), "the waiting start-up's lock, as documented")
		return waiting
	})
	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(migrations.LockKey))
	require.NoError(t, err)
	for {
		line := next()
		if line["msg"] == "rindled listening" {
			require.NotEmpty(t, line["started_in"])
			break
		}
		require.NotEqual(t, "ERROR", line["level"], "%v", line)
	}
	go func() { _, _ = io.Copy(io.Discard, logs) }()
}

func TestServeThenDrainOnSignal(t *testing.T) {
	db := pgtest.NewDB(t)
	srv := startRindled(t, db)
	base, env, done, signal := srv.base, srv.env, srv.done, srv.stop

	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"token", "-sub", "svc", "-scope", "producer"}, env, &out, io.Discard))
	tok := strings.TrimSpace(out.String())
	call := func(method, path, body string) int {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusCreated, call("POST", "/v1/messages", `{"id":"m","owner":"alice"}`))
	require.Equal(t, http.StatusOK, call("POST", "/v1/streams/m/open", ""))
	require.Equal(t, http.StatusOK, call("POST", "/v1/streams/m/append", `{"text":"cut short 😀"}`))
	eventually.True(t, func() bool { return call("GET", "/readyz", "") == http.StatusOK },
		"ready once the CDC reader streams the slot")
	var health bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"health", "-addr", strings.TrimPrefix(base, "http://")}, env, &health, io.Discard))
	require.Equal(t, "ready\n", health.String(), "the container health check")

	signal() // SIGTERM
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-eventually.Late(t):
		t.Fatal("rindled did not stop")
	}
	var body, status string
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT body, status FROM messages WHERE id = 'm'").Scan(&body, &status))
	require.Equal(t, "interrupted", status, "the drain sealed the live stream")
	require.Equal(t, "cut short 😀", body, "with everything produced")
}

func TestTokenIsVerifiableWithTheSecret(t *testing.T) {
	var out bytes.Buffer
	env := envOf(map[string]string{"RINDLE_JWT_SECRET": testSecret})
	require.NoError(t, run(t.Context(), []string{"token", "-sub", "alice", "-ttl", "1h"}, env, &out, io.Discard))
	var c httpapi.Claims
	_, err := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &c, func(*jwt.Token) (any, error) { return []byte(testSecret), nil })
	require.NoError(t, err)
	require.Equal(t, "alice", c.Subject)
	require.ErrorContains(t, run(t.Context(), []string{"token"}, env, io.Discard, io.Discard), "-sub is required")
}

func TestMigrateAppliesTheSchema(t *testing.T) {
	db := pgtest.NewBareDB(t)
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"migrate"}, envOf(map[string]string{"DATABASE_URL": db.URL}), &out, io.Discard))
	all, err := migrations.All()
	require.NoError(t, err)
	versions := make([]string, len(all))
	for i, m := range all {
		versions[i] = strconv.Itoa(m.Version)
	}
	require.Contains(t, out.String(), `msg="applied migrations" versions="[`+strings.Join(versions, " ")+`]"`, "every migration, in order")
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"migrate"}, envOf(map[string]string{"DATABASE_URL": db.URL}), &out, io.Discard))
	require.Contains(t, out.String(), `msg="applied migrations" versions=[]`, "idempotent")
}

func TestHelpAndRefusals(t *testing.T) {
	var errOut bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-h"}, envOf(nil), io.Discard, &errOut), "-h is success: exit 0")
	for _, s := range []string{"DATABASE_URL", "RINDLE_ADDR", "RINDLE_JWT_SECRET", "OTEL_EXPORTER_OTLP_ENDPOINT", "rindled token", "rindled version"} {
		require.Contains(t, errOut.String(), s)
	}
	var version bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"version"}, envOf(nil), &version, io.Discard))
	require.Regexp(t, `^rindled \S+\n$`, version.String())
	require.ErrorContains(t, run(t.Context(), []string{"bogus"}, envOf(nil), io.Discard, io.Discard), `unknown command "bogus"`)
	require.ErrorContains(t, run(t.Context(), []string{"health", "-addr", "127.0.0.1:1"}, envOf(nil), io.Discard, io.Discard), "health:")
	// -url probes any endpoint (the collector's health_check extension): 2xx is healthy.
	status := http.StatusOK
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer probe.Close()
	require.NoError(t, run(t.Context(), []string{"health", "-url", probe.URL}, envOf(nil), io.Discard, io.Discard))
	status = http.StatusServiceUnavailable
	require.ErrorContains(t, run(t.Context(), []string{"health", "-url", probe.URL}, envOf(nil), io.Discard, io.Discard), "503")
	err := run(t.Context(), nil, envOf(map[string]string{"DATABASE_URL": "host=/nowhere"}), io.Discard, io.Discard)
	require.ErrorContains(t, err, "RINDLE_JWT_SECRET is required with DATABASE_URL")
	err = run(t.Context(), []string{"token", "-sub", "a"}, envOf(map[string]string{"RINDLE_JWT_SECRET": "short"}), io.Discard, io.Discard)
	require.ErrorContains(t, err, "at least 32 bytes")
}

// TestSecondInstanceWithoutABrokerIsNotReady: in-process, only the slot holder's view hears
// events, so a second instance on the same slot and no broker says so at /readyz instead of
// serving a view that never moves.
func TestSecondInstanceWithoutABrokerIsNotReady(t *testing.T) {
	db := pgtest.NewDB(t)
	get := func(base string) (int, string) {
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The second starts once the first holds the slot: started together, either may take it
	// (on a loaded machine the second sometimes did, and the first never became ready). The
	// bounds only stop a hung run; each wait ends when its condition holds.
	first := startRindled(t, db)
	eventually.True(t, func() bool { s, _ := get(first.base); return s == http.StatusOK })
	second := startRindled(t, db)
	eventually.True(t, func() bool {
		s, b := get(second.base)
		return s == http.StatusServiceUnavailable && strings.Contains(b, "several instances need -broker-url")
	}, "the second says why it is not ready")
	s, _ := get(first.base)
	require.Equal(t, http.StatusOK, s, "the first stays ready")
}

// A malformed environment value is an error that names the variable, never a silent default;
// a good one applies, and a flag still wins over it.
func TestEnvironmentValuesAreParsedOrRefused(t *testing.T) {
	t.Parallel()
	for k, v := range map[string]string{"RINDLE_LEASE_TTL": "bogus", "RINDLE_DB_MAX_CONNS": "many", "RINDLE_CONNECT_TIMEOUT": "5", "RINDLE_CHECKPOINT_CHARS": "lots"} {
		_, err := parse("rindled", nil, envOf(map[string]string{k: v}), io.Discard, nil)
		require.ErrorContains(t, err, k, "%s=%s", k, v)
	}
	s, err := parse("rindled", nil, envOf(map[string]string{"RINDLE_LEASE_TTL": "7s", "RINDLE_DB_MAX_CONNS": "9"}), io.Discard, nil)
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, s.leaseTTL)
	require.Equal(t, 9, s.dbMaxConns)
	require.Equal(t, DefaultCheckpointChars, s.checkpointChars)
	s, err = parse("rindled", nil, envOf(map[string]string{"RINDLE_CHECKPOINT_CHARS": "300"}), io.Discard, nil)
	require.NoError(t, err)
	require.Equal(t, 300, s.checkpointChars)
	_, err = parse("rindled", []string{"-checkpoint-chars", "0"}, envOf(nil), io.Discard, nil)
	require.ErrorContains(t, err, "-checkpoint-chars 0: want at least 1")
	s, err = parse("rindled", []string{"-lease-ttl", "3s"}, envOf(map[string]string{"RINDLE_LEASE_TTL": "7s"}), io.Discard, nil)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, s.leaseTTL, "the flag wins")
	require.Equal(t, checkpoint.DefaultAppendWriters, s.streamsAppendWriters)
	s, err = parse("rindled", nil, envOf(map[string]string{"RINDLE_STREAMS_APPEND_WRITERS": "3"}), io.Discard, nil)
	require.NoError(t, err)
	require.Equal(t, 3, s.streamsAppendWriters)
	_, err = parse("rindled", nil, envOf(map[string]string{"RINDLE_STREAMS_APPEND_WRITERS": "two"}), io.Discard, nil)
	require.ErrorContains(t, err, "RINDLE_STREAMS_APPEND_WRITERS")
	_, err = parse("rindled", []string{"-streams-append-writers", "0"}, envOf(nil), io.Discard, nil)
	require.ErrorContains(t, err, "-streams-append-writers 0: want at least 1")
}

// TestEachCommandOffersItsOwnFlags: migrate, token and health list (and accept) only the
// settings they read, so -h is a short answer and a serve flag given to them is an error.
func TestEachCommandOffersItsOwnFlags(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string][]string{
		"migrate":   {"-database-url", "-data", "-connect-timeout"},
		"token":     {"-sub", "-scope", "-ttl", "-jwt-secret", "-jwt-secret-file", "-data"},
		"health":    {"-addr", "-url"},
		"edge-auth": {"-addr", "-jwt-secret", "-jwt-secret-file", "-issuers"},
	} {
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), []string{cmd, "-h"}, envOf(nil), io.Discard, &out), cmd)
		for _, f := range want {
			require.Contains(t, out.String(), "  "+f+" ", cmd)
		}
		for _, f := range []string{"-broker-url", "-cors-origins", "-lease-ttl", "-demo"} {
			require.NotContains(t, out.String(), "  "+f+" ", "%s -h lists a serve flag", cmd)
		}
		err := run(t.Context(), []string{cmd, "-lease-ttl", "5s"}, envOf(nil), io.Discard, io.Discard)
		require.ErrorContains(t, err, "flag provided but not defined: -lease-ttl", cmd)
	}
}

// TestTheSecretCanComeFromAFile: a mounted secret (Docker, Kubernetes) is read from its file,
// a trailing newline ignored; too short, missing, or given twice, it is refused by name.
func TestTheSecretCanComeFromAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := strings.Repeat("s", 40)
	file := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(file, []byte(secret+"\n"), 0o600))
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"token", "-sub", "a", "-jwt-secret-file", file}, envOf(nil), &out, io.Discard))
	var claims httpapi.Claims
	_, err := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &claims, func(*jwt.Token) (any, error) { return []byte(secret), nil })
	require.NoError(t, err, "signed with the file's secret, newline stripped")
	require.Equal(t, "a", claims.Subject)

	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("tiny\n"), 0o600))
	require.ErrorContains(t, run(t.Context(), []string{"token", "-sub", "a", "-jwt-secret-file", short}, envOf(nil), io.Discard, io.Discard), "at least 32 bytes")
	require.ErrorContains(t, run(t.Context(), []string{"token", "-sub", "a"}, envOf(map[string]string{"RINDLE_JWT_SECRET_FILE": filepath.Join(dir, "none")}), io.Discard, io.Discard), "-jwt-secret-file")
	require.ErrorContains(t, run(t.Context(), []string{"token", "-sub", "a", "-jwt-secret-file", file}, envOf(map[string]string{"RINDLE_JWT_SECRET": secret}), io.Discard, io.Discard), "both set")
}

// TestJSONLogs: -log-format json writes one JSON object per line; anything else is refused.
func TestJSONLogs(t *testing.T) {
	t.Parallel()
	s, err := parse("rindled", []string{"-log-format", "json"}, envOf(nil), io.Discard, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	s.logger(&out).Info("hello", "stream", "m1")
	var line map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &line))
	require.Equal(t, "hello", line["msg"])
	require.Equal(t, "m1", line["stream"])
	_, err = parse("rindled", nil, envOf(map[string]string{"RINDLE_LOG_FORMAT": "xml"}), io.Discard, nil)
	require.ErrorContains(t, err, "want text or json")
}

// Issue 21, operator conventions: --version answers and exits 0; every line of a JSON log is
// JSON, the fatal one included; -log-level and -drain-timeout read their environment variables.
func TestOperatorConventions(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--version"}, envOf(nil), &out, io.Discard))
	require.True(t, strings.HasPrefix(out.String(), "rindled "), out.String())

	out.Reset()
	err := run(t.Context(), []string{"-log-format", "json", "-connect-timeout", "1s", "-database-url", "postgres://x@127.0.0.1:1/x"},
		envOf(map[string]string{"RINDLE_JWT_SECRET": testSecret}), &out, io.Discard)
	var reported *reportedError
	require.ErrorAs(t, err, &reported, "the failure is the log's last line; main prints nothing more")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, l := range lines {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &v), "not JSON: %s", l)
	}
	require.Contains(t, lines[len(lines)-1], `"level":"ERROR"`)

	s, err := parse("rindled", nil, envOf(map[string]string{"RINDLE_LOG_LEVEL": "warn", "RINDLE_DRAIN_TIMEOUT": "9s"}), io.Discard, nil)
	require.NoError(t, err)
	require.Equal(t, slog.LevelWarn, s.logLevel)
	require.Equal(t, 9*time.Second, s.drainTimeout)
	out.Reset()
	s.logger(&out).Info("quiet")
	require.Empty(t, out.String(), "below -log-level")
	_, err = parse("rindled", nil, envOf(map[string]string{"RINDLE_LOG_LEVEL": "loud"}), io.Discard, nil)
	require.ErrorContains(t, err, "RINDLE_LOG_LEVEL")
}
