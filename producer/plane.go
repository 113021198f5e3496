package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rindle-sh/rindle-go/internal/retry"
)

// errPlaneClosed is the cause of the plane's context once Close runs.
var errPlaneClosed = errors.New("producer: plane closed")

// Plane hosts the live streams of one process. It owns their goroutines: each stream's checkpoint
// driver and each relayed reader's frame pump. Close stops them all.
type Plane struct {
	cfg    Config
	ctx    context.Context // commits and relay pumps; cancelled by Close
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	live    map[string]*LiveStream
	relayed map[*subscriber]struct{}
	opens   map[string]map[*context.CancelFunc]struct{} // WatchOpen's watchers, by stream id
	closed  bool
	// suspended is set between Suspend and Resume: opens are refused. suspendGen counts
	// Suspends, so a Resume never lifts a later Suspend.
	suspended  error
	suspendGen uint64

	// The relay's outbox: frames wait here for Relay.Publish, which runs in one goroutine of
	// its own, never under a stream's lock. A full outbox drops frames (see publishRelay).
	outbox      chan relayOut
	dropped     atomic.Int64 // frames dropped since the last report
	lastDropLog atomic.Int64 // unix nanos of the last report
}

type relayOut struct {
	streamID string
	frame    Frame
}

// New validates cfg and returns a Plane. It returns a *ConfigError naming the first field it
// refuses.
func New(cfg Config) (*Plane, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	p := &Plane{
		cfg:     c,
		ctx:     ctx,
		cancel:  cancel,
		live:    make(map[string]*LiveStream),
		relayed: make(map[*subscriber]struct{}),
		opens:   make(map[string]map[*context.CancelFunc]struct{}),
	}
	if c.Relay != nil && c.Relay.Publish != nil {
		p.outbox = make(chan relayOut, c.RelayQueue)
		p.wg.Add(1)
		go p.relayPublisher()
	}
	return p, nil
}

// OpenStreamInput is what Plane.Open takes.
type OpenStreamInput struct {
	User any // the producer, for the app's bookkeeping
	// StreamID is the message row's id: the durable pointer and the live plane's key. The row
	// must exist already (the app wrote it with the prompt), empty.
	StreamID string
	Meta     any // opaque app payload, passed to the committer's Open
}

// Open opens a stream on an existing message row and returns its producer handle. It returns an
// *OpenRefusedError when the stream is already open here or the committer refuses it, an error
// wrapping ErrSuspended while the host cannot prove its lease (see Suspend), and ErrClosed after
// Close.
//
// When the committer's Open fails in a way that leaves its outcome unknown (the write may have
// landed with its reply lost), the plane does not leave the row to chance: it releases it in
// the background with an interrupted Close at 0, retried until it settles, so a row this host
// may have marked streaming never stays so behind its live lease. A second Open of the same id
// waits for that release.
func (p *Plane) Open(ctx context.Context, in OpenStreamInput) (*LiveStream, error) {
	s, err := p.register(ctx, in)
	if err != nil {
		return nil, err
	}
	// The precondition is checked once, never per write attempt: re-deciding it after a lost
	// ack would refuse the plane's own success (the row would already say streaming).
	if err := p.cfg.Committer.CheckOpenable(ctx, in.StreamID); err != nil {
		p.unregister(s)
		return nil, err
	}
	open := OpenInput{StreamID: in.StreamID, Meta: in.Meta, StartedAt: p.cfg.Clock.Now()}
	err = p.retry(ctx, func(ctx context.Context) error { return p.cfg.Committer.Open(ctx, open) })
	switch {
	case errors.Is(err, ErrOpenRefused):
		p.unregister(s) // a rival holds the row: nothing of ours landed
		return nil, err
	case err != nil:
		s.release()
		return nil, fmt.Errorf("stream %s: open: %w (the row is being released)", in.StreamID, err)
	}
	p.mu.Lock()
	s.mu.Lock()
	s.opened = true
	s.armIdleLocked()
	if p.suspended != nil {
		// The lease was lost while the open was in flight: this stream waits to be reclaimed
		// like the others.
		s.suspended, s.suspendGen = p.suspended, p.suspendGen
	}
	s.mu.Unlock()
	for cancel := range p.opens[in.StreamID] {
		(*cancel)()
	}
	delete(p.opens, in.StreamID)
	p.mu.Unlock()
	s.counted.Store(true)
	p.streamDelta(1)
	// Beyond the seed: the relay hears the open too, so a reader on another instance who joins
	// before the first delta finds the stream live there instead of absent.
	p.publishRelay(in.StreamID, Frame{Type: FrameOpen, StreamID: in.StreamID})
	return s, nil
}

