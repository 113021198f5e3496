// Package clocktest provides a manual producer.Clock for tests: time moves only when the test
// calls Advance, so cadence-driven behaviour (checkpoint intervals, linger, keep-alives) is
// tested on signals, never on sleeps. It owns no goroutines of its own: due timers run in the
// goroutine that calls Advance.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/rindle-sh/rindle-go/producer"
)

// Clock is a manual clock. The zero value is not ready; use New.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

var _ producer.Clock = (*Clock)(nil)

// New returns a clock stopped at a fixed instant.
func New() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

type timer struct {
	c       *Clock
	at      time.Time
	f       func()
	stopped bool
	fired   bool
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.stopped || t.fired {
		return false
	}
	t.stopped = true
	return true
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when Advance passes d from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) producer.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Pending is how many timers wait to fire.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			n++
		}
	}
	return n
}

// Advance moves time forward by d and runs every timer that falls due, in time order, in the
// calling goroutine. A timer scheduled by one of them runs too if it falls due within d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		live := c.timers[:0]
		for _, t := range c.timers {
			if !t.stopped && !t.fired {
				live = append(live, t)
			}
		}
		c.timers = live
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		t.fired = true
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}
