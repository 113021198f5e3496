package checkpoint_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

// openAs opens a stream on its own plane whose store writes hostID, and checkpoints text.
func openAs(t *testing.T, b *bundle, hostID, id, text string) *producer.LiveStream {
	t.Helper()
	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables(), HostID: hostID})
	require.NoError(t, err)
	plane, err := producer.New(producer.Config{
		Committer: store,
		Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
	})
	require.NoError(t, err)
	t.Cleanup(plane.Close)
	b.insert(t, id)
	s, err := plane.Open(t.Context(), producer.OpenStreamInput{StreamID: id})
	require.NoError(t, err)
	for _, piece := range []string{text[:len(text)/2], text[len(text)/2:]} {
		require.NoError(t, s.Push(piece))
		_, err = s.Flush(t.Context())
		require.NoError(t, err)
	}
	require.NoError(t, s.Push("never checkpointed"))
	return s
}

func TestSweeperSealsOnlyOrphans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	lease, err := checkpoint.NewLease(checkpoint.LeaseConfig{DB: checkpoint.PoolDB(b.db.Pool), HostID: "live-host", TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, lease.Start(ctx))
	defer lease.Stop()

	openAs(t, b, "dead-host", "dead", "checkpointed 😀 text")
	openAs(t, b, "live-host", "live", "still streaming")
	_, err = b.db.Pool.Exec(ctx, "INSERT INTO messages (id, status) VALUES ('nohost', 'streaming')")
	require.NoError(t, err)

	var sealed atomic.Int64
	sw, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 { // every instance sweeps at once
		wg.Go(func() {
			n, err := sw.SweepOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			sealed.Add(int64(n))
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), sealed.Load(), "exactly one sweeper sealed the orphan")

	dead := b.durable(t, "dead")
	require.Equal(t, "interrupted", dead.status)
	require.Equal(t, "checkpointed 😀 text", dead.text, "every checkpointed character, nothing more")
	require.Zero(t, dead.chunks)
	require.Equal(t, producer.Len16("checkpointed 😀 text"), dead.seq)

	live := b.durable(t, "live")
	require.Equal(t, "streaming", live.status, "a live lease protects its streams")
	require.Equal(t, 2, live.chunks)
	require.Equal(t, "streaming", b.durable(t, "nohost").status, "no host: cannot tell, leave it")

	// The live host stops: its lease is released, and its leftovers become the sweeper's.
	lease.Stop()
	n, err := sw.SweepOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "interrupted", b.durable(t, "live").status)
}

func TestLeaseAndSweeperConfigRefusals(t *testing.T) {
	t.Parallel()
	db := newFaultDB(nil)
	_, err := checkpoint.NewLease(checkpoint.LeaseConfig{DB: db})
	require.ErrorContains(t, err, "HostID")
	_, err = checkpoint.NewLease(checkpoint.LeaseConfig{DB: db, HostID: "h", TTL: time.Second, Interval: 2 * time.Second})
	require.ErrorContains(t, err, "must be below TTL")
	_, err = checkpoint.NewLease(checkpoint.LeaseConfig{DB: db, HostID: "h", TTL: time.Second, Interval: 600 * time.Millisecond, Guard: 400 * time.Millisecond})
	require.ErrorContains(t, err, "plus Guard", "no room left for a retry before the fence")
	_, err = checkpoint.NewLease(checkpoint.LeaseConfig{DB: db, HostID: "h", Guard: -time.Second})
	require.ErrorContains(t, err, "Guard")
	_, err = checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: db, Tables: checkpoint.DefaultTables(), ForgetAfter: -time.Second})
	require.ErrorContains(t, err, "ForgetAfter")
	_, err = checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: db, Tables: checkpoint.Tables{Message: "app_messages"}})
	require.ErrorContains(t, err, "Tables.Columns.Host", "a mapping without a host column cannot be swept")
	_, err = checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: db})
	require.NoError(t, err, "a zero mapping is the project's schema, which has one")
	_, err = checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: db, Tables: checkpoint.DefaultTables(), HostsTable: `x"y`})
	require.Error(t, err)
}

// TestAZombieProducerIsFencedOutOfASweptRow: a producer whose lease lapsed but which still runs
// (a partition, a stalled VM) must not write into the row the sweeper sealed.
func TestAZombieProducerIsFencedOutOfASweptRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	zombie := openAs(t, b, "lapsed-host", "z", "checkpointed before the lapse")
	sw, err := checkpoint.NewSweeper(checkpoint.SweeperConfig{DB: checkpoint.PoolDB(b.db.Pool), Tables: checkpoint.DefaultTables()})
	require.NoError(t, err)
	n, err := sw.SweepOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	swept := b.durable(t, "z")
	require.Equal(t, "interrupted", swept.status)

	require.NoError(t, zombie.Push(" and more after it"))
	_, err = zombie.Flush(ctx)
	require.ErrorIs(t, err, producer.ErrFenced, "the guarded append refuses a sealed row")
	require.ErrorIs(t, err, producer.ErrNotDurable)
	err = zombie.Close(ctx)
	require.ErrorIs(t, err, producer.ErrFenced, "compaction refuses a sealed row")

	after := b.durable(t, "z")
	require.Equal(t, swept.text, after.text, "the sweeper's seal stands")
	require.Equal(t, "interrupted", after.status)
	require.Zero(t, after.chunks)
}

// TestARetriedSealWhoseReplyWasLostSucceeds: compaction is guarded now, so its retry must read
// back its own seal rather than mistake it for a fence.
func TestARetriedSealWhoseReplyWasLostSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, "m1")
	require.NoError(t, s.Push("sealed once"))
	b.fdb.set(func(f *faultDB) { f.loseAck = 1 })
	require.NoError(t, s.Close(t.Context()))
	r := b.durable(t, "m1")
	require.Equal(t, "complete", r.status)
	require.Equal(t, "sealed once", r.text)
}
