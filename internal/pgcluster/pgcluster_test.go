package pgcluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
