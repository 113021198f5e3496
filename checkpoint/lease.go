package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rindle-sh/rindle-go/internal/startstop"
)

// Defaults of LeaseConfig.
const (
	DefaultLeaseTTL = 15 * time.Second
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
	if err := validateTables(Tables{Message: cfg.HostsTable}); err != nil {
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
