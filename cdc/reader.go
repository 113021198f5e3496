package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/rindle-sh/rindle-go/internal/retry"
	"github.com/rindle-sh/rindle-go/internal/startstop"
	"github.com/rindle-sh/rindle-go/mapping"
)

// Defaults of Config.
const (
	DefaultSlot            = "rindle_cdc"
	DefaultPublication     = "rindle_cdc"
	DefaultTopic           = "rindle.cdc"
	DefaultStatusInterval  = time.Second
	DefaultServerTimeout   = 60 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	DefaultReconnectDelay  = 500 * time.Millisecond
	DefaultStandbyInterval = time.Second
	MaxReconnectDelay      = 30 * time.Second
	DefaultPublishBackoff  = 100 * time.Millisecond
	MaxPublishBackoff      = 5 * time.Second
	DefaultMaxEventBytes   = 512 << 10
	DefaultMaxBodyBytes    = 64 << 10
)

// Errors a caller can act on.
var (
	// ErrWALLevel: the server's wal_level is not logical.
	ErrWALLevel = errors.New("cdc: wal_level is not logical")
	// ErrSlotInUse: another reader holds the slot (SQLSTATE 55006). The slot is the leader lock.
	ErrSlotInUse = errors.New("cdc: the replication slot is in use by another reader")
)

