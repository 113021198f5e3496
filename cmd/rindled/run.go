package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jackc/pgx/v5"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/migrations"
	"github.com/rindle-sh/rindle-go/producer"
)

// settings are every knob, from flags with environment defaults.
type settings struct {
	addr, databaseURL, dataDir, secret, hostID, slot, otlp, demo, brokerURL string
	corsOrigins, debugAddr, secretFile, logFormat, issuersFile, otlpMetrics string
	logLevel                                                                slog.Level
	drainTimeout, leaseTTL, connectTimeout, streamsLongPoll                 time.Duration
	streamsReapInterval, streamsProducerRetention                           time.Duration
	idleTimeout, bodyTimeout, ingestIdleTimeout, streamIdleTimeout          time.Duration
	dbMaxConns, checkpointChars, maxEventStreams, maxEventStreamsPerSubject int
	streamsAppendGroup, streamsAppendWriters                                int
	sseDirect                                                               bool
	sseRing                                                                 bool
	getenv                                                                  func(string) string // the environment parse read
}

// DefaultCheckpointChars is rindled's checkpoint size: twice the seed's (producer's) 512. The
// interval (750 ms) still bounds how stale the durable plane can be; the larger size halves the
// per-checkpoint WAL overhead (the length update, the commit, the index entry) of a fast stream,
// which is most of the WAL beyond the text itself (BenchmarkWALPerByte: Chars1024 against
// Default).
const DefaultCheckpointChars = 1024

// DefaultIdleTimeout is how long an idle keep-alive connection stays open (nginx's
// keepalive_timeout is 75 s; a browser reconnects at once when it is cut).
const DefaultIdleTimeout = 75 * time.Second

const usage = `rindled: durable, resumable language-model answers.

Usage:
  rindled [flags]            serve (the default)
  rindled migrate [flags]    apply the schema migrations and exit
  rindled token [flags] -sub SUBJECT [-scope producer] [-tenant T] [-stream ID] [-ttl 24h]
                             print a development bearer token
  rindled edge-auth [flags]  answer an HTTP cache's per-request authorization (nginx
                             auth_request) for the protocol's reads: README, "Readers
                             behind a cache"
  rindled health [flags] [-url URL]
                             exit 0 if the server at -addr is ready, or URL answers 2xx
                             (for container health checks)
  rindled version            print the version

Run "rindled COMMAND -h" for a command's own flags.

Every flag also reads an environment variable (shown in brackets).
`

// commandFlags names the settings each command reads; a command is offered (and -h lists) only
// its own. serve reads them all.
var commandFlags = map[string][]string{ //nolint:gochecknoglobals // a fixed table
	"rindled migrate":   {"database-url", "data", "connect-timeout", "log-format", "log-level"},
	"rindled token":     {"database-url", "data", "jwt-secret", "jwt-secret-file"},
	"rindled health":    {"addr"},
	"rindled edge-auth": {"addr", "data", "database-url", "jwt-secret", "jwt-secret-file", "issuers", "log-format", "log-level"},
}

