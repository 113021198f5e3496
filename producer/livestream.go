package producer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// LiveStream is the producer's handle on one stream, and the live plane's state for it: the
// retained text, the offsets, the attached readers and the checkpoint driver. There is one
// writer per stream by construction (Plane.Open refuses a second); its methods are safe for
// concurrent use.
type LiveStream struct {
	p    *Plane
	id   string
	user any
	meta any

	mu         sync.Mutex
	buf        text16
	seq        Seq
	durableSeq Seq
	ended      bool
	cancelled  bool
	cancelCh   chan struct{} // closed once cancelled
	detached   bool          // the plane closed: no more commits, timers or readers
	subs       []*subscriber
	arena      frameArena // the shared live frames readers queue
	ready      readyBatch // the direct readers a fan-out made ready (under mu)
	sealing    *sealRequest
	sealDone   chan struct{} // closed once ended
	sealTry    chan struct{} // closed, and replaced, after each seal attempt that failed
	sealRetry  Timer         // the next seal attempt, after a failed one
	sealErr    error
	endFrame   Frame // the terminal every reader gets, once ended
	waiters    []*flushWaiter

	// Lease state. opened: the committer's Open succeeded, so the stream is this host's to
	// suspend and reclaim. suspended: the host cannot prove it still holds the stream; pushes are
	// refused until Plane.Resume reclaims it (suspendGen names the Suspend it belongs to).
	// fence: another writer sealed the row. releasing: the open's outcome was unknown, and the
	// stream exists only to seal the row interrupted at 0 (see Plane.Open).
	opened     bool
	suspended  error
	suspendGen uint64
	fence      *FencedError
	releasing  atomic.Bool

	// Checkpoint driving (one drain goroutine at a time).
	draining bool
	forced   bool
	stalled  bool // the last round left a slice uncommitted: wait the interval, not a hot loop
	tick     Timer
	tickGen  uint64
	linger   Timer

	// The idle seal (Config.IdleTimeout): the last push's time, and the timer that checks it.
	lastPush time.Time
	idle     Timer

	// Durability lag bookkeeping: the push time of the oldest character not yet in a commit,
	// and of the oldest one not yet durable (in a commit in flight, or not yet in one).
	pendingAt   time.Time
	undurableAt time.Time

	// causes are the contexts of the requests whose text the next commit carries (Cause).
	causes []context.Context

	// counted: the plane's live-streams count includes this stream (from its open to its end).
	counted atomic.Bool
}

type sealRequest struct {
	status Status
	err    string
	// durableOnly seals what is durable and nothing more: the store refused the rest for good
	// (ErrPermanent), and cause is that refusal, which Close and Flush then report.
	durableOnly bool
	cause       error
}

type flushWaiter struct {
	at   Seq
	done chan error // buffered 1
}

func newLiveStream(p *Plane, id string, user, meta any) *LiveStream {
	return &LiveStream{p: p, id: id, user: user, meta: meta, sealDone: make(chan struct{}), cancelCh: make(chan struct{})}
}

// ID is the stream id: the message row's key.
func (s *LiveStream) ID() string { return s.id }

// Meta is the app payload the stream was opened with (OpenStreamInput.Meta).
func (s *LiveStream) Meta() any { return s.meta }

// Ended reports whether the stream has ended: sealed, fenced, or released.
func (s *LiveStream) Ended() bool {
	_, ok := s.terminal()
	return ok
}

// terminal returns the terminal frame once the stream has ended.
func (s *LiveStream) terminal() (Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endFrame, s.ended
}

// Seq is the total produced length.
func (s *LiveStream) Seq() Seq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// DurableSeq is the length the store has confirmed. It never decreases and never exceeds Seq.
func (s *LiveStream) DurableSeq() Seq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durableSeq
}

// Cancelled reports whether the plane has seen a reader's request to stop (at a checkpoint's
// read-back, or from Cancel). From then on pushes are refused with ErrCancelled. Pump stops on
// it; a hand-written generation loop should check it, or wait on CancelRequested.
func (s *LiveStream) Cancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// CancelRequested is closed once the plane has seen a reader's request to stop.
func (s *LiveStream) CancelRequested() <-chan struct{} { return s.cancelCh }

// Cancel records a reader's request to stop that reached this process directly (the durable
// flag is the caller's to write; other hosts see it at their next checkpoint).
func (s *LiveStream) Cancel() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelLocked()
}

func (s *LiveStream) cancelLocked() {
	if !s.cancelled {
		s.cancelled = true
		close(s.cancelCh)
	}
}

