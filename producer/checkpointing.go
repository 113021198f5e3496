package producer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// The checkpoint driver of a LiveStream: the policy timers, the drain goroutine, each round's
// commit and read-back, permanent refusals and the seal.

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
			if s.sealRetry == nil && s.commitSealLocked() {
				continue // the store refused the seal's text for good: seal what is durable now
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
			s.stalled = s.commitTailLocked()
			if s.stalled {
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

// commitSealLocked runs one attempt of the seal. It reports true when the store refused the
// seal's text for good and a seal of what is durable took its place: the drain runs it at once.
func (s *LiveStream) commitSealLocked() (again bool) {
	seal := s.sealing
	from := s.durableSeq
	in := CloseInput{
		StreamID: s.id,
		From:     from,
		Seq:      s.seq,
		Body:     s.buf.string(), // no copy: a long answer's seal holds its text once
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
		return true
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
	return false
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
