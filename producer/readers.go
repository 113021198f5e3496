package producer

import (
	"math"
)

// A LiveStream's readers: the fan-out, their removal and the subscribe at an offset.

func (s *LiveStream) fanoutLocked(f Frame) {
	// Every frame local readers get, the relay gets, also when nobody local is attached.
	s.p.publishRelay(s.id, f)
	if len(s.subs) == 0 {
		return
	}
	// A live frame is the same bytes for every reader: encode it once, here, and share them.
	q := s.arena.encode(f)
	b := &s.ready
	for i := 0; i < len(s.subs); {
		sub := s.subs[i]
		if !sub.offer(q, b) {
			// Bounded, then dropped: a reader that stopped draining costs itself a rejoin.
			s.removeSubLocked(sub, true)
			sub.finish(Frame{Type: FrameStale, FloorSeq: s.buf.from, DurableSeq: s.durableSeq})
			continue
		}
		i++
	}
	b.flush()
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
