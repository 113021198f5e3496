package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DirectConfig configures a DirectWriter.
type DirectConfig struct {
	// Writers is the number of writer goroutines. Defaults to GOMAXPROCS.
	Writers int
	// KeepAlive is the interval of the ": ping" comment on an idle reader. Defaults to
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// WriteTimeout bounds each blocking write to a reader that fell behind. Defaults to
	// DefaultSSEWriteTimeout.
	WriteTimeout time.Duration
}

// DirectWriter writes live SSE frames straight to readers' sockets. The fan-out hands each
// frame to a small pool of writer goroutines, which write it (every frame a reader has queued,
// in one write) to each ready reader's socket without blocking: no goroutine per reader wakes
// for a frame, and a frame's encoding is made once for every reader. A reader whose socket
// would block leaves this fast path: the goroutine serving it (Serve's caller) writes what is
// left with blocking writes under WriteTimeout, draining its bounded queue (an overflow still
// ends it with stale, as WriteSSE does), and hands it back once it has caught up. Idle readers
// get keep-alives from the writers.
//
// A reader served here is a hijacked HTTP/1.x connection on a socket (TCP or Unix); the
// response is delimited by the connection's close (no chunked framing). Serve's goroutine
// waits in a read of the connection (a client says nothing after its request), so a client
// that goes away is noticed at once, with no goroutine woken per frame; the caller touches the
// connection no more once it called Serve.
type DirectWriter struct {
	cfg     DirectConfig
	readers atomic.Int64
	fast    atomic.Uint64
	handoff atomic.Uint64
	shards  []*directShard
	next    atomic.Uint32
	stop    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

// errDirectClosed ends the readers of a closed DirectWriter.
var errDirectClosed = errors.New("producer: the direct writer closed")

// NewDirectWriter starts the writer goroutines; Close stops them.
func NewDirectWriter(cfg DirectConfig) *DirectWriter {
	if cfg.Writers <= 0 {
		cfg.Writers = runtime.GOMAXPROCS(0)
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultSSEWriteTimeout
	}
	d := &DirectWriter{cfg: cfg, stop: make(chan struct{})}
	for range cfg.Writers {
		sh := &directShard{d: d, wake: make(chan struct{}, 1), readers: map[*directReader]struct{}{}}
		d.shards = append(d.shards, sh)
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
	// Handoffs: readers handed to their Serve goroutine because the socket would block (or
	// the connection has no descriptor to write to without blocking).
	Handoffs uint64
}

// Stats returns the counts so far.
func (d *DirectWriter) Stats() DirectStats {
	return DirectStats{Readers: d.readers.Load(), FastWrites: d.fast.Load(), Handoffs: d.handoff.Load()}
}

// Close ends every reader (its connection closes; Serve returns) and stops the writers.
func (d *DirectWriter) Close() {
	d.once.Do(func() {
		close(d.stop)
		d.stopped.Wait()
		for _, sh := range d.shards {
			sh.mu.Lock()
			readers := make([]*directReader, 0, len(sh.readers))
			for r := range sh.readers {
				readers = append(readers, r)
			}
			sh.mu.Unlock()
			for _, r := range readers {
				r.abort(errDirectClosed)
			}
		}
	})
}

// Serve writes head (the response head and anything the caller had ready, written first, as
// it is), then sub's frames to conn, until sub's terminal frame, a failed write, ctx's end or
// Close; then it closes conn and sub. pos is the end of the text the reader has been sent: a
// subscription that ends without a terminal (the plane shut down) gets stale from there. It
// returns nil after a terminal frame. A conn that is not a socket (a wrapper without its file
// descriptor) is served all the same, each frame by Serve's goroutine with blocking writes.
func (d *DirectWriter) Serve(ctx context.Context, conn net.Conn, sub *Subscription, pos Seq, head []byte) error {
	var raw syscall.RawConn
	if sc, ok := conn.(syscall.Conn); ok {
		raw, _ = sc.SyscallConn()
	}
	// Deadlines are this writer's now: none on the fast path, WriteTimeout on each blocking write.
	_ = conn.SetDeadline(time.Time{})
	sh := d.shards[int(d.next.Add(1))%len(d.shards)]
	r := &directReader{d: d, shard: sh, conn: conn, raw: raw, sub: sub, pos: pos, owner: ownerServe, rest: head}
	r.touch()
	defer sub.Close()
	defer conn.Close()
	sh.mu.Lock()
	sh.readers[r] = struct{}{}
	sh.mu.Unlock()
	d.readers.Add(1)
	defer func() {
		sh.mu.Lock()
		delete(sh.readers, r)
		sh.mu.Unlock()
		d.readers.Add(-1)
	}()
	select {
	case <-d.stop:
		return errDirectClosed
	default:
	}
	sub.sub.setReady(r.ready)
	stopAbort := context.AfterFunc(ctx, func() { r.abort(context.Cause(ctx)) })
	defer stopAbort()
	var buf []byte
	for {
		// This goroutine owns the reader: it writes, blocking, until nothing is queued.
		if done, err := r.drain(&buf); done {
			return err
		}
		// The fast path's writes must not meet the last blocking write's deadline.
		if err := conn.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
		if r.release() {
			// Back on the fast path. This goroutine waits in a read of the connection, which
			// wakes it when the client goes away, and which a writer cuts short (a read
			// deadline in the past) when it hands the reader back or ends it.
			if err := r.await(); err != nil {
				r.abort(err)
			}
			r.mu.Lock()
			done, err := r.done, r.err
			r.mu.Unlock()
			if done {
				return err
			}
		}
	}
}

// await blocks until the reader is handed back to Serve's goroutine or ended (nil), or the
// client closed its side (the read's error).
func (r *directReader) await() error {
	var one [1]byte
	for {
		// The deadline is cleared before the state is read: a writer changes the state, then
		// sets the deadline, so a hand-back after this check still cuts the read short.
		if err := r.conn.SetReadDeadline(time.Time{}); err != nil {
			return err
		}
		r.mu.Lock()
		back := r.done || r.owner == ownerServe
		r.mu.Unlock()
		if back {
			return nil
		}
		_, err := r.conn.Read(one[:])
		switch {
		case err == nil:
			// The client sent something after its request: an SSE client has nothing to say.
		case errors.Is(err, os.ErrDeadlineExceeded):
		default:
			return fmt.Errorf("producer: the client went away: %w", err)
		}
	}
}

// Who may touch a directReader's subscription and socket: one owner at a time.
const (
	ownerNone   = iota // on the fast path, nothing queued: the next frame makes a writer owner
	ownerWriter        // a writer is writing it (or will: it is on the shard's dirty list)
	ownerServe         // Serve's goroutine is writing it, with blocking writes
)

type directReader struct {
	d     *DirectWriter
	shard *directShard
	conn  net.Conn
	raw   syscall.RawConn
	sub   *Subscription
	pos   Seq

	mu      sync.Mutex
	owner   int
	pending bool // a frame came while someone owned the reader: the owner goes around again
	done    bool
	err     error
	rest    []byte // what the fast path could not write, for Serve's goroutine (owner only)
	ended   bool   // rest ends with the terminal frame (owner only)

	lastWrite atomic.Int64 // unix nanoseconds
}

func (r *directReader) touch() { r.lastWrite.Store(time.Now().UnixNano()) }

// ready is the subscription's hook for a frame queued on an empty queue (called with the
// stream's and the subscriber's locks held: it only takes r.mu and the shard's list lock).
func (r *directReader) ready() {
	r.mu.Lock()
	if r.done || r.owner != ownerNone {
		r.pending = true
		r.mu.Unlock()
		return
	}
	r.owner = ownerWriter
	r.mu.Unlock()
	r.shard.push(r)
}

// release gives up ownership, unless a frame came meanwhile (then the owner goes around
// again and release reports false).
func (r *directReader) release() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending && !r.done {
		r.pending = false
		return false
	}
	r.pending = false
	r.owner = ownerNone
	return true
}

// toServe hands the reader to Serve's goroutine (the socket would block).
func (r *directReader) toServe() {
	r.d.handoff.Add(1)
	r.mu.Lock()
	r.owner = ownerServe
	r.mu.Unlock()
	r.signal()
}

// signal cuts Serve's read short, so it sees the reader handed back or ended.
func (r *directReader) signal() {
	_ = r.conn.SetReadDeadline(time.Unix(1, 0))
}

// end marks the reader done with err (nil after its terminal frame) and wakes Serve.
func (r *directReader) end(err error) {
	r.mu.Lock()
	if !r.done {
		r.done, r.err = true, err
	}
	r.mu.Unlock()
	r.signal()
}

// abort ends the reader from outside (ctx, Close): its connection closes, so whoever owns it
// fails its next write.
func (r *directReader) abort(err error) {
	r.end(err)
	_ = r.conn.Close()
}

// gather appends every frame ready on the subscription (up to maxSSEBatch bytes) to buf;
// ended reports a terminal frame among them (the last). A subscription that ended without
// one gets stale from the reader's position.
func (r *directReader) gather(buf []byte) (out []byte, ended bool) {
	for len(buf) < maxSSEBatch {
		f, enc, err := r.sub.NextEncoded(ready)
		if errors.Is(err, io.EOF) {
			return AppendSSE(buf, Frame{Type: FrameStale, FloorSeq: r.pos}), true
		}
		if err != nil {
			return buf, false // nothing more is ready
		}
		if f.Type == FrameChunk {
			r.pos = f.Seq
		}
		buf = appendEncoded(buf, f, enc)
		if f.Terminal() {
			return buf, true
		}
	}
	return buf, false
}

// drain is Serve's goroutine writing, blocking: what the fast path left, then every frame
// ready, until none is. done reports the reader finished (err nil after its terminal frame).
func (r *directReader) drain(buf *[]byte) (done bool, err error) {
	for {
		r.mu.Lock()
		done, err = r.done, r.err
		r.mu.Unlock()
		if done {
			return true, err
		}
		b, ended := r.rest, r.ended
		r.rest, r.ended = nil, false
		if len(b) == 0 {
			*buf, ended = r.gather((*buf)[:0])
			b = *buf
		}
		if len(b) == 0 {
			return false, nil
		}
		if err := r.conn.SetWriteDeadline(time.Now().Add(r.d.cfg.WriteTimeout)); err != nil {
			r.end(err)
			return true, err
		}
		if _, err := r.conn.Write(b); err != nil {
			r.end(err)
			return true, err
		}
		r.touch()
		if ended {
			r.end(nil)
			return true, nil
		}
	}
}

// tryWrite writes b without blocking: n is what the socket took (nothing when the connection
// has no descriptor to write to this way).
func (r *directReader) tryWrite(b []byte) (n int, err error) {
	if r.raw == nil {
		return 0, nil
	}
	var werr error
	cerr := r.raw.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			m, e := syscall.Write(int(fd), b)
			if m > 0 {
				n += m
				b = b[m:]
			}
			switch {
			case errors.Is(e, syscall.EINTR):
				continue
			case errors.Is(e, syscall.EAGAIN):
				return true
			case e != nil:
				werr = e
				return true
			case m <= 0:
				return true
			}
		}
		return true
	})
	if werr != nil {
		return n, werr
	}
	return n, cerr
}

