package producer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
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
	if s.seq-s.durableSeq >= Seq(s.p.cfg.CheckpointChars) {
		s.kickLocked(true)
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

// ---- checkpoint driving

func (s *LiveStream) armLocked() {
	if s.tick != nil || s.seq == s.durableSeq || s.detached || s.ended {
		return
	}
	s.tickGen++
	gen := s.tickGen
	wait := s.p.cfg.CheckpointInterval
	if spread := s.p.cfg.CheckpointSpread; spread > 0 {
		wait -= rand.N(spread + 1)
	}
	s.tick = s.p.cfg.Clock.AfterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if gen != s.tickGen || s.detached {
			return // disarmed or re-armed since: this firing is stale
		}
		s.tick = nil
		s.kickLocked(true)
	})
}

func (s *LiveStream) disarmLocked() {
	if s.tick != nil {
		s.tick.Stop()
		s.tick = nil
	}
	s.tickGen++
}

func (s *LiveStream) kickLocked(force bool) {
	if force {
		s.forced = true
	}
	if s.draining || s.detached || s.ended {
		return
	}
	s.draining = true
	s.p.wg.Add(1)
	go s.drain()
}

// drain runs checkpoint rounds until nothing is due. Rounds are serialized (one drain goroutine
// per stream), so a slow store turns into fewer, larger checkpoints, never a queue of them.
func (s *LiveStream) drain() {
	defer s.p.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = false
	for !s.ended { // ended: fenced by another writer
		// A seal goes straight to compaction: it writes the whole body, so committing the tail
		// as one more chunk first would be waste, and the seal repairs any failed slice anyway.
		// It runs even after the plane detached (its commit then fails at once), so a Close
		// waiting on it always gets an answer.
		if s.sealing != nil {
			if s.sealRetry == nil {
				s.commitSealLocked()
			}
			break
		}
		if s.detached {
			break
		}
		behind := s.seq - s.durableSeq
		if behind > 0 && (s.forced || behind >= Seq(s.p.cfg.CheckpointChars)) {
			// Consume the force before the round, not after: a flush that lands while this round
			// is in flight sets it again and gets a round of its own.
			s.forced = false
			s.disarmLocked()
			if s.commitTailLocked() {
				s.stalled = true
				// A seal requested meanwhile outranks the retry cadence (it supersedes and repairs
				// the failed slice), and a flush that re-forced during the failed round earns one
				// immediate re-attempt; an unforced failure waits the interval.
				if s.sealing == nil && !s.forced {
					break
				}
			}
			continue
		}
		s.forced = false
		break
	}
	s.draining = false
	if s.ended || s.detached {
		return
	}
	switch {
	case s.sealing != nil:
		// A failed seal waits for its retry timer.
	case s.stalled:
		s.armLocked()
	case s.seq-s.durableSeq >= Seq(s.p.cfg.CheckpointChars):
		s.kickLocked(false)
	default:
		s.armLocked()
	}
}

