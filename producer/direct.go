package producer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DirectConfig configures a DirectWriter.
type DirectConfig struct {
	// Writers is the number of writer goroutines. Defaults to GOMAXPROCS, or half of it (at
	// least one) when the writers send through the ring: a writer's submission is mostly the
	// kernel's sends, and the readers' side of the machine needs the other cores (on 2 cores,
	// one writer with the ring spent 0.75–0.90 of the CPU per frame of two, with a lower p99,
	// in five pairs of runs).
	Writers int
	// KeepAlive is the interval of the ": ping" comment on an idle reader. Defaults to
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// WriteTimeout bounds each blocking write to a reader that fell behind. Defaults to
	// DefaultSSEWriteTimeout.
	WriteTimeout time.Duration
	// PlainWrites turns the send ring off: each reader's write is a write(2) of its own. By
	// default each writer sends its turn's writes through an io_uring, one system call for
	// up to 256 readers, where the kernel allows one (Linux; not under a seccomp profile
	// that filters io_uring, as container runtimes' defaults do); RingError says why not.
	PlainWrites bool
}

// DirectWriter writes live SSE frames straight to readers' sockets. The fan-out hands each
// frame to a small pool of writer goroutines, which write it (every frame a reader has queued,
// in one write) to each ready reader's socket without blocking: no goroutine per reader wakes
// for a frame, and a frame's encoding is made once for every reader. A reader whose socket
// would block leaves this fast path: a goroutine of its own, started then, writes what is left
// with blocking writes under WriteTimeout, draining its bounded queue (an overflow still ends
// it with stale, as WriteSSE does), and hands it back once it has caught up. Idle readers get
// keep-alives from the writers.
//
// A waiting reader holds no goroutine: on Linux one goroutine per DirectWriter watches every
// reader's socket for the client's hang-up (epoll, EPOLLRDHUP), so a client that goes away is
// let go at once. Elsewhere, and for a connection without a descriptor, a goroutine per reader
// waits in a read of it instead (a client says nothing after its request).
//
// A reader served here is a hijacked HTTP/1.x connection on a socket (TCP or Unix); the
// response is delimited by the connection's close (no chunked framing). The caller touches the
// connection no more once it called Start or Serve.
type DirectWriter struct {
	cfg     DirectConfig
	readers atomic.Int64
	handoff atomic.Uint64
	shards  []*directShard
	next    atomic.Uint32
	hangups *hangups // nil: a goroutine per reader watches for the hang-up
	stop    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
	// touchEvery is how stale (in nanoseconds) a reader's lastWrite may get on the fast path:
	// KeepAlive/8.
	touchEvery int64
	// sink, when set (by a benchmark, before any reader), takes every fast write in place of
	// the socket: the writer's in-process work measured without write(2).
	sink func(writer int, p []byte) (int, error)
	// ringErr is why the writers do not send through a ring (nil: they do).
	ringErr error
	// ringFault, when set (by a test, before any reader), is asked before each ring submission:
	// an error fails it as a failed io_uring_enter would.
	ringFault func() error
}

// errRingOff is RingError with DirectConfig.PlainWrites.
var errRingOff = errors.New("producer: the send ring is off (PlainWrites)")

// RingError is nil when the writers send through io_uring, else why they write with write(2).
func (d *DirectWriter) RingError() error { return d.ringErr }

// errDirectClosed ends the readers of a closed DirectWriter.
var errDirectClosed = errors.New("producer: the direct writer closed")

