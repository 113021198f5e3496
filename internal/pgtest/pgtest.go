// Package pgtest runs tests against a real PostgreSQL: one private cluster per test binary,
// started from the machine's initdb and pg_ctl, and a fresh database per test cloned from a
// migrated template. It owns the cluster's lifecycle; it does not own the schema (migrations
// does) and it is for tests only.
//
// The cluster lives in a temporary directory, listens only on a Unix socket there, and runs with
// wal_level=logical and room for replication slots, so CDC tests can use it. It runs with
// fsync=off unless the binary runs benchmarks (-test.bench), whose commit figures must be real.
// PostgreSQL refuses to run as root, so as root the harness starts it as the postgres user, in
// a directory chowned to that user; as anyone else it runs it directly.
//
// RINDLE_TEST_DATABASE_URL, if set, names an existing server to use instead (it must allow
// CREATE DATABASE, and logical replication for the CDC tests).
//
// Use Main from TestMain, then NewDB(t) in each test. Main stops the cluster and checks for
// leaked goroutines after the tests, before it exits.
package pgtest

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/migrations"
)

// EnvURL names an existing server to test against instead of a private cluster.
const EnvURL = "RINDLE_TEST_DATABASE_URL"

// Cluster is a running PostgreSQL for one test binary.
type Cluster struct {
	// AdminURL connects to the maintenance database as a superuser.
	AdminURL string
	local    *pgcluster.Cluster // nil for an external server
	template string

	mu      sync.Mutex // serializes CREATE DATABASE ... TEMPLATE
	counter atomic.Int64
}

var current *Cluster //nolint:gochecknoglobals // the one cluster of this test binary, set by Main

// Main starts the cluster, runs the tests, stops the cluster, checks for leaked goroutines, and
// exits. Call it from TestMain.
func Main(m *testing.M) {
	code := run(m)
	os.Exit(code)
}

func run(m *testing.M) int {
	flag.Parse()
	bench := flag.Lookup("test.bench")
	c, err := Start(bench != nil && bench.Value.String() != "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	current = c
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// Current is the cluster Main started.
func Current() *Cluster { return current }

// Start starts a private cluster, or connects to RINDLE_TEST_DATABASE_URL, and migrates a
// template database. durable turns fsync and synchronous commit on.
func Start(durable bool) (*Cluster, error) {
	ctx := context.Background()
	c := &Cluster{}
	if url := os.Getenv(EnvURL); url != "" {
		c.AdminURL = url
	} else {
		reapOrphans(ctx)
		dir, err := os.MkdirTemp("", "rindle-pg-")
		if err != nil {
			return nil, err
		}
		c.local, err = pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Durable: durable, Ephemeral: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		c.AdminURL = c.local.URL
	}
	c.template = fmt.Sprintf("rindle_template_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, c.AdminURL)
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("connect to %s: %w", c.AdminURL, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+c.template); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+c.template); err != nil {
		_ = c.Stop()
		return nil, err
	}
	conn, err := pgx.Connect(ctx, c.urlFor(c.template))
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// reapOrphans stops and removes the private clusters of test processes that were killed
// before their Stop (a fuzz worker its coordinator ended, a binary killed at its timeout):
// nothing else stops their servers. Clusters in use are left alone (pgcluster.Reap).
func reapOrphans(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "rindle-pg-*"))
	for _, dir := range dirs {
		if reaped, err := pgcluster.Reap(ctx, dir); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		} else if reaped {
			fmt.Fprintln(os.Stderr, "pgtest: stopped and removed the cluster of a test process that was killed before its cleanup:", dir)
		}
	}
}

// Stop stops a private cluster and removes it; for an external server it drops the template.
func (c *Cluster) Stop() error {
	ctx := context.Background()
	if c.local != nil {
		return c.local.Stop(ctx)
	}
	if c.template == "" || c.AdminURL == "" {
		return nil
	}
	admin, err := pgx.Connect(ctx, c.AdminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+c.template+" WITH (FORCE)")
	return err
}

// urlFor is AdminURL pointed at another database, in whichever form AdminURL is written.
func (c *Cluster) urlFor(db string) string {
	if u, err := url.Parse(c.AdminURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String()
	}
	kept := []string{}
	for _, kv := range strings.Fields(c.AdminURL) {
		if !strings.HasPrefix(kv, "dbname=") {
			kept = append(kept, kv)
		}
	}
	return strings.Join(append(kept, "dbname="+db), " ")
}

// DB is one test's private database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDB creates a database cloned from the migrated template, with a pool on it, and drops it
// when the test ends.
func NewDB(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, 0, false)
}

// NewDBWith is NewDB with a pool of maxConns connections (0 means pgx's default).
func NewDBWith(tb testing.TB, maxConns int32) *DB {
	tb.Helper()
	return newDB(tb, maxConns, false)
}

// NewBareDB is NewDB without the schema: an empty database, for testing migrations.
func NewBareDB(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, 0, true)
}

func newDB(tb testing.TB, maxConns int32, bare bool) *DB {
	tb.Helper()
	c := current
	if c == nil {
		tb.Fatal("pgtest: no cluster: call pgtest.Main from TestMain")
	}
	template := c.template
	if bare {
		template = "template0"
	}
	ctx := context.Background()
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(tb.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%d_%s", os.Getpid(), c.counter.Add(1), name)
	admin, err := pgx.Connect(ctx, c.AdminURL)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	c.mu.Lock()
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template))
	c.mu.Unlock()
	admin.Close(ctx)
	if err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	url := c.urlFor(name)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	db := &DB{Name: name, URL: url, Pool: pool}
	tb.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, c.AdminURL)
		if err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	return db
}

// Slot is a replication slot name for this database: slots are per cluster, so the name carries
// the database's, within PostgreSQL's 63-byte limit.
func (db *DB) Slot() string {
	name := "s_" + db.Name
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// DurableText is what the default schema holds for a message: the body followed by its chunks
// in seq order, and its status.
func (db *DB) DurableText(tb testing.TB, id string) (text, status string) {
	tb.Helper()
	err := db.Pool.QueryRow(context.Background(), `SELECT m.body || coalesce((SELECT string_agg(c.text, '' ORDER BY c.seq)
		FROM message_chunks c WHERE c.stream_id = m.id), ''), m.status FROM messages m WHERE m.id = $1`, id).Scan(&text, &status)
	if err != nil {
		tb.Fatalf("pgtest: durable text of %s: %v", id, err)
	}
	return text, status
}

// PrivateCluster starts a cluster of the test's own (for tests that crash it, restart it or
// need settings the shared one cannot have), with cfg's settings, in a directory the postgres
// user can reach when the test runs as root, and stops and removes it when the test ends.
// cfg.Dir is set here, and the cluster is Ephemeral.
func PrivateCluster(tb testing.TB, cfg pgcluster.Config) *pgcluster.Cluster {
	tb.Helper()
	base, err := os.MkdirTemp("", "rindle-private-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(base) })
	// As root the cluster runs as postgres, which must be able to search the directory.
	if err := os.Chmod(base, 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg.Dir, cfg.Ephemeral = filepath.Join(base, "pg"), true
	c, err := pgcluster.Start(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: start a private cluster: %v", err)
	}
	tb.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}
