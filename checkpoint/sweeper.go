package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rindle-sh/rindle-go/internal/startstop"
)

// Defaults of LeaseConfig and SweeperConfig.
const (
	DefaultLeaseTTL      = 15 * time.Second
	DefaultSweepInterval = 5 * time.Second
	DefaultHostsTable    = "rindle_hosts"
)

// LeaseConfig configures a host's lease.
type LeaseConfig struct {
	// DB runs the SQL. Required.
	DB DB
	// HostID is the host whose lease this is: the Store's HostID. Required.
	HostID string
	// TTL is how long one renewal keeps the host alive. Defaults to DefaultLeaseTTL.
	TTL time.Duration
	// Interval is the renewal cadence; it must be below TTL. Defaults to TTL/3.
	Interval time.Duration
	// HostsTable holds the leases. Defaults to DefaultHostsTable.
	HostsTable string
	// Logger hears failed renewals. Defaults to slog.Default().
	Logger *slog.Logger
}

// Lease keeps a producer host's row in the hosts table alive, so the sweeper leaves its streams
// alone. Start renews once (failing if the database is unreachable), then renews every Interval
// in a goroutine it owns until Stop, which releases the lease: a host that stopped on purpose
// has drained its streams, and whatever it could not seal is the sweeper's to finish.
type Lease struct {
	cfg    LeaseConfig
	renew  string
	remove string
	runner startstop.Runner
}

// NewLease validates cfg.
func NewLease(cfg LeaseConfig) (*Lease, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	if cfg.HostID == "" {
		return nil, &ConfigError{Field: "HostID", Reason: "is required"}
	}
	if cfg.TTL < 0 || cfg.Interval < 0 {
		return nil, &ConfigError{Field: "TTL", Reason: "TTL and Interval must not be negative"}
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.TTL / 3
	}
	if cfg.Interval >= cfg.TTL {
		return nil, &ConfigError{Field: "Interval", Reason: fmt.Sprintf("%s must be below TTL %s, or the lease lapses between renewals", cfg.Interval, cfg.TTL)}
	}
	if cfg.HostsTable == "" {
		cfg.HostsTable = DefaultHostsTable
	}
	if err := (Tables{Message: cfg.HostsTable}).validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t := q(cfg.HostsTable)
	return &Lease{
		cfg: cfg,
		// The database's clock decides expiry, for every host alike: hosts' clocks may disagree.
		renew: fmt.Sprintf(`INSERT INTO %s (host, lease_until) VALUES ($1, now() + make_interval(secs => $2))
			ON CONFLICT (host) DO UPDATE SET lease_until = EXCLUDED.lease_until`, t),
		remove: fmt.Sprintf("DELETE FROM %s WHERE host = $1", t),
	}, nil
}

// Renew extends the lease by TTL from now.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.cfg.DB.Batch(ctx, Statement{SQL: l.renew, Args: []any{l.cfg.HostID, l.cfg.TTL.Seconds()}}); err != nil {
		return fmt.Errorf("lease for host %s: renew: %w", l.cfg.HostID, err)
	}
	return nil
}

// Start renews once, then keeps renewing in the background until Stop.
func (l *Lease) Start(ctx context.Context) error {
	if err := l.Renew(ctx); err != nil {
		return err
	}
	return l.runner.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, l.cfg.Interval, func(ctx context.Context) {
			if err := l.Renew(ctx); err != nil && ctx.Err() == nil {
				l.cfg.Logger.Error("lease renewal failed; the sweeper may seal this host's streams if it lapses", "host", l.cfg.HostID, "err", err)
			}
		})
	})
}

