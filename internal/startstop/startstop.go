// Package startstop gives long-lived parts one lifecycle shape (river's startstop): Start
// launches a goroutine and returns, Stop cancels it and returns once it has finished. It owns
// that goroutine and nothing else.
package startstop

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrStop is the cause of a Runner's context once Stop is called.
var ErrStop = errors.New("service stopped")

// ErrStarted is returned by Start while the Runner is already running.
var ErrStarted = errors.New("already started")

// Runner runs one goroutine at a time. The zero value is ready.
type Runner struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Start runs run in a new goroutine with a context that ends at Stop (not when ctx ends: ctx
// only scopes the start). It returns ErrStarted if the Runner is running.
func (r *Runner) Start(ctx context.Context, run func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return ErrStarted
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	done := make(chan struct{})
	r.cancel, r.done = cancel, done
	go func() {
		defer close(done)
		run(runCtx)
	}()
	return nil
}

// Stop cancels the goroutine and waits for it. It reports whether one was running; calling it
// again, or before Start, does nothing. The Runner can be started again afterwards.
func (r *Runner) Stop() bool {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel(ErrStop)
	<-done
	return true
}

// Every calls f every interval until ctx ends. The interval runs from the end of one call to
// the start of the next, so calls never pile up behind a slow f.
func Every(ctx context.Context, interval time.Duration, f func(ctx context.Context)) {
	repeat(ctx, func() time.Duration { return interval }, f)
}

// EveryJittered is Every with each wait drawn from [¾, 1¼] of mean, so parts started together
// (sweepers on several instances, a lease renewing on a cadence of its own) never run in phase.
func EveryJittered(ctx context.Context, mean time.Duration, f func(ctx context.Context)) {
	repeat(ctx, func() time.Duration { return mean*3/4 + rand.N(mean/2+1) }, f)
}

func repeat(ctx context.Context, next func() time.Duration, f func(ctx context.Context)) {
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
			t.Reset(next())
		}
	}
}