// writeFast is a writer's turn with a reader it owns: every frame ready, in one non-blocking
// write, until none is ready; a socket that would block hands the rest to Serve's goroutine.
func (r *directReader) writeFast(buf []byte) []byte {
	for {
		r.mu.Lock()
		done := r.done
		r.mu.Unlock()
		if done {
			r.release()
			return buf
		}
		var ended bool
		buf, ended = r.gather(buf[:0])
		if len(buf) == 0 {
			if r.release() {
				return buf
			}
			continue
		}
		n, err := r.tryWrite(buf)
		if n > 0 {
			r.touch()
		}
		switch {
		case err != nil:
			r.end(err)
			return buf
		case n < len(buf):
			r.rest, r.ended = append([]byte(nil), buf[n:]...), ended
			r.toServe()
			return buf
		case ended:
			r.d.fast.Add(1)
			r.end(nil)
			return buf
		}
		r.d.fast.Add(1)
	}
}

// ping is a writer's keep-alive for an idle reader it owns.
func (r *directReader) ping(buf []byte) []byte {
	ping := []byte(pingComment)
	n, err := r.tryWrite(ping)
	switch {
	case err != nil:
		r.end(err)
		return buf
	case n < len(ping):
		r.rest = ping[n:]
		r.toServe()
		return buf
	}
	r.touch()
	r.d.fast.Add(1)
	return r.writeFast(buf)
}