// commitTailLocked commits [durableSeq, seq). It releases the lock for the I/O and reports
// whether the round failed.
func (s *LiveStream) commitTailLocked() (failed bool) {
	from, to := s.durableSeq, s.seq
	text := s.buf.slice(from, to)
	inflightAt := s.pendingAt
	s.pendingAt = time.Time{}
	in := AppendInput{StreamID: s.id, From: from, Seq: to, Text: text}
	causes := s.takeCausesLocked()

	s.mu.Unlock()
	start := s.p.cfg.Clock.Now()
	var res AppendResult
	commitCtx, settled := s.p.commitContext(CheckpointInfo{StreamID: s.id, From: from, Seq: to, Causes: causes})
	err := s.p.retry(commitCtx, func(ctx context.Context) error {
		var err error
		res, err = s.p.cfg.Committer.Append(ctx, in)
		return err
	})
	settled(err)
	var truth Seq
	var truthErr error
	var fence *FencedError
	if errors.As(err, &fence) {
		s.mu.Lock()
		s.fenceLocked(fence)
		s.mu.Unlock()
		s.p.reportFence(fence)
		s.mu.Lock()
		return true
	}
	if err != nil {
		// The store may hold more than we believe: an append that committed while its reply was
		// lost somewhere in the retry chain. Adopting its word keeps the next slice contiguous.
		truthCtx, cancel := context.WithTimeout(context.WithoutCancel(s.p.ctx), s.p.cfg.CommitTimeout)
		truth, truthErr = s.p.cfg.Committer.DurableSeq(truthCtx, s.id)
		cancel()
	}
	now := s.p.cfg.Clock.Now()
	info := CheckpointInfo{StreamID: s.id, From: from, Seq: to, Duration: now.Sub(start)}
	s.mu.Lock()

	if s.ended {
		// Fenced while the round was in flight (Plane.Resume found the row sealed): the end
		// frame, with what the row holds, was the last word.
		return true
	}
	if err == nil && res.CancelRequested {
		s.cancelLocked()
	}
	confirmed := to
	switch {
	case err != nil && truthErr == nil:
		confirmed = truth
	case err != nil:
		confirmed = s.durableSeq
	case res.ReadBack:
		confirmed = res.Durable
	}
	if confirmed > s.seq {
		// P forbids claiming more than was produced: a rival wrote this row. Keep our offsets
		// and let the seal's compaction settle the body.
		if err == nil {
			err = fmt.Errorf("stream %s: the store holds %d characters but only %d were produced (a rival writer?)", s.id, confirmed, s.seq)
		}
		confirmed = s.durableSeq
	}
	if confirmed > s.durableSeq {
		s.advanceDurableLocked(confirmed)
	}
	if err == nil && confirmed < to {
		// The slice's from was stale (an earlier ack loss not visible then): the guarded write
		// was a no-op, and the next round re-covers from the confirmed offset.
		err = fmt.Errorf("stream %s: the store confirmed %d of %d: re-covering from there", s.id, confirmed, to)
	}
	if err != nil && errors.Is(err, ErrPermanent) {
		// No retry can store this text: seal error with what is durable, at once.
		s.mu.Unlock()
		s.p.reportCheckpointError(err, info)
		s.mu.Lock()
		s.failPermanentLocked(err)
		return true
	}
	if err != nil {
		if !inflightAt.IsZero() && (s.pendingAt.IsZero() || inflightAt.Before(s.pendingAt)) {
			s.pendingAt = inflightAt
		}
		// The text goes again with the next round, and so do its causes.
		s.causes = append(causes, s.causes...)[:min(len(causes)+len(s.causes), MaxCauses)]
		s.rejectWaitersLocked(to, &NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: to, Err: err})
		s.mu.Unlock()
		s.p.reportCheckpointError(err, info)
		s.mu.Lock()
		return true
	}
	if !inflightAt.IsZero() {
		info.Lag = now.Sub(inflightAt)
	}
	if f := s.p.cfg.OnCheckpointFunc; f != nil {
		s.mu.Unlock()
		f(info)
		s.mu.Lock()
	}
	return false
}

// advanceDurableLocked is the one place durable progress is recorded: offset, durable frame,
// trim, waiters.
func (s *LiveStream) advanceDurableLocked(seq Seq) {
	s.durableSeq = seq
	s.settleUndurableLocked()
	s.fanoutLocked(Frame{Type: FrameDurable, Seq: seq})
	if floor := s.durableSeq - s.p.cfg.RetainChars; floor > s.buf.from {
		s.buf.trimTo(floor)
	}
	s.resolveWaitersLocked()
}

// failPermanentLocked answers a store's permanent refusal: waiters hear it, and the stream seals
// error with exactly what is durable (a seal already asked for is superseded: its text is what
// the store refused).
func (s *LiveStream) failPermanentLocked(err error) {
	if s.ended || (s.sealing != nil && s.sealing.durableOnly) {
		return
	}
	s.rejectWaitersLocked(math.MaxInt64, &NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: err})
	if s.sealRetry != nil {
		s.sealRetry.Stop()
		s.sealRetry = nil
	}
	if s.sealTry == nil {
		s.sealTry = make(chan struct{})
	}
	s.sealing = &sealRequest{status: StatusError, err: storable("the store refused the text: " + err.Error()), durableOnly: true, cause: err}
	s.disarmLocked()
	s.forced = true
}

