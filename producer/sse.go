package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Defaults of SSEConfig.
const (
	DefaultKeepAlive       = 15 * time.Second
	DefaultSSEWriteTimeout = 30 * time.Second
)

// SetSSEHeaders sets the SSE response headers. x-accel-buffering is part of the contract: without
// it a buffering proxy holds the tokens back and hands the user a paragraph at a time.
func SetSSEHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
}

// ResumeError is a malformed resume offset.
type ResumeError struct {
	Source string // "Last-Event-ID" or "from"
	Value  string
}

func (e *ResumeError) Error() string {
	return fmt.Sprintf("%s %q is not a non-negative integer offset", e.Source, e.Value)
}

// ParseResume returns the join offset of a subscribe request: Last-Event-ID wins over from (a
// reconnecting EventSource knows where it got to; the URL holds the original join point). Both
// empty means 0. A value that is not a non-negative decimal integer is a *ResumeError: unlike the
// seed's lenient parseInt ("12abc" read as 12), a malformed offset is refused, not guessed.
// Values past the stream's length are clamped at the join.
func ParseResume(lastEventID, from string) (Seq, error) {
	if lastEventID != "" {
		return ParseOffset("Last-Event-ID", lastEventID)
	}
	return ParseOffset("from", from)
}

// ParseOffset reads one offset value named source: empty means 0; anything but a non-negative
// decimal integer that fits a Seq is a *ResumeError.
func ParseOffset(source, raw string) (Seq, error) {
	if raw == "" {
		return 0, nil
	}
	if len(raw) > 20 {
		return 0, &ResumeError{Source: source, Value: raw[:20] + "…"}
	}
	for _, c := range []byte(raw) {
		if c < '0' || c > '9' {
			return 0, &ResumeError{Source: source, Value: raw}
		}
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, &ResumeError{Source: source, Value: raw}
	}
	return Seq(n), nil
}

// ResumeFromRequest is ParseResume over a request's Last-Event-ID header and ?from= parameter.
func ResumeFromRequest(r *http.Request) (Seq, error) {
	return ParseResume(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("from"))
}