const pingComment = ": ping\n\n"

// directShard is one writer goroutine and its readers.
type directShard struct {
	d       *DirectWriter
	mu      sync.Mutex
	dirty   []*directReader
	spare   []*directReader
	readers map[*directReader]struct{}
	wake    chan struct{}
}

func (sh *directShard) push(r *directReader) {
	sh.mu.Lock()
	sh.dirty = append(sh.dirty, r)
	first := len(sh.dirty) == 1
	sh.mu.Unlock()
	if first {
		select {
		case sh.wake <- struct{}{}:
		default:
		}
	}
}

func (sh *directShard) run() {
	defer sh.d.stopped.Done()
	tick := time.NewTicker(sh.d.cfg.KeepAlive / 2)
	defer tick.Stop()
	var buf []byte
	for {
		select {
		case <-sh.d.stop:
			return
		case <-tick.C:
			buf = sh.keepAlive(buf)
		case <-sh.wake:
		}
		sh.mu.Lock()
		batch := sh.dirty
		sh.dirty, sh.spare = sh.spare[:0], nil
		sh.mu.Unlock()
		for i, r := range batch {
			buf = r.writeFast(buf)
			batch[i] = nil
		}
		sh.mu.Lock()
		if sh.spare == nil {
			sh.spare = batch[:0]
		}
		sh.mu.Unlock()
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
		mine := !r.done && r.owner == ownerNone
		if mine {
			r.owner = ownerWriter
		}
		r.mu.Unlock()
		if mine {
			buf = r.ping(buf)
		}
	}
	return buf
}