func parse(name string, args []string, getenv func(string) string, stderr io.Writer, extra func(*flag.FlagSet)) (*settings, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	s := &settings{getenv: getenv}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&s.addr, "addr", env("RINDLE_ADDR", "127.0.0.1:8080"), "listen address [RINDLE_ADDR]")
	fs.StringVar(&s.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL (needs wal_level=logical); empty runs a private cluster in -data [DATABASE_URL]")
	fs.StringVar(&s.dataDir, "data", env("RINDLE_DATA_DIR", ".rindle"), "where the private cluster and the development secret live [RINDLE_DATA_DIR]")
	fs.StringVar(&s.secret, "jwt-secret", env("RINDLE_JWT_SECRET", ""), "HS256 secret for bearer tokens, 32+ bytes; empty with a private cluster uses one generated in -data [RINDLE_JWT_SECRET]")
	fs.StringVar(&s.issuersFile, "issuers", env("RINDLE_ISSUERS", ""), "a JSON file of identity providers whose tokens are taken beside the HS256 secret's: JWKS URL or key set, algorithms, audience, claim names (README: Identity providers) [RINDLE_ISSUERS]")
	fs.StringVar(&s.secretFile, "jwt-secret-file", env("RINDLE_JWT_SECRET_FILE", ""), "read the HS256 secret from this file (a mounted secret); one trailing newline is ignored [RINDLE_JWT_SECRET_FILE]")
	fs.StringVar(&s.logFormat, "log-format", env("RINDLE_LOG_FORMAT", "text"), "log lines as text (logfmt) or json [RINDLE_LOG_FORMAT]")
	fs.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "the least severe log lines written: debug, info, warn or error [RINDLE_LOG_LEVEL]")
	fs.StringVar(&s.hostID, "host-id", env("RINDLE_HOST_ID", ""), "this instance's producer identity, unique per process; empty generates one [RINDLE_HOST_ID]")
	fs.StringVar(&s.slot, "slot", env("RINDLE_SLOT", cdc.DefaultSlot), "logical replication slot [RINDLE_SLOT]")
	fs.StringVar(&s.otlp, "otlp-endpoint", env("OTEL_EXPORTER_OTLP_ENDPOINT", ""), "OTLP/HTTP collector base URL; empty exports nothing [OTEL_EXPORTER_OTLP_ENDPOINT]")
	fs.StringVar(&s.otlpMetrics, "otlp-metrics", env("OTEL_METRICS_EXPORTER", "otlp"), "where metrics go besides /metrics: otlp (pushed to -otlp-endpoint) or none (scraped from /metrics only) [OTEL_METRICS_EXPORTER]")
	fs.StringVar(&s.demo, "demo", env("RINDLE_DEMO", "auto"), "serve the demo page at / and its synthetic generator: true, false, or auto (on with the private cluster only) [RINDLE_DEMO]")
	fs.StringVar(&s.brokerURL, "broker-url", env("RINDLE_BROKER_URL", ""), "NATS JetStream URL (nats://host:4222) that carries CDC events to every instance and relays live tails between them; empty runs in-process, one instance only [RINDLE_BROKER_URL]")
	fs.StringVar(&s.corsOrigins, "cors-origins", env("RINDLE_CORS_ORIGINS", ""), "comma-separated browser origins allowed to call the API cross-origin (https://app.example.com), or *; empty allows same-origin only [RINDLE_CORS_ORIGINS]")
	fs.StringVar(&s.debugAddr, "debug-addr", env("RINDLE_DEBUG_ADDR", ""), "serve Go's /debug/pprof on this address (keep it on loopback or a private network); empty serves none [RINDLE_DEBUG_ADDR]")
	fs.DurationVar(&s.leaseTTL, "lease-ttl", checkpoint.DefaultLeaseTTL, "how long an instance that stopped renewing keeps its live streams before the sweeper seals them interrupted [RINDLE_LEASE_TTL]")
	fs.DurationVar(&s.drainTimeout, "drain-timeout", 30*time.Second, "how long SIGTERM waits for live streams to seal interrupted [RINDLE_DRAIN_TIMEOUT]")
	fs.IntVar(&s.dbMaxConns, "db-max-conns", max(16, 4*runtime.NumCPU()), "the database pool's size: checkpoints, joins and long-polls share it (a pool_max_conns in the URL wins) [RINDLE_DB_MAX_CONNS]")
	fs.IntVar(&s.checkpointChars, "checkpoint-chars", DefaultCheckpointChars, "pending UTF-16 units that force a checkpoint; the 750ms interval forces one anyway [RINDLE_CHECKPOINT_CHARS]")
	fs.IntVar(&s.streamsAppendGroup, "streams-append-group", checkpoint.DefaultMaxGroup, "Durable Streams appends to different streams that one transaction may commit together (group commit, when appends arrive faster than the transactions run); 1 gives every append its own [RINDLE_STREAMS_APPEND_GROUP]")
	fs.IntVar(&s.streamsAppendWriters, "streams-append-writers", checkpoint.DefaultAppendWriters, "Durable Streams append transactions at once; appends that arrive while they all run share the next [RINDLE_STREAMS_APPEND_WRITERS]")
	fs.DurationVar(&s.streamsLongPoll, "streams-long-poll", httpapi.DefaultStreamsLongPoll, "how long a Durable Streams long-poll waits for data before 204 [RINDLE_STREAMS_LONG_POLL]")
	fs.DurationVar(&s.streamsReapInterval, "streams-reap-interval", DefaultStreamsReapInterval, "how often (with 20% jitter) this instance removes expired Durable Streams streams and idle producer state; 0 leaves them until next touched [RINDLE_STREAMS_REAP_INTERVAL]")
	fs.DurationVar(&s.streamsProducerRetention, "streams-producer-retention", DefaultStreamsProducerRetention, "how long an idempotent producer's state outlives its last append; past it the producer starts again at seq 0; 0 keeps it for the stream's life [RINDLE_STREAMS_PRODUCER_RETENTION]")
	fs.DurationVar(&s.connectTimeout, "connect-timeout", cdc.DefaultConnectTimeout, "bound on every connection attempt to PostgreSQL (a connect_timeout in the URL wins) [RINDLE_CONNECT_TIMEOUT]")
	fs.DurationVar(&s.streamIdleTimeout, "stream-idle-timeout", producer.DefaultIdleTimeout, "a live stream with no text pushed for this long is sealed interrupted with what it took [RINDLE_STREAM_IDLE_TIMEOUT]")
	fs.DurationVar(&s.idleTimeout, "idle-timeout", DefaultIdleTimeout, "how long an idle keep-alive connection stays open [RINDLE_IDLE_TIMEOUT]")
	fs.DurationVar(&s.bodyTimeout, "body-timeout", httpapi.DefaultBodyTimeout, "bound on reading a whole request body (every route but ingest) [RINDLE_BODY_TIMEOUT]")
	fs.DurationVar(&s.ingestIdleTimeout, "ingest-idle-timeout", httpapi.DefaultIngestIdleTimeout, "the longest pause between two reads of a streaming ingest body [RINDLE_INGEST_IDLE_TIMEOUT]")
	fs.IntVar(&s.maxEventStreams, "max-event-streams", httpapi.DefaultMaxEventStreams, "waiting reads (event streams, protocol SSE and long-polls) this instance holds at once; past it 429 [RINDLE_MAX_EVENT_STREAMS]")
	fs.BoolVar(&s.sseDirect, "sse-direct", true, "write event streams' live tails straight to HTTP/1.x sockets from a few writer goroutines (false: each stream's own goroutine writes through net/http) [RINDLE_SSE_DIRECT]")
	fs.BoolVar(&s.sseRing, "sse-ring", true, "with -sse-direct, send each writer's turn of writes through one io_uring submission where the kernel allows it (false, or where it does not: a write(2) per reader) [RINDLE_SSE_RING]")
	fs.IntVar(&s.maxEventStreamsPerSubject, "max-event-streams-per-subject", httpapi.DefaultMaxEventStreamsPerSubject, "waiting reads one token subject holds on this instance; past it 429 [RINDLE_MAX_EVENT_STREAMS_PER_SUBJECT]")
	// Typed settings take their environment value through the flag's own parser, so a
	// malformed one is an error naming the variable, never a silent default; flags still win.
	for flagName, k := range map[string]string{"lease-ttl": "RINDLE_LEASE_TTL", "db-max-conns": "RINDLE_DB_MAX_CONNS", "connect-timeout": "RINDLE_CONNECT_TIMEOUT",
		"streams-long-poll": "RINDLE_STREAMS_LONG_POLL", "checkpoint-chars": "RINDLE_CHECKPOINT_CHARS",
		"streams-reap-interval": "RINDLE_STREAMS_REAP_INTERVAL", "streams-producer-retention": "RINDLE_STREAMS_PRODUCER_RETENTION",
		"drain-timeout": "RINDLE_DRAIN_TIMEOUT", "log-level": "RINDLE_LOG_LEVEL",
		"idle-timeout": "RINDLE_IDLE_TIMEOUT", "stream-idle-timeout": "RINDLE_STREAM_IDLE_TIMEOUT", "body-timeout": "RINDLE_BODY_TIMEOUT", "ingest-idle-timeout": "RINDLE_INGEST_IDLE_TIMEOUT",
		"max-event-streams": "RINDLE_MAX_EVENT_STREAMS", "max-event-streams-per-subject": "RINDLE_MAX_EVENT_STREAMS_PER_SUBJECT",
		"sse-direct": "RINDLE_SSE_DIRECT", "sse-ring": "RINDLE_SSE_RING", "streams-append-group": "RINDLE_STREAMS_APPEND_GROUP",
		"streams-append-writers": "RINDLE_STREAMS_APPEND_WRITERS"} {
		if v := getenv(k); v != "" {
			if err := fs.Set(flagName, v); err != nil {
				return nil, fmt.Errorf("%s=%q: %w", k, v, err)
			}
		}
	}
	if uses, ok := commandFlags[name]; ok {
		// Offer only this command's flags, with the values the environment gave them.
		own := flag.NewFlagSet(name, flag.ContinueOnError)
		for _, n := range uses {
			f := fs.Lookup(n)
			own.Var(f.Value, f.Name, f.Usage)
			own.Lookup(n).DefValue = f.DefValue
		}
		fs = own
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		if name == "rindled" {
			fmt.Fprint(stderr, usage)
		} else {
			fmt.Fprintf(stderr, "Usage of %s:\n", name)
		}
		fs.PrintDefaults()
	}
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if s.secret != "" && s.secretFile != "" {
		return nil, errors.New("-jwt-secret and -jwt-secret-file (or RINDLE_JWT_SECRET and RINDLE_JWT_SECRET_FILE) are both set: give one")
	}
	switch s.logFormat {
	case "text", "json":
	default:
		return nil, fmt.Errorf("-log-format %q: want text or json", s.logFormat)
	}
	if s.otlpMetrics != "otlp" && s.otlpMetrics != "none" {
		return nil, fmt.Errorf("-otlp-metrics %q: want otlp or none", s.otlpMetrics)
	}
	if s.checkpointChars < 1 {
		return nil, fmt.Errorf("-checkpoint-chars %d: want at least 1", s.checkpointChars)
	}
	if s.dbMaxConns < 1 {
		return nil, fmt.Errorf("-db-max-conns %d: want at least 1", s.dbMaxConns)
	}
	for name, v := range map[string]int{"max-event-streams": s.maxEventStreams, "max-event-streams-per-subject": s.maxEventStreamsPerSubject, "streams-append-group": s.streamsAppendGroup, "streams-append-writers": s.streamsAppendWriters} {
		if v < 1 {
			return nil, fmt.Errorf("-%s %d: want at least 1", name, v)
		}
	}
	for name, v := range map[string]time.Duration{"idle-timeout": s.idleTimeout, "stream-idle-timeout": s.streamIdleTimeout, "body-timeout": s.bodyTimeout, "ingest-idle-timeout": s.ingestIdleTimeout} {
		if v <= 0 {
			return nil, fmt.Errorf("-%s %s: want a positive duration", name, v)
		}
	}
	for name, v := range map[string]time.Duration{"streams-reap-interval": s.streamsReapInterval, "streams-producer-retention": s.streamsProducerRetention} {
		if v < 0 {
			return nil, fmt.Errorf("-%s %s: want 0 (off) or a positive duration", name, v)
		}
	}
	switch s.demo {
	case "auto", "true", "false":
	default:
		return nil, fmt.Errorf("-demo %q: want true, false or auto", s.demo)
	}
	return s, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h asked for the usage, which is printed: success
	}
	return err
}