// Done is closed once the stream has ended: sealed, fenced, or released.
func (s *LiveStream) Done() <-chan struct{} { return s.sealDone }

// checkText refuses what no durable store of text can hold, before any reader sees it: invalid
// UTF-8, and U+0000 (valid UTF-8, but PostgreSQL's text type refuses it, so a stream that took
// it could never checkpoint or seal).
func checkText(id, text string) error {
	if !utf8.ValidString(text) {
		return fmt.Errorf("stream %s: %w: not valid UTF-8", id, ErrInvalidText)
	}
	if i := strings.IndexByte(text, 0); i >= 0 {
		return fmt.Errorf("stream %s: %w: U+0000 (NUL) at byte %d of the delta", id, ErrInvalidText, i)
	}
	return nil
}

// storable makes a seal's error message something the store can hold: the message comes from
// an error (a model's, a library's) and must never be what makes a stream unsealable.
func storable(msg string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
}

// Push appends a delta. It reaches every reader at once and is checkpointed by policy. It returns
// ErrInvalidText for invalid UTF-8 or U+0000, ErrClosed once the stream is sealing, ErrCancelled once a
// reader's cancel was seen, ErrSuspended while the host cannot prove its lease, and ErrFenced
// once another writer sealed the stream; in every case nothing of text was taken.
func (s *LiveStream) Push(text string) error {
	if err := checkText(s.id, text); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refusePushLocked(); err != nil {
		return err
	}
	s.pushLocked(text)
	return nil
}

// PushAt is the idempotent push: text is what the producer believes starts at offset at. A
// retry of a push that was taken (its reply lost) is absorbed: where the stream already holds
// text at that offset, it must be the same text, and only the part past the stream's length is
// pushed. It returns how many UTF-16 units were new (0 for a retry absorbed whole), and an
// *OffsetConflictError (ErrOffsetConflict) when text cannot be placed at at: nothing is taken
// then, and the error says where the stream is. Otherwise it fails as Push does.
func (s *LiveStream) PushAt(at Seq, text string) (Seq, error) {
	if err := checkText(s.id, text); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refusePushLocked(); err != nil {
		return 0, err
	}
	conflict := func(reason string) (Seq, error) {
		return 0, &OffsetConflictError{StreamID: s.id, At: at, Seq: s.seq, Reason: reason}
	}
	switch {
	case at > s.seq:
		return conflict("past the end: text between would be missing")
	case at == s.seq:
		s.pushLocked(text)
		return s.seq - at, nil
	case at < s.buf.from:
		return conflict("below the text this host retains, so a retry cannot be checked")
	}
	floor, off := s.buf.locate(at)
	if floor != at {
		return conflict("inside a surrogate pair")
	}
	held := s.buf.b[off:] // the stream's text from at: whole characters
	if len(text) <= len(held) {
		if string(held[:len(text)]) != text {
			return conflict("different text is already there")
		}
		return 0, nil // a retry, absorbed whole
	}
	if text[:len(held)] != string(held) {
		return conflict("different text is already there")
	}
	before := s.seq
	s.pushLocked(text[len(held):])
	return s.seq - before, nil
}

// MaxCauses bounds the causes one checkpoint carries; later ones are not kept.
const MaxCauses = 8

// Cause records ctx as a cause of the next checkpoint: the request that pushed text (or asked
// for the seal). The checkpoint's CommitContextFunc gets them in CheckpointInfo.Causes, so a
// tracer can link the commit's span to the requests it made durable. At most MaxCauses are kept
// per checkpoint; the plane only holds them, it never reads them.
func (s *LiveStream) Cause(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && len(s.causes) < MaxCauses {
		s.causes = append(s.causes, ctx)
	}
}

// takeCausesLocked hands the recorded causes to a commit.
func (s *LiveStream) takeCausesLocked() []context.Context {
	c := s.causes
	s.causes = nil
	return c
}

// Refusal is why the stream takes no more text (what Push would return), or nil while it does.
func (s *LiveStream) Refusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusePushLocked()
}

func (s *LiveStream) refusePushLocked() error {
	switch {
	case s.fence != nil:
		return fmt.Errorf("push: %w", s.fence)
	case s.sealing != nil || s.ended || s.detached:
		return fmt.Errorf("stream %s: push: %w", s.id, ErrClosed)
	case s.cancelled:
		return fmt.Errorf("stream %s: push: %w", s.id, ErrCancelled)
	case s.suspended != nil:
		return fmt.Errorf("stream %s: push refused: %w: %w", s.id, ErrSuspended, s.suspended)
	}
	return nil
}

