package cdc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Readers on several instances that lost one database together reconnect (and retry a stalled
// publish) at spread-out times, not in lock-step: their first delays differ from reader to
// reader, within the jitter of the first step, and later delays stay within the cap's.
func TestReaderRetriesAreJittered(t *testing.T) {
	for _, c := range []struct {
		name        string
		next        func() time.Duration
		first, last time.Duration
	}{
		{"reconnect", func() time.Duration { return reconnectBackoff().NextBackOff() }, DefaultReconnectDelay, MaxReconnectDelay},
		{"publish", func() time.Duration { return publishBackoff().NextBackOff() }, DefaultPublishBackoff, MaxPublishBackoff},
	} {
		t.Run(c.name, func(t *testing.T) {
			firsts := map[time.Duration]bool{}
			for range 20 {
				d := c.next()
				require.GreaterOrEqual(t, d, c.first/2)
				require.LessOrEqual(t, d, c.first*3/2+1)
				firsts[d] = true
			}
			require.Greater(t, len(firsts), 5, "20 readers' first delays took %d values: lock-step", len(firsts))
		})
	}
	b := reconnectBackoff()
	for range 20 {
		require.LessOrEqual(t, b.NextBackOff(), MaxReconnectDelay*3/2+1)
	}
}
