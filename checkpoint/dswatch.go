package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/internal/retry"
)

// ByteStreamChannel is the PostgreSQL notification channel a byte stream's append, close or
// removal (a delete, or the reaper's) notifies, with the stream's path as the payload, in the append's own transaction: the
// notification is delivered to listeners only if, and once, the append commits. A text stream
// needs none: its append reaches every instance through the CDC reader and the view.
const ByteStreamChannel = "rindle_ds_bytes"

// maxNotifyPayload is the longest notification payload PostgreSQL takes (it must be shorter
// than 8000 bytes). A longer path is not notified; its readers on other instances poll.
const maxNotifyPayload = 7999

// Watch listens for byte-stream appends, closes and removals committed by any instance and calls changed with each
// stream's path, from one goroutine, until ctx ends; then it returns ctx's cause. The LISTEN
// holds a connection of its own, taken out of the pool (which may open another in its place).
// Each time it (re)starts listening it calls changed(""): anything may have moved while it was
// not listening, so a caller wakes every reader it has waiting. A lost connection is retried
// with jittered backoff whose step is capped at maxBackoff (a zero maxBackoff means 5 s;
// retry.Backoff); onError, if set, hears why each attempt failed.
//
// Notifications are a wake-up, not a record: a reader woken reads the store, and readers keep
// a poll as a safety net. NOTIFY takes a lock at commit that serializes the transactions that
// notify, so only byte streams (which have no other way to other instances) notify.
func (p *Protocol) Watch(ctx context.Context, changed func(path string), maxBackoff time.Duration, onError func(error)) error {
	if maxBackoff <= 0 {
		maxBackoff = 5 * time.Second
	}
	b := retry.Backoff(50*time.Millisecond, maxBackoff)
	for {
		listened, err := listen(ctx, p.pool, changed)
		if listened {
			b.Reset() // a session that listened starts the backoff over
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if onError != nil {
			onError(err)
		}
		// Jittered, so instances that lost the database at once do not come back in lock-step.
		if err := retry.Sleep(ctx, b.NextBackOff()); err != nil {
			return err
		}
	}
}

// listen runs one LISTEN session until its connection fails or ctx ends; listened says
// whether it got as far as listening.
func listen(ctx context.Context, pool *pgxpool.Pool, changed func(path string)) (listened bool, err error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("checkpoint: watch byte streams: %w", err)
	}
	// The session is LISTENing: it never goes back to the pool, whose other users would
	// inherit the LISTEN.
	conn := c.Hijack()
	defer func() {
		// Bounded: the connection may be the one that died.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+ByteStreamChannel); err != nil {
		return false, fmt.Errorf("checkpoint: watch byte streams: %w", err)
	}
	changed("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("checkpoint: watch byte streams: %w", err)
		}
		changed(n.Payload)
	}
}
