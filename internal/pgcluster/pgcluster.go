// Package pgcluster runs a private PostgreSQL cluster from the machine's server binaries
// (initdb, pg_ctl): for the test harness (internal/pgtest) and for programs that run with an
// embedded default database when no DATABASE_URL is given. It owns the cluster's files and
// process; it does not own any schema (migrations does).
//
// The cluster listens only on a Unix socket in its own directory and runs with
// wal_level=logical and room for replication slots. PostgreSQL refuses to run as root, so as
// root the cluster runs as the postgres user, in a directory chowned to it; as anyone else it
// runs as that user.
//
// Lifecycle: Start initializes the data directory if it has none (so a kept directory survives
// restarts) and starts the server, or adopts the server already running there (another
// program using the same directory, or one killed without stopping it); Stop stops it unless
// another program still uses it. Several programs may share one directory (rindled and
// examples/stream in one checkout): each holds a shared lock on users.lock for as long as it
// runs (the kernel drops it when a process dies, even by kill -9), and Stop stops the server
// only when it can take that lock exclusively. start.lock serializes the start and the stop
// decisions, so a program starting while another stops waits and then starts the server anew.
// An ephemeral cluster whose every user died before its Stop keeps running, since nothing else
// stops it; Reap stops and removes it (the test harness reaps such clusters as it starts).
// Errors name the binary or step that failed and carry its output; a missing binary says how
// to install it.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoBinaries means the PostgreSQL server programs are not installed.
var ErrNoBinaries = errors.New("PostgreSQL server binaries not found")

// Config configures a cluster.
type Config struct {
	// Dir holds the data directory ("data") and the server log. It is created if missing and
	// kept by Stop unless Ephemeral is set. Required.
	Dir string
	// Durable turns fsync, synchronous commit and full-page writes on. Off suits tests: a crash
	// of a test cluster loses nothing anyone needs.
	Durable bool
	// Ephemeral removes Dir on Stop.
	Ephemeral bool
	// StartTimeout bounds pg_ctl start. Defaults to 60s.
	StartTimeout time.Duration
	// Settings override server settings (name → value), after the defaults above.
	Settings map[string]string
}

