package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/retry"
)

// Every delay lies within the jitter of its step; the steps double from first to the limit and
// stay there; Reset starts over; and the delays are spread, not one value per step.
func TestBackoffGrowsToItsLimitJittered(t *testing.T) {
	const first, limit = 100 * time.Millisecond, 800 * time.Millisecond
	steps := []time.Duration{100, 200, 400, 800, 800, 800}
	seen := make([]map[time.Duration]bool, len(steps))
	for run := range 50 {
		b := retry.Backoff(first, limit)
		if run%2 == 1 {
			b.NextBackOff()
			b.Reset()
		}
		for i, step := range steps {
			step *= time.Millisecond
			d := b.NextBackOff()
			lo := time.Duration(float64(step) * (1 - retry.Jitter))
			hi := time.Duration(float64(step)*(1+retry.Jitter)) + 1
			require.GreaterOrEqual(t, d, lo, "delay %d of run %d", i+1, run)
			require.LessOrEqual(t, d, hi, "delay %d of run %d", i+1, run)
			if seen[i] == nil {
				seen[i] = map[time.Duration]bool{}
			}
			seen[i][d] = true
		}
	}
	for i, s := range seen {
		require.Greater(t, len(s), 10, "delay %d took %d distinct values over 50 runs: not jittered", i+1, len(s))
	}
}

// A limit below the first step is the first step: the delays do not shrink.
func TestBackoffLimitBelowFirst(t *testing.T) {
	b := retry.Backoff(time.Second, time.Millisecond)
	for range 5 {
		require.GreaterOrEqual(t, b.NextBackOff(), time.Second/2)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	require.NoError(t, retry.Sleep(t.Context(), time.Nanosecond))
	cause := errors.New("stopping")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	require.ErrorIs(t, retry.Sleep(ctx, time.Hour), cause)
}