// AppendSSE appends f as one SSE event: an id line with the frame's resume point (none for stale
// and absent), then one data line with the frame JSON, which never contains a raw newline.
func AppendSSE(dst []byte, f Frame) []byte {
	if at, ok := f.ResumePoint(); ok {
		dst = append(dst, "id: "...)
		dst = strconv.AppendInt(dst, int64(at), 10)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = f.AppendJSON(dst)
	return append(dst, '\n', '\n')
}

// SSEConfig configures WriteSSE.
type SSEConfig struct {
	// KeepAlive is the interval of the ": ping" comment that keeps intermediaries from reaping an
	// idle connection. Defaults to DefaultKeepAlive.
	KeepAlive time.Duration
	// WriteTimeout bounds each event write, so a client that stopped reading releases the
	// handler instead of holding it forever. Defaults to DefaultSSEWriteTimeout.
	WriteTimeout time.Duration
	// Retry, if set, is sent first as the SSE retry field: how long a browser's EventSource waits
	// before it reconnects. Zero sends none (the browser's default applies).
	Retry time.Duration
	// Clock drives the keep-alive. Nil means real time.
	Clock Clock
}

// FrameReader is a pull source of frames: a Subscription, or anything that joins several (the
// HTTP layer's view-plus-live join). Next returns io.EOF after the terminal frame; a Next cut
// short by its context returns that context's cause and consumes nothing.
type FrameReader interface {
	Next(ctx context.Context) (Frame, error)
	Close()
}

// EncodedFrameReader is a FrameReader that can hand over a frame's SSE encoding made once for
// every reader (Subscription does, for live frames). WriteSSE uses it when src implements it.
type EncodedFrameReader interface {
	FrameReader
	// NextEncoded is Next, with AppendSSE's bytes for the frame, or nil. The bytes are shared.
	NextEncoded(ctx context.Context) (Frame, []byte, error)
}

var _ EncodedFrameReader = (*Subscription)(nil)

var _ FrameReader = (*Subscription)(nil)

// errKeepAlive cuts an idle Next short so a keep-alive comment can be written.
var errKeepAlive = errors.New("sse keep-alive due")

// WriteSSE streams src as an SSE response until its terminal frame, ctx's end or a failed
// write, and closes src. It is pull-based: frames are taken only once the previous write
// completed (with every frame already queued at that moment batched into one write), so a slow
// client backs up in the subscription's bounded queue, where it is dropped
// with stale, never in unbounded memory here. A ": ping" comment goes out after KeepAlive
// without a frame. The server's WriteTimeout is lifted for this response (an SSE response lives
// for minutes) and replaced by a per-write deadline. Do authorization and lookups before calling
// it, while an error status is still possible.
func WriteSSE(ctx context.Context, w http.ResponseWriter, src FrameReader, cfg SSEConfig) error {
	defer src.Close()
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultSSEWriteTimeout
	}
	clock := clockOrReal(cfg.Clock)
	rc := http.NewResponseController(w)
	// The write deadline moves only once half of it is used up: setting it is a timer change on
	// the connection, too dear to pay per frame when a thousand readers take every delta. Each
	// write still has between half and all of WriteTimeout.
	var deadline time.Time
	extend := func() error {
		now := time.Now()
		if deadline.Sub(now) >= cfg.WriteTimeout/2 {
			return nil
		}
		deadline = now.Add(cfg.WriteTimeout)
		if err := rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		return nil
	}
	flush := func() error {
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		return nil
	}
	write := func(b []byte) error {
		if err := extend(); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return flush()
	}
	// The live plane's shared encoding, when the source can hand it over.
	nextOf := func(ctx context.Context) (Frame, []byte, error) {
		f, err := src.Next(ctx)
		return f, nil, err
	}
	if e, ok := src.(EncodedFrameReader); ok {
		nextOf = e.NextEncoded
	}
	SetSSEHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 0, 512)
	if cfg.Retry > 0 {
		if err := extend(); err != nil {
			return err
		}
		buf = append(buf, "retry: "...)
		buf = strconv.AppendInt(buf, cfg.Retry.Milliseconds(), 10)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	// The head (status, headers, retry) goes out with the first frames when they are ready, as
	// a join's open frame and catch-up are: one write instead of three. Otherwise it is flushed
	// now, so the client sees the stream open before anything happens on it.
	first, firstEnc, err := nextOf(ready)
	held := err == nil
	if !held {
		if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) && ctx.Err() == nil {
			err = nil
		}
		if ferr := flush(); ferr != nil {
			return ferr
		}
		if err != nil {
			return err
		}
	}
	// The keep-alive runs in periods, not per frame: a context that a timer cuts after the
	// period, shared by every Next until it ends. When it ends, a ping goes out only if nothing
	// was written for KeepAlive; otherwise the next period runs to KeepAlive after the last write.
	lastWrite := clock.Now()
	var period context.Context
	var endPeriod func()
	startPeriod := func(d time.Duration) {
		next, cancel := context.WithCancelCause(ctx)
		timer := clock.AfterFunc(d, func() { cancel(errKeepAlive) })
		period, endPeriod = next, func() { timer.Stop(); cancel(nil) }
	}
	startPeriod(cfg.KeepAlive)
	defer func() { endPeriod() }()
	for {
		var f Frame
		var enc []byte
		if held {
			f, enc, err, held = first, firstEnc, nil, false
		} else {
			f, enc, err = nextOf(period)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, errKeepAlive) && ctx.Err() == nil:
			endPeriod()
			if idle := clock.Now().Sub(lastWrite); idle < cfg.KeepAlive {
				startPeriod(cfg.KeepAlive - idle)
				continue
			}
			if err := write([]byte(": ping\n\n")); err != nil {
				return err
			}
			lastWrite = clock.Now()
			startPeriod(cfg.KeepAlive)
			continue
		case err != nil:
			return err
		}
		// Frames already queued behind f go out in the same flush: a reader that fell behind
		// catches up in a few system calls instead of one per frame. Only frames that are ready
		// are taken (Next on a finished context consumes nothing otherwise), up to maxSSEBatch
		// bytes, so memory stays bounded by the queue. A large shared encoding (a long catch-up)
		// is written as it is rather than copied into this reader's buffer.
		if err := extend(); err != nil {
			return err
		}
		buf = buf[:0]
		n := 0 // the bytes of this flush
		// spill hands what buf gathered to the ResponseWriter.
		spill := func() error {
			if len(buf) == 0 {
				return nil
			}
			_, err := w.Write(buf)
			buf = buf[:0]
			return err
		}
		put := func(f Frame, enc []byte) error {
			if len(enc) < directSSEWrite {
				before := len(buf)
				buf = appendEncoded(buf, f, enc)
				n += len(buf) - before
				return nil
			}
			n += len(enc)
			if err := spill(); err != nil {
				return err
			}
			_, err := w.Write(enc)
			return err
		}
		if err := put(f, enc); err != nil {
			return err
		}
		for !f.Terminal() && n < maxSSEBatch {
			more, enc, err := nextOf(ready)
			if err != nil {
				break
			}
			f = more
			if err := put(f, enc); err != nil {
				return err
			}
		}
		if err := spill(); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		lastWrite = clock.Now()
		if f.Terminal() {
			return nil
		}
	}
}

func appendEncoded(dst []byte, f Frame, enc []byte) []byte {
	if enc != nil {
		return append(dst, enc...)
	}
	return AppendSSE(dst, f)
}

// maxSSEBatch bounds the bytes WriteSSE gathers into one flush.
const maxSSEBatch = 32 << 10

// directSSEWrite is the size from which a shared encoding is written without a copy.
const directSSEWrite = 4 << 10

// ready is a finished context: Next with it returns a frame only if one is already queued.
var ready = func() context.Context { //nolint:gochecknoglobals // immutable
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