func (s *LiveStream) commitSealLocked() {
	seal := s.sealing
	from := s.durableSeq
	in := CloseInput{
		StreamID: s.id,
		From:     from,
		Seq:      s.seq,
		Body:     string(s.buf.b),
		BodyFrom: s.buf.from,
		Status:   seal.status,
		Error:    seal.err,
	}
	if seal.durableOnly {
		in.Seq = s.durableSeq
		in.Body = s.buf.slice(s.buf.from, s.durableSeq)
	}
	pendingAt := s.pendingAt
	causes := s.takeCausesLocked()
	s.mu.Unlock()
	start := s.p.cfg.Clock.Now()
	commitCtx, settled := s.p.commitContext(CheckpointInfo{StreamID: s.id, From: from, Seq: in.Seq, Seal: true, Causes: causes})
	err := s.p.retry(commitCtx, func(ctx context.Context) error { return s.p.cfg.Committer.Close(ctx, in) })
	settled(err)
	now := s.p.cfg.Clock.Now()
	info := CheckpointInfo{StreamID: s.id, From: from, Seq: in.Seq, Seal: true, Duration: now.Sub(start)}
	var fence *FencedError
	switch {
	case errors.As(err, &fence):
		s.p.reportFence(fence)
	case err != nil:
		s.p.reportCheckpointError(err, info)
	default:
		if f := s.p.cfg.OnCheckpointFunc; f != nil {
			if !pendingAt.IsZero() {
				info.Lag = now.Sub(pendingAt)
			}
			f(info)
		}
	}
	s.mu.Lock()

	switch {
	case s.ended:
		// Fenced meanwhile.
	case err == nil && seal.durableOnly:
		s.endLocked(Frame{Type: FrameEnd, Seq: in.Seq, Status: seal.status, Error: seal.err}, seal.cause)
	case err == nil:
		s.durableSeq = s.seq
		s.endLocked(Frame{Type: FrameEnd, Seq: s.seq, Status: seal.status, Error: seal.err}, nil)
	case fence != nil:
		s.fenceLocked(fence)
	case errors.Is(err, ErrPermanent) && !seal.durableOnly:
		// The seal's body holds what the store refused: seal what is durable instead, now.
		s.failPermanentLocked(err)
		s.kickLocked(true)
	case s.detached:
		// The plane is gone: nothing will retry. The row stays streaming until this host's lease
		// lapses and another host's sweeper seals it; readers were detached without an end.
		s.endLocked(Frame{Type: FrameStale, FloorSeq: s.buf.from, DurableSeq: s.durableSeq},
			&NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: errors.Join(err, ErrClosed)})
	default:
		// Not sealed, and not fenced: the row is still this host's and streaming. Tell whoever
		// waits on this attempt, then try again after the interval, for as long as it takes.
		nd := &NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: err}
		s.sealErr = nd
		s.rejectWaitersLocked(math.MaxInt64, nd)
		close(s.sealTry)
		s.sealTry = make(chan struct{})
		s.sealRetry = s.p.cfg.Clock.AfterFunc(s.p.cfg.CheckpointInterval, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sealRetry = nil
			if !s.ended {
				s.kickLocked(true)
			}
		})
	}
}

// fenceLocked ends the stream with what another writer sealed the row with. Nothing more is
// taken or written; readers' end frame carries the row's status and length (absent when the
// row is not sealed at all: an open that never landed).
func (s *LiveStream) fenceLocked(fe *FencedError) {
	if s.ended {
		return
	}
	s.fence = fe
	if fe.Seq > s.durableSeq && fe.Seq <= s.seq {
		// The other writer sealed what this host had committed: body ++ its chunks.
		s.durableSeq = fe.Seq
	}
	end := Frame{Type: FrameEnd, Seq: fe.Seq, Status: fe.Status, Error: fe.Message}
	if !fe.Status.Terminal() {
		end = Frame{Type: FrameAbsent}
	}
	s.endLocked(end, fe)
}