func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "serve" && len(args) == 1 && (args[0] == "-version" || args[0] == "--version") {
		cmd = "version" // the operator's habit: rindled --version
	}
	switch cmd {
	case "serve":
		s, err := parse("rindled", args, getenv, stderr, nil)
		if err != nil {
			return err
		}
		return serve(ctx, s, stdout)
	case "migrate":
		s, err := parse("rindled migrate", args, getenv, stderr, nil)
		if err != nil {
			return err
		}
		logger := s.logger(stdout)
		watch := watchStartup(logger, defaultSlowStart)
		_, applied, stopDB, err := migratedDatabase(ctx, s, logger, watch.at)
		watch.stop()
		if err != nil {
			return s.reported(logger, err)
		}
		stopDB()
		logger.Info("applied migrations", "versions", fmt.Sprint(applied))
		return nil
	case "token":
		var sub, scope, tenant, stream string
		var ttl time.Duration
		s, err := parse("rindled token", args, getenv, stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&sub, "sub", "", "the token's subject (a reader reads the messages it owns)")
			fs.StringVar(&scope, "scope", "", `space-separated scopes: "producer" for the producer routes, "admin" to delete and to act in any tenant`)
			fs.StringVar(&tenant, "tenant", "", "the token's tenant (empty: the default tenant)")
			fs.StringVar(&stream, "stream", "", "narrow the token to this one stream id or protocol path")
			fs.DurationVar(&ttl, "ttl", 24*time.Hour, "validity")
		})
		if err != nil {
			return err
		}
		if sub == "" {
			return errors.New("token: -sub is required")
		}
		secret, err := jwtSecret(s)
		if err != nil {
			return err
		}
		if tenant != "" {
			if err := auth.CheckTenant(tenant); err != nil {
				return fmt.Errorf("token: -tenant %w", err)
			}
		}
		tok, err := auth.Sign(secret, auth.TokenClaims{Scope: scope, Tenant: tenant, Stream: stream,
			RegisteredClaims: jwt.RegisteredClaims{Subject: sub}}, ttl)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		return nil
	case "edge-auth":
		s, err := parse("rindled edge-auth", args, getenv, stderr, nil)
		if err != nil {
			return err
		}
		return serveEdgeAuth(ctx, s, stdout)
	case "health":
		var probe string
		s, err := parse("rindled health", args, getenv, stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&probe, "url", "", "probe this URL instead of -addr's /readyz (any 2xx is healthy): the health check of images without a shell, such as the collector's")
		})
		if err != nil {
			return err
		}
		if probe == "" {
			host, port, err := net.SplitHostPort(s.addr)
			if err != nil {
				return fmt.Errorf("health: -addr %q: %w", s.addr, err)
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			probe = "http://" + net.JoinHostPort(host, port) + "/readyz"
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(hctx, http.MethodGet, probe, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("health: %w", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("health: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		fmt.Fprintln(stdout, "ready")
		return nil
	}
	if cmd == "version" {
		fmt.Fprintln(stdout, "rindled", version())
		return nil
	}
	return fmt.Errorf("unknown command %q (serve, migrate, token, health, version)", cmd)
}

// database returns the URL to use, starting the private cluster when none is configured.
func database(ctx context.Context, s *settings, logger *slog.Logger) (string, func(), error) {
	if s.databaseURL != "" {
		return s.databaseURL, func() {}, nil
	}
	logger.Info("no DATABASE_URL: starting a private PostgreSQL", "dir", s.dataDir)
	cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(s.dataDir, "pg"), Durable: true})
	if err != nil {
		return "", nil, fmt.Errorf("the embedded default database: %w", err)
	}
	stop := func() { _ = cluster.Stop(context.WithoutCancel(ctx)) }
	conn, err := pgx.Connect(ctx, cluster.URL)
	if err != nil {
		stop()
		return "", nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'rindle')").Scan(&exists); err != nil {
		stop()
		return "", nil, err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE rindle"); err != nil {
			stop()
			return "", nil, err
		}
	}
	return strings.Replace(cluster.URL, "dbname=postgres", "dbname=rindle", 1), stop, nil
}