// register reserves id on this plane, waiting out the release of an earlier open of it.
func (p *Plane) register(ctx context.Context, in OpenStreamInput) (*LiveStream, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("stream %s: open: %w", in.StreamID, ErrClosed)
		}
		if p.suspended != nil {
			cause := p.suspended
			p.mu.Unlock()
			return nil, fmt.Errorf("stream %s: open refused: %w: %w", in.StreamID, ErrSuspended, cause)
		}
		old, ok := p.live[in.StreamID]
		if !ok {
			s := newLiveStream(p, in.StreamID, in.User, in.Meta)
			p.live[in.StreamID] = s
			p.mu.Unlock()
			return s, nil
		}
		if !old.releasing.Load() {
			p.mu.Unlock()
			if end, ok := old.terminal(); ok {
				return nil, &OpenRefusedError{StreamID: in.StreamID, Reason: fmt.Sprintf("it is sealed (%s at %d): a regeneration is a new message id", end.Status, end.Seq)}
			}
			return nil, &OpenRefusedError{StreamID: in.StreamID, Reason: "it is already open on this host"}
		}
		select {
		case <-old.sealDone:
			// Released: replace it.
			delete(p.live, in.StreamID)
			p.mu.Unlock()
			old.detach()
			continue
		default:
		}
		p.mu.Unlock()
		select {
		case <-old.sealDone:
		case <-ctx.Done():
			return nil, fmt.Errorf("stream %s: open: waiting for the release of an earlier open: %w", in.StreamID, context.Cause(ctx))
		}
	}
}

// unregister drops a stream whose open did not write anything.
func (p *Plane) unregister(s *LiveStream) {
	p.mu.Lock()
	if p.live[s.id] == s {
		delete(p.live, s.id)
	}
	p.mu.Unlock()
	s.detach()
}

// release seals a stream whose open's outcome is unknown interrupted at 0, in the background:
// with checkpoint.Store a no-op on a row this host never marked streaming. Its readers (a
// subscribe can race the open) get the row's verdict.
func (s *LiveStream) release() {
	s.releasing.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && s.sealing == nil && !s.detached {
		s.startSealLocked(StatusInterrupted, "")
	}
}

// Suspend is the lease's fence: the host can no longer prove it holds its streams (its lease
// could not be renewed, and the TTL others wait on may lapse). Until Resume, every open
// stream refuses pushes with ErrSuspended and new opens are refused. Checkpoints and seals go
// on: the store's guard (the row still streaming under this host) fences them, so what they
// commit is honest either way. Readers stay attached and see no new text.
func (p *Plane) Suspend(cause error) {
	if cause == nil {
		cause = errors.New("the host's lease could not be renewed")
	}
	p.mu.Lock()
	p.suspended = cause
	p.suspendGen++
	gen := p.suspendGen
	streams := p.snapshotLocked()
	p.mu.Unlock()
	for _, s := range streams {
		s.suspend(cause, gen)
	}
}

