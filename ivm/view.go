package ivm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

// DefaultMaxEntries is how many settled (not streaming) messages the view keeps in memory.
const DefaultMaxEntries = 10_000

// DefaultMaxBytes is how much text the settled messages the view keeps in memory may hold.
const DefaultMaxBytes = 256 << 20

// ErrNotFound: no message row has that id.
var ErrNotFound = errors.New("ivm: no such message")

// Message is the view of one message: its durable text and state.
type Message struct {
	ID string
	// Text is the durable text: the body, then the chunks contiguous after it. It is always a
	// prefix of the produced text (contract P).
	Text      string
	Seq       producer.Seq // len16(Text)
	Status    producer.Status
	Error     string
	UpdatedAt time.Time // commit time of the last change applied, or the load time

	text producer.TextView // Text, indexed by UTF-16 offset
}

// TextSlice is Text between two UTF-16 offsets, each moved down to a character boundary, as
// producer.Slice16 computes it, but through the view's index: O(log n), not a scan of Text.
func (m Message) TextSlice(from, to producer.Seq) string {
	if len(m.text.String()) != len(m.Text) { // a Message built by hand
		return producer.Slice16(m.Text, from, to)
	}
	return m.text.Slice(from, to)
}

// TextFloor moves at down to a character boundary of Text, clamped to [0, Seq].
func (m Message) TextFloor(at producer.Seq) producer.Seq {
	if len(m.text.String()) != len(m.Text) {
		return producer.Len16(producer.Slice16(m.Text, 0, at))
	}
	return m.text.Floor(at)
}

