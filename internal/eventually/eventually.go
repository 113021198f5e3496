// Package eventually waits in tests for a condition to hold, for as long as the test binary may
// run (go test -timeout), not for a duration of its own. require.Eventually's bound is a timing
// assertion in disguise: on a shared two-core machine under load, a condition that holds after
// 40 s fails a 30 s bound although nothing is wrong. Here a condition that never holds still
// fails the test with its message, shortly before the binary's deadline would panic it.
//
// It does not replace assertions that something does not happen within a window (those are
// about time by nature), nor the fault schedules, which tests drive by counts.
package eventually

import (
	"fmt"
	"testing"
	"time"
)

// True polls cond until it returns true, and fails tb (FailNow) when the test binary's deadline
// is near or the test's context ends first. The poll starts at a millisecond and backs off to
// 50 ms, so a condition that holds at once costs nothing and a slow one costs little.
func True(tb testing.TB, cond func() bool, msgAndArgs ...any) {
	tb.Helper()
	give := Late(tb)
	step := time.Millisecond
	for !cond() {
		select {
		case <-give:
			tb.Fatalf("condition never held before the test binary's deadline%s", message(msgAndArgs))
		case <-tb.Context().Done():
			tb.Fatalf("condition never held before the test ended%s", message(msgAndArgs))
		case <-time.After(step):
		}
		step = min(2*step, 50*time.Millisecond)
	}
}

func message(msgAndArgs []any) string {
	switch {
	case len(msgAndArgs) == 0:
		return ""
	case len(msgAndArgs) == 1:
		return ": " + fmt.Sprint(msgAndArgs[0])
	}
	format, ok := msgAndArgs[0].(string)
	if !ok {
		return ": " + fmt.Sprint(msgAndArgs...)
	}
	return ": " + fmt.Sprintf(format, msgAndArgs[1:]...)
}

// Late is a hang bound: a channel that fires shortly before the test binary's deadline (go test
// -timeout), so a test waiting on an event can fail with its own message instead of the
// binary's panic. Without a deadline (-timeout 0, or a tb that has none) it never fires.
func Late(tb testing.TB) <-chan time.Time {
	d, ok := tb.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return nil
	}
	at, ok := d.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(at)
	return time.After(left - min(30*time.Second, left/10))
}
