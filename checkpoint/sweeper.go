package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rindle-sh/rindle-go/internal/startstop"
)

// Defaults of SweeperConfig.
const (
	DefaultSweepInterval = 5 * time.Second
	DefaultForgetAfter   = time.Hour
	DefaultHostsTable    = "rindle_hosts"
)

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// DB runs the SQL. Required.
	DB DB
	// Tables maps the app's tables; Columns.Host must be named (it is how a row names its
	// producer). Empty names take the same defaults as Config.Tables.
	Tables Tables
	// HostID is this process's host (its Store's and Lease's HostID): the sweeper never seals
	// its rows, even if its lease lapsed, because a live host fences itself and seals or
	// reclaims its own streams. Empty excludes no host (a sweeper in a process that produces
	// nothing).
	HostID string
	// HostsTable holds the leases. Defaults to DefaultHostsTable.
	HostsTable string
	// Interval is the mean sweep cadence; each wait is drawn from [¾, 1¼] of it, so sweepers
	// started together (and a lease renewing on a cadence of its own) never run in phase.
	// Defaults to DefaultSweepInterval.
	Interval time.Duration
	// ForgetAfter is how long after its lease lapsed a host's row is deleted, once no
	// streaming row names it. Defaults to DefaultForgetAfter.
	ForgetAfter time.Duration
	// OnSweepFunc, if set, hears how many streams each sweep sealed.
	OnSweepFunc func(sealed int)
	// Logger hears failed sweeps. Defaults to slog.Default().
	Logger *slog.Logger
}

// Sweeper seals orphaned streams: every row still streaming whose host has no live lease is
// sealed interrupted, with body = body ++ its chunks in seq order, and its chunks deleted, in one
// statement (one transaction). The seq column already counts the chunks, so it is kept. The
// same statement forgets hosts whose lease lapsed ForgetAfter ago and that name no live row.
//
// It never touches a row whose host holds a live lease, nor its own host's rows (HostID), nor a
// streaming row with no host (it cannot tell whether that producer is alive). It is safe to run
// on every instance at once: rows are claimed FOR UPDATE SKIP LOCKED, so two sweepers never seal
// the same row twice, and a sweep that races a producer's own compaction waits for it and then
// finds the row sealed.
type Sweeper struct {
	cfg       SweeperConfig
	sweep     string
	sweepHost string
	runner    startstop.Runner
}

// NewSweeper validates cfg.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	t, err := resolvedTables(cfg.Tables)
	if err != nil {
		return nil, err
	}
	if t.Columns.Host == "" {
		return nil, &ConfigError{Field: "Tables.Columns.Host", Reason: "is required: the sweeper finds a stream's producer through it"}
	}
	if cfg.HostsTable == "" {
		cfg.HostsTable = DefaultHostsTable
	}
	if err := validateTables(Tables{Message: cfg.HostsTable}); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 {
		return nil, &ConfigError{Field: "Interval", Reason: "must not be negative"}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.ForgetAfter < 0 {
		return nil, &ConfigError{Field: "ForgetAfter", Reason: "must not be negative"}
	}
	if cfg.ForgetAfter == 0 {
		cfg.ForgetAfter = DefaultForgetAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := t.Columns
	msg, chunks, hosts := q(t.Message), q(t.Chunks), q(cfg.HostsTable)
	// $1 is the host to spare (or to seal, for sweepHost), $2 the forget delay in seconds.
	stmt := func(dead string) string {
		// seen is the statement's snapshot of the candidates; dead locks them. A row an append
		// moved between the two (its transaction committed after the snapshot, before the lock)
		// is left for the next sweep: the snapshot's chunks would miss its newest one.
		return fmt.Sprintf(`WITH seen AS (
		SELECT m.%[3]s AS id, m.%[12]s AS seq FROM %[1]s m
		WHERE m.%[4]s = 'streaming' AND m.%[5]s IS NOT NULL AND %[11]s
	), dead AS (
		SELECT m.%[3]s AS id FROM %[1]s m JOIN seen ON seen.id = m.%[3]s
		WHERE m.%[4]s = 'streaming'
		FOR UPDATE OF m SKIP LOCKED
	), sealed AS (
		UPDATE %[1]s m SET %[7]s = m.%[7]s || coalesce(
			(SELECT string_agg(ch.%[8]s, '' ORDER BY ch.%[9]s) FROM %[2]s ch WHERE ch.%[10]s = m.%[3]s), ''),
			%[4]s = 'interrupted'
		FROM dead JOIN seen ON seen.id = dead.id
		WHERE m.%[3]s = dead.id AND m.%[12]s = seen.seq
		RETURNING m.%[3]s AS id
	), gone AS (
		DELETE FROM %[2]s ch USING sealed WHERE ch.%[10]s = sealed.id
	), forgotten AS (
		DELETE FROM %[6]s h WHERE h.lease_until < now() - make_interval(secs => $2)
		  AND NOT EXISTS (SELECT 1 FROM %[1]s m WHERE m.%[5]s = h.host AND m.%[4]s = 'streaming')
	)
	SELECT count(*) FROM sealed`,
			msg, chunks, q(c.Key), q(c.Status), q(c.Host), hosts, q(c.Body), q(c.ChunkText), q(c.ChunkSeq), q(c.ChunkStream), dead, q(c.Seq))
	}
	sweep := stmt(fmt.Sprintf("m.%[1]s IS DISTINCT FROM $1 AND NOT EXISTS (SELECT 1 FROM %[2]s h WHERE h.host = m.%[1]s AND h.lease_until > now())", q(c.Host), hosts))
	sweepHost := stmt(fmt.Sprintf("m.%s = $1", q(c.Host)))
	return &Sweeper{cfg: cfg, sweep: sweep, sweepHost: sweepHost}, nil
}

// SweepOnce seals every orphaned stream now and returns how many it sealed.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	var host *string
	if s.cfg.HostID != "" {
		host = &s.cfg.HostID
	}
	n, err := s.run(ctx, s.sweep, host)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	return n, nil
}

// SealHost seals every streaming row of host interrupted, whatever its lease says. A process
// calls it for its own HostID before it opens anything: rows its HostID names then can only be
// a previous process's under the same configured id (killed, not drained), whose lease the new
// process's renewals would otherwise keep alive for ever.
func (s *Sweeper) SealHost(ctx context.Context, host string) (int, error) {
	n, err := s.run(ctx, s.sweepHost, &host)
	if err != nil {
		return 0, fmt.Errorf("sweep host %s: %w", host, err)
	}
	return n, nil
}

func (s *Sweeper) run(ctx context.Context, sql string, host *string) (int, error) {
	var n int64
	if err := s.cfg.DB.QueryRow(ctx, sql, []any{host, s.cfg.ForgetAfter.Seconds()}, &n); err != nil {
		return 0, err
	}
	if s.cfg.OnSweepFunc != nil {
		s.cfg.OnSweepFunc(int(n))
	}
	return int(n), nil
}

// Start sweeps every Interval (jittered) in a goroutine it owns until Stop.
func (s *Sweeper) Start(ctx context.Context) error {
	return s.runner.Start(ctx, func(ctx context.Context) {
		startstop.EveryJittered(ctx, s.cfg.Interval, func(ctx context.Context) {
			if _, err := s.SweepOnce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("sweep failed", "err", err)
			}
		})
	})
}

// Stop ends the sweeps. Safe to call twice.
func (s *Sweeper) Stop() { s.runner.Stop() }
