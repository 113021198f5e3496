package eventually_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/eventually"
)

// A condition that holds on its tenth poll is waited for, and polled no more after it holds.
func TestTrueWaitsForTheCondition(t *testing.T) {
	var polls atomic.Int64
	eventually.True(t, func() bool { return polls.Add(1) == 10 })
	require.Equal(t, int64(10), polls.Load())
}

// A condition that never holds fails the test with its message once the test's context ends
// (here, a fake TB whose context is already done), instead of polling forever.
func TestTrueFailsWithTheMessage(t *testing.T) {
	tb := &fakeTB{TB: t}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer func() { _ = recover() }() // FailNow's stand-in panics
		eventually.True(tb, func() bool { return false }, "the %s held", "row")
	}()
	<-ended
	require.Equal(t, "condition never held before the test ended: the row held", tb.failed)
}

type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Context() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic("FailNow")
}