func (s *LiveStream) pushLocked(text string) {
	if text == "" {
		return
	}
	from := s.seq
	s.seq += s.buf.append(text)
	now := s.p.cfg.Clock.Now()
	s.lastPush = now
	if s.pendingAt.IsZero() {
		s.pendingAt = now
	}
	if s.undurableAt.IsZero() {
		s.undurableAt = s.pendingAt
	}
	s.fanoutLocked(Frame{Type: FrameChunk, From: from, Seq: s.seq, Text: text})
	if !s.stalled && s.seq-s.durableSeq >= Seq(s.p.cfg.CheckpointChars) {
		// Unforced: the drain takes a round for the size itself. While a round is in flight
		// durableSeq has not moved yet, so every push would meet the size again; forcing here
		// made the drain follow each size-triggered checkpoint at once with one more, of the few
		// characters pushed during it (the seed does this). They wait for the next trigger.
		// A stalled stream (its last round failed) waits for its retry timer, not for the next
		// push: during an outage every producing stream would otherwise retry at the pace of
		// its model. A flush or the seal still goes at once.
		s.kickLocked(false)
	} else {
		s.armLocked()
	}
}

// Flush forces a checkpoint and returns once the store holds everything produced so far, with
// the durable length. It is the ordering primitive: flush before writing a row that must follow
// the text. It returns a *NotDurableError if the checkpoint could not commit.
func (s *LiveStream) Flush(ctx context.Context) (Seq, error) {
	s.mu.Lock()
	at := s.seq
	if s.durableSeq >= at {
		d := s.durableSeq
		s.mu.Unlock()
		return d, nil
	}
	if s.ended || s.detached {
		// Fenced or torn down: the shortfall is permanent, nothing will write it.
		cause := ErrClosed
		if s.fence != nil {
			cause = s.fence
		}
		err := &NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: cause}
		s.mu.Unlock()
		return 0, err
	}
	w := &flushWaiter{at: at, done: make(chan error, 1)}
	s.waiters = append(s.waiters, w)
	s.kickLocked(true)
	s.mu.Unlock()
	select {
	case err := <-w.done:
		if err != nil {
			return 0, err
		}
		return s.DurableSeq(), nil
	case <-ctx.Done():
		s.mu.Lock()
		s.dropWaiterLocked(w)
		s.mu.Unlock()
		return 0, context.Cause(ctx)
	}
}

