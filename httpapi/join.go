package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

// ViewReader is what a join needs from the durable view (ivm.View).
type ViewReader interface {
	// Get returns the message's durable view; ivm.ErrNotFound when there is no such message.
	Get(ctx context.Context, id string) (ivm.Message, error)
	// Wait returns once the durable length passes after or the status is terminal.
	Wait(ctx context.Context, id string, after producer.Seq) (ivm.Message, error)
	// WaitFunc returns the message once done holds for it, re-checking after every change.
	WaitFunc(ctx context.Context, id string, done func(ivm.Message) bool) (ivm.Message, error)
}

// LiveSubscriber is what a join needs from the live plane (producer.Plane).
type LiveSubscriber interface {
	Subscribe(ctx context.Context, in producer.SubscribeInput) (*producer.Subscription, error)
}

// Joined is one reader's frames: an open at its join point, the durable prefix the view
// holds past that point, then the live tail (or, when no live stream is hosted here, the view
// followed to the end). Chunks are contiguous and never split a surrogate pair, so a client
// that only appends is correct. It ends with exactly one of end or stale.
type Joined struct {
	queue   []queued
	live    *producer.Subscription // nil when following the view
	view    ViewReader
	id      string
	pos     producer.Seq // end of what this reader has been sent
	durable producer.Seq // the last durable frame's seq
	done    bool
	closed  bool

	// A reader that joined before the stream was live here follows the view, and moves onto
	// the live tail once the stream opens: on this instance (opened fires), or elsewhere (the
	// view shows it streaming, and the relay can serve it). A failed attempt waits
	// retryLiveEvery before the next (each costs the relay a lookup).
	subscriber LiveSubscriber
	opened     context.Context // cancelled when the stream opens here
	stopOpen   func()
	nextTry    time.Time

	// A relayed tail (the stream is live on another instance) is watched through the view:
	// if its producer dies, no end frame will ever be relayed, and the seal the sweeper
	// writes reaches this instance only by replication. sealed ends when the view turns
	// terminal; stopWatch ends the watcher.
	relayed   bool
	sealed    context.Context
	stopWatch context.CancelFunc
	// lateTail: the tail was taken after the join (tryLive), so its replay needs trimming.
	lateTail bool
}

// errSealedElsewhere cuts a relayed tail short once the view shows the stream sealed.
var errSealedElsewhere = errors.New("the stream was sealed on another instance")

// hoster is the live plane's local lookup (producer.Plane.Stream).
type hoster interface {
	Stream(id string) (*producer.LiveStream, bool)
}

// openWatcher tells a join that a stream opened on this instance (producer.Plane.WatchOpen).
type openWatcher interface {
	WatchOpen(id string) (context.Context, func())
}

// Join joins a reader at from. The caller has authorized the reader: Join reveals whether
// the message exists (ivm.ErrNotFound), so the HTTP layer must answer a denied and a missing id
// the same way before calling it.
func Join(ctx context.Context, view ViewReader, live LiveSubscriber, user any, id string, from producer.Seq) (*Joined, error) {
	m, err := view.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	ivmSeq := m.Seq
	j := &Joined{view: view, id: id, subscriber: live}
	if w, ok := live.(openWatcher); ok && !m.Status.Terminal() {
		// Before subscribing, so an open landing in between is not missed.
		j.opened, j.stopOpen = w.WatchOpen(id)
	}
	// The reader's offset within the durable text, moved down to a character boundary.
	floor := m.TextFloor(max(from, 0))
	liveFrom := ivmSeq
	if from > ivmSeq {
		liveFrom = from // the reader holds more than the view: only the live plane can serve it
	}
	sub, err := live.Subscribe(ctx, producer.SubscribeInput{User: user, StreamID: id, From: liveFrom})
	if err != nil {
		return nil, err
	}
	first, err := sub.Next(ctx)
	if err != nil {
		sub.Close()
		j.Close()
		return nil, fmt.Errorf("stream %s: join: %w", id, err)
	}
	relayed := false
	if h, ok := live.(hoster); ok {
		_, local := h.Stream(id)
		relayed = !local
	}
	if relayed && first.Type == producer.FrameStale {
		// The relay cannot serve this reader (the broker is down, or its history is gone): the
		// view can, at checkpoint granularity.
		first = producer.Frame{Type: producer.FrameAbsent}
	}
	switch first.Type {
	case producer.FrameOpen:
		at := first.From // the live plane's join point: clamped and floored by the plane
		start := at
		if from <= ivmSeq && floor < at {
			start = floor
		}
		j.queue = append(j.queue, queued{f: producer.Frame{
			Type: producer.FrameOpen, StreamID: id, From: start, Seq: max(first.Seq, ivmSeq),
			DurableSeq: max(first.DurableSeq, ivmSeq), Ended: first.Ended,
		}})
		if start < at {
			// The durable prefix comes from the view: P makes it the produced text's prefix, so
			// it splices exactly onto the live plane's replay from at.
			j.queue = append(j.queue, catchUp(id, producer.Frame{Type: producer.FrameChunk, From: start, Seq: at, Text: m.TextSlice(start, at)}))
		}
		j.pos = at
		j.goLive(ctx, sub, relayed)
	case producer.FrameAbsent:
		// Not hosted here (another instance, or sealed and evicted): the view serves everything.
		sub.Close()
		start := min(floor, ivmSeq)
		j.queue = append(j.queue, queued{f: producer.Frame{Type: producer.FrameOpen, StreamID: id, From: start, Seq: ivmSeq, DurableSeq: ivmSeq, Ended: m.Status.Terminal()}})
		j.pos = start
	default:
		// stale: the live plane cannot serve this offset; the reader falls back.
		sub.Close()
		j.queue = append(j.queue, queued{f: first})
		j.done = true
	}
	if j.live != nil || j.done {
		j.stopOpenWatch()
	}
	return j, nil
}

