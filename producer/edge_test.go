package producer_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// U+0000 is valid UTF-8 that no PostgreSQL text column can hold: a push holding it is refused
// before any reader sees it, as invalid UTF-8 is, and nothing of it is taken.
func TestPushRefusesNULAndTakesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	s := w.open(t, "m")
	sub := w.subscribe(t, "m", 0)
	require.NoError(t, s.Push("ok"))
	for _, bad := range []string{"a\x00b", "\x00", "tail\x00"} {
		err := s.Push(bad)
		require.ErrorIs(t, err, producer.ErrInvalidText, "%q", bad)
		require.ErrorContains(t, err, "U+0000")
		_, err = s.PushAt(2, bad)
		require.ErrorIs(t, err, producer.ErrInvalidText, "%q", bad)
	}
	require.Equal(t, producer.Seq(2), s.Seq())
	require.NoError(t, s.Close(t.Context()))
	text, status := w.store.get("m")
	require.Equal(t, "ok", text)
	require.Equal(t, producer.StatusComplete, status)
	for _, f := range streamtest.Collect(t, sub) {
		require.NotContains(t, f.Text, "\x00", "no reader saw the refused text")
	}
}

// A seal's error message is stored in the row: one the store could not hold (a NUL, invalid
// UTF-8, from a model or a library's error) is made storable rather than making the stream
// unsealable.
func TestFailWithAnUnstorableMessageStillSeals(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.store.failFunc = func(in producer.CommitInput) error {
		if in.Kind == producer.CommitClose && (strings.ContainsRune(in.Close.Error, 0) || !utf8Valid(in.Close.Error)) {
			return &producer.PermanentError{Err: errors.New("22021: invalid byte sequence")}
		}
		return nil
	}
	s := w.open(t, "m")
	require.NoError(t, s.Push("partial"))
	require.NoError(t, s.Fail(t.Context(), errors.New("model said \x00 and \xff")))
	closes := w.store.closes()
	require.Len(t, closes, 1)
	require.Equal(t, "model said \uFFFD and \uFFFD", closes[0].Error)
	text, status := w.store.get("m")
	require.Equal(t, "partial", text)
	require.Equal(t, producer.StatusError, status)
}

// A checkpoint the store refuses for good (producer.ErrPermanent: PostgreSQL's data exceptions
// and the like) is not retried: the stream seals error at once with exactly what is durable,
// once, and every reader gets that end. Before, such a stream retried forever and its close
// never committed.
func TestAPermanentCheckpointErrorSealsWithWhatIsDurable(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	appends := 0
	w := newWorld(t, func(c *producer.Config) { c.CheckpointRetries = 3 })
	w.store.failFunc = func(in producer.CommitInput) error {
		mu.Lock()
		defer mu.Unlock()
		if in.Kind == producer.CommitAppend && strings.Contains(in.Append.Text, "poison") {
			appends++
			return &producer.PermanentError{Err: errors.New("ERROR: value too long (SQLSTATE 22001)")}
		}
		if in.Kind == producer.CommitClose && strings.Contains(in.Close.Body[min(len(in.Close.Body), int(in.Close.From-in.Close.BodyFrom)):], "poison") {
			return &producer.PermanentError{Err: errors.New("ERROR: value too long (SQLSTATE 22001)")}
		}
		return nil
	}
	s := w.open(t, "m")
	sub := w.subscribe(t, "m", 0)
	require.NoError(t, s.Push("good"))
	d, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.Equal(t, producer.Seq(4), d)
	require.NoError(t, s.Push(" poison"))
	_, err = s.Flush(t.Context())
	require.ErrorIs(t, err, producer.ErrPermanent)
	<-s.Done()
	require.ErrorIs(t, s.Push("more"), producer.ErrClosed)
	err = s.Close(t.Context())
	require.ErrorIs(t, err, producer.ErrPermanent, "the close learns the stream ended in error")
	mu.Lock()
	require.Equal(t, 1, appends, "a permanent refusal is not retried")
	mu.Unlock()
	text, status := w.store.get("m")
	require.Equal(t, "good", text, "sealed with exactly what was durable")
	require.Equal(t, producer.StatusError, status)
	closes := w.store.closes()
	require.Len(t, closes, 1, "sealed once")
	require.Contains(t, closes[0].Error, "22001")
	frames := streamtest.Collect(t, sub)
	end := frames[len(frames)-1]
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Equal(t, producer.StatusError, end.Status)
	require.Equal(t, producer.Seq(4), end.Seq, "the end says what the row holds")
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }

// A stream nobody pushes to for IdleTimeout is sealed interrupted with everything it took: a
// producer that went away without closing does not leave it streaming for the host's life.
// Each push moves the deadline; the clock is the plane's, so the test advances it.
func TestAnIdleStreamIsSealedInterrupted(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Minute
	w := newWorld(t, func(c *producer.Config) { c.IdleTimeout = idle; c.CheckpointChars = 1 << 20 })
	s := w.open(t, "m")
	sub := w.subscribe(t, "m", 0)
	require.NoError(t, s.Push("still "))
	w.clock.Advance(idle - time.Minute)
	require.NoError(t, s.Push("here"))
	w.clock.Advance(idle - time.Minute) // past the open's deadline, not the last push's
	require.False(t, s.Ended(), "a push moves the deadline")
	w.clock.Advance(2 * time.Minute)
	<-s.Done()
	text, status := w.store.get("m")
	require.Equal(t, "still here", text, "sealed with everything it took")
	require.Equal(t, producer.StatusInterrupted, status)
	frames := streamtest.Collect(t, sub)
	end := frames[len(frames)-1]
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Equal(t, producer.StatusInterrupted, end.Status)
	require.Equal(t, producer.Seq(10), end.Seq)

	// NoIdleTimeout keeps a quiet stream open.
	w2 := newWorld(t, func(c *producer.Config) { c.IdleTimeout = producer.NoIdleTimeout })
	s2 := w2.open(t, "m")
	w2.clock.Advance(24 * time.Hour)
	require.False(t, s2.Ended())
}

// A seal whose body the store refuses for good (text that never reached a checkpoint) is
// replaced by a seal of what is durable, at once: the stream ends error, not stuck retrying.
func TestAPermanentlyRefusedSealSealsWhatIsDurable(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *producer.Config) { c.CheckpointChars = 1 << 20 })
	w.store.failFunc = func(in producer.CommitInput) error {
		if in.Kind == producer.CommitClose && strings.Contains(in.Close.Body, "poison") {
			return &producer.PermanentError{Err: errors.New("ERROR: value too long (SQLSTATE 22001)")}
		}
		return nil
	}
	s := w.open(t, "m")
	require.NoError(t, s.Push("good"))
	_, err := s.Flush(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Push(" poison"))
	require.ErrorIs(t, s.Close(t.Context()), producer.ErrPermanent)
	text, status := w.store.get("m")
	require.Equal(t, "good", text)
	require.Equal(t, producer.StatusError, status)
}
