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
	"errors"
	"flag"
	"fmt"
	"os"
	"net/url"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/rindle-sh/rindle-go/migrations"
)

// EnvURL names an existing server to test against instead of a private cluster.
const EnvURL = "RINDLE_TEST_DATABASE_URL"

// Cluster is a running PostgreSQL for one test binary.
type Cluster struct {
	// AdminURL connects to the maintenance database as a superuser.
	AdminURL string
	// Dir holds the data directory and the socket; empty for an external server.
	Dir      string
	template string
	pgCtl    string
	runAs    *syscall.Credential
	data     string

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
	} else if err := c.startLocal(ctx, durable); err != nil {
		return nil, err
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

// Binary finds a PostgreSQL server program: on PATH, else in the newest
// /usr/lib/postgresql/*/bin (where Debian's packages put them, off PATH).
func Binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin: install PostgreSQL (Debian: apt-get install -y postgresql) or set %s", name, EnvURL)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func (c *Cluster) startLocal(ctx context.Context, durable bool) error {
	initdb, err := Binary("initdb")
	if err != nil {
		return err
	}
	if c.pgCtl, err = Binary("pg_ctl"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rindle-pg-")
	if err != nil {
		return err
	}
	c.Dir = dir
	c.data = filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root, PostgreSQL must run as another user, and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.runAs = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
	}
	if out, err := c.command(ctx, initdb, "-D", c.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	onOff := "off"
	if durable {
		onOff = "on"
	}
	opts := strings.Join([]string{
		"-c listen_addresses=''",
		"-k " + dir,
		"-c wal_level=logical",
		"-c max_replication_slots=64",
		"-c max_wal_senders=64",
		"-c max_connections=400",
		"-c shared_buffers=128MB",
		"-c fsync=" + onOff,
		"-c synchronous_commit=" + onOff,
		"-c full_page_writes=" + onOff,
	}, " ")
	if out, err := c.command(ctx, c.pgCtl, "start", "-w", "-t", "60", "-D", c.data, "-l", filepath.Join(dir, "log"), "-o", opts).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	c.AdminURL = fmt.Sprintf("host=%s user=postgres dbname=postgres sslmode=disable", dir)
	return nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	if c.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs}
	}
	cmd.Dir = os.TempDir()
	return cmd
}

// Stop drops the template and stops a private cluster, removing its directory.
func (c *Cluster) Stop() error {
	if c.Dir == "" {
		if c.template == "" || c.AdminURL == "" {
			return nil
		}
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, c.AdminURL)
		if err != nil {
			return err
		}
		defer admin.Close(ctx)
		_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+c.template+" WITH (FORCE)")
		return err
	}
	var errs []error
	if c.data != "" {
		if out, err := c.command(context.Background(), c.pgCtl, "stop", "-D", c.data, "-m", "immediate", "-w").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("pg_ctl stop: %w\n%s", err, out))
		}
	}
	errs = append(errs, os.RemoveAll(c.Dir))
	return errors.Join(errs...)
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

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`) //nolint:gochecknoglobals // compiled once, read-only

// NewDB creates a database cloned from the migrated template, with a pool on it, and drops it
// when the test ends.
func NewDB(tb testing.TB) *DB {
	tb.Helper()
	return NewDBWith(tb, 0)
}

// NewDBWith is NewDB with a pool of maxConns connections (0 means pgx's default).
func NewDBWith(tb testing.TB, maxConns int32) *DB {
	tb.Helper()
	c := current
	if c == nil {
		tb.Fatal("pgtest: no cluster: call pgtest.Main from TestMain")
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
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, c.template))
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