// dropLive lets go of the live tail (and the watch of a relayed one): the view takes over.
func (j *Joined) dropLive() {
	j.live.Close()
	j.live = nil
	if j.stopWatch != nil {
		j.stopWatch()
		j.stopWatch = nil
	}
	j.relayed = false
}

// goLive makes sub this reader's tail; a relayed one is watched through the view.
func (j *Joined) goLive(ctx context.Context, sub *producer.Subscription, relayed bool) {
	j.live = sub
	if relayed {
		j.relayed = true
		watchCtx, stop := context.WithCancel(ctx)
		sealed, seal := context.WithCancel(context.Background())
		j.sealed, j.stopWatch = sealed, func() { stop(); seal() }
		go j.watch(watchCtx, seal)
	}
}

func (j *Joined) stopOpenWatch() {
	if j.stopOpen != nil {
		j.stopOpen()
		j.stopOpen, j.opened = nil, nil
	}
}

// tryLive moves a reader that follows the view onto the live tail from what it was sent, if
// the live plane (here or relayed) can serve it now.
func (j *Joined) tryLive(ctx context.Context) {
	sub, err := j.subscriber.Subscribe(ctx, producer.SubscribeInput{StreamID: j.id, From: j.pos})
	if err != nil {
		return
	}
	first, err := sub.Next(ctx)
	if err != nil || first.Type != producer.FrameOpen || first.From > j.pos {
		sub.Close()
		return
	}
	relayed := true
	if h, ok := j.subscriber.(hoster); ok {
		_, local := h.Stream(j.id)
		relayed = !local
	}
	j.stopOpenWatch()
	// The open frame stays behind: this reader had its open. What the live plane replays below
	// j.pos is trimmed in Next.
	j.lateTail = true
	j.goLive(ctx, sub, relayed)
}

// onLocalTail reports whether the reader is on this instance's live tail with nothing left to
// transform: the live frames pass through Next unchanged from here on (a relayed tail, a
// reader following the view, or one that moved onto the tail late, still need Next).
func (j *Joined) onLocalTail() bool {
	return !j.closed && !j.done && j.live != nil && !j.relayed && j.stopOpen == nil && !j.lateTail
}

// handOver gives a reader on its local tail (onLocalTail) to a writer that reads the
// subscription itself: the frames the join queued (to be sent first), the subscription, and
// the end of the text the queued frames cover. j is closed; the subscription is the caller's.
func (j *Joined) handOver() (prefix []queued, tail *producer.Subscription, pos producer.Seq) {
	prefix, tail, pos = j.queue, j.live, j.pos
	j.queue, j.live = nil, nil
	j.Close()
	return prefix, tail, pos
}

var _ producer.EncodedFrameReader = (*Joined)(nil)

// Next returns the next frame; io.EOF after the terminal one.
func (j *Joined) Next(ctx context.Context) (producer.Frame, error) {
	f, _, err := j.NextEncoded(ctx)
	return f, err
}