// IsSlotInUse reports whether err says the slot is held by another reader.
func IsSlotInUse(err error) bool {
	if errors.Is(err, ErrSlotInUse) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// Config configures a Reader.
type Config struct {
	// ConnString reaches the database, as for pgx. The reader opens its replication connection
	// with replication=database added, and a normal one for setup and slot lag. Required.
	ConnString string
	// Slot is the logical replication slot, created if missing. Defaults to DefaultSlot.
	Slot string
	// Publication covers the message and chunk tables, created if missing. Defaults to
	// DefaultPublication.
	Publication string
	// Tables maps the tables to decode. Defaults to mapping.Default().
	Tables *mapping.Tables
	// Publisher receives one message per transaction. Required.
	Publisher message.Publisher
	// Topic is where transactions are published. Defaults to DefaultTopic.
	Topic string
	// StatusInterval is the standby status cadence, and so the longest a receive waits.
	// Defaults to DefaultStatusInterval.
	StatusInterval time.Duration
	// ServerTimeout is how long the reader waits with no message at all from the server
	// before it treats the connection as dead and reconnects. A server with nothing to send
	// stays quiet while the reader's status updates keep coming, so once half of it has passed
	// in silence each status update asks for a reply (a keep-alive): an idle but healthy
	// connection is never taken for a dead one. Defaults to DefaultServerTimeout.
	ServerTimeout time.Duration
	// ConnectTimeout bounds every connection attempt (a database address that accepts and never
	// answers must not hang the reader). A connect_timeout in ConnString wins. Defaults to
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ApplicationName, if set, names the replication connection in pg_stat_replication, so an
	// operator sees which instance leads.
	ApplicationName string
	// StandbyInterval is how often a reader whose slot another reader holds tries to take it
	// over: with the leader gone, failover takes at most this long. Defaults to
	// DefaultStandbyInterval.
	StandbyInterval time.Duration
	// MaxEventBytes bounds one published message: a transaction whose payload is larger (a
	// seal of a long answer) is published in ordered parts of at most this size, which every
	// consumer joins back (Assembler), so no broker's message limit can stall the slot.
	// Defaults to DefaultMaxEventBytes (NATS's default max_payload is 1 MB).
	MaxEventBytes int
	// MaxBodyBytes bounds the message body an event carries. A longer body (the seal of a long
	// answer, which compaction writes whole) is left out and the event says so (BodyOmitted):
	// a consumer reads it from the row if it needs it. The body is then not copied out of the
	// WAL, encoded, sent through the broker and decoded on every instance, most of which hold
	// its text already or never will. Defaults to DefaultMaxBodyBytes; -1 carries every body.
	MaxBodyBytes int
	// OnPublishErrorFunc, if set, hears every failed publish while the reader stalls on it.
	OnPublishErrorFunc func(err error, tx *Tx, attempt int)
	// Logger hears reconnects and stalls. Defaults to slog.Default().
	Logger *slog.Logger
}

// Stats is a snapshot of a Reader's progress.
type Stats struct {
	Published  int64         // transactions published
	Events     int64         // events in them
	Acked      pglogrepl.LSN // the last position reported flushed to the server
	Reconnects int64
	// Keepalives: the server's keep-alive messages received (some asked for by the reader
	// after a silence, see Config.ServerTimeout).
	Keepalives int64
	Stalled    bool // a publish is failing right now
	// Leader: this reader holds the slot and is streaming it. A standby (another reader holds
	// the slot) and a reader between connections are not.
	Leader bool
}

// Reader streams the tables' changes from a logical replication slot and publishes them as
// whole transactions. See the package comment for its guarantees.
type Reader struct {
	cfg       Config
	replConf  *pgconn.Config
	plainConf *pgx.ConnConfig // setup and slot lag
	tables    mapping.Tables

	published, events, reconnects, keepalives atomic.Int64
	acked                                     atomic.Uint64
	stalled, leader                           atomic.Bool

	runner startstop.Runner
}

// New validates cfg.
func New(cfg Config) (*Reader, error) {
	if cfg.ConnString == "" {
		return nil, &ConfigError{Field: "ConnString", Reason: "is required"}
	}
	if cfg.Publisher == nil {
		return nil, &ConfigError{Field: "Publisher", Reason: "is required"}
	}
	if cfg.Slot == "" {
		cfg.Slot = DefaultSlot
	}
	if cfg.Publication == "" {
		cfg.Publication = DefaultPublication
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	// Both names travel inside replication commands and plugin arguments: keep them to what
	// PostgreSQL accepts for a slot name, so no quoting is ever needed.
	for field, name := range map[string]string{"Slot": cfg.Slot, "Publication": cfg.Publication} {
		if !validName(name) {
			return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("%q must be 1-63 lowercase letters, digits and underscores", name)}
		}
	}
	for field, v := range map[string]time.Duration{"StatusInterval": cfg.StatusInterval, "ServerTimeout": cfg.ServerTimeout, "ConnectTimeout": cfg.ConnectTimeout} {
		if v < 0 {
			return nil, &ConfigError{Field: field, Reason: "must not be negative"}
		}
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.ServerTimeout == 0 {
		cfg.ServerTimeout = DefaultServerTimeout
	}
	if cfg.StandbyInterval <= 0 {
		cfg.StandbyInterval = DefaultStandbyInterval
	}
	if cfg.MaxEventBytes < 0 {
		return nil, &ConfigError{Field: "MaxEventBytes", Reason: "must not be negative"}
	}
	if cfg.MaxEventBytes == 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	switch {
	case cfg.MaxBodyBytes < -1:
		return nil, &ConfigError{Field: "MaxBodyBytes", Reason: "must be positive, 0 for the default or -1 for no bound"}
	case cfg.MaxBodyBytes == 0:
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	resolved, err := mapping.Resolve(cfg.Tables)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	replConf, err := pgconn.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, &ConfigError{Field: "ConnString", Reason: err.Error(), Err: err}
	}
	if replConf.ConnectTimeout == 0 {
		replConf.ConnectTimeout = cfg.ConnectTimeout
	}
	plainConf, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, &ConfigError{Field: "ConnString", Reason: err.Error(), Err: err}
	}
	if plainConf.ConnectTimeout == 0 {
		plainConf.ConnectTimeout = cfg.ConnectTimeout
	}
	if replConf.RuntimeParams == nil {
		replConf.RuntimeParams = map[string]string{}
	}
	replConf.RuntimeParams["replication"] = "database"
	if cfg.ApplicationName != "" {
		replConf.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	return &Reader{cfg: cfg, replConf: replConf, plainConf: plainConf, tables: resolved}, nil
}

// Setup checks wal_level and creates the publication and the slot if they are missing. Start
// calls it; it is exported for operators (rindled migrate) and tests.
func (r *Reader) Setup(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, r.plainConf.Copy())
	if err != nil {
		return fmt.Errorf("cdc: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("cdc: read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w (it is %q): set wal_level = logical in postgresql.conf and restart the server", ErrWALLevel, level)
	}
	// The publication comes before the slot: a slot only decodes what its publication names.
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", r.cfg.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("cdc: look up publication %s: %w", r.cfg.Publication, err)
	}
	if !exists {
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", pgx.Identifier{r.cfg.Publication}.Sanitize(),
			pgx.Identifier{r.tables.Message}.Sanitize(), pgx.Identifier{r.tables.Chunks}.Sanitize())
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("cdc: create publication %s: %w", r.cfg.Publication, err)
		}
	}
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_publication_tables WHERE pubname = $1", r.cfg.Publication)
	if err != nil {
		return fmt.Errorf("cdc: read publication %s: %w", r.cfg.Publication, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("cdc: read publication %s: %w", r.cfg.Publication, err)
	}
	for _, want := range []string{r.tables.Message, r.tables.Chunks} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			return fmt.Errorf("cdc: publication %s does not include table %s: ALTER PUBLICATION %s ADD TABLE %s", r.cfg.Publication, want, r.cfg.Publication, want)
		}
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", r.cfg.Slot).Scan(&exists); err != nil {
		return fmt.Errorf("cdc: look up slot %s: %w", r.cfg.Slot, err)
	}
	if !exists {
		repl, err := pgconn.ConnectConfig(ctx, r.replConf)
		if err != nil {
			return fmt.Errorf("cdc: replication connect: %w", err)
		}
		defer repl.Close(context.WithoutCancel(ctx))
		// No exported snapshot: a view bootstraps from any snapshot and filters by transaction
		// visibility (see ivm), which also works for a view that starts long after the slot.
		_, err = pglogrepl.CreateReplicationSlot(ctx, repl, r.cfg.Slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42710") { // a rival created it first
			return fmt.Errorf("cdc: create slot %s: %w", r.cfg.Slot, err)
		}
	}
	return nil
}