// settleUndurableLocked moves the oldest-undurable mark after durable progress: none when all
// is durable, else the push time of the oldest character not in the commit that just landed
// (commits are serialized, so what remains was pushed after it began).
func (s *LiveStream) settleUndurableLocked() {
	switch {
	case s.durableSeq >= s.seq:
		s.undurableAt = time.Time{}
	case !s.pendingAt.IsZero():
		s.undurableAt = s.pendingAt
	}
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

// ---- readers

func (s *LiveStream) fanoutLocked(f Frame) {
	// Every frame local readers get, the relay gets, also when nobody local is attached.
	s.p.publishRelay(s.id, f)
	if len(s.subs) == 0 {
		return
	}
	// A live frame is the same bytes for every reader: encode it once, here, and share them.
	q := s.arena.encode(f)
	for i := 0; i < len(s.subs); {
		sub := s.subs[i]
		if !sub.offer(q) {
			// Bounded, then dropped: a reader that stopped draining costs itself a rejoin.
			s.removeSubLocked(sub, true)
			sub.finish(Frame{Type: FrameStale, FloorSeq: s.buf.from, DurableSeq: s.durableSeq})
			continue
		}
		i++
	}
}

// removeSubLocked unregisters a reader, once: stale says it was dropped for not draining.
func (s *LiveStream) removeSubLocked(sub *subscriber, stale bool) {
	i := sub.idx
	if i < 0 || i >= len(s.subs) || s.subs[i] != sub {
		return
	}
	s.p.subscriberDelta(-1, stale)
	last := len(s.subs) - 1
	s.subs[i] = s.subs[last]
	s.subs[i].idx = i
	s.subs[last] = nil
	s.subs = s.subs[:last]
	sub.idx = -1
}

func (s *LiveStream) detachSub(sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeSubLocked(sub, false)
}

// subscribe attaches a reader at from in one critical section (snapshot, replay, register), so
// no delta can fall between the replay and the live tail: the gap-free half of contract S.
func (s *LiveStream) subscribe(from Seq) *Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := newSubscriber(s.p.cfg.MaxQueuedFrames, s.detachSub)
	out := &Subscription{streamID: s.id, sub: sub}
	at := min(max(from, 0), s.seq)
	if at < s.buf.from {
		sub.finish(Frame{Type: FrameStale, FloorSeq: s.buf.from, DurableSeq: s.durableSeq})
		return out
	}
	// A join inside a surrogate pair moves down to the pair's start: the replay re-covers the
	// half the reader holds rather than starting mid-character.
	at, off := s.buf.locate(at)
	// The join frames bypass the cap: they are one snapshot, however small the cap.
	sub.queue = append(sub.queue, &queued{f: Frame{Type: FrameOpen, StreamID: s.id, From: at, Seq: s.seq, DurableSeq: s.durableSeq, Ended: s.ended}})
	if s.seq > at {
		sub.queue = append(sub.queue, &queued{f: Frame{Type: FrameChunk, From: at, Seq: s.seq, Text: string(s.buf.b[off:])}})
	}
	if s.durableSeq > at {
		sub.queue = append(sub.queue, &queued{f: Frame{Type: FrameDurable, Seq: s.durableSeq}})
	}
	if s.ended {
		sub.finish(s.endFrame)
		return out
	}
	if s.detached {
		sub.finish(Frame{Type: FrameAbsent})
		return out
	}
	sub.idx = len(s.subs)
	s.subs = append(s.subs, sub)
	s.p.subscriberDelta(1, false)
	return out
}

// detach drops every reader and timer without a durable write (plane teardown).
func (s *LiveStream) detach() {
	s.mu.Lock()
	s.detached = true
	s.disarmLocked()
	if s.linger != nil {
		s.linger.Stop()
	}
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	subs := s.subs
	s.subs = nil
	for _, sub := range subs {
		sub.idx = -1
		s.p.subscriberDelta(-1, false)
	}
	s.rejectWaitersLocked(math.MaxInt64, &NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: ErrClosed})
	if s.sealing != nil && !s.ended && !s.draining {
		// A seal waiting for its retry: nothing will run it now. (A seal in flight settles in
		// its own drain goroutine, which sees detached.)
		s.endLocked(Frame{Type: FrameStale, FloorSeq: s.buf.from, DurableSeq: s.durableSeq},
			&NotDurableError{StreamID: s.id, DurableSeq: s.durableSeq, Seq: s.seq, Err: ErrClosed})
	}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.close()
	}
}
