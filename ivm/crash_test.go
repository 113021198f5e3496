package ivm_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/producer"
)

const crashProducerEnv = "RINDLE_CRASH_PRODUCER_URL"

// crashProducer is the child process: a producer host with a short lease that streams and
// checkpoints until it is killed, printing each confirmed durable length.
func crashProducer(url string) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	db := checkpoint.PoolDB(pool)
	lease, err := checkpoint.NewLease(checkpoint.LeaseConfig{DB: db, HostID: "crash-host", TTL: time.Second})
	if err == nil {
		err = lease.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	store, err := checkpoint.New(checkpoint.Config{DB: db, Tables: checkpoint.DefaultTables(), HostID: "crash-host"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plane, err := producer.New(producer.Config{Committer: store, Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: "crash"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; ; i++ {
		if err := s.Push(fmt.Sprintf("tok%d😀 ", i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if i%10 == 9 {
			d, err := s.Flush(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Printf("durable %d\n", d)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKilledProducerIsSealedBySweeperAndSeenByTheView(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) VALUES ('crash')")
	require.NoError(t, err)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashProducerEnv+"="+w.db.URL)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	var reported producer.Seq
	lines := bufio.NewScanner(out)
	for reported < 500 && lines.Scan() {
		n, err := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "durable "), 10, 64)
		require.NoError(t, err)
		reported = producer.Seq(n)
	}
	require.GreaterOrEqual(t, reported, producer.Seq(500), "the child stopped early")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()

	// What the store held at the kill: everything checkpointed, the body still empty.
	text, status := w.db.DurableText(t, "crash")
	require.Equal(t, "streaming", status)
	require.GreaterOrEqual(t, producer.Len16(text), reported, "every confirmed character is in the store")

	sw, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(w.db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	eventually.True(t, func() bool {
		n, err := sw.SweepOnce(ctx)
		require.NoError(t, err)
		return n == 1
	}, "the sweeper seals the row once the dead host's lease lapses")

	var body string
	var seq int64
	require.NoError(t, w.db.Pool.QueryRow(ctx, "SELECT body, seq, status FROM messages WHERE id = 'crash'").Scan(&body, &seq, &status))
	require.Equal(t, "interrupted", status)
	require.Equal(t, text, body, "the seal kept every checkpointed character, and nothing else")
	require.Equal(t, producer.Len16(text), producer.Seq(seq))

	m, err := w.view.Wait(ctx, "crash", 0)
	for err == nil && m.Status != producer.StatusInterrupted {
		m, err = w.view.Wait(ctx, "crash", m.Seq)
	}
	require.NoError(t, err)
	require.Equal(t, body, m.Text)
}
