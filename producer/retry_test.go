package producer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetryDelayIsJitteredAndCapped: a retry waits within the upper half of its exponential
// step, never past MaxRetryBackoff however many retries are configured (a long run of retries
// once shifted the step past the int64 range), and two streams failing together draw different
// waits.
func TestRetryDelayIsJitteredAndCapped(t *testing.T) {
	for _, base := range []time.Duration{time.Nanosecond, DefaultRetryBackoff, time.Second, 10 * time.Second} {
		for attempt := 1; attempt <= 200; attempt++ {
			step := base
			for i := 1; i < attempt && step < MaxRetryBackoff; i++ {
				step *= 2
			}
			step = min(step, MaxRetryBackoff)
			d := retryDelay(base, attempt)
			require.GreaterOrEqual(t, d, step/2, "base %v attempt %d", base, attempt)
			require.LessOrEqual(t, d, step, "base %v attempt %d", base, attempt)
		}
	}
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[retryDelay(DefaultRetryBackoff, 3)] = true
	}
	require.Greater(t, len(seen), 10, "jittered: a hundred streams do not retry in one instant")
}
