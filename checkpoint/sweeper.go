package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rindle-sh/rindle-go/internal/startstop"
)

// Defaults of LeaseConfig and SweeperConfig.
const (
	DefaultLeaseTTL      = 15 * time.Second
	DefaultSweepInterval = 5 * time.Second
	DefaultForgetAfter   = time.Hour
	DefaultHostsTable    = "rindle_hosts"
	// DefaultReleaseTimeout bounds a lease's release when it stops.
	DefaultReleaseTimeout = 5 * time.Second
)

// LeaseConfig configures a host's lease.
type LeaseConfig struct {
	// DB runs the SQL. Required.
	DB DB
	// HostID is the host whose lease this is: the Store's HostID. Required.
	HostID string
	// TTL is how long one renewal keeps the host alive in other hosts' eyes. Defaults to
	// DefaultLeaseTTL.
	TTL time.Duration
	// Interval is the renewal cadence after a successful renewal. Defaults to TTL/4; it must
	// leave room for retries before the guard (Interval + Guard < TTL).
	Interval time.Duration
	// RetryInterval is the cadence after a failed renewal. Defaults to Interval/4.
	RetryInterval time.Duration
	// Guard is how long before the lease could lapse (TTL after the start of the last
	// successful renewal) the holder fences itself: OnLostFunc runs then, so the host stops
	// claiming its streams before any other host's sweeper may seal them. It covers clock-rate
	// differences and a renewal that is slow to report. Defaults to TTL/4.
	Guard time.Duration
	// OnLostFunc hears the fence: the lease can no longer be proven. Wire it to
	// producer.Plane.Suspend. It runs in the lease's goroutine and must not block.
	OnLostFunc func(cause error)
	// OnHeldFunc runs after every successful renewal, with a context that ends when the lease
	// it proves would reach its guard. Wire it to producer.Plane.Resume, which reclaims the
	// suspended streams (cheap when there are none).
	OnHeldFunc func(ctx context.Context)
	// HostsTable holds the leases. Defaults to DefaultHostsTable.
	HostsTable string
	// ReleaseTimeout bounds the release in Stop: a lease row another session holds locked
	// (or a database that does not answer) cannot hold a stopping host, and so a drain, any
	// longer; an unreleased lease lapses after its TTL. Defaults to DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// Logger hears failed renewals, the fence and the recovery. Defaults to slog.Default().
	Logger *slog.Logger
}

// Lease keeps a producer host's row in the hosts table alive, so other hosts' sweepers leave its
// streams alone, and fences its holder when it cannot.
//
// The database's clock decides expiry for everyone: a renewal writes lease_until = now() + TTL,
// and now() is the renewal's transaction start, which is later in real time than the moment the
// holder sent it. So the holder knows the lease holds at least until that send time + TTL by
// its own monotonic clock, and fences itself Guard before that: a real lease, in which the
// holder stops acting before anyone else may act for it.
//
// Lifecycle: Start renews once (failing if the database is unreachable), then runs a goroutine
// it owns: renewals every Interval, retried every RetryInterval while they fail, each bounded
// so a hung database cannot hold the fence back; OnLostFunc at the guard; OnHeldFunc after each
// success. Stop ends it and releases the lease: a host that stopped on purpose has drained its
// streams, and whatever it could not seal is the sweepers' to finish.
//
//	held ──renewals fail until the guard──▶ lost (OnLostFunc) ──a renewal succeeds──▶ held (OnHeldFunc)
type Lease struct {
	cfg    LeaseConfig
	renew  string
	remove string
	runner startstop.Runner

	mu      sync.Mutex
	fenceAt time.Time // the guard of the last successful renewal
	lost    bool
}

// NewLease validates cfg.
func NewLease(cfg LeaseConfig) (*Lease, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	if cfg.HostID == "" {
		return nil, &ConfigError{Field: "HostID", Reason: "is required"}
	}
	for field, v := range map[string]time.Duration{"TTL": cfg.TTL, "Interval": cfg.Interval, "RetryInterval": cfg.RetryInterval, "Guard": cfg.Guard, "ReleaseTimeout": cfg.ReleaseTimeout} {
		if v < 0 {
			return nil, &ConfigError{Field: field, Reason: "must not be negative"}
		}
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.TTL / 4
	}
	if cfg.Guard == 0 {
		cfg.Guard = cfg.TTL / 4
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = max(cfg.Interval/4, time.Millisecond)
	}
	if cfg.Interval+cfg.Guard >= cfg.TTL {
		return nil, &ConfigError{Field: "Interval", Reason: fmt.Sprintf("%s plus Guard %s must be below TTL %s, or the holder fences itself between two healthy renewals", cfg.Interval, cfg.Guard, cfg.TTL)}
	}
	if cfg.HostsTable == "" {
		cfg.HostsTable = DefaultHostsTable
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = DefaultReleaseTimeout
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
		renew: fmt.Sprintf(`INSERT INTO %s (host, lease_until) VALUES ($1, now() + make_interval(secs => $2))
			ON CONFLICT (host) DO UPDATE SET lease_until = EXCLUDED.lease_until`, t),
		remove: fmt.Sprintf("DELETE FROM %s WHERE host = $1", t),
	}, nil
}

