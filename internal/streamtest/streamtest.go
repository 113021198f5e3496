// Package streamtest checks subscriptions against the wire contract of docs/DESIGN.md §4 in tests of
// every package that serves frames: one open, contiguous chunks that span their offsets,
// durable never past what was delivered, an end that claims no more than was delivered, and
// exactly one terminal, last. It owns no goroutines.
package streamtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// Collect reads a subscription to its end.
func Collect(t testing.TB, sub producer.FrameReader) []producer.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []producer.Frame
	for {
		f, err := sub.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, "after %d frames", len(out))
		out = append(out, f)
	}
}

// Replay checks a subscription's frames against the wire contract and applies them to held, the
// text the reader had at its join. It returns the reader's final text and its terminal frame.
func Replay(t testing.TB, held string, frames []producer.Frame) (string, producer.Frame) {
	t.Helper()
	require.NotEmpty(t, frames)
	last := frames[len(frames)-1]
	require.True(t, last.Terminal(), "the last frame is %s, not a terminal", last.Type)
	for _, f := range frames[:len(frames)-1] {
		require.False(t, f.Terminal(), "a terminal frame before the last")
	}
	if frames[0].Type != producer.FrameOpen {
		require.Len(t, frames, 1, "a subscription without open is a single stale or absent")
		return held, last
	}
	open := frames[0]
	require.LessOrEqual(t, open.From, producer.Len16(held), "open past what the reader holds")
	text := producer.Slice16(held, 0, open.From)
	pos := open.From
	durable := producer.Seq(0)
	for _, f := range frames[1:] {
		switch f.Type {
		case producer.FrameChunk:
			require.Equal(t, pos, f.From, "chunk does not continue the delivered prefix")
			require.Equal(t, f.Seq-f.From, producer.Len16(f.Text), "chunk text does not span its offsets")
			var err error
			text, err = producer.Splice(text, f)
			require.NoError(t, err)
			pos = f.Seq
		case producer.FrameDurable:
			require.GreaterOrEqual(t, f.Seq, durable, "durable went backwards")
			require.LessOrEqual(t, f.Seq, pos, "durable claims more than was delivered")
			durable = f.Seq
		case producer.FrameEnd:
			require.LessOrEqual(t, f.Seq, pos, "end claims more than was delivered")
		case producer.FrameOpen:
			t.Fatalf("a second open")
		}
	}
	return text, last
}

// SSEEvent is one parsed SSE event, or a comment.
type SSEEvent struct {
	ID      string
	HasID   bool
	Data    string
	Comment string
	Retry   string // the retry field, when the event sets one
}

// ReadSSE reads one event (or comment) up to its blank line. Two data lines in one event are
// an error: a raw newline escaped the frame JSON.
func ReadSSE(r *bufio.Reader) (SSEEvent, error) {
	var ev SSEEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, ":"):
			ev.Comment = line
		case strings.HasPrefix(line, "retry: "):
			ev.Retry = strings.TrimPrefix(line, "retry: ")
		case strings.HasPrefix(line, "id: "):
			ev.ID, ev.HasID = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "data: "):
			if ev.Data != "" {
				return ev, errors.New("two data lines in one event: a raw newline escaped the JSON")
			}
			ev.Data = strings.TrimPrefix(line, "data: ")
		default:
			return ev, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// ReadFrame reads the next frame of an event stream, skipping comments (keep-alives) and
// events without data (a bare retry).
func ReadFrame(r *bufio.Reader) (producer.Frame, error) {
	for {
		ev, err := ReadSSE(r)
		if err != nil {
			return producer.Frame{}, err
		}
		if ev.Data == "" {
			continue
		}
		var f producer.Frame
		if err := json.Unmarshal([]byte(ev.Data), &f); err != nil {
			return producer.Frame{}, fmt.Errorf("frame %q: %w", ev.Data, err)
		}
		return f, nil
	}
}