// NewDirectWriter starts the writer goroutines; Close stops them.
func NewDirectWriter(cfg DirectConfig) *DirectWriter {
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultSSEWriteTimeout
	}
	d := &DirectWriter{stop: make(chan struct{}), touchEvery: int64(cfg.KeepAlive / 8)}
	var first *sendRing
	if cfg.PlainWrites {
		d.ringErr = errRingOff
	} else {
		first, d.ringErr = newSendRing(uringDefaultEntries)
	}
	if cfg.Writers <= 0 {
		cfg.Writers = runtime.GOMAXPROCS(0)
		if d.ringErr == nil {
			cfg.Writers = max(1, cfg.Writers/2)
		}
	}
	d.cfg = cfg
	if h, err := newHangups(); err == nil {
		d.hangups = h
		d.stopped.Add(1)
		go func() {
			defer d.stopped.Done()
			h.run()
		}()
	}
	for i := range cfg.Writers {
		sh := &directShard{d: d, index: len(d.shards), wake: make(chan struct{}, 1), readers: map[*directReader]struct{}{}}
		switch {
		case d.ringErr != nil:
		case i == 0:
			sh.ring = first
		default:
			sh.ring, d.ringErr = newSendRing(uringDefaultEntries)
			if d.ringErr != nil { // all the writers send the same way
				for _, prev := range d.shards {
					prev.ring.close()
					prev.ring = nil
				}
			}
		}
		d.shards = append(d.shards, sh)
	}
	for _, sh := range d.shards {
		d.stopped.Add(1)
		go sh.run()
	}
	return d
}

// DirectStats counts a DirectWriter's work.
type DirectStats struct {
	// Readers being served.
	Readers int64
	// FastWrites: non-blocking writes that took everything ready (frames, or a keep-alive).
	FastWrites uint64
	// Handoffs: readers handed to a goroutine of their own because the socket would block (or
	// the connection has no descriptor to write to without blocking).
	Handoffs uint64
	// RingSends: the fast writes that went through the send ring.
	RingSends uint64
}

// Stats returns the counts so far.
func (d *DirectWriter) Stats() DirectStats {
	var fast, ring uint64
	for _, sh := range d.shards {
		fast += sh.fast.Load()
		ring += sh.ringSent.Load()
	}
	return DirectStats{Readers: d.readers.Load(), FastWrites: fast, Handoffs: d.handoff.Load(), RingSends: ring}
}

// Close ends every reader (its connection closes; its done runs) and stops the writers.
func (d *DirectWriter) Close() {
	d.once.Do(func() {
		close(d.stop)
		d.hangups.close()
		d.stopped.Wait()
		for _, sh := range d.shards {
			sh.mu.Lock()
			readers := make([]*directReader, 0, len(sh.readers))
			for r := range sh.readers {
				readers = append(readers, r)
			}
			sh.mu.Unlock()
			for _, r := range readers {
				r.finish(errDirectClosed)
			}
		}
	})
}

// Start serves sub's frames on conn and returns at once: head first (the response head and
// anything the caller had ready, written as it is), then the frames, until sub's terminal
// frame, a failed write, the client's hang-up or Close. Then conn and sub close and done runs,
// once, with nil after a terminal frame (done may run before Start returns, when the writer is
// closed). pos is the end of the text the reader has been sent: a subscription that ends
// without a terminal (the plane shut down) gets stale from there. A conn that is not a socket
// (a wrapper without its file descriptor) is served all the same, by a goroutine of its own
// with blocking writes.
func (d *DirectWriter) Start(conn net.Conn, sub *Subscription, pos Seq, head []byte, done func(error)) {
	d.start(conn, sub, pos, head, done)
}

// Serve is Start that waits for the reader to end (or for ctx's end, which ends it) and returns
// what done would get.
func (d *DirectWriter) Serve(ctx context.Context, conn net.Conn, sub *Subscription, pos Seq, head []byte) error {
	ended := make(chan error, 1)
	r := d.start(conn, sub, pos, head, func(err error) { ended <- err })
	stop := context.AfterFunc(ctx, func() { r.finish(context.Cause(ctx)) })
	defer stop()
	return <-ended
}

