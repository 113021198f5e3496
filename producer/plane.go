package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
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
	closed  bool
}

// New validates cfg and returns a Plane. It returns a *ConfigError naming the first field it
// refuses.
func New(cfg Config) (*Plane, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Plane{
		cfg:     c,
		ctx:     ctx,
		cancel:  cancel,
		live:    make(map[string]*LiveStream),
		relayed: make(map[*subscriber]struct{}),
	}, nil
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
// *OpenRefusedError when the stream is already open here or the committer refuses it, and
// ErrClosed after Close.
func (p *Plane) Open(ctx context.Context, in OpenStreamInput) (*LiveStream, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("stream %s: open: %w", in.StreamID, ErrClosed)
	}
	if _, ok := p.live[in.StreamID]; ok {
		p.mu.Unlock()
		return nil, &OpenRefusedError{StreamID: in.StreamID, Reason: "it is already open on this host"}
	}
	s := newLiveStream(p, in.StreamID, in.User, in.Meta)
	p.live[in.StreamID] = s
	p.mu.Unlock()

	// The precondition is checked once, never per write attempt: re-deciding it after a lost
	// ack would refuse the plane's own success (the row would already say streaming).
	err := p.cfg.Committer.CheckOpenable(ctx, in.StreamID)
	if err == nil {
		open := OpenInput{StreamID: in.StreamID, Meta: in.Meta, StartedAt: p.cfg.Clock.Now()}
		err = p.retry(ctx, func(ctx context.Context) error { return p.cfg.Committer.Open(ctx, open) })
	}
	if err != nil {
		p.mu.Lock()
		if p.live[in.StreamID] == s {
			delete(p.live, in.StreamID)
		}
		p.mu.Unlock()
		s.detach()
		return nil, err
	}
	p.streamDelta(1)
	// Beyond the seed: the relay hears the open too, so a reader on another instance who joins
	// before the first delta finds the stream live there instead of absent.
	p.publishRelay(in.StreamID, Frame{Type: FrameOpen, StreamID: in.StreamID})
	return s, nil
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

// Stream returns the live stream hosted here under id, if any.
func (p *Plane) Stream(id string) (*LiveStream, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.live[id]
	return s, ok
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
	streams := make([]*LiveStream, 0, len(p.live))
	for _, s := range p.live {
		streams = append(streams, s)
	}
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
	p.mu.Unlock()
	p.cancel(errPlaneClosed)
	for _, s := range streams {
		s.detach()
		p.streamDelta(-1)
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
		p.streamDelta(-1)
	}
}

// retry runs one commit step with the checkpoint retry policy: each attempt bounded by
// CommitTimeout, backoff doubling from RetryBackoff in real time. A refused open or a fence is
// a verdict, not a blip, and is returned at once.
func (p *Plane) retry(ctx context.Context, step func(context.Context) error) error {
	var last error
	for attempt := 0; attempt <= p.cfg.CheckpointRetries; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(p.cfg.RetryBackoff << (attempt - 1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return errors.Join(last, context.Cause(ctx))
			}
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.CommitTimeout)
		err := step(actx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrOpenRefused) || errors.Is(err, ErrFenced) {
			return err
		}
		last = err
		if ctx.Err() != nil {
			return last
		}
	}
	return last
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
	// terminal end), in order, after an open at offset 0 when the stream opens. It is called with the stream's lock held, so it must not block
	// and must not call back into the plane. An error or panic is reported to OnRelayErrorFunc
	// and otherwise ignored: a relay outage may cost the live leg, never the generation.
	Publish func(streamID string, f Frame) error

	// Attach returns the frames of a stream this process does not host, from offset from on, or
	// a nil source for absent. It is consulted only after authorization passed and only on a
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

func (p *Plane) publishRelay(streamID string, f Frame) {
	if p.cfg.Relay == nil || p.cfg.Relay.Publish == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.reportRelayError(fmt.Errorf("relay publish panicked: %v", r), streamID, RelayPublish)
		}
	}()
	if err := p.cfg.Relay.Publish(streamID, f); err != nil {
		p.reportRelayError(err, streamID, RelayPublish)
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
			if !sub.offer(f) {
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
		for {
			f, err := src.Next(pumpCtx)
			if pumpCtx.Err() != nil {
				return // the reader let go, or the plane closed
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