// DropSlot removes the slot (and with it the WAL it holds). For tests and decommissioning. It
// waits for a reader that just stopped to release the slot (its walsender exits
// asynchronously); a slot that does not exist is not an error.
func (r *Reader) DropSlot(ctx context.Context) error {
	conn, err := pgconn.ConnectConfig(ctx, r.replConf)
	if err != nil {
		return fmt.Errorf("cdc: replication connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pglogrepl.DropReplicationSlot(ctx, conn, r.cfg.Slot, pglogrepl.DropReplicationSlotOptions{Wait: true})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object
		return nil
	}
	if err != nil {
		return fmt.Errorf("cdc: drop slot %s: %w", r.cfg.Slot, err)
	}
	return nil
}

// SlotLag is how many WAL bytes the slot holds back: the distance from the server's current WAL
// position to the slot's confirmed position.
func (r *Reader) SlotLag(ctx context.Context) (int64, error) {
	conn, err := pgx.ConnectConfig(ctx, r.plainConf.Copy())
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lag *int64
	err = conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1", r.cfg.Slot).Scan(&lag)
	if err != nil {
		return 0, fmt.Errorf("cdc: slot %s lag: %w", r.cfg.Slot, err)
	}
	if lag == nil {
		return 0, nil
	}
	return *lag, nil
}

// Stats returns the reader's progress.
func (r *Reader) Stats() Stats {
	return Stats{
		Published:  r.published.Load(),
		Events:     r.events.Load(),
		Acked:      pglogrepl.LSN(r.acked.Load()),
		Reconnects: r.reconnects.Load(),
		Keepalives: r.keepalives.Load(),
		Leader:     r.leader.Load(),
		Stalled:    r.stalled.Load(),
	}
}

// Start runs Setup, then reads in a goroutine it owns until Stop: a lost connection is
// reconnected with backoff and resumes from the slot's confirmed position. A slot held by
// another reader is retried the same way, so a standby reader takes over when the leader dies.
func (r *Reader) Start(ctx context.Context) error {
	if err := r.Setup(ctx); err != nil {
		return err
	}
	return r.runner.Start(ctx, r.loop)
}

// Stop stops reading and returns once the goroutine has. Safe to call twice.
func (r *Reader) Stop() { r.runner.Stop() }

func (r *Reader) loop(ctx context.Context) {
	b := reconnectBackoff()
	for ctx.Err() == nil {
		progressed, err := r.session(ctx)
		if ctx.Err() != nil {
			return
		}
		r.reconnects.Add(1)
		if progressed {
			b.Reset()
		}
		var delay time.Duration
		if IsSlotInUse(err) {
			// A standby polls at a fixed cadence, not a growing backoff: that cadence bounds
			// failover once the leader's walsender has gone.
			r.cfg.Logger.Debug("cdc: slot held by another reader; standing by", "slot", r.cfg.Slot)
			delay = r.cfg.StandbyInterval
		} else {
			delay = b.NextBackOff()
			r.cfg.Logger.Warn("cdc: replication session ended; reconnecting", "slot", r.cfg.Slot, "in", delay, "err", err)
		}
		if retry.Sleep(ctx, delay) != nil {
			return
		}
	}
}

// reconnectBackoff is the reader's delays between replication sessions: from
// DefaultReconnectDelay doubling to MaxReconnectDelay, jittered (retry.Jitter) so that readers
// on several instances that lost one database together do not reconnect in lock-step.
func reconnectBackoff() *backoff.ExponentialBackOff {
	return retry.Backoff(DefaultReconnectDelay, MaxReconnectDelay)
}

// publishBackoff is the delays between attempts to publish one transaction: from
// DefaultPublishBackoff doubling to MaxPublishBackoff, jittered (retry.Jitter).
func publishBackoff() *backoff.ExponentialBackOff {
	return retry.Backoff(DefaultPublishBackoff, MaxPublishBackoff)
}

// session runs one replication connection until it fails. progressed reports whether it
// published anything (resetting the reconnect backoff).
func (r *Reader) session(ctx context.Context) (progressed bool, err error) {
	conn, err := pgconn.ConnectConfig(ctx, r.replConf)
	if err != nil {
		return false, fmt.Errorf("cdc: replication connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Start at 0/0: the server resumes from the slot's confirmed position, so everything not
	// acknowledged is re-sent. proto_version 1 delivers only committed transactions, in
	// commit order. messages (PostgreSQL 14 and later) delivers the logical-decoding message
	// that carries a seal's trace context, inside its transaction.
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.cfg.Publication + "'", "messages 'true'"},
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			return false, fmt.Errorf("%w: slot %s: %s", ErrSlotInUse, r.cfg.Slot, pgErr.Message)
		}
		return false, fmt.Errorf("cdc: start replication on slot %s: %w", r.cfg.Slot, err)
	}
	r.leader.Store(true)
	defer r.leader.Store(false)
	dec := newDecoder(r.tables)
	dec.maxBody = r.cfg.MaxBodyBytes
	acked := pglogrepl.LSN(r.acked.Load())
	lastHeard := time.Now()
	status := func(ctx context.Context) error {
		// A walsender with nothing to send stays silent while status updates arrive: after
		// half the timeout in silence, ask it to answer, so a quiet connection shows it lives.
		ask := time.Since(lastHeard) >= r.cfg.ServerTimeout/2
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: acked, ReplyRequested: ask})
		if err == nil {
			r.acked.Store(uint64(acked))
		}
		return err
	}
	nextStatus := time.Now().Add(r.cfg.StatusInterval)
	// Every receive is bounded by the next status update: a hung read must not hide behind a
	// healthy process. The bounding context is made once per status interval, not per message
	// (a context with a deadline is a timer and some allocations; a busy slot sends thousands
	// of messages a second).
	var bound deadlineContext
	defer bound.stop()
	for {
		if ctx.Err() != nil {
			return progressed, context.Cause(ctx)
		}
		if !time.Now().Before(nextStatus) {
			if err := status(ctx); err != nil {
				return progressed, fmt.Errorf("cdc: standby status: %w", err)
			}
			nextStatus = time.Now().Add(r.cfg.StatusInterval)
		}
		if time.Since(lastHeard) > r.cfg.ServerTimeout {
			return progressed, fmt.Errorf("cdc: nothing from the server for %s", r.cfg.ServerTimeout)
		}
		raw, err := conn.ReceiveMessage(bound.until(ctx, nextStatus))
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return progressed, fmt.Errorf("cdc: receive: %w", err)
		}
		lastHeard = time.Now()
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return progressed, fmt.Errorf("cdc: server error: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return progressed, fmt.Errorf("cdc: keepalive: %w", err)
				}
				r.keepalives.Add(1)
				// The server's position may be acknowledged only with nothing in flight, or a
				// quiet publication on a busy cluster pins WAL forever.
				if !dec.inTx() && ka.ServerWALEnd > acked {
					acked = ka.ServerWALEnd
				}
				if ka.ReplyRequested {
					nextStatus = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return progressed, fmt.Errorf("cdc: xlog data: %w", err)
				}
				tx, err := dec.feed(xld.WALData)
				if err != nil {
					return progressed, err
				}
				if tx == nil {
					continue
				}
				if len(tx.Events) > 0 {
					if err := r.publish(ctx, tx, status); err != nil {
						return progressed, err
					}
					progressed = true
				}
				// Acknowledge only now: every event of the transaction is published.
				if tx.EndLSN > acked {
					acked = tx.EndLSN
				}
			}
		}
	}
}