func (d *DirectWriter) start(conn net.Conn, sub *Subscription, pos Seq, head []byte, done func(error)) *directReader {
	var raw syscall.RawConn
	if sc, ok := conn.(syscall.Conn); ok {
		raw, _ = sc.SyscallConn()
	}
	// Deadlines are this writer's now: none on the fast path, WriteTimeout on each blocking write.
	_ = conn.SetDeadline(time.Time{})
	sh := d.shards[d.shardOf(int(d.next.Add(1)))]
	// The reader starts owned by its shard's writer, which writes the head and what is queued.
	r := &directReader{d: d, shard: sh, conn: conn, raw: raw, sub: sub, s: sub.sub, mu: &sub.sub.mu, pos: pos, done: done, rest: head}
	sub.sub.mu.Lock()
	sub.sub.owner = ownerWriter
	sub.sub.mu.Unlock()
	if raw != nil {
		r.nb.init(raw)
		r.hold = func(fd uintptr) bool {
			r.shard.heldAt(fd)
			return true
		}
	}
	r.touch()
	sh.mu.Lock()
	sh.readers[r] = struct{}{}
	sh.mu.Unlock()
	d.readers.Add(1)
	select {
	case <-d.stop:
		r.finish(errDirectClosed)
		return r
	default:
	}
	if raw == nil || !d.hangups.watch(r) {
		go r.readUntilGone()
	}
	sub.sub.setReady(r.ready)
	sh.push(r)
	return r
}

// shardOf is the writer that the n-th reader started (counting from 1) goes to: round robin.
func (d *DirectWriter) shardOf(n int) int { return n % len(d.shards) }

// readUntilGone waits in a read of the connection until the client goes away (or the reader
// ends and closes it): the hang-up watch where there is no epoll to do it.
func (r *directReader) readUntilGone() {
	var one [1]byte
	for {
		// A client says nothing after its request; anything it sends is ignored.
		if _, err := r.conn.Read(one[:]); err != nil {
			r.hangUp(fmt.Errorf("%w: %w", errClientGone, err))
			return
		}
	}
}

// errClientGone ends a reader whose client closed its side.
var errClientGone = errors.New("producer: the client went away")

// Who may touch a directReader's subscription and socket: one owner at a time.
const (
	ownerNone   = iota // on the fast path, nothing queued: the next frame makes a writer owner
	ownerWriter        // a writer is writing it (or will: it is on the shard's dirty list)
	ownerSlow          // its own goroutine is writing it, with blocking writes
)

type directReader struct {
	// Set at start, then only read: every core may cache these without passing them around.
	d     *DirectWriter
	shard *directShard
	// s is the subscription's queue. Its first cache line also holds this reader's ownership
	// (owner, pending, finished) and its link on the dirty list (nextDirty), guarded by its
	// lock (mu) as the queue is: the producer, which holds that lock when it calls ready, and
	// the writer pass that one line between them per frame.
	s    *subscriber
	mu   *sync.Mutex // &s.mu
	sub  *Subscription
	conn net.Conn
	raw  syscall.RawConn
	done func(error)

	token uint32 // the hang-up watch's key (0: not watched there)

	nb  nonblockingWriter // writes raw's socket without blocking (the owner's)
	pos Seq               // the end of the text the reader has been sent (the owner's)

	gone     error  // the client hung up while someone owned the reader: the owner ends it (under mu)
	rest     []byte // what the last write left unwritten: the owner writes it first (owner only)
	restEnds bool   // rest ends with the terminal frame (owner only)

	// over mirrors s.finished || gone != nil (set under mu, with them): an owner's check
	// between writes reads it without the lock.
	over atomic.Bool

	lastWrite atomic.Int64 // unix nanoseconds

	hold func(fd uintptr) bool // the ring's hold of the socket (direct_ring.go), bound once
}

func (r *directReader) touch() { r.lastWrite.Store(time.Now().UnixNano()) }

// ready is the subscription's hook for a frame queued on an empty queue (called with r.mu, the
// subscriber's lock, held, and the stream's when the producer queues). The writer becomes the
// reader's owner; the reader goes on its writer's list at once, or with b's flush.
func (r *directReader) ready(b *readyBatch) {
	if r.s.finished || r.s.owner != ownerNone {
		r.s.pending = true
		return
	}
	r.s.owner = ownerWriter
	if b == nil {
		r.shard.push(r)
		return
	}
	b.add(r)
}