// Config configures a View.
type Config struct {
	// Subscriber delivers the reader's transactions, in commit order (GoChannel with
	// BlockPublishUntilSubscriberAck, or a broker's ordered consumer). The view subscribes but
	// never closes it. Required.
	Subscriber message.Subscriber
	// Topic is the reader's topic. Defaults to cdc.DefaultTopic.
	Topic string
	// Pool reads snapshots and misses. Required.
	Pool *pgxpool.Pool
	// Tables maps the tables. Defaults to checkpoint.DefaultTables().
	Tables *checkpoint.Tables
	// MaxEntries bounds the settled messages kept in memory; the least recently used beyond it
	// are evicted and read from the database on their next access. Streaming messages are
	// always kept. Defaults to DefaultMaxEntries.
	MaxEntries int
	// MaxBytes bounds the text the settled messages kept in memory hold, in bytes (a message
	// counts its body, its chunks and its exposed text): a few very long answers evict the
	// least recently used as many short ones do. Defaults to DefaultMaxBytes.
	MaxBytes int
	// PoisonPublisher, if set, receives transactions that cannot be decoded, on Topic+".poison".
	// Without it they are logged and dropped (they could never be applied).
	PoisonPublisher message.Publisher
	// OnApplyFunc, if set, observes every applied transaction and its commit-to-apply lag.
	OnApplyFunc func(tx *cdc.Tx, lag time.Duration)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// View is the incremental view of message text, driven by the cdc reader's transactions. See
// the package comment for its consistency model.
type View struct {
	cfg    Config
	t      checkpoint.Tables
	sqlRow string
	sqlChk string
	sqlAll string

	mu      sync.Mutex
	entries map[string]*entry
	settled *list.List // settled entries, most recently used first
	held    int        // the bytes the settled entries hold (entry.held)
	ready   chan struct{}

	router  *message.Router
	runDone chan error
	parts   cdc.Assembler // the handler's alone: messages are handled one at a time, in order
}

type chunk struct {
	seq  producer.Seq // END offset
	text string
}

// entry is one message's state, mirroring its rows: the body and the chunk set. Applying the
// same row changes in commit order yields the same state as the database's.
type entry struct {
	id      string
	body    string
	chunks  []chunk // sorted by seq
	rowSeq  producer.Seq
	status  producer.Status
	errMsg  string
	updated time.Time
	lastLSN pglogrepl.LSN
	snap    *snapshot // transactions visible here are already in the loaded state
	loading bool
	pending []*cdc.Tx
	buf     *producer.Text    // the exposed text, appended to as chunks arrive
	shared  bool              // buf still holds body's own bytes (nothing appended since)
	view    producer.TextView // buf as last settled
	seq     producer.Seq
	changed chan struct{} // closed on every change, then replaced
	elem    *list.Element // in settled when not streaming
	held    int           // the bytes counted in View.held while settled
	// chunkBytes is the bytes of text the chunks hold, kept as they come and go: size is
	// asked on every change of a settled entry, and an open Durable Streams text stream keeps
	// one chunk per append, so walking them would make each event cost the stream's length.
	chunkBytes int
}

// size is what the entry holds in memory, in bytes of text.
func (e *entry) size() int {
	n := e.view.Bytes() + e.chunkBytes
	if !e.shared {
		n += len(e.body)
	}
	return n
}

// addChunk inserts c in seq order, unless a chunk of its seq is held already (a redelivery).
func (e *entry) addChunk(c chunk) {
	i := sort.Search(len(e.chunks), func(i int) bool { return e.chunks[i].seq >= c.seq })
	if i < len(e.chunks) && e.chunks[i].seq == c.seq {
		return
	}
	e.chunks = slices.Insert(e.chunks, i, c)
	e.chunkBytes += len(c.text)
}

// removeChunks removes the chunks whose seq is in gone, in one pass: a transaction that
// deletes a stream deletes every chunk it has, and removing them one at a time would cost the
// square of their number.
func (e *entry) removeChunks(gone map[producer.Seq]bool) {
	e.chunks = slices.DeleteFunc(e.chunks, func(c chunk) bool {
		if gone[c.seq] {
			e.chunkBytes -= len(c.text)
			return true
		}
		return false
	})
	clear(gone)
}

// New validates cfg.
func New(cfg Config) (*View, error) {
	if cfg.Subscriber == nil {
		return nil, &ConfigError{Field: "Subscriber", Reason: "is required"}
	}
	if cfg.Pool == nil {
		return nil, &ConfigError{Field: "Pool", Reason: "is required"}
	}
	if cfg.Topic == "" {
		cfg.Topic = cdc.DefaultTopic
	}
	if cfg.MaxEntries < 0 {
		return nil, &ConfigError{Field: "MaxEntries", Reason: "must not be negative"}
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxBytes < 0 {
		return nil, &ConfigError{Field: "MaxBytes", Reason: "must not be negative"}
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t, err := checkpoint.ResolveTables(cfg.Tables)
	if err != nil {
		return nil, err
	}
	reads := checkpoint.ViewReads(t)
	v := &View{
		cfg:     cfg,
		t:       t,
		entries: map[string]*entry{},
		settled: list.New(),
		ready:   make(chan struct{}),
	}
	v.sqlRow, v.sqlChk, v.sqlAll = reads.Row, reads.Chunks, reads.Streaming
	return v, nil
}

// Start subscribes, loads a snapshot of every streaming message, and returns once the view is
// consistent. It runs the router in a goroutine it owns until Stop.
func (v *View) Start(ctx context.Context) error {
	// The router narrates its lifecycle at INFO; for a library that is debug detail.
	wmLogger := watermill.NewSlogLoggerWithLevelMapping(v.cfg.Logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, wmLogger)
	if err != nil {
		return err
	}
	router.AddMiddleware(middleware.Recoverer)
	if v.cfg.PoisonPublisher != nil {
		poison, err := middleware.PoisonQueueWithFilter(v.cfg.PoisonPublisher, v.cfg.Topic+".poison", func(err error) bool {
			var perm *permanentError
			return errors.As(err, &perm)
		})
		if err != nil {
			return err
		}
		router.AddMiddleware(poison)
	}
	// A transient failure (a database read for a loading entry) is retried; application is
	// idempotent, so a retried or redelivered transaction changes nothing twice.
	router.AddMiddleware(middleware.Retry{MaxRetries: 5, InitialInterval: 20 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2, Logger: wmLogger}.Middleware)
	router.AddConsumerHandler("rindle-ivm", v.cfg.Topic, borrowed{v.cfg.Subscriber}, v.handle)
	v.router = router
	v.runDone = make(chan error, 1)
	go func() { v.runDone <- router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-router.Running():
	case err := <-v.runDone:
		return fmt.Errorf("ivm: router: %w", err)
	case <-ctx.Done():
		_ = router.Close()
		v.awaitRouter()
		return context.Cause(ctx)
	}
	// Subscribed first, snapshot second: every transaction not visible in the snapshot is
	// delivered after this point (the handler holds them until ready).
	if err := v.bootstrap(ctx); err != nil {
		_ = router.Close()
		v.awaitRouter()
		return err
	}
	close(v.ready)
	return nil
}

// awaitRouter waits for the closed router's Run to return, and logs its error: the view is
// stopping, so there is no caller left to hand it to.
func (v *View) awaitRouter() {
	if err := <-v.runDone; err != nil {
		v.cfg.Logger.Warn("ivm: the router ended with an error", "err", err)
	}
}

// Stop closes the router and returns once its handler has. Safe to call twice.
func (v *View) Stop() {
	if v.router == nil {
		return
	}
	_ = v.router.Close()
	if v.runDone != nil {
		v.awaitRouter()
		v.runDone = nil
	}
}

// Get returns a message's view, reading it from the database on a miss.
func (v *View) Get(ctx context.Context, id string) (Message, error) {
	e, err := v.entryFor(ctx, id)
	if err != nil {
		return Message{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return e.message(), nil
}

// Wait returns once the message's durable length passes after or its status is terminal (a
// long-poll), or when ctx ends, with the latest view and ctx's error.
func (v *View) Wait(ctx context.Context, id string, after producer.Seq) (Message, error) {
	return v.WaitFunc(ctx, id, func(m Message) bool { return m.Seq > after || m.Status.Terminal() })
}

// WaitFunc returns the message once done holds for it, re-checking after every change to the
// entry; at ctx's end it returns the latest message with ctx's cause.
func (v *View) WaitFunc(ctx context.Context, id string, done func(Message) bool) (Message, error) {
	for {
		e, err := v.entryFor(ctx, id)
		if err != nil {
			return Message{}, err
		}
		v.mu.Lock()
		m, ch := e.message(), e.changed
		v.mu.Unlock()
		if done(m) {
			return m, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return m, context.Cause(ctx)
		}
	}
}

// Len is how many messages the view holds in memory.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.entries)
}

func (e *entry) message() Message {
	return Message{ID: e.id, Text: e.view.String(), Seq: e.seq, Status: e.status, Error: e.errMsg, UpdatedAt: e.updated, text: e.view}
}

// ---- applying transactions

// borrowed keeps the router from closing a Subscriber the view does not own: a watermill
// router closes its handlers' subscribers, and a broker shared with other consumers (or a
// restarted view) must outlive this one. The subscription itself ends with the router's context.
type borrowed struct{ message.Subscriber }

func (borrowed) Close() error { return nil }

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

func (v *View) handle(msg *message.Message) error {
	payload, err := v.parts.Add(msg.Payload, msg.Metadata)
	if err == nil && payload == nil {
		return nil // a part of a transaction still being gathered
	}
	var tx *cdc.Tx
	if err == nil {
		tx, err = cdc.DecodeTx(payload)
	}
	if err != nil {
		if v.cfg.PoisonPublisher == nil {
			v.cfg.Logger.Error("ivm: dropping an undecodable transaction", "uuid", msg.UUID, "err", err)
			return nil
		}
		return &permanentError{err}
	}
	select {
	case <-v.ready:
	case <-msg.Context().Done():
		return msg.Context().Err()
	}
	v.apply(tx)
	if f := v.cfg.OnApplyFunc; f != nil {
		f(tx, time.Since(tx.CommitTime))
	}
	return nil
}

// apply routes a transaction's events to the entries they touch.
func (v *View) apply(tx *cdc.Tx) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range tx.Events {
		if ev.Kind == cdc.Truncated {
			// The tables were emptied: nothing held is true any more. Misses reload.
			for _, e := range v.entries {
				v.dropLocked(e)
			}
			return
		}
	}
	// Each message's events, in commit order, from one pass over the transaction: one that
	// touches thousands of messages (a group commit's, a reaper's batch) costs its events,
	// not its events times its messages.
	var ids []string
	byID := map[string][]*cdc.Event{}
	for i := range tx.Events {
		ev := &tx.Events[i]
		if _, ok := byID[ev.StreamID]; !ok {
			ids = append(ids, ev.StreamID)
		}
		byID[ev.StreamID] = append(byID[ev.StreamID], ev)
	}
	for _, id := range ids {
		evs := byID[id]
		e := v.entries[id]
		switch {
		case e == nil:
			// Only a new row starts an entry from events alone; anything else about a message
			// the view does not hold is read from the database when someone asks.
			if ev := evs[0]; ev.Kind == cdc.MessageChanged && ev.Created {
				e = &entry{id: id, changed: make(chan struct{})}
				v.entries[id] = e
				v.applyToLocked(e, tx, evs)
			}
		case e.loading:
			e.pending = append(e.pending, tx)
		default:
			v.applyToLocked(e, tx, evs)
		}
	}
	v.evictLocked()
}

// eventsOf is tx's events for the message id, in commit order.
func eventsOf(tx *cdc.Tx, id string) []*cdc.Event {
	var evs []*cdc.Event
	for i := range tx.Events {
		if tx.Events[i].StreamID == id {
			evs = append(evs, &tx.Events[i])
		}
	}
	return evs
}

// applyToLocked applies evs, tx's events for e, unless e already reflects tx: it was in e's
// load snapshot, or e has applied it (a redelivery after a reader restart).
func (v *View) applyToLocked(e *entry, tx *cdc.Tx, evs []*cdc.Event) {
	if e.snap != nil && e.snap.visible(tx.Xid) {
		return
	}
	if tx.EndLSN != 0 && tx.EndLSN <= e.lastLSN {
		return
	}
	deleted, reload, appendOnly := false, false, true
	// The chunks tx deletes, removed together (before any later append of tx, which keeps
	// commit order) rather than one at a time.
	var gone map[producer.Seq]bool
	for _, ev := range evs {
		switch ev.Kind {
		case cdc.ChunkAppended:
			if len(gone) > 0 {
				e.removeChunks(gone)
			}
			e.addChunk(chunk{seq: ev.Seq, text: ev.Text})
		case cdc.ChunkDeleted:
			if !deleted { // a deleted message's entry is dropped whole below
				if gone == nil {
					gone = map[producer.Seq]bool{}
				}
				gone[ev.Seq] = true
			}
			appendOnly = false
		case cdc.MessageChanged:
			e.rowSeq, e.status = ev.Seq, producer.Status(ev.Status)
			e.errMsg = ""
			if ev.Error != nil {
				e.errMsg = *ev.Error
			}
			reload = reload || ev.BodyOmitted
			if ev.Body != nil && *ev.Body != e.body {
				e.body = *ev.Body
				appendOnly = false
			}
		case cdc.MessageDeleted:
			deleted = true
		}
	}
	if len(gone) > 0 {
		e.removeChunks(gone)
	}
	e.lastLSN = tx.EndLSN
	e.updated = tx.CommitTime
	if deleted || reload {
		// A body the event left out (too long to carry) is read from the row by the next
		// reader: dropping the entry wakes every waiter, which loads it again.
		v.dropLocked(e)
		return
	}
	v.settleLocked(e, appendOnly)
}

// settleLocked recomputes the exposed text and wakes waiters. The text is the body followed by
// the chunks contiguous after it: a gap (which the guarded append never writes) is not shown,
// so the view never exposes anything but a prefix of the produced text. appendOnly says the
// change only added chunks, so the exposed text can be extended instead of rebuilt.
func (v *View) settleLocked(e *entry, appendOnly bool) {
	// Appending costs what the checkpoint added; only a changed body (compaction, a load)
	// rebuilds the text.
	if !appendOnly || e.buf == nil {
		// The body's own bytes, not a copy: a sealed message's text is held once.
		e.buf, e.shared = producer.TextOf(e.body), true
	}
	at := e.buf.Len()
	// The chunks are sorted by seq: skip those the text already holds without measuring them.
	first := sort.Search(len(e.chunks), func(i int) bool { return e.chunks[i].seq > at })
	for _, c := range e.chunks[first:] {
		if c.seq-producer.Len16(c.text) != at {
			break
		}
		e.buf.Append(c.text)
		e.shared = false
		at = c.seq
	}
	e.view, e.seq = e.buf.View(), at
	switch {
	case e.status == producer.StatusStreaming:
		if e.elem != nil {
			v.settled.Remove(e.elem)
			e.elem = nil
			v.held -= e.held
			e.held = 0
		}
	case e.elem == nil:
		e.elem = v.settled.PushFront(e)
	default:
		v.settled.MoveToFront(e.elem)
	}
	if e.elem != nil {
		n := e.size()
		v.held += n - e.held
		e.held = n
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

func (v *View) dropLocked(e *entry) {
	if v.entries[e.id] == e {
		delete(v.entries, e.id)
	}
	if e.elem != nil {
		v.settled.Remove(e.elem)
		e.elem = nil
		v.held -= e.held
		e.held = 0
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

func (v *View) evictLocked() {
	for v.settled.Len() > v.cfg.MaxEntries || (v.held > v.cfg.MaxBytes && v.settled.Len() > 0) {
		v.dropLocked(v.settled.Back().Value.(*entry))
	}
}

// ---- loading from the database

// snapshot is a transaction snapshot (pg_current_snapshot): a transaction is visible in it when
// it committed before the snapshot was taken. Compared in 32 bits, as pgoutput sends xids.
type snapshot struct {
	xmin, xmax uint32
	xip        map[uint32]bool
}

func parseSnapshot(s string) (*snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("ivm: snapshot %q is not xmin:xmax:xip", s)
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("ivm: snapshot %q: %w", s, err)
	}
	snap := &snapshot{xmin: uint32(xmin), xmax: uint32(xmax), xip: map[uint32]bool{}}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ivm: snapshot %q: %w", s, err)
			}
			snap.xip[uint32(n)] = true
		}
	}
	return snap, nil
}

// precedes is xid order modulo 2^32, as PostgreSQL's TransactionIdPrecedes.
func precedes(a, b uint32) bool { return int32(a-b) < 0 }

func (s *snapshot) visible(xid uint32) bool {
	if precedes(xid, s.xmin) {
		return true
	}
	return precedes(xid, s.xmax) && !s.xip[xid]
}

// readTx runs f in a read-only REPEATABLE READ transaction and returns the snapshot it saw.
func (v *View) readTx(ctx context.Context, f func(tx pgx.Tx) error) (*snapshot, error) {
	var snap *snapshot
	err := pgx.BeginTxFunc(ctx, v.cfg.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var s string
		// The first statement fixes the transaction's snapshot; this one reads it.
		if err := tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&s); err != nil {
			return err
		}
		var err error
		if snap, err = parseSnapshot(s); err != nil {
			return err
		}
		return f(tx)
	})
	return snap, err
}

func (v *View) readChunks(ctx context.Context, tx pgx.Tx, byID map[string]*entry) error {
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	rows, err := tx.Query(ctx, v.sqlChk, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, text string
		var seq int64
		if err := rows.Scan(&id, &seq, &text); err != nil {
			return err
		}
		e := byID[id]
		e.chunks = append(e.chunks, chunk{seq: producer.Seq(seq), text: text})
		e.chunkBytes += len(text)
	}
	return rows.Err()
}

// bootstrap loads every streaming message in one snapshot.
func (v *View) bootstrap(ctx context.Context) error {
	loaded := map[string]*entry{}
	snap, err := v.readTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, v.sqlAll)
		if err != nil {
			return err
		}
		for rows.Next() {
			e := &entry{changed: make(chan struct{})}
			var seq int64
			var status string
			var errMsg *string
			if err := rows.Scan(&e.id, &e.body, &seq, &status, &errMsg); err != nil {
				rows.Close()
				return err
			}
			e.rowSeq, e.status = producer.Seq(seq), producer.Status(status)
			if errMsg != nil {
				e.errMsg = *errMsg
			}
			loaded[e.id] = e
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return v.readChunks(ctx, tx, loaded)
	})
	if err != nil {
		return fmt.Errorf("ivm: bootstrap: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	for id, e := range loaded {
		e.snap, e.updated = snap, now
		v.entries[id] = e
		v.settleLocked(e, false)
	}
	return nil
}