// NextEncoded is Next with the live plane's shared SSE encoding of a frame the join passes on
// unchanged (nil otherwise): a delta is JSON-escaped once, not once per reader.
func (j *Joined) NextEncoded(ctx context.Context) (producer.Frame, []byte, error) {
	for {
		if j.closed {
			return producer.Frame{}, nil, io.EOF
		}
		if len(j.queue) > 0 {
			q := j.queue[0]
			j.queue = j.queue[1:]
			return q.f, q.enc, nil
		}
		if j.done {
			return producer.Frame{}, nil, io.EOF
		}
		if j.live != nil {
			f, enc, err := j.nextLive(ctx)
			if errors.Is(err, errSealedElsewhere) || (j.relayed && (errors.Is(err, io.EOF) || err == nil && f.Type == producer.FrameStale)) {
				// The producer is gone, or the relay broke (a broker outage): the view has the
				// durable text and will have the end. The reader loses smoothness, not text.
				j.dropLive()
				continue
			}
			if errors.Is(err, io.EOF) {
				// Detached without a terminal (the plane shut down): the reader falls back.
				j.done = true
				return producer.Frame{Type: producer.FrameStale, FloorSeq: j.pos}, nil, nil
			}
			if err != nil {
				return producer.Frame{}, nil, err
			}
			if f.Type == producer.FrameChunk {
				if f.Seq <= j.pos {
					continue // already sent (from the view, before the tail took over)
				}
				if f.From < j.pos {
					f.Text = producer.Slice16(f.Text, j.pos-f.From, f.Seq-f.From)
					f.From = j.pos
					enc = nil // no longer the frame that was encoded
				}
				j.pos = f.Seq
			}
			if f.Type == producer.FrameDurable {
				if f.Seq <= j.durable {
					continue // a relay replaying from its first frame: already said
				}
				j.durable = f.Seq
			}
			if f.Terminal() {
				j.done = true
			}
			return f, enc, nil
		}
		if err := j.follow(ctx); err != nil {
			return producer.Frame{}, nil, err
		}
	}
}

// nextLive is the live tail's next frame; a relayed one is cut short once the view is sealed.
func (j *Joined) nextLive(ctx context.Context) (producer.Frame, []byte, error) {
	if !j.relayed {
		return j.live.NextEncoded(ctx)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(j.sealed, func() { cancel(errSealedElsewhere) })
	defer stop()
	f, enc, err := j.live.NextEncoded(lctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(lctx), errSealedElsewhere) {
		return producer.Frame{}, nil, errSealedElsewhere
	}
	return f, enc, err
}

// watch waits for the view to show the stream terminal, then calls seal.
func (j *Joined) watch(ctx context.Context, seal context.CancelFunc) {
	m, err := j.view.Get(ctx, j.id)
	for err == nil && !m.Status.Terminal() {
		m, err = j.view.Wait(ctx, j.id, m.Seq)
	}
	if err == nil {
		seal()
	}
}

// follow waits for the view to pass what was sent and queues the difference: the durable plane
// streamed at checkpoint granularity, for a stream produced elsewhere. It also moves the reader
// onto the live tail once one can serve it: when the stream opens here, or when the view shows
// it streaming (once per change of the view).
func (j *Joined) follow(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if j.opened != nil {
		defer context.AfterFunc(j.opened, cancel)()
	}
	m, err := j.view.WaitFunc(wctx, j.id, func(m ivm.Message) bool {
		return m.Seq > j.pos || m.Status.Terminal() || (m.Status == producer.StatusStreaming && !time.Now().Before(j.nextTry))
	})
	openedHere := false
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		openedHere = true // the local open cut the wait short
		m, err = j.view.Get(ctx, j.id)
		if err != nil {
			return err
		}
	}
	if n := m.Seq; n > j.pos {
		j.queue = append(j.queue,
			catchUp(j.id, producer.Frame{Type: producer.FrameChunk, From: j.pos, Seq: n, Text: m.TextSlice(j.pos, n)}),
			queued{f: producer.Frame{Type: producer.FrameDurable, Seq: n}})
		j.pos, j.durable = n, n
	}
	if n := m.Seq; m.Status.Terminal() && n <= j.pos {
		// The end claims the durable length: a reader that was relayed text its producer
		// never made durable (it died) learns where the durable text ends.
		j.queue = append(j.queue, queued{f: producer.Frame{Type: producer.FrameEnd, Seq: n, Status: m.Status, Error: m.Error}})
		j.done = true
		j.stopOpenWatch()
		return nil
	}
	if openedHere {
		// A fired watch is spent (the stream opened here, or the plane closed): later waits
		// rely on the view's status alone.
		j.stopOpenWatch()
	}
	if j.subscriber != nil && (openedHere || m.Status == producer.StatusStreaming && !time.Now().Before(j.nextTry)) {
		j.nextTry = time.Now().Add(retryLiveEvery)
		j.tryLive(ctx)
	}
	return nil
}

// retryLiveEvery spaces the attempts of a reader that follows the view of a streaming message
// to join its live tail.
const retryLiveEvery = 2 * time.Second

// Close releases the live subscription. Idempotent.
func (j *Joined) Close() {
	j.closed = true
	j.stopOpenWatch()
	if j.stopWatch != nil {
		j.stopWatch()
	}
	if j.live != nil {
		j.live.Close()
	}
}
