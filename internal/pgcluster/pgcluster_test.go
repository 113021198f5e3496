package pgcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/pgcluster"
)

// clusterDir is a cluster directory the test removes. t.TempDir is not searchable by others,
// and a root run hands the cluster to postgres: there it lives under a world-searchable base.
func clusterDir(t *testing.T, name string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return filepath.Join(t.TempDir(), name)
	}
	base, err := os.MkdirTemp("", "pgcluster-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	return filepath.Join(base, name)
}

func TestAKeptClusterSurvivesARestart(t *testing.T) {
	dir := clusterDir(t, "kept")
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	var wal string
	require.NoError(t, conn.QueryRow(ctx, "SHOW wal_level").Scan(&wal))
	require.Equal(t, "logical", wal)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	conn.Close(ctx)

	// A second program on the same directory adopts the running server; when it stops, the
	// server stays up for the first (issue 19: it used to stop the cluster under it).
	adopted, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir})
	require.NoError(t, err)
	conn, err = pgx.Connect(ctx, adopted.URL)
	require.NoError(t, err)
	conn.Close(ctx)
	require.NoError(t, adopted.Stop(ctx))
	conn, err = pgx.Connect(ctx, c.URL)
	require.NoError(t, err, "the first program's cluster is still up")
	require.NoError(t, conn.Ping(ctx))
	conn.Close(ctx)
	require.NoError(t, c.Stop(ctx))
	_, err = pgx.Connect(ctx, c.URL)
	require.Error(t, err, "the last program stopped it")
	require.NoError(t, c.Stop(ctx), "twice is fine")

	c, err = pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Ephemeral: true})
	require.NoError(t, err)
	conn, err = pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 42, v)
	conn.Close(ctx)
	require.NoError(t, c.Stop(ctx))
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "an ephemeral cluster removes its directory")
}

func TestAnUnreachableDirectoryIsRefusedWithAHint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root run hands the cluster to another user")
	}
	base, err := os.MkdirTemp("", "pgcluster-closed-") // 0700: postgres cannot search it
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	_, err = pgcluster.Start(context.Background(), pgcluster.Config{Dir: filepath.Join(base, "x")})
	require.ErrorContains(t, err, "is not searchable by others")
	require.ErrorContains(t, err, "chmod o+x")
}

func TestConfigNeedsADirectory(t *testing.T) {
	_, err := pgcluster.Start(context.Background(), pgcluster.Config{})
	require.ErrorContains(t, err, "Dir is required")
}

// The server does not inherit this process's descriptors beyond stdio. A fuzz worker's pipes to
// its coordinator are inherited without close-on-exec; a server holding them outlived the worker
// and kept the coordinator waiting forever.
func TestTheServerHoldsNoInheritedDescriptor(t *testing.T) {
	var p [2]int
	require.NoError(t, syscall.Pipe(p[:])) // no O_CLOEXEC, as an inherited pipe would be
	t.Cleanup(func() { _ = syscall.Close(p[0]); _ = syscall.Close(p[1]) })
	var st syscall.Stat_t
	require.NoError(t, syscall.Fstat(p[0], &st))
	dir := clusterDir(t, "c")
	c, err := pgcluster.Start(context.Background(), pgcluster.Config{Dir: dir, Ephemeral: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	pid := strings.SplitN(string(pidFile), "\n", 2)[0]
	fds, err := os.ReadDir("/proc/" + pid + "/fd")
	require.NoError(t, err)
	want := fmt.Sprintf("pipe:[%d]", st.Ino)
	for _, fd := range fds {
		target, _ := os.Readlink("/proc/" + pid + "/fd/" + fd.Name())
		require.NotEqual(t, want, target, "the server holds this process's pipe as fd %s", fd.Name())
	}
}

// Crash kills every server process at once; Restart replays the WAL. A durable cluster keeps
// every commit acknowledged before the crash, including one no checkpoint has written yet, and
// a connection open across the crash fails rather than hangs.
func TestACrashKeepsWhatWasCommitted(t *testing.T) {
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: clusterDir(t, "crash"), Durable: true, Ephemeral: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); CHECKPOINT; INSERT INTO kept SELECT generate_series(1, 1000)")
	require.NoError(t, err)

	require.NoError(t, c.Crash())
	require.Error(t, conn.Ping(ctx), "the crash closed the connection")
	_, err = pgx.Connect(ctx, c.URL)
	require.Error(t, err, "nothing answers until the restart")
	require.NoError(t, c.Restart(ctx))
	conn, err = pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n))
	require.Equal(t, 1000, n, "every committed row, replayed from the WAL")
	log, err := os.ReadFile(c.LogFile())
	require.NoError(t, err)
	require.Contains(t, string(log), "not properly shut down", "the restart recovered from a crash, not a clean stop")
}

// reapChildEnv names the cluster directory of TestReapHelperStartsAndWaits, run as a child.
const reapChildEnv = "PGCLUSTER_REAP_CHILD_DIR"

// TestReapHelperStartsAndWaits is the child of TestReapStopsOnlyAClusterNobodyUses: it starts
// an ephemeral cluster, says so on stdout, and waits to be killed. Skipped in a normal run.
func TestReapHelperStartsAndWaits(t *testing.T) {
	dir := os.Getenv(reapChildEnv)
	if dir == "" {
		t.Skip("the child of TestReapStopsOnlyAClusterNobodyUses")
	}
	_, err := pgcluster.Start(context.Background(), pgcluster.Config{Dir: dir, Ephemeral: true})
	require.NoError(t, err)
	fmt.Println("started")
	select {} // until killed, with no Stop
}

// A program killed before its Stop (a fuzz worker its coordinator ended) leaves its server
// running. Reap stops it and removes the directory once no program uses it, and leaves alone a
// cluster a live program uses and a directory that is not a started cluster yet.
func TestReapStopsOnlyAClusterNobodyUses(t *testing.T) {
	ctx := context.Background()
	dir := clusterDir(t, "orphan")
	child := exec.Command(os.Args[0], "-test.run=^TestReapHelperStartsAndWaits$")
	child.Env = append(os.Environ(), reapChildEnv+"="+dir)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_, _ = pgcluster.Reap(ctx, dir) // on a failure below, nothing is left running
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)
	pid := postmasterPID(t, dir)
	require.True(t, running(pid))

	reaped, err := pgcluster.Reap(ctx, dir)
	require.NoError(t, err)
	require.False(t, reaped, "the child still uses the cluster")
	require.True(t, running(pid))

	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	require.True(t, running(pid), "a killed user's server keeps running: nothing stops it")
	reaped, err = pgcluster.Reap(ctx, dir)
	require.NoError(t, err)
	require.True(t, reaped)
	require.False(t, running(pid), "pg_ctl stop -w returned: the server is gone")
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)

	// A directory whose cluster is not started yet (initdb may be running) is not a cluster to reap.
	fresh := clusterDir(t, "fresh")
	require.NoError(t, os.MkdirAll(filepath.Join(fresh, "data"), 0o700))
	reaped, err = pgcluster.Reap(ctx, fresh)
	require.NoError(t, err)
	require.False(t, reaped)
	require.DirExists(t, fresh)
}

// postmasterPID is the pid in dir's postmaster.pid.
func postmasterPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	return pid
}

// running reports whether pid is a live process (a zombie, exited but not yet reaped, is not).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
