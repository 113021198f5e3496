package checkpoint_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// Two forks of a soft-deleted source deleted in two transactions at once: the one that counts
// the source's forks second must see the other's delete, or neither collects the source and its
// path stays taken for good. The first transaction holds its delete uncommitted while the
// second runs; the second must wait for it (the source's row lock) and then collect.
func TestForkDeletesThatOverlapCollectTheirSource(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := t.Context()
	p, err := checkpoint.NewProtocol(db.Pool)
	require.NoError(t, err)
	same := func(a, b string) bool { return a == b }
	_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: "src", ContentType: "text/plain", Text: "x", SameType: same})
	require.NoError(t, err)
	for _, f := range []string{"a", "b"} {
		_, _, err = p.Create(ctx, checkpoint.CreateStream{Path: f, SameType: same, Fork: &checkpoint.Fork{Source: "src"}})
		require.NoError(t, err)
	}
	require.NoError(t, p.Delete(ctx, "src"))
	_, err = p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamGone)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	require.NoError(t, checkpoint.DeleteInTx(ctx, tx, "a"))
	done := make(chan error, 1)
	go func() { done <- p.Delete(ctx, "b") }()
	// Commit only once the second delete has finished or is waiting on a lock: committing
	// earlier would let it see the first delete whether or not it waits.
	waiting := func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n))
		return n > 0
	}
	var second error
	returned := false
	for !returned && !waiting() {
		select {
		case second = <-done:
			returned = true
		default:
		}
	}
	require.NoError(t, tx.Commit(ctx))
	if !returned {
		second = <-done
	}
	require.NoError(t, second)
	_, err = p.Head(ctx, "src")
	require.ErrorIs(t, err, checkpoint.ErrStreamNotFound, "the later delete collected the source")
}