// Stop ends the renewals and releases the lease. Safe to call twice.
func (l *Lease) Stop() {
	if !l.runner.Stop() {
		return
	}
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := l.cfg.DB.Batch(ctx, Statement{SQL: l.remove, Args: []any{l.cfg.HostID}}); err != nil {
		l.cfg.Logger.Warn("lease release failed; it lapses after its TTL", "host", l.cfg.HostID, "err", err)
	}
}

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// DB runs the SQL. Required.
	DB DB
	// Tables maps the app's tables; Columns.Host must be named (it is how a row names its
	// producer). Empty names take the same defaults as Config.Tables.
	Tables Tables
	// HostsTable holds the leases. Defaults to DefaultHostsTable.
	HostsTable string
	// Interval is the sweep cadence. Defaults to DefaultSweepInterval.
	Interval time.Duration
	// OnSweepFunc, if set, hears how many streams each sweep sealed.
	OnSweepFunc func(sealed int)
	// Logger hears failed sweeps. Defaults to slog.Default().
	Logger *slog.Logger
}

// Sweeper seals orphaned streams: every row still streaming whose host has no live lease is
// sealed interrupted, with body = body ++ its chunks in seq order, and its chunks deleted, in one
// statement (one transaction). The seq column already counts the chunks, so it is kept.
//
// It never touches a row whose host holds a live lease, nor a streaming row with no host (it
// cannot tell whether that producer is alive). It is safe to run on every instance at once:
// rows are claimed FOR UPDATE SKIP LOCKED, so two sweepers never seal the same row twice, and a
// sweep that races a producer's own compaction waits for it and then finds the row sealed.
type Sweeper struct {
	cfg    SweeperConfig
	sweep  string
	runner startstop.Runner
}

// NewSweeper validates cfg.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	t := cfg.Tables.resolve()
	if err := t.validate(); err != nil {
		return nil, err
	}
	if t.Columns.Host == "" {
		return nil, &ConfigError{Field: "Tables.Columns.Host", Reason: "is required: the sweeper finds a stream's producer through it"}
	}
	if cfg.HostsTable == "" {
		cfg.HostsTable = DefaultHostsTable
	}
	if err := (Tables{Message: cfg.HostsTable}).validate(); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 {
		return nil, &ConfigError{Field: "Interval", Reason: "must not be negative"}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := t.Columns
	msg, chunks := q(t.Message), q(t.Chunks)
	sweep := fmt.Sprintf(`WITH dead AS (
		SELECT m.%[3]s AS id FROM %[1]s m
		WHERE m.%[4]s = 'streaming' AND m.%[5]s IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM %[6]s h WHERE h.host = m.%[5]s AND h.lease_until > now())
		FOR UPDATE OF m SKIP LOCKED
	), sealed AS (
		UPDATE %[1]s m SET %[7]s = m.%[7]s || coalesce(
			(SELECT string_agg(ch.%[8]s, '' ORDER BY ch.%[9]s) FROM %[2]s ch WHERE ch.%[10]s = m.%[3]s), ''),
			%[4]s = 'interrupted'
		FROM dead WHERE m.%[3]s = dead.id
		RETURNING m.%[3]s AS id
	), gone AS (
		DELETE FROM %[2]s ch USING sealed WHERE ch.%[10]s = sealed.id
	)
	SELECT count(*) FROM sealed`,
		msg, chunks, q(c.Key), q(c.Status), q(c.Host), q(cfg.HostsTable), q(c.Body), q(c.ChunkText), q(c.ChunkSeq), q(c.ChunkStream))
	return &Sweeper{cfg: cfg, sweep: sweep}, nil
}

// SweepOnce seals every orphaned stream now and returns how many it sealed.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	var n int64
	if err := s.cfg.DB.QueryRow(ctx, s.sweep, nil, &n); err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	if s.cfg.OnSweepFunc != nil {
		s.cfg.OnSweepFunc(int(n))
	}
	return int(n), nil
}

// Start sweeps every Interval in a goroutine it owns until Stop.
func (s *Sweeper) Start(ctx context.Context) error {
	return s.runner.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, s.cfg.Interval, func(ctx context.Context) {
			if _, err := s.SweepOnce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("sweep failed", "err", err)
			}
		})
	})
}

// Stop ends the sweeps. Safe to call twice.
func (s *Sweeper) Stop() { s.runner.Stop() }
