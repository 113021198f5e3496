package startstop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rindle-sh/rindle-go/internal/startstop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunnerLifecycle(t *testing.T) {
	var r startstop.Runner
	require.False(t, r.Stop(), "stop before start does nothing")
	var runs atomic.Int64
	run := func(ctx context.Context) {
		runs.Add(1)
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), startstop.ErrStop)
	}
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, r.Start(ctx, run))
	cancel() // the start context only scopes the start
	require.ErrorIs(t, r.Start(t.Context(), run), startstop.ErrStarted)
	require.True(t, r.Stop())
	require.False(t, r.Stop(), "a second stop does nothing")
	require.NoError(t, r.Start(t.Context(), run), "a stopped runner starts again")
	require.True(t, r.Stop())
	require.Equal(t, int64(2), runs.Load())
}

func TestEveryTicksUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	ticks := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		startstop.Every(ctx, time.Millisecond, func(context.Context) { ticks <- struct{}{} })
	}()
	<-ticks
	<-ticks
	cancel()
	<-done
}
