package producer

import "time"

// Clock is the plane's source of time for cadence: the checkpoint interval, the linger window and
// the SSE keep-alive. A nil Clock means real time. Retry backoff is not cadence: it always sleeps
// in real time, because a checkpoint mid-retry is work in flight.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the timer is stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started, and reports whether it did.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func clockOrReal(c Clock) Clock {
	if c == nil {
		return realClock{}
	}
	return c
}