// readyBatch gathers the readers one fan-out makes ready, a list per writer, and puts each
// list on its writer's with one compare-and-swap (and at most one wake-up) per readyBatchLen
// readers. A compare-and-swap per reader-frame moved the list's head between the producer's
// core and a writer's that was taking it meanwhile, and woke the writer more often. A reader
// in a batch is owned by its writer (ownerWriter) before the writer can see it: nothing but
// the writer's turn acts on that, and the batch is flushed before the fan-out returns.
type readyBatch struct {
	lists []readyList
}

// readyList is a writer's readers of a readyBatch, newest first, linked as the writer's list is.
type readyList struct {
	sh         *directShard
	head, tail *directReader
	n          int
}

// readyBatchLen bounds how many readers a writer waits for while the producer goes on: the
// writer starts on the first ones while the rest of a large fan-out is queued.
const readyBatchLen = 64

func (b *readyBatch) add(r *directReader) {
	i := 0
	for i < len(b.lists) && b.lists[i].sh != r.shard {
		i++
	}
	if i == len(b.lists) {
		b.lists = append(b.lists, readyList{sh: r.shard})
	}
	l := &b.lists[i]
	r.s.nextDirty = l.head
	l.head = r
	if l.tail == nil {
		l.tail = r
	}
	if l.n++; l.n == readyBatchLen {
		l.push()
	}
}

// flush puts every list gathered on its writer's.
func (b *readyBatch) flush() {
	for i := range b.lists {
		if l := &b.lists[i]; l.head != nil {
			l.push()
		}
	}
}

// push puts the list's readers on its writer's list and starts it anew.
func (l *readyList) push() {
	l.sh.pushList(l.head, l.tail)
	l.head, l.tail, l.n = nil, nil, 0
}

// release gives up ownership, unless a frame came meanwhile (then the owner goes around
// again and release reports false). A reader whose client hung up meanwhile ends here.
func (r *directReader) release() bool {
	r.mu.Lock()
	if r.s.pending && !r.s.finished && r.gone == nil {
		r.s.pending = false
		r.mu.Unlock()
		return false
	}
	r.s.pending = false
	r.s.owner = ownerNone
	gone := r.gone
	r.mu.Unlock()
	if gone != nil {
		r.finish(gone)
	}
	return true
}

// isFinished reports the reader ended, or its client gone (which ends it here, from its owner).
func (r *directReader) isFinished() bool {
	if !r.over.Load() {
		return false
	}
	r.mu.Lock()
	finished, gone := r.s.finished, r.gone
	r.mu.Unlock()
	if !finished && gone != nil {
		r.finish(gone)
		return true
	}
	return finished
}

