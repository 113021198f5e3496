package producer

import (
	"context"
	"errors"
	"io"
	"iter"
	"sync"
)

// subscriber is one attached reader's bounded frame queue. The producer offers frames; the reader
// pulls them. A reader that stops pulling fills its queue and is then dropped with stale rather
// than pinning the producer's memory: it recovers by rejoining.
//
// Lock order: a LiveStream's mutex may be held while calling offer or finish, never the reverse;
// close releases the subscriber's own mutex before it calls detach.
type subscriber struct {
	// The first cache line is what the producer and a DirectWriter's writer both touch for each
	// frame, on two cores: the lock, the queue, and the direct reader's ownership (guarded by
	// mu). Keeping them on one line passes one line between the cores per reader-frame, not
	// three (BenchmarkFanoutDirect).
	mu sync.Mutex
	// one is the frame offered to an empty queue (it is then the only one queued): a reader
	// that keeps up takes each frame from here, on the lock's line, not from the queue's
	// array, which would be another line passed between the cores.
	one    *queued
	queue  []*queued // the frames behind one, or, once one is taken, the rest
	head   int32
	done   bool // no more frames will be queued: a terminal is queued, or the reader closed
	closed bool // the reader let go; Next returns io.EOF
	// A DirectWriter's reader's state (see directReader), guarded by mu like the queue:
	owner     uint8         // who writes its socket: ownerNone, ownerWriter or ownerSlow
	pending   bool          // a frame came while it was owned: the owner goes around again
	finished  bool          // the direct reader ended (its done ran or is running)
	nextDirty *directReader // the next (older) reader on its writer's dirty list (ends the line)

	// Read-mostly: set before frames flow.
	cap    int
	notify chan struct{} // one token: "the queue changed"
	detach func(*subscriber)
	idx    int // position in the owning LiveStream's subs slice
	// ready, if set, is called in place of each token (under mu, and the stream's lock when the
	// producer queues): a DirectWriter's hook, which polls instead of a goroutine waiting on
	// notify.
	ready func(*readyBatch)
	_     [128 - 104]byte // 128 bytes: the allocator's 128-byte class keeps the first line whole
}

// queued is a frame and, for a live frame, its SSE encoding, made once for every reader. A live
// frame's queued is shared by every reader's queue (see frameArena): never modify one once queued.
type queued struct {
	f   Frame
	sse []byte
}

func newSubscriber(capacity int, detach func(*subscriber)) *subscriber {
	return &subscriber{cap: capacity, notify: make(chan struct{}, 1), detach: detach, idx: -1}
}

func (s *subscriber) wake(b *readyBatch) {
	if s.ready != nil {
		// A DirectWriter's reader: its owner polls; nobody waits on notify.
		s.ready(b)
		return
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// setReady installs the hook wake calls.
func (s *subscriber) setReady(f func(*readyBatch)) {
	s.mu.Lock()
	s.ready = f
	s.mu.Unlock()
}

// offer queues a frame (with its shared SSE encoding, or nil). It returns false when the queue
// is full: the caller drops the reader. A DirectWriter's reader that the frame makes ready joins
// b, when b is not nil (see readyBatch), else its writer's list at once.
func (s *subscriber) offer(q *queued, b *readyBatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return true
	}
	n := len(s.queue) - int(s.head)
	if s.one != nil {
		n++
	}
	if n >= s.cap {
		return false
	}
	// Only the first frame of an empty queue needs the token: a reader waits only after a poll
	// found the queue empty, and frames behind the first are taken by the polls that follow it.
	if n == 0 {
		s.one = q
		s.wake(b)
		return true
	}
	s.queue = append(s.queue, q)
	return true
}

// finish queues a terminal frame past the cap (it is the last one) and ends the queue.
func (s *subscriber) finish(f Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.queue = append(s.queue, &queued{f: f})
	s.done = true
	s.wake(nil)
}

// poll takes the next frame without blocking. q is nil when none is queued; end is true when
// none ever will be.
func (s *subscriber) poll() (q *queued, end bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollLocked()
}

// pollLocked is poll with s.mu held: a DirectWriter takes every ready frame under one lock.
func (s *subscriber) pollLocked() (q *queued, end bool) {
	if s.closed {
		return nil, true
	}
	if q = s.one; q != nil {
		s.one = nil
		return q, false
	}
	if int(s.head) < len(s.queue) {
		q = s.queue[s.head]
		s.queue[s.head] = nil
		s.head++
		if int(s.head) == len(s.queue) {
			// Reuse the backing array: a steady reader queues and pulls without allocating.
			s.queue = s.queue[:0]
			s.head = 0
		}
		return q, false
	}
	return nil, s.done
}

// close drops the queue and detaches the reader. Idempotent.
func (s *subscriber) close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.done = true
	s.one = nil
	s.queue = nil
	s.head = 0
	s.wake(nil)
	s.mu.Unlock()
	if !already && s.detach != nil {
		s.detach(s)
	}
}

// Subscription is one reader's view of a stream: an open frame, the replay from its join offset,
// then the live tail, ending with exactly one of end, stale or absent. Pull frames with Next or
// Frames; call Close when the reader goes away. A Subscription is meant for one reading goroutine;
// Close may be called from any goroutine.
type Subscription struct {
	streamID string
	sub      *subscriber
}

// StreamID is the stream this subscription reads.
func (s *Subscription) StreamID() string { return s.streamID }

// Next returns the next frame, waiting for it if need be. After the terminal frame, or after
// Close, it returns io.EOF; when ctx ends first it returns the context's error.
func (s *Subscription) Next(ctx context.Context) (Frame, error) {
	f, _, err := s.NextEncoded(ctx)
	return f, err
}

// NextEncoded is Next with the frame's SSE encoding (AppendSSE's bytes) when the live plane
// made one: the same bytes for every reader of a delta, encoded once. Nil means encode it
// yourself. The bytes are shared: never modify them.
func (s *Subscription) NextEncoded(ctx context.Context) (Frame, []byte, error) {
	for {
		q, end := s.sub.poll()
		if q != nil {
			return q.f, q.sse, nil
		}
		if end {
			return Frame{}, nil, io.EOF
		}
		select {
		case <-s.sub.notify:
		case <-ctx.Done():
			return Frame{}, nil, context.Cause(ctx)
		}
	}
}

// Frames ranges over the subscription's frames until the terminal one. A context error is yielded
// with an empty frame; breaking out of the loop closes the subscription.
func (s *Subscription) Frames(ctx context.Context) iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		defer s.Close()
		for {
			f, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(f, err) || err != nil {
				return
			}
		}
	}
}

// Close detaches the reader early (a disconnected client). Idempotent.
func (s *Subscription) Close() { s.sub.close() }

// oneFrame is a subscription that yields a single terminal frame.
func oneFrame(streamID string, f Frame) *Subscription {
	sub := newSubscriber(1, nil)
	sub.finish(f)
	return &Subscription{streamID: streamID, sub: sub}
}
