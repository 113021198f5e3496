// Package retry owns the delays between the service's own retries of a lost connection: the
// CDC reader's reconnects and stalled publishes, the byte-stream LISTEN, and start-up's
// connects. Each delay grows exponentially from a first step to a cap and is jittered, so
// instances (or streams) that failed together in one database blip do not come back in
// lock-step. The arithmetic is github.com/cenkalti/backoff/v5's ExponentialBackOff; this
// package only fixes its settings in one place.
//
// It does not decide what is worth retrying, how long to keep trying, or what to log: the
// callers do. The producer's checkpoint retries keep their own attempt-numbered delays
// (producer.MaxRetryBackoff), which its configuration exposes.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Jitter is the spread of every delay: a step d waits between (1-Jitter)·d and (1+Jitter)·d.
const Jitter = 0.5

// Backoff returns delays whose step starts at first and doubles up to limit (a limit below
// first is first); each delay is the step jittered by Jitter, so no delay exceeds
// (1+Jitter)·limit. Reset starts again from first (after a session that made progress). A
// Backoff is not safe for concurrent use.
func Backoff(first, limit time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     first,
		RandomizationFactor: Jitter,
		Multiplier:          2,
		MaxInterval:         max(first, limit),
	}
}

// Sleep waits d, or until ctx ends; it returns ctx's cause then, and nil after d. It is the
// service's one cancellable wait: the retries above use it, and so do the producer's checkpoint
// retries, the broker's wait before a redelivery and the stream reaper's interval.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