// Cluster is a running server.
type Cluster struct {
	// URL connects to the postgres database as the superuser postgres, over the socket.
	URL string
	// SocketDir is where the server's Unix socket lives.
	SocketDir string

	cfg   Config
	pgCtl string
	data  string
	runAs *syscall.Credential
	users *os.File // holds a shared flock while this program uses the cluster
	// startArgs are pg_ctl's arguments to start the server, for Restart.
	startArgs []string
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
	return "", fmt.Errorf("%w: %s is not on PATH or in /usr/lib/postgresql/*/bin; install PostgreSQL (Debian: apt-get install -y postgresql) or point DATABASE_URL at a server", ErrNoBinaries, name)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initializes (if needed) and starts a cluster in cfg.Dir.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgcluster: Config.Dir is required")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	initdb, err := Binary("initdb")
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	if c.pgCtl, err = Binary("pg_ctl"); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	// Parents must stay searchable by others: as root the server runs as postgres, which has to
	// traverse them. The cluster directory itself is private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("pgcluster: create %s: %w", filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("pgcluster: create %s: %w", dir, err)
	}
	c.cfg.Dir = dir
	c.data = filepath.Join(dir, "data")
	if c.runAs, err = serverUser(); err != nil {
		return nil, err
	}
	if c.runAs != nil {
		uid, gid := int(c.runAs.Uid), int(c.runAs.Gid)
		if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		}); err != nil {
			return nil, fmt.Errorf("pgcluster: hand %s to the postgres user: %w", dir, err)
		}
		if blocked := untraversable(dir); blocked != "" {
			return nil, fmt.Errorf("pgcluster: the postgres user cannot reach %s because %s is not searchable by others; choose a directory under a world-searchable path (for example /var/tmp) or chmod o+x %s", dir, blocked, blocked)
		}
	}
	c.SocketDir = dir
	if len(dir) > 90 { // a Unix socket path is limited to 107 bytes
		if c.SocketDir, err = os.MkdirTemp("", "rindle-sock-"); err != nil {
			return nil, err
		}
		if c.runAs != nil {
			if err := os.Chown(c.SocketDir, int(c.runAs.Uid), int(c.runAs.Gid)); err != nil {
				return nil, err
			}
		}
	}
	if _, err := os.Stat(filepath.Join(c.data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		args := []string{"-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
		if !cfg.Durable {
			args = append(args, "--no-sync")
		}
		if out, err := c.command(ctx, initdb, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pgcluster: initdb in %s: %w\n%s", c.data, err, out)
		}
	}
	onOff := "off"
	if cfg.Durable {
		onOff = "on"
	}
	settings := []string{
		"-c listen_addresses=''",
		"-k " + c.SocketDir,
		"-c wal_level=logical",
		"-c max_replication_slots=64",
		"-c max_wal_senders=64",
		"-c max_connections=400",
		"-c shared_buffers=128MB",
		"-c max_slot_wal_keep_size=1GB",
		"-c fsync=" + onOff,
		"-c synchronous_commit=" + onOff,
		"-c full_page_writes=" + onOff,
	}
	names := make([]string, 0, len(cfg.Settings))
	for name := range cfg.Settings {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		settings = append(settings, fmt.Sprintf("-c %s=%s", name, cfg.Settings[name]))
	}
	opts := strings.Join(settings, " ")
	logFile := filepath.Join(dir, "postgres.log")
	timeout := strconv.Itoa(int(cfg.StartTimeout.Seconds()))
	c.URL = fmt.Sprintf("host=%s user=postgres dbname=postgres sslmode=disable", c.SocketDir)
	unlock, err := lockFile(filepath.Join(dir, "start.lock"), syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	closeInheritedOnExec()
	// A server already running on this data directory belongs to another program using this
	// directory, or to one killed without stopping it: adopt it rather than fail on its lock file.
	c.startArgs = []string{"start", "-w", "-t", timeout, "-D", c.data, "-l", logFile, "-o", opts}
	if c.command(ctx, c.pgCtl, "status", "-D", c.data).Run() != nil {
		if err := c.start(ctx); err != nil {
			return nil, err
		}
	}
	if c.users, err = os.OpenFile(filepath.Join(dir, "users.lock"), os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := syscall.Flock(int(c.users.Fd()), syscall.LOCK_SH); err != nil {
		_ = c.users.Close()
		return nil, fmt.Errorf("pgcluster: lock %s: %w", c.users.Name(), err)
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if out, err := c.command(ctx, c.pgCtl, c.startArgs...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(c.LogFile())
		return fmt.Errorf("pgcluster: pg_ctl start in %s: %w\n%s\n%s", c.data, err, out, tail(log, 4000))
	}
	return nil
}

// Crash kills the server as a crash would: SIGKILL to the postmaster and every process it
// started, at once, with no shutdown checkpoint; what was committed is only in the WAL, which
// the next start (Restart) replays. With Durable set, every acknowledged commit survives it.
// The cluster's directory stays. For tests of what a database crash loses.
func (c *Cluster) Crash() error {
	pidFile, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("pgcluster: crash: no running server: %w", err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("pgcluster: crash: postmaster.pid: %w", err)
	}
	victims := []int{postmaster}
	for pid := range children(postmaster) {
		victims = append(victims, pid)
	}
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Wait until none is left, reaped too: a new postmaster refuses to start while the old
	// one's PID answers, and a zombie's does.
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range victims {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgcluster: crash: process %d is still there 30 s after SIGKILL (a zombie nobody reaps?)", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// LogFile is the server's log.
func (c *Cluster) LogFile() string { return filepath.Join(c.cfg.Dir, "postgres.log") }

// Restart starts the server again after Crash, replaying its WAL, with the settings it had.
func (c *Cluster) Restart(ctx context.Context) error { return c.start(ctx) }

// serverUser is who the server runs as: nil for this process's user, the postgres user as root.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, PostgreSQL must run as another user, and there is no postgres user (Debian's postgresql package creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Reap stops the server of the ephemeral cluster in dir and removes dir, if no program uses it
// any more: one whose every user was killed before its Stop (a fuzz worker ended by its
// coordinator, a test binary killed at its timeout) leaves a running server behind, which
// nothing else would stop. It reports whether it reaped. A directory that a live program
// uses, or that is not a started cluster yet (no users.lock: initdb may still be running),
// is left alone. Only for directories made for one run (Ephemeral), never a kept one.
func Reap(ctx context.Context, dir string) (bool, error) {
	users := filepath.Join(dir, "users.lock")
	if _, err := os.Stat(users); err != nil {
		return false, nil //nolint:nilerr // not started (yet), or gone: nothing to reap
	}
	unlock, err := lockFile(filepath.Join(dir, "start.lock"), syscall.LOCK_EX)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // its last user's Stop removed it meanwhile
	}
	if err != nil {
		return false, err
	}
	defer unlock()
	f, err := os.OpenFile(users, os.O_RDWR, 0o600)
	if err != nil {
		return false, nil //nolint:nilerr // removed meanwhile by its last user's Stop
	}
	defer func() { _ = f.Close() }()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false, nil // a live program holds its shared lock
	}
	pgCtl, err := Binary("pg_ctl")
	if err != nil {
		return false, err
	}
	c := &Cluster{cfg: Config{Dir: dir, Ephemeral: true}, data: filepath.Join(dir, "data"), pgCtl: pgCtl}
	if c.runAs, err = serverUser(); err != nil {
		return false, err
	}
	if out, err := c.command(ctx, c.pgCtl, "stop", "-D", c.data, "-m", "immediate", "-w").CombinedOutput(); err != nil && !strings.Contains(string(out), "Is server running?") {
		return false, fmt.Errorf("pgcluster: reap %s: pg_ctl stop: %w\n%s", dir, err, out)
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("pgcluster: reap %s: %w", dir, err)
	}
	return true, nil
}

// lockFile takes a flock of how on path (created if missing) and returns its release.
func lockFile(path string, how int) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pgcluster: lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil // closing the file drops its lock
}

// untraversable returns the first ancestor of dir that others cannot search, or "".
func untraversable(dir string) string {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return p
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	if c.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs}
	}
	cmd.Dir = os.TempDir()
	return cmd
}

// Stop stops the server (fast shutdown: clients are disconnected, nothing committed is lost)
// and removes the directory when the cluster is ephemeral, unless another program still uses
// the cluster: then it leaves the server to the last one. Safe to call twice.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.users == nil {
		return nil
	}
	var errs []error
	unlock, err := lockFile(filepath.Join(c.cfg.Dir, "start.lock"), syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	last := syscall.Flock(int(c.users.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
	_ = c.users.Close()
	c.users = nil
	if !last {
		return nil // another program uses the cluster: it stops it when it is done
	}
	mode := "fast"
	if c.cfg.Ephemeral {
		mode = "immediate"
	}
	if out, err := c.command(ctx, c.pgCtl, "stop", "-D", c.data, "-m", mode, "-w").CombinedOutput(); err != nil && !strings.Contains(string(out), "Is server running?") {
		errs = append(errs, fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, out))
	}
	if c.SocketDir != c.cfg.Dir {
		errs = append(errs, os.RemoveAll(c.SocketDir))
	}
	if c.cfg.Ephemeral {
		errs = append(errs, os.RemoveAll(c.cfg.Dir))
	}
	return errors.Join(errs...)
}

// closeInheritedOnExec marks every descriptor this process inherited beyond stdio close-on-exec
// (Go opens its own that way), so the server started here does not hold them. A fuzz worker
// inherits its pipes to the coordinator: a server holding them outlives the worker, keeps the
// pipes open, and the coordinator waits on them forever (seen here as a fuzz run stalled at 0
// execs/s with its workers gone).
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return // not Linux: nothing to mark this way
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// procStat is a process's /proc stat fields after its command's name (field 0 is its state, 1
// its parent's PID, 11 and 12 its user and system time, 13 and 14 those of the children it
// has reaped, in clock ticks); nil when the process is gone.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// children yields the running processes whose parent is pid, each with its stat fields.
func children(pid int) iter.Seq2[int, []string] {
	parent := strconv.Itoa(pid)
	return func(yield func(int, []string) bool) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			child, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if f := procStat(child); len(f) > 1 && f[1] == parent && !yield(child, f) {
				return
			}
		}
	}
}

// ServerCPU is the CPU used so far by the PostgreSQL server that backend (a pg_backend_pid())
// belongs to: its postmaster, the children the postmaster has reaped (a client's backends, once
// they exit) and the children still running, read from /proc in clock ticks of 10 ms. Only
// differences of two readings mean anything: a backend that started and ended between them is
// in the second's reaped time. For benchmarks that read CPU per process, never machine-wide.
func ServerCPU(backend int) (time.Duration, error) {
	f := procStat(backend)
	if len(f) < 15 {
		return 0, fmt.Errorf("pgcluster: no /proc stat for backend %d", backend)
	}
	postmaster, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, fmt.Errorf("pgcluster: backend %d's parent: %w", backend, err)
	}
	pm := procStat(postmaster)
	if len(pm) < 15 {
		return 0, fmt.Errorf("pgcluster: no /proc stat for postmaster %d", postmaster)
	}
	ticks := func(f []string, fields ...int) (n int64) {
		for _, i := range fields {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
		return n
	}
	total := ticks(pm, 11, 12, 13, 14)
	for _, f := range children(postmaster) {
		if len(f) >= 13 {
			total += ticks(f, 11, 12)
		}
	}
	return time.Duration(total) * 10 * time.Millisecond, nil
}