// Resume is called once the host's lease is held again. It lets opens through, then reclaims
// each suspended stream: with a Reclaimer committer it asks the store whether the row is still
// this host's, and a stream another writer sealed meanwhile ends at once with the row's status
// and length (ErrFenced); the others take pushes again. A stream the store cannot answer for
// stays suspended, and its error is returned: call Resume again (the lease does, on its next
// renewal).
func (p *Plane) Resume(ctx context.Context) error {
	p.mu.Lock()
	p.suspended = nil
	gen := p.suspendGen
	streams := p.snapshotLocked()
	p.mu.Unlock()
	reclaimer, _ := p.cfg.Committer.(Reclaimer)
	var errs []error
	for _, s := range streams {
		if !s.isSuspended() {
			continue
		}
		var err error
		if reclaimer != nil {
			err = reclaimer.Reclaim(ctx, s.id)
		}
		var fence *FencedError
		switch {
		case err == nil:
			s.resume(gen)
		case errors.As(err, &fence):
			s.fenced(fence)
			p.reportFence(fence)
		default:
			errs = append(errs, fmt.Errorf("stream %s: reclaim: %w", s.id, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Plane) snapshotLocked() []*LiveStream {
	out := make([]*LiveStream, 0, len(p.live))
	for _, s := range p.live {
		out = append(out, s)
	}
	return out
}

func (p *Plane) reportFence(fe *FencedError) {
	p.cfg.Logger.Warn("stream sealed by another writer; it ended with what the store holds",
		"stream", fe.StreamID, "status", string(fe.Status), "seq", fe.Seq)
}

// commitContext wraps one checkpoint's commit context with CommitContextFunc.
func (p *Plane) commitContext(info CheckpointInfo) (context.Context, func(error)) {
	if f := p.cfg.CommitContextFunc; f != nil {
		return f(p.ctx, info)
	}
	return p.ctx, func(error) {}
}

func (p *Plane) streamDelta(d int) {
	if f := p.cfg.OnStreamFunc; f != nil {
		f(d)
	}
}

func (p *Plane) subscriberDelta(d int, stale bool) {
	if f := p.cfg.OnSubscriberFunc; f != nil {
		f(d, stale)
	}
}

// WatchOpen returns a context that is cancelled once a stream with id opens on this plane (or
// the plane closes), and a function that stops watching. A reader that joined before the
// producer opened uses it to move from the durable view onto the live tail.
func (p *Plane) WatchOpen(id string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		cancel()
		return ctx, func() {}
	}
	if p.opens[id] == nil {
		p.opens[id] = map[*context.CancelFunc]struct{}{}
	}
	key := &cancel
	p.opens[id][key] = struct{}{}
	return ctx, func() {
		cancel()
		p.mu.Lock()
		defer p.mu.Unlock()
		if w := p.opens[id]; w != nil {
			delete(w, key)
			if len(w) == 0 {
				delete(p.opens, id)
			}
		}
	}
}

// Stream returns the live stream hosted here under id, if any. A stream whose open failed (and
// which is being released) is not one.
func (p *Plane) Stream(id string) (*LiveStream, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.live[id]
	if !ok || s.releasing.Load() {
		return nil, false
	}
	return s, true
}

// SubscribeInput is what Plane.Subscribe takes.
type SubscribeInput struct {
	User     any
	StreamID string
	// From is how much of the text the reader already holds (from its durable view, or an SSE
	// Last-Event-ID). It is clamped to [0, seq] and moved down to a character boundary.
	From    Seq
	Request any
}

// Subscribe joins a reader to a stream at in.From. Authorization runs first, so a denial
// (a *ForbiddenError) is the same for a stream that exists and one that does not. A stream not
// hosted here is served by the relay when one is configured, else the subscription is a single
// absent frame; a join below the retained floor is a single stale frame.
func (p *Plane) Subscribe(ctx context.Context, in SubscribeInput) (*Subscription, error) {
	p.mu.Lock()
	s := p.live[in.StreamID]
	closed := p.closed
	p.mu.Unlock()
	var meta any
	if s != nil {
		meta = s.meta
	}
	ok, err := p.cfg.Authorize(ctx, AuthorizeInput{User: in.User, StreamID: in.StreamID, From: in.From, Meta: meta, Request: in.Request})
	if err != nil {
		return nil, fmt.Errorf("stream %s: authorize: %w", in.StreamID, err)
	}
	if !ok {
		return nil, &ForbiddenError{StreamID: in.StreamID}
	}
	if closed {
		return oneFrame(in.StreamID, Frame{Type: FrameAbsent}), nil
	}
	if s == nil {
		// Consulted only on a local miss and only after authorization: a local stream always
		// wins, and a denial never becomes a probe against the relay.
		if sub := p.attachRelay(ctx, in.StreamID, in.From); sub != nil {
			return sub, nil
		}
		return oneFrame(in.StreamID, Frame{Type: FrameAbsent}), nil
	}
	return s.subscribe(in.From), nil
}

// Drain seals every live stream interrupted, writing everything produced, and returns once all
// seals have settled (or ctx ends). Wire it to SIGTERM; Close afterwards.
func (p *Plane) Drain(ctx context.Context) error {
	p.mu.Lock()
	streams := p.snapshotLocked()
	p.mu.Unlock()
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { errs[i] = s.seal(ctx, StatusInterrupted, "") })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close tears the plane down without a durable write (that is Drain): readers are detached,
// pending flushes fail, in-flight commits are cancelled, and every goroutine the plane started
// has returned when Close does. Safe to call twice.
func (p *Plane) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	streams := p.live
	p.live = map[string]*LiveStream{}
	relayed := p.relayed
	p.relayed = map[*subscriber]struct{}{}
	for _, w := range p.opens {
		for cancel := range w {
			(*cancel)()
		}
	}
	p.opens = map[string]map[*context.CancelFunc]struct{}{}
	p.mu.Unlock()
	p.cancel(errPlaneClosed)
	for _, s := range streams {
		s.detach()
		s.uncount()
	}
	for sub := range relayed {
		sub.close()
	}
	p.wg.Wait()
}

// retire evicts a sealed stream once its linger window has passed.
func (p *Plane) retire(s *LiveStream) {
	p.mu.Lock()
	ours := p.live[s.id] == s
	if ours {
		delete(p.live, s.id)
	}
	p.mu.Unlock()
	s.detach()
	if ours {
		s.uncount()
	}
}

// DurabilityStats is what a plane holds that its store has not confirmed.
type DurabilityStats struct {
	// Streams is how many hosted streams hold text above their durable offset.
	Streams int
	// Chars is the sum of that text, in UTF-16 code units.
	Chars Seq
	// Oldest is how long the oldest of those characters has waited since its push.
	Oldest time.Duration
}

// Durability reports the text this plane's streams hold above their durable offsets: how much,
// and how old the oldest character is. While the store is away both grow, so a stall shows
// before any checkpoint gives up. It visits every hosted stream; call it at a scrape's pace.
func (p *Plane) Durability() DurabilityStats {
	p.mu.Lock()
	streams := make([]*LiveStream, 0, len(p.live))
	for _, s := range p.live {
		streams = append(streams, s)
	}
	p.mu.Unlock()
	now := p.cfg.Clock.Now()
	var st DurabilityStats
	for _, s := range streams {
		s.mu.Lock()
		if n := s.seq - s.durableSeq; n > 0 && !s.detached {
			st.Streams++
			st.Chars += n
			if !s.undurableAt.IsZero() {
				st.Oldest = max(st.Oldest, now.Sub(s.undurableAt))
			}
		}
		s.mu.Unlock()
	}
	return st
}

// retry runs one commit step with the checkpoint retry policy: each attempt bounded by
// CommitTimeout, backoff doubling from RetryBackoff in real time. A refused open or a fence is
// a verdict, not a blip, and is returned at once.
func (p *Plane) retry(ctx context.Context, step func(context.Context) error) error {
	var last error
	for attempt := 0; attempt <= p.cfg.CheckpointRetries; attempt++ {
		if attempt > 0 {
			if err := retry.Sleep(ctx, retryDelay(p.cfg.RetryBackoff, attempt)); err != nil {
				return errors.Join(last, err)
			}
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.CommitTimeout)
		err := step(actx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrOpenRefused) || errors.Is(err, ErrFenced) || errors.Is(err, ErrPermanent) {
			return err
		}
		last = err
		if ctx.Err() != nil {
			return last
		}
	}
	return last
}

// MaxRetryBackoff caps one retry's delay however many retries are configured.
const MaxRetryBackoff = 5 * time.Second

// retryDelay is the wait before retry attempt (1, 2, …): the exponential step from base,
// capped at MaxRetryBackoff, jittered over its upper half, so streams whose commits failed
// together in one database blip do not all retry in the same instant, and none waits longer
// than the cap.
func retryDelay(base time.Duration, attempt int) time.Duration {
	d := MaxRetryBackoff
	if shift := attempt - 1; shift < 62 && base <= MaxRetryBackoff>>shift {
		d = base << shift
	}
	d = max(d, 1)
	return d/2 + rand.N(d/2+1)
}

func (p *Plane) reportCheckpointError(err error, info CheckpointInfo) {
	if f := p.cfg.OnCheckpointErrorFunc; f != nil {
		// A diagnostic must never take the checkpoint driver down with it.
		defer func() {
			if r := recover(); r != nil {
				p.cfg.Logger.Error("OnCheckpointErrorFunc panicked", "stream", info.StreamID, "panic", r)
			}
		}()
		f(err, info)
		return
	}
	p.cfg.Logger.Error("checkpoint failed", "stream", info.StreamID, "from", info.From, "seq", info.Seq, "seal", info.Seal, "err", err)
}

func (p *Plane) reportRelayError(err error, streamID string, phase RelayPhase) {
	if f := p.cfg.OnRelayErrorFunc; f != nil {
		defer func() {
			if r := recover(); r != nil {
				p.cfg.Logger.Error("OnRelayErrorFunc panicked", "stream", streamID, "panic", r)
			}
		}()
		f(err, streamID, phase)
		return
	}
	p.cfg.Logger.Warn("relay failed", "stream", streamID, "phase", string(phase), "err", err)
}

// ---- the relay seam

// Relay carries the live plane across processes. Either function may be nil; which ones are set
// is which topology was built: an addressing adapter implements only Attach, a broadcast adapter
// mirrors with Publish and subscribes with Attach. The durable plane never consults it.
//
// The plane does not trust what Attach yields: every frame goes through the conform pass
// (Conform), and any violation turns the subscription into stale, which already means "read the
// durable plane".
type Relay struct {
	// Publish mirrors every frame this process's producers fan out (chunk, durable and the
	// terminal end), in order, after an open at offset 0 when the stream opens. The plane calls
	// it from one goroutine of its own, fed by a bounded outbox (Config.RelayQueue), never under
	// a stream's lock: a Publish that blocks backs up the outbox, whose overflow is dropped, and
	// never the producer. It must not call back into the plane. An error or panic is reported
	// to OnRelayErrorFunc and otherwise ignored: a relay outage may cost the live leg, never the
	// generation. A published frame becomes visible to Attach eventually, not necessarily
	// when Publish returns (a broker may capture it asynchronously); once a stream's first
	// frame is visible, a source yields every frame published after it, in order.
	Publish func(streamID string, f Frame) error

	// Attach returns the frames of a stream this process does not host, from offset from on, or
	// a nil source for absent. A source may start at the stream's first frame, or skip to the
	// chunk that holds from, preferably after yielding the open (the conform pass trims what
	// the reader holds, and opens the reader at the first chunk if the open never comes). It is consulted only after authorization passed and only on a
	// local miss, bounded by RelayAttachTimeout (a source that arrives late is closed). An
	// adapter that cannot serve from (pub/sub keeps no history) yields stale and stops.
	Attach func(ctx context.Context, streamID string, from Seq) (FrameSource, error)
}

// FrameSource is a relayed stream of frames.
type FrameSource interface {
	// Next returns the next frame, blocking until there is one or ctx ends. io.EOF means the
	// source ended; ending without a terminal frame is a truncation and reads as stale.
	Next(ctx context.Context) (Frame, error)
	// Close releases the source. The plane calls it exactly once.
	Close() error
}

// publishRelay hands a frame to the relay's outbox without blocking: it is called under the
// stream's lock, and a slow, dead or partitioned broker must never stall a producer. When the
// outbox is full the frame is dropped; the relayed readers' conform pass sees the hole and turns
// it into stale, and they follow the durable view instead. Drops are reported at most once a
// second.
func (p *Plane) publishRelay(streamID string, f Frame) {
	if p.outbox == nil {
		return
	}
	select {
	case p.outbox <- relayOut{streamID: streamID, frame: f}:
		return
	default:
	}
	n := p.dropped.Add(1)
	now := time.Now().UnixNano()
	if last := p.lastDropLog.Load(); now-last >= int64(time.Second) && p.lastDropLog.CompareAndSwap(last, now) {
		p.dropped.Add(-n)
		p.reportRelayError(fmt.Errorf("relay outbox full (%d frames): dropped %d frames; relayed readers fall back to the durable view", cap(p.outbox), n), streamID, RelayPublish)
	}
}

// relayPublisher feeds Relay.Publish from the outbox until the plane closes, then publishes
// what is still queued (a drain's end frames) and returns.
func (p *Plane) relayPublisher() {
	defer p.wg.Done()
	for {
		select {
		case o := <-p.outbox:
			p.publishNow(o)
		case <-p.ctx.Done():
			for {
				select {
				case o := <-p.outbox:
					p.publishNow(o)
				default:
					return
				}
			}
		}
	}
}

func (p *Plane) publishNow(o relayOut) {
	defer func() {
		if r := recover(); r != nil {
			p.reportRelayError(fmt.Errorf("relay publish panicked: %v", r), o.streamID, RelayPublish)
		}
	}()
	if err := p.cfg.Relay.Publish(o.streamID, o.frame); err != nil {
		p.reportRelayError(err, o.streamID, RelayPublish)
	}
}

// attachRelay asks the relay for a stream hosted elsewhere. Nil means absent: no relay, no
// Attach, the adapter declined, timed out or failed.
func (p *Plane) attachRelay(ctx context.Context, streamID string, from Seq) *Subscription {
	if p.cfg.Relay == nil || p.cfg.Relay.Attach == nil {
		return nil
	}
	// Floored like a local join, but clamped only below: the producer's length is unknown here.
	at := max(from, 0)
	type attached struct {
		src FrameSource
		err error
	}
	actx, cancel := context.WithTimeout(ctx, p.cfg.RelayAttachTimeout)
	defer cancel()
	result := make(chan attached, 1)
	go func() {
		var a attached
		defer func() {
			if r := recover(); r != nil {
				a = attached{err: fmt.Errorf("relay attach panicked: %v", r)}
			}
			result <- a
		}()
		a.src, a.err = p.cfg.Relay.Attach(actx, streamID, at)
	}()
	select {
	case a := <-result:
		if a.err != nil {
			p.reportRelayError(a.err, streamID, RelayAttach)
			return nil
		}
		if a.src == nil {
			return nil
		}
		return p.relaySubscription(streamID, at, a.src)
	case <-actx.Done():
		p.reportRelayError(fmt.Errorf("relay attach for stream %s gave no answer within %s: %w", streamID, p.cfg.RelayAttachTimeout, context.Cause(actx)), streamID, RelayAttach)
		go func() {
			// Too late to serve the reader; don't leak the adapter's channel.
			if a := <-result; a.src != nil {
				_ = a.src.Close()
			}
		}()
		return nil
	}
}

// errRelayQuiet is a relayed source that gave no first frame within RelayFirstFrame.
var errRelayQuiet = errors.New("the relay source was quiet")

// relaySubscription pumps an adapter's frames through the conform pass into a bounded reader
// queue, and tears the adapter down when either side lets go. Adapter failures become one stale.
func (p *Plane) relaySubscription(streamID string, from Seq, src FrameSource) *Subscription {
	conform := NewConform(streamID, from, func(reason string) {
		p.reportRelayError(errors.New(reason), streamID, RelayFrames)
	})
	pumpCtx, stop := context.WithCancel(p.ctx)
	sub := newSubscriber(p.cfg.MaxQueuedFrames, func(s *subscriber) {
		p.mu.Lock()
		delete(p.relayed, s)
		p.mu.Unlock()
		stop()
	})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		stop()
		_ = src.Close()
		return oneFrame(streamID, Frame{Type: FrameAbsent})
	}
	p.relayed[sub] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()

	deliver := func(frames []Frame) bool {
		for _, f := range frames {
			if f.Terminal() {
				sub.finish(f)
				return false
			}
			if !sub.offer(&queued{f: f}, nil) {
				// The same bound as a local reader.
				if st := conform.Fail(); len(st) > 0 {
					sub.finish(st[0])
				}
				return false
			}
		}
		return true
	}
	go func() {
		defer p.wg.Done()
		defer stop()
		defer func() { _ = src.Close() }()
		defer func() {
			if r := recover(); r != nil {
				p.reportRelayError(fmt.Errorf("relay source panicked: %v", r), streamID, RelayFrames)
				deliver(conform.Fail())
			}
		}()
		// The first frame is awaited for RelayFirstFrame at most: a broker that restarted
		// just after the attach may never deliver, and the reader must not wait on it for
		// ever (stale sends a join to the durable view).
		firstCtx, firstDone := context.WithTimeoutCause(pumpCtx, p.cfg.RelayFirstFrame, errRelayQuiet)
		defer firstDone()
		for first := true; ; first = false {
			nextCtx := pumpCtx
			if first {
				nextCtx = firstCtx
			}
			f, err := src.Next(nextCtx)
			if pumpCtx.Err() != nil {
				return // the reader let go, or the plane closed
			}
			if first {
				quiet := err != nil && errors.Is(context.Cause(firstCtx), errRelayQuiet)
				firstDone()
				if quiet {
					p.reportRelayError(fmt.Errorf("relay source for stream %s gave no frame within %s: %w", streamID, p.cfg.RelayFirstFrame, errRelayQuiet), streamID, RelayFrames)
					deliver(conform.Fail())
					return
				}
			}
			switch {
			case errors.Is(err, io.EOF):
				deliver(conform.End())
				return
			case err != nil:
				p.reportRelayError(err, streamID, RelayFrames)
				deliver(conform.Fail())
				return
			}
			if !deliver(conform.Feed(f)) {
				return
			}
		}
	}()
	return &Subscription{streamID: streamID, sub: sub}
}