// hangUp is the client's hang-up, seen by the watch. An owned reader is ended by its owner,
// at its next turn: an owner that has just written the terminal frame (which the client may
// read and then hang up) ends it with nil, as it should, not with the hang-up.
func (r *directReader) hangUp(err error) {
	r.mu.Lock()
	if r.s.finished {
		r.mu.Unlock()
		return
	}
	if r.s.owner != ownerNone {
		r.gone = err
		r.over.Store(true)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.finish(err)
}

// finish ends the reader with err (nil after its terminal frame), from whoever notices first:
// its owner, the hang-up watch, ctx or Close. The connection closes, so an owner still writing
// fails its next write and lets go; the subscription detaches; done runs. Idempotent.
func (r *directReader) finish(err error) {
	r.mu.Lock()
	if r.s.finished {
		r.mu.Unlock()
		return
	}
	r.s.finished = true
	r.over.Store(true)
	r.mu.Unlock()
	r.d.hangups.forget(r)
	_ = r.conn.Close()
	r.sub.Close()
	r.shard.mu.Lock()
	delete(r.shard.readers, r)
	r.shard.mu.Unlock()
	r.d.readers.Add(-1)
	if r.done != nil {
		r.done(err)
	}
}

// toSlow hands the reader to a goroutine of its own, which writes with blocking writes (the
// socket would block).
func (r *directReader) toSlow() {
	r.d.handoff.Add(1)
	r.mu.Lock()
	r.s.owner = ownerSlow
	r.mu.Unlock()
	go r.slow()
}

// slow is the goroutine of a reader that fell behind: it writes, blocking, until nothing is
// queued, then hands the reader back to the fast path.
func (r *directReader) slow() {
	var buf []byte
	for {
		if r.drain(&buf) {
			return
		}
		// The fast path's writes must not meet the last blocking write's deadline.
		if err := r.conn.SetWriteDeadline(time.Time{}); err != nil {
			r.finish(err)
			return
		}
		if r.release() {
			return
		}
	}
}

// gather appends every frame ready on the subscription (up to maxSSEBatch bytes) to buf;
// ended reports a terminal frame among them (the last), drained that the queue was found empty
// (so a frame queued since woke the reader's hook). A subscription that ended without one gets
// stale from the reader's position. It holds the queue's lock throughout (copying encoded
// frames takes no other lock), so a reader's turn locks its queue once, not once per frame plus
// the poll that finds it empty.
//
// With let, a writer's gather that finds the queue empty lets go of the reader in the same
// hold of the lock (released): the next frame makes the writer owner again through ready, and
// a write that takes all of buf needs no second lock to let go. A write that does not is
// settled by reclaim. The slow goroutine gathers without let: it lets go through release.
func (r *directReader) gather(buf []byte, let bool) (out []byte, ended, drained, released bool) {
	s := r.s
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(buf) < maxSSEBatch {
		q, end := s.pollLocked()
		if q == nil {
			if end {
				return AppendSSE(buf, Frame{Type: FrameStale, FloorSeq: r.pos}), true, true, false
			}
			if let && len(buf) > 0 && !s.finished && r.gone == nil {
				// Frames that came during the turn are in buf: pending said only that.
				s.pending = false
				s.owner = ownerNone
				return buf, false, true, true
			}
			return buf, false, true, false // nothing more is ready
		}
		if q.f.Type == FrameChunk {
			r.pos = q.f.Seq
		}
		buf = appendEncoded(buf, q.f, q.sse)
		if q.f.Terminal() {
			return buf, true, true, false
		}
	}
	return buf, false, false, false
}

// next is what the owner writes next: what the last write left (rest true), else every
// frame ready, gathered into buf. ends reports the terminal frame at its end; drained, that
// nothing else was ready, and released that gather let go of the reader then (see gather).
func (r *directReader) next(buf *[]byte, let bool) (b []byte, ends, rest, drained, released bool) {
	if len(r.rest) > 0 {
		b, ends = r.rest, r.restEnds
		r.rest, r.restEnds = nil, false
		return b, ends, true, false, false
	}
	*buf, ends, drained, released = r.gather((*buf)[:0], let)
	return *buf, ends, false, drained, released
}

// keep holds what a write left unwritten for the next turn: a copy when it is in the owner's
// buffer, which the next gather reuses.
func (r *directReader) keep(left []byte, ends, rest bool) {
	if !rest {
		left = append([]byte(nil), left...)
	}
	r.rest, r.restEnds = left, ends
}

// drain is the slow goroutine writing, blocking: what the fast path left, then every frame
// ready, until none is. It reports the reader finished.
func (r *directReader) drain(buf *[]byte) (finished bool) {
	for {
		if r.isFinished() {
			return true
		}
		b, ends, _, _, _ := r.next(buf, false)
		if len(b) == 0 {
			return false
		}
		if err := r.conn.SetWriteDeadline(time.Now().Add(r.d.cfg.WriteTimeout)); err != nil {
			r.finish(err)
			return true
		}
		if _, err := r.conn.Write(b); err != nil {
			r.finish(err)
			return true
		}
		r.touch()
		if ends {
			r.finish(nil)
			return true
		}
	}
}

// tryWrite writes b without blocking: n is what the socket took (nothing when the connection
// has no descriptor to write to this way).
func (r *directReader) tryWrite(b []byte) (n int, err error) {
	if r.raw == nil {
		return 0, nil
	}
	if r.d.sink != nil {
		return r.d.sink(r.shard.index, b)
	}
	return r.nb.Write(b)
}

// writeFast is a writer's turn with a reader it owns: what the last write left, then every
// frame ready, each in one non-blocking write, until nothing is ready; a socket that would
// block hands the rest to the reader's own goroutine.
func (r *directReader) writeFast(buf []byte) []byte {
	for {
		w, ok := r.nextWrite(&buf)
		if !ok {
			return buf
		}
		n, err := r.tryWrite(w.b)
		if !r.written(w, n, err) {
			return buf
		}
	}
}

// directWrite is one non-blocking write of a writer's turn with a reader.
type directWrite struct {
	b       []byte
	ends    bool // b ends with the terminal frame
	rest    bool // b is what the last write left (r.rest), not the writer's buffer
	drained bool // nothing else was ready when b was gathered
	// released: gather let go of the reader when it found the queue empty, so the writer
	// no longer owns it once b is written (written settles a short write with reclaim)
	released bool
}

// nextWrite is what the owner writes next (gathered into buf), or false when the reader needs
// nothing more of this turn: it ended, or nothing was ready and it was let go.
func (r *directReader) nextWrite(buf *[]byte) (directWrite, bool) {
	for {
		if r.isFinished() {
			r.release()
			return directWrite{}, false
		}
		b, ends, rest, drained, released := r.next(buf, true)
		if len(b) == 0 {
			if r.release() {
				return directWrite{}, false
			}
			continue
		}
		return directWrite{b: b, ends: ends, rest: rest, drained: drained, released: released}, true
	}
}

// written takes the outcome of writing w (n bytes of it went, or err) and reports whether the
// owner goes on with the reader: false when it ended, was handed to its own goroutine, or was
// let go with nothing left to write.
func (r *directReader) written(w directWrite, n int, err error) bool {
	if n > 0 && r.shard.now-r.lastWrite.Load() >= r.d.touchEvery {
		// The writer's clock, read once per turn, and stored only when the last store is
		// touchEvery old: an atomic store is a full barrier, dearer than the rest of a
		// reader's turn, and keep-alives need no finer (a ping comes at most touchEvery
		// early, to a reader that had frames KeepAlive minus touchEvery ago).
		r.lastWrite.Store(r.shard.now)
	}
	if w.released {
		switch {
		case err != nil:
			r.finish(err)
		case n < len(w.b):
			r.reclaim(w.b[n:])
		default:
			r.shard.writes++
		}
		return false
	}
	switch {
	case err != nil:
		r.finish(err)
		return false
	case n < len(w.b):
		r.keep(w.b[n:], w.ends, w.rest)
		r.toSlow()
		return false
	case w.ends:
		r.shard.writes++
		r.shard.countWrites() // Stats counts this reader's writes before its done runs
		r.finish(nil)
		return false
	}
	r.shard.writes++
	// The queue was empty after what was written: a frame queued since has set pending (the
	// reader is owned), which release reports, so no poll is needed to find out.
	return !(w.drained && r.release())
}

// reclaim settles a short write of bytes gathered by a gather that let go of the reader: left
// goes first, before any frame queued since. A reader nobody took meanwhile goes to a
// goroutine of its own, as a short write does on the fast path; one that a frame made the
// writer's again is on the writer's list, and the writer's next turn writes left first.
func (r *directReader) reclaim(left []byte) {
	left = append([]byte(nil), left...) // it is in the writer's buffer, which the next gather reuses
	r.mu.Lock()
	switch {
	case r.s.finished:
		r.mu.Unlock()
	case r.s.owner == ownerNone:
		r.rest = left
		r.s.owner = ownerSlow
		r.mu.Unlock()
		r.d.handoff.Add(1)
		go r.slow()
	default: // ownerWriter: on this writer's list, which only this goroutine takes
		r.rest = left
		r.mu.Unlock()
	}
}

// ping is a writer's keep-alive for an idle reader it owns.
func (r *directReader) ping(buf []byte) []byte {
	r.rest = []byte(pingComment)
	return r.writeFast(buf)
}

const pingComment = ": ping\n\n"

// directShard is one writer goroutine and its readers.
type directShard struct {
	d      *DirectWriter
	index  int           // the writer's number among the DirectWriter's
	now    int64         // unix nanoseconds at the start of the writer's turn (the writer's own)
	writes uint64        // fast writes of the writer's current turn (the writer's own), added to fast at its end
	fast   atomic.Uint64 // per writer, so writers do not share a counter's cache line
	// dirty is the readers with frames for the writer, newest first, linked through
	// nextDirty: producers push a fan-out's readers with a compare-and-swap per part of its
	// readyBatch (no lock, nor a compare-and-swap, per reader-frame), the writer takes the
	// whole list at once. A reader is on it at most once: it is pushed when a writer
	// becomes its owner, and only the writer, having taken it off, lets go of it.
	dirty atomic.Pointer[directReader]
	batch []*directReader // the writer's turn, oldest first (the writer's own)
	// ring, when set, sends a turn's writes in one submission (direct_ring.go); the rest is
	// the ring's scratch (the writer's own).
	ring     *sendRing
	ringSent atomic.Uint64 // sends that went through the ring
	ops      []ringOp
	obuf     []byte // the bytes of a submission's sends
	ringCur  []*directReader
	ringNext []*directReader
	at       int        // the op whose descriptor the nest holds next
	ringErr  error      // the last submission's failure
	mu       sync.Mutex // guards readers
	readers  map[*directReader]struct{}
	wake     chan struct{}
}

func (sh *directShard) push(r *directReader) {
	sh.pushList(r, r)
}

// pushList puts the readers from head to tail (linked through nextDirty, newest first) on the
// writer's list.
func (sh *directShard) pushList(head, tail *directReader) {
	for {
		old := sh.dirty.Load()
		tail.s.nextDirty = old
		if sh.dirty.CompareAndSwap(old, head) {
			if old == nil { // the list was empty: the writer may be waiting
				select {
				case sh.wake <- struct{}{}:
				default:
				}
			}
			return
		}
	}
}

// take empties the dirty list into sh.batch, oldest first.
func (sh *directShard) take() []*directReader {
	batch := sh.batch[:0]
	for r := sh.dirty.Swap(nil); r != nil; {
		next := r.s.nextDirty
		r.s.nextDirty = nil
		batch = append(batch, r)
		r = next
	}
	slices.Reverse(batch)
	return batch
}

func (sh *directShard) run() {
	defer sh.d.stopped.Done()
	defer func() {
		if sh.ring != nil {
			sh.ring.close()
		}
	}()
	tick := time.NewTicker(sh.d.cfg.KeepAlive / 2)
	defer tick.Stop()
	var buf []byte
	for {
		keepAlive := false
		select {
		case <-sh.d.stop:
			return
		case <-tick.C:
			keepAlive = true
		case <-sh.wake:
		}
		sh.now = time.Now().UnixNano()
		if keepAlive {
			buf = sh.keepAlive(buf)
		}
		batch := sh.take()
		if sh.ring != nil && sh.d.sink == nil {
			buf = sh.ringTurn(batch, buf)
			clear(batch)
		} else {
			for i, r := range batch {
				buf = r.writeFast(buf)
				batch[i] = nil
			}
		}
		sh.batch = batch[:0]
		sh.countWrites()
	}
}

// countWrites adds the turn's fast writes so far to the shared count (writer only).
func (sh *directShard) countWrites() {
	if sh.writes > 0 {
		sh.fast.Add(sh.writes)
		sh.writes = 0
	}
}

// keepAlive pings the shard's readers that wrote nothing for KeepAlive and that nobody owns.
func (sh *directShard) keepAlive(buf []byte) []byte {
	due := time.Now().Add(-sh.d.cfg.KeepAlive).UnixNano()
	sh.mu.Lock()
	var idle []*directReader
	for r := range sh.readers {
		if r.lastWrite.Load() <= due {
			idle = append(idle, r)
		}
	}
	sh.mu.Unlock()
	for _, r := range idle {
		r.mu.Lock()
		mine := !r.s.finished && r.s.owner == ownerNone
		if mine {
			r.s.owner = ownerWriter
		}
		r.mu.Unlock()
		if mine {
			buf = r.ping(buf)
		}
	}
	return buf
}
