package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rindle-sh/rindle-go/internal/retry"
)

// defaultSlowStart is how long start-up may wait on one step before it says so in the log.
const defaultSlowStart = 5 * time.Second

// startupWatch (rindled serve's, and rindled migrate's) names the step start-up is waiting on
// and, once a step has waited every, logs a warning naming it, then again each every while it
// waits. A healthy start is silent until "rindled listening"; one that hangs (on the
// migrations' advisory lock another instance holds, on creating the replication slot while
// long transactions run, on an unreachable broker) says where, instead of nothing until a
// health check gives up.
type startupWatch struct {
	logger *slog.Logger
	every  time.Duration
	began  time.Time

	mu     sync.Mutex
	step   string
	since  time.Time
	warned time.Time // the last warning about step
	done   chan struct{}
	once   sync.Once
	took   time.Duration
}

func watchStartup(logger *slog.Logger, every time.Duration) *startupWatch {
	now := time.Now()
	w := &startupWatch{logger: logger, every: every, began: now, since: now, done: make(chan struct{})}
	go w.run()
	return w
}

// at says start-up now waits on step.
func (w *startupWatch) at(step string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.step, w.since, w.warned = step, time.Now(), time.Time{}
}

// stop ends the watch: start-up finished or failed. It returns how long start-up took, as
// measured by its first call; later calls change nothing.
func (w *startupWatch) stop() time.Duration {
	w.once.Do(func() {
		w.took = time.Since(w.began)
		close(w.done)
	})
	return w.took
}

// run looks five times per every, so a step is named within a fifth of every of having waited
// every, and again each every after.
func (w *startupWatch) run() {
	t := time.NewTicker(max(w.every/5, time.Microsecond))
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case now := <-t.C:
			w.mu.Lock()
			step, waited := w.step, now.Sub(w.since)
			due := step != "" && waited >= w.every && now.Sub(w.warned) >= w.every
			if due {
				w.warned = now
			}
			w.mu.Unlock()
			if due {
				w.logger.Warn("start-up is still waiting", "step", step, "waited", waited.Round(time.Millisecond),
					"since_start", now.Sub(w.began).Round(time.Millisecond))
			}
		}
	}
}

// untilReachable runs connect until it returns nil, fails in a way a retry cannot change, or
// the database has been unreachable for within (the last error is then returned, with how long
// it was tried). Unreachable is a failure to connect that PostgreSQL did not answer (a host
// name that does not resolve, a refused connection) or answered only with "the database
// system is starting up". In a container network, the database's name can fail to resolve for
// a moment after its container reports healthy (seen with podman after the container was
// recreated), and an instance that exited on that would stay down. A timeout is not retried
// (unreachable says why). Bad credentials, a missing database or a wal_level that is not
// logical are answers, and fail at once. The delays start at first and double up to 2 s, jittered (retry.Backoff) so that
// instances started together do not try in lock-step.
func untilReachable(ctx context.Context, logger *slog.Logger, what string, within, first time.Duration, connect func() error) error {
	began := time.Now()
	b := retry.Backoff(first, 2*time.Second)
	for {
		err := connect()
		if err == nil || !unreachable(err) {
			return err
		}
		delay := b.NextBackOff()
		if time.Since(began)+delay > within {
			return fmt.Errorf("%w (unreachable for %s)", err, time.Since(began).Round(time.Millisecond))
		}
		logger.Warn("the database is unreachable; trying again", "step", what, "in", delay, "err", err)
		if retry.Sleep(ctx, delay) != nil {
			return err
		}
	}
}

// unreachable reports err is a failure to connect that the server did not answer, or answered
// with "the database system is starting up" (SQLSTATE 57P03, a server still recovering). A
// connection that timed out is not one: an address that accepts and never answers fails
// start-up within the connect timeout (issue 9), where trying it again would hang start-up for
// reachableWithin.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		return pe.Code == "57P03"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return false
	}
	return errors.As(err, &ce)
}

// reachableWithin bounds how long start-up retries an unreachable database before it exits.
const reachableWithin = 30 * time.Second
