package producer_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// TestLifecycleHooksBalance counts streams and readers through every way they come and go.
func TestLifecycleHooksBalance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	streams, readers, stale := 0, 0, 0
	w := newWorld(t, func(c *producer.Config) {
		c.MaxQueuedFrames = 3
		c.CheckpointChars = 1 << 20
		c.OnStreamFunc = func(d int) { mu.Lock(); streams += d; mu.Unlock() }
		c.OnSubscriberFunc = func(d int, s bool) {
			mu.Lock()
			readers += d
			if s {
				stale++
			}
			mu.Unlock()
		}
	})
	counts := func() (int, int, int) { mu.Lock(); defer mu.Unlock(); return streams, readers, stale }

	a := w.open(t, "a")
	w.open(t, "b")
	st, rd, _ := counts()
	require.Equal(t, 2, st)
	require.Equal(t, 0, rd)

	w.subscribe(t, "a", 0) // never drains: dropped stale
	closer := w.subscribe(t, "a", 0)
	w.subscribe(t, "a", 0) // never drains either
	w.subscribe(t, "b", 0) // left attached until teardown
	_, rd, _ = counts()
	require.Equal(t, 4, rd)

	closer.Close()
	_, rd, _ = counts()
	require.Equal(t, 3, rd)
	for range 5 { // both undrained readers overflow their queues of 3
		require.NoError(t, a.Push("x"))
	}
	_, rd, sd := counts()
	require.Equal(t, 2, sd, "two readers dropped stale")
	require.Equal(t, 1, rd, "only b's reader is left")

	w.subscribe(t, "a", 0) // attached at the seal
	_, rd, _ = counts()
	require.Equal(t, 2, rd)
	require.NoError(t, a.Close(t.Context())) // sealed: its readers get end and leave
	_, rd, _ = counts()
	require.Equal(t, 1, rd)
	w.clock.Advance(producer.DefaultLinger) // and the stream is evicted
	st, _, _ = counts()
	require.Equal(t, 1, st)

	w.plane.Close() // teardown: b and its reader
	st, rd, _ = counts()
	require.Equal(t, 0, st)
	require.Equal(t, 0, rd)
}