// migratedDatabase is database, then the migrations it lacks. stop releases the private
// cluster, if one was started. at is told each step as it begins.
func migratedDatabase(ctx context.Context, s *settings, logger *slog.Logger, at func(step string)) (url string, applied []int, stop func(), err error) {
	if s.databaseURL == "" {
		at("starting the private PostgreSQL")
	}
	url, stop, err = database(ctx, s, logger)
	if err != nil {
		return "", nil, nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		stop()
		return "", nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = s.connectTimeout
	}
	at("connecting to the database")
	var conn *pgx.Conn
	err = untilReachable(ctx, logger, "connect", reachableWithin, 250*time.Millisecond, func() (err error) {
		conn, err = pgx.ConnectConfig(ctx, cfg)
		return err
	})
	if err != nil {
		stop()
		return "", nil, nil, fmt.Errorf("connect to the database (within %s): %w", cfg.ConnectTimeout, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	at("migrating the database, or waiting for the migrations' advisory lock while another instance migrates")
	if applied, err = migrations.Migrate(ctx, conn); err != nil {
		stop()
		return "", nil, nil, err
	}
	return url, applied, stop, nil
}

// jwtSecret is the configured secret, or with the private cluster one generated once and kept
// in the data directory, so `rindled token` and the server agree across runs.
func jwtSecret(s *settings) ([]byte, error) {
	if s.secretFile != "" {
		b, err := os.ReadFile(s.secretFile)
		if err != nil {
			return nil, fmt.Errorf("-jwt-secret-file: %w", err)
		}
		b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
		if len(b) < 32 {
			return nil, fmt.Errorf("-jwt-secret-file %s: the secret must be at least 32 bytes, it has %d", s.secretFile, len(b))
		}
		return b, nil
	}
	if s.secret != "" {
		if len(s.secret) < 32 {
			return nil, errors.New("RINDLE_JWT_SECRET must be at least 32 bytes")
		}
		return []byte(s.secret), nil
	}
	if s.databaseURL != "" {
		return nil, errors.New("RINDLE_JWT_SECRET is required with DATABASE_URL (the generated development secret is only for the private cluster)")
	}
	path := filepath.Join(s.dataDir, "jwt-secret")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	// 0755: the private cluster lives below, and its server (as postgres) must traverse this.
	// The secret file itself is 0600.
	if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
		return nil, err
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret := []byte(hex.EncodeToString(raw))
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		return nil, err
	}
	return secret, nil
}

// buildVersion is set at link time by builds that have no VCS information to read (the image:
// -ldflags "-X main.buildVersion=v1.2.3"); empty otherwise.
var buildVersion string //nolint:gochecknoglobals // written only by the linker

// version is the module version of a `go install`ed binary, else the link-time version, else
// the VCS revision the binary was built from (with +dirty for uncommitted changes).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	if buildVersion != "" {
		return buildVersion
	}
	if ok {
		var rev, dirty string
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				rev = kv.Value
			case "vcs.modified":
				if kv.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			return "devel-" + rev[:min(12, len(rev))] + dirty
		}
	}
	return "devel"
}

// origins splits -cors-origins.
func (s *settings) origins() []string {
	var out []string
	for _, o := range strings.Split(s.corsOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// demoOn resolves -demo: auto serves the demo only with the private development cluster, since
// its start route lets anyone start a generation.
func (s *settings) demoOn() bool {
	return s.demo == "true" || (s.demo == "auto" && s.databaseURL == "")
}

// serveDebug serves net/http/pprof on its own listener, apart from the API: profiles are
// for operators, opt-in, and never behind the API's port or its auth.
func serveDebug(addr string, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-debug-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("profiling endpoint", "at", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}

// logger writes the server's log lines in -log-format, from -log-level up.
func (s *settings) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.logLevel}
	if s.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// reportedError is an error the server already wrote to its log (a JSON log stays JSON to its
// last line); main exits non-zero without printing it again.
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

// reported logs err as the last line of a JSON log and marks it reported; in the text format it
// is left for main to print, as it always was.
func (s *settings) reported(logger *slog.Logger, err error) error {
	if s.logFormat != "json" {
		return err
	}
	logger.Error("rindled stopped", "err", err)
	return &reportedError{err}
}