// Pump pushes every delta of an iterator (the shape of an LLM SDK's text stream) until it ends,
// returning early once a reader has cancelled (nil) or ctx ends (its error). Returning early
// stops the iterator, which is what aborts the SDK's request. An error from the iterator is
// returned as is: seal with Fail.
func (s *LiveStream) Pump(ctx context.Context, deltas iter.Seq2[string, error]) error {
	for d, err := range deltas {
		if err != nil {
			return err
		}
		if err := s.Push(d); errors.Is(err, ErrCancelled) {
			return nil
		} else if err != nil {
			return err
		}
		if s.Cancelled() {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	return nil
}

// Close seals the stream: cancelled if a reader asked it to stop, else complete. With a
// compacting committer this writes the whole body and drops the chunk rows in one transaction,
// so it also repairs any checkpoint that failed along the way.
//
// Readers get their end frame once the seal has committed, never before: it says what the
// store holds. A seal that fails is retried by this host every CheckpointInterval until it
// commits (or the plane is closed, and another host's sweeper takes over): Close then returns
// a *NotDurableError for that attempt while the stream stays sealing, and a later Close waits
// for the next attempt. A stream that another writer sealed (the sweeper, after this host's
// lease lapsed) returns its *FencedError.
func (s *LiveStream) Close(ctx context.Context) error {
	s.mu.Lock()
	status := StatusComplete
	if s.cancelled {
		status = StatusCancelled
	}
	s.mu.Unlock()
	return s.seal(ctx, status, "")
}

// Fail seals the stream with status error and cause's message, at whatever was produced.
func (s *LiveStream) Fail(ctx context.Context, cause error) error {
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	return s.seal(ctx, StatusError, msg)
}

func (s *LiveStream) seal(ctx context.Context, status Status, errMsg string) error {
	s.mu.Lock()
	if !s.ended && s.sealing == nil {
		if s.detached {
			s.mu.Unlock()
			return fmt.Errorf("stream %s: seal: %w", s.id, ErrClosed)
		}
		s.startSealLocked(status, errMsg)
	}
	done, try := s.sealDone, s.sealTry
	s.mu.Unlock()
	select {
	case <-done:
	case <-try:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sealErr
}

func (s *LiveStream) startSealLocked(status Status, errMsg string) {
	s.sealing = &sealRequest{status: status, err: storable(errMsg)}
	s.sealTry = make(chan struct{})
	s.disarmLocked()
	s.kickLocked(true)
}

// uncount takes the stream out of the plane's live count, once.
func (s *LiveStream) uncount() {
	if s.counted.CompareAndSwap(true, false) {
		s.p.streamDelta(-1)
	}
}

// armIdleLocked starts the idle seal's timer from now (the open).
func (s *LiveStream) armIdleLocked() {
	if s.p.cfg.IdleTimeout <= 0 || s.ended || s.detached {
		return
	}
	s.lastPush = s.p.cfg.Clock.Now()
	s.idle = s.p.cfg.Clock.AfterFunc(s.p.cfg.IdleTimeout, s.idleCheck)
}

// idleCheck seals the stream interrupted when nothing was pushed for IdleTimeout, and otherwise
// waits out the rest: one timer per stream, moved only when it fires, not on every push.
func (s *LiveStream) idleCheck() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = nil
	if s.ended || s.detached || s.sealing != nil {
		return
	}
	if since := s.p.cfg.Clock.Now().Sub(s.lastPush); since < s.p.cfg.IdleTimeout {
		s.idle = s.p.cfg.Clock.AfterFunc(s.p.cfg.IdleTimeout-since, s.idleCheck)
		return
	}
	s.p.cfg.Logger.Warn("stream idle: sealing it interrupted with what it took", "stream", s.id, "idle", s.p.cfg.IdleTimeout, "seq", s.seq)
	s.startSealLocked(StatusInterrupted, fmt.Sprintf("no text for %s: the producer went away", s.p.cfg.IdleTimeout))
}

// endLocked is the one place a stream ends: the terminal frame to every reader (and the relay),
// the outcome to every Close and Flush, and the linger before eviction.
func (s *LiveStream) endLocked(end Frame, err error) {
	s.ended = true
	s.settleUndurableLocked()
	// A sealed stream lingers for late joins, but it is no longer live.
	s.uncount()
	s.sealErr = err
	s.endFrame = end
	s.disarmLocked()
	if s.sealRetry != nil {
		s.sealRetry.Stop()
		s.sealRetry = nil
	}
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	if err != nil {
		s.rejectWaitersLocked(math.MaxInt64, &NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: err})
	}
	s.resolveWaitersLocked()
	if end.Type == FrameEnd && !s.releasing.Load() {
		// The terminal reaches the relay too; locally it bypasses the queue cap, being the last
		// frame.
		s.p.publishRelay(s.id, end)
	}
	for _, sub := range s.subs {
		sub.idx = -1
		sub.finish(end)
		s.p.subscriberDelta(-1, false)
	}
	s.subs = nil
	close(s.sealDone)
	if !s.detached {
		s.linger = s.p.cfg.Clock.AfterFunc(s.p.cfg.Linger, func() { s.p.retire(s) })
	}
}

// suspend refuses pushes until resume, for a stream the committer opened.
func (s *LiveStream) suspend(cause error, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened || s.ended {
		return
	}
	s.suspended, s.suspendGen = cause, gen
}

// isSuspended reports whether the stream waits to be reclaimed. A sealing stream does not: it
// takes no pushes anyway, and its seal's own read-back tells its commit from a fence (a reclaim
// racing it would take this host's own seal for another writer's).
func (s *LiveStream) isSuspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended != nil && !s.ended && s.sealing == nil
}

// resume takes pushes again, unless a later Suspend has come since gen.
func (s *LiveStream) resume(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.suspendGen == gen {
		s.suspended = nil
	}
}

// fenced ends the stream with another writer's seal (from Reclaim).
func (s *LiveStream) fenced(fe *FencedError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenceLocked(fe)
}

func (s *LiveStream) resolveWaitersLocked() {
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.at <= s.durableSeq {
			w.done <- nil
		} else {
			kept = append(kept, w)
		}
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
}

// rejectWaitersLocked fails the flushes that asked for a prefix through upTo that is not durable;
// later ones keep waiting for a later round. A durability failure is never silent.
func (s *LiveStream) rejectWaitersLocked(upTo Seq, err error) {
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.at <= upTo && w.at > s.durableSeq {
			w.done <- err
		} else {
			kept = append(kept, w)
		}
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
}

func (s *LiveStream) dropWaiterLocked(target *flushWaiter) {
	for i, w := range s.waiters {
		if w == target {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return
		}
	}
}