// entryFor returns id's entry, loading it from the database on a miss. Events that arrive
// while it loads are held and applied after it, filtered by the load's snapshot, so nothing is
// missed and nothing is applied twice.
func (v *View) entryFor(ctx context.Context, id string) (*entry, error) {
	select {
	case <-v.ready:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	for {
		v.mu.Lock()
		e := v.entries[id]
		if e != nil && !e.loading {
			if e.elem != nil {
				v.settled.MoveToFront(e.elem)
			}
			v.mu.Unlock()
			return e, nil
		}
		if e != nil { // another caller is loading it: wait for that
			ch := e.changed
			v.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		e = &entry{id: id, loading: true, changed: make(chan struct{})}
		v.entries[id] = e
		v.mu.Unlock()
		return v.load(ctx, e)
	}
}

func (v *View) load(ctx context.Context, e *entry) (*entry, error) {
	found := false
	snap, err := v.readTx(ctx, func(tx pgx.Tx) error {
		var seq int64
		var status string
		var errMsg *string
		err := tx.QueryRow(ctx, v.sqlRow, e.id).Scan(&e.body, &seq, &status, &errMsg)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		e.rowSeq, e.status = producer.Seq(seq), producer.Status(status)
		if errMsg != nil {
			e.errMsg = *errMsg
		}
		return v.readChunks(ctx, tx, map[string]*entry{e.id: e})
	})
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil || !found {
		v.dropLocked(e)
		if err != nil {
			return nil, fmt.Errorf("ivm: load message %s: %w", e.id, err)
		}
		return nil, fmt.Errorf("%w: %s", ErrNotFound, e.id)
	}
	e.snap, e.loading, e.updated = snap, false, time.Now()
	pending := e.pending
	e.pending = nil
	v.settleLocked(e, false)
	for _, tx := range pending {
		v.applyToLocked(e, tx, eventsOf(tx, e.id))
	}
	v.evictLocked() // may evict e itself: this read is still served from it
	return e, nil
}

// ConfigError names the Config field that New refused, and why. It is the convention of every
// package here (producer, checkpoint, cdc, ivm, broker, httpapi, otel): match it with errors.As.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "ivm: Config." + e.Field + ": " + e.Reason
}