// Renew extends the lease by TTL from the database's now.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.write(ctx, l.cfg.Interval, Statement{SQL: l.renew, Args: []any{l.cfg.HostID, l.cfg.TTL.Seconds()}}); err != nil {
		return fmt.Errorf("lease for host %s: renew: %w", l.cfg.HostID, err)
	}
	return nil
}

// write runs one statement on the lease row with the server's lock_timeout at half of wait, the
// caller's bound: a row another session holds locked makes the server give the statement up
// too, so an attempt the holder abandoned does not wait on in the database and apply much later
// (PostgreSQL does not notice a client that left while its statement waits for a lock).
func (l *Lease) write(ctx context.Context, wait time.Duration, stmt Statement) error {
	return l.cfg.DB.Batch(ctx,
		Statement{SQL: "SELECT set_config('lock_timeout', $1, true)", Args: []any{fmt.Sprintf("%dms", max(wait.Milliseconds()/2, 1))}},
		stmt)
}

// Held reports whether the lease is proven: renewed, and short of its guard.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lost && time.Now().Before(l.fenceAt)
}

// Start renews once, then keeps renewing in the background until Stop.
func (l *Lease) Start(ctx context.Context) error {
	sent := time.Now()
	if err := l.Renew(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	l.fenceAt, l.lost = sent.Add(l.cfg.TTL-l.cfg.Guard), false
	l.mu.Unlock()
	return l.runner.Start(ctx, l.loop)
}

type renewal struct {
	sent time.Time
	err  error
}

func (l *Lease) loop(ctx context.Context) {
	results := make(chan renewal, 1)
	inflight := false
	renew := time.NewTimer(l.cfg.Interval)
	defer renew.Stop()
	l.mu.Lock()
	fence := time.NewTimer(time.Until(l.fenceAt))
	l.mu.Unlock()
	defer fence.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			if inflight {
				<-results
			}
			return
		case <-renew.C:
			if inflight {
				continue
			}
			inflight = true
			go func() {
				// An attempt never outlives the cadence: a renewal stuck behind a lock is
				// abandoned and tried again, and the fence timer runs meanwhile.
				sent := time.Now()
				actx, cancel := context.WithTimeout(ctx, l.cfg.Interval)
				err := l.Renew(actx)
				cancel()
				results <- renewal{sent: sent, err: err}
			}()
		case r := <-results:
			inflight = false
			if r.err != nil {
				if !failing && ctx.Err() == nil {
					l.cfg.Logger.Warn("lease renewal failed; retrying", "host", l.cfg.HostID, "every", l.cfg.RetryInterval, "err", r.err)
				}
				failing = true
				renew.Reset(l.cfg.RetryInterval)
				continue
			}
			failing = false
			renew.Reset(l.cfg.Interval)
			fenceAt := r.sent.Add(l.cfg.TTL - l.cfg.Guard)
			if !time.Now().Before(fenceAt) {
				continue // it took so long that it proves nothing any more
			}
			l.mu.Lock()
			l.fenceAt = fenceAt
			wasLost := l.lost
			l.lost = false
			l.mu.Unlock()
			fence.Reset(time.Until(fenceAt))
			if wasLost {
				l.cfg.Logger.Info("lease held again; reclaiming this host's streams", "host", l.cfg.HostID)
			}
			if l.cfg.OnHeldFunc != nil {
				hctx, cancel := context.WithDeadline(ctx, fenceAt)
				l.cfg.OnHeldFunc(hctx)
				cancel()
			}
		case <-fence.C:
			l.mu.Lock()
			fire := !l.lost && !time.Now().Before(l.fenceAt)
			if fire {
				l.lost = true
			}
			l.mu.Unlock()
			if fire {
				cause := fmt.Errorf("lease for host %s not renewed within %s of its TTL %s", l.cfg.HostID, l.cfg.Guard, l.cfg.TTL)
				l.cfg.Logger.Error("lease lost: this host stops taking pushes and opens until it is renewed", "host", l.cfg.HostID, "err", cause)
				if l.cfg.OnLostFunc != nil {
					l.cfg.OnLostFunc(cause)
				}
			}
		}
	}
}

// Stop ends the renewals and releases the lease. Safe to call twice. It is bounded even when
// another session holds the lease row locked: the renewal in flight is abandoned with the
// loop's context (pgx ends a cancelled query at once), and the release waits at most
// ReleaseTimeout.
func (l *Lease) Stop() {
	if !l.runner.Stop() {
		return
	}
	ctx, stop := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
	defer stop()
	if err := l.write(ctx, l.cfg.ReleaseTimeout, Statement{SQL: l.remove, Args: []any{l.cfg.HostID}}); err != nil {
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
	t, err := cfg.Tables.resolved()
	if err != nil {
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