// deadlineContext is a context with a deadline, kept while the deadline stays.
type deadlineContext struct {
	ctx      context.Context
	deadline time.Time
	cancel   context.CancelFunc
}

// until returns a context of parent that ends at deadline, the one it returned last time when
// that has the same deadline and has not ended. Every call of one deadlineContext passes the
// same parent.
func (d *deadlineContext) until(parent context.Context, deadline time.Time) context.Context {
	if d.ctx == nil || !d.deadline.Equal(deadline) || d.ctx.Err() != nil {
		d.stop()
		d.ctx, d.cancel = context.WithDeadline(parent, deadline)
		d.deadline = deadline
	}
	return d.ctx
}

func (d *deadlineContext) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// publish delivers one transaction, retrying for as long as the broker refuses it. The slot
// holds the WAL meanwhile, and standby status updates (at the old position) keep the server
// from dropping the connection.
func (r *Reader) publish(ctx context.Context, tx *Tx, status func(context.Context) error) error {
	payload, err := tx.Encode()
	if err != nil {
		return err
	}
	parts := Parts(payload, r.cfg.MaxEventBytes)
	b := publishBackoff()
	for attempt := 1; ; attempt++ {
		msgs := make([]*message.Message, len(parts))
		for i, part := range parts {
			msg := message.NewMessage(watermill.NewUUID(), part)
			msg.Metadata.Set(MetaLSN, tx.EndLSN.String())
			msg.Metadata.Set(MetaCommitTime, tx.CommitTime.UTC().Format(time.RFC3339Nano))
			msg.Metadata.Set(MetaXid, strconv.FormatUint(uint64(tx.Xid), 10))
			if tp := tx.Traceparent(); tp != "" {
				msg.Metadata.Set(MetaTraceparent, tp)
			}
			if len(parts) > 1 {
				msg.Metadata.Set(MetaPart, fmt.Sprintf("%d/%d", i+1, len(parts)))
			}
			msgs[i] = msg
		}
		// One call publishes the parts in order; a failure publishes them all again, from the
		// first, which the Assembler takes as the transaction starting anew.
		err := r.cfg.Publisher.Publish(r.cfg.Topic, msgs...)
		if err == nil {
			r.stalled.Store(false)
			r.published.Add(1)
			r.events.Add(int64(len(tx.Events)))
			return nil
		}
		r.stalled.Store(true)
		if f := r.cfg.OnPublishErrorFunc; f != nil {
			f(err, tx, attempt)
		} else if attempt == 1 || attempt%20 == 0 {
			r.cfg.Logger.Error("cdc: publish failed; the reader stalls and keeps the slot", "lsn", tx.EndLSN, "attempt", attempt, "err", err)
		}
		if err := retry.Sleep(ctx, b.NextBackOff()); err != nil {
			return err
		}
		if err := status(ctx); err != nil {
			return fmt.Errorf("cdc: standby status while stalled: %w", err)
		}
	}
}

func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// ConfigError names the Config field that New refused, and why. It is the convention of every
// package here (producer, checkpoint, cdc, ivm, broker, httpapi, otel): match it with errors.As.
type ConfigError struct {
	Field  string
	Reason string
	// Err is the underlying parse error, if any.
	Err error
}

func (e *ConfigError) Error() string {
	return "cdc: Config." + e.Field + ": " + e.Reason
}

func (e *ConfigError) Unwrap() error { return e.Err }
