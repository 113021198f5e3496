package producer

import (
	"context"
	"log/slog"
	"time"
)

// Defaults of Config, as in the seed.
const (
	DefaultCheckpointChars    = 512
	DefaultCheckpointInterval = 750 * time.Millisecond
	DefaultCheckpointRetries  = 3
	DefaultRetryBackoff       = 50 * time.Millisecond
	DefaultCommitTimeout      = 10 * time.Second
	DefaultRetainChars        = Seq(64 * 1024)
	DefaultLinger             = 30 * time.Second
	DefaultMaxQueuedFrames    = 1024
	DefaultRelayAttachTimeout = 2 * time.Second
	DefaultRelayFirstFrame    = 10 * time.Second
	DefaultRelayQueue         = 8192
	// DefaultIdleTimeout is beyond the seed: a stream with no push for this long is sealed
	// interrupted (Config.IdleTimeout).
	DefaultIdleTimeout = 10 * time.Minute
)

// NoIdleTimeout is the IdleTimeout value that turns the idle seal off (zero means the default).
const NoIdleTimeout time.Duration = -1

// NoRetries is the CheckpointRetries value that turns retries off (zero means the default).
const NoRetries = -1

// RetainNone is the RetainChars value that keeps nothing below the durable offset (zero means
// the default slack): a reader behind the durable offset joins from its durable view instead.
const RetainNone Seq = -1

// retainAll is the internal RetainChars of a whole-body committer: no floor is ever above the
// buffer's start.
const retainAll = Seq(1<<63 - 1)

// AuthorizeInput is what the authorizer sees for one subscribe.
type AuthorizeInput struct {
	User     any    // the caller, as the app identifies it
	StreamID string // the stream asked for
	From     Seq    // where the reader claims to be
	// Meta is the payload the stream was opened with, or nil when the stream is not hosted on this
	// plane: exactly when the app must decide from StreamID and its own durable state.
	Meta    any
	Request any // the app's request value, passed through
}

// AuthorizeFunc decides whether a reader may subscribe. It runs before the plane looks the stream
// up, so a denial cannot be used to probe for stream ids. An error fails the subscribe as is.
type AuthorizeFunc func(ctx context.Context, in AuthorizeInput) (bool, error)

// CheckpointInfo describes one checkpoint, for errors and observation.
type CheckpointInfo struct {
	StreamID string
	From     Seq
	Seq      Seq
	// Duration is how long the commit took, retries included.
	Duration time.Duration
	// Lag is how long the oldest character of the slice waited between Push and the store's
	// confirmation: the durability lag of this checkpoint. Zero on errors.
	Lag time.Duration
	// Seal is true for the closing compaction.
	Seal bool
	// Causes are the contexts LiveStream.Cause recorded for the text (or seal) this checkpoint
	// commits, at most MaxCauses: CommitContextFunc may link its span to theirs. Set only on
	// the info CommitContextFunc receives.
	Causes []context.Context
}

// RelayPhase says where a relay failure happened.
type RelayPhase string

// The relay phases.
const (
	RelayPublish RelayPhase = "publish" // mirroring a frame out
	RelayAttach  RelayPhase = "attach"  // dialing the adapter
	RelayFrames  RelayPhase = "frames"  // consuming or conforming its frames
)

// Config configures a Plane. Committer and Authorize are required; every other field has a
// default. New validates the whole Config once and names the first field it refuses.
type Config struct {
	// Committer is the durable plane. Required.
	Committer Committer

	// Authorize decides every subscribe. Required: subscribing is reading someone's chat, so
	// there is no default-allow.
	Authorize AuthorizeFunc

	// CheckpointChars is how many produced but uncommitted UTF-16 units force a checkpoint.
	// Defaults to DefaultCheckpointChars.
	CheckpointChars int

	// CheckpointInterval is how long after the last checkpoint pending text forces one, and how
	// long a failed checkpoint waits before the next attempt. Defaults to
	// DefaultCheckpointInterval.
	CheckpointInterval time.Duration

	// CheckpointSpread staggers interval checkpoints: each interval timer fires up to this much
	// earlier, drawn anew each time, so streams opened together (a burst of answers) spread
	// their commits instead of hitting the store in waves. It never delays a checkpoint. Zero
	// means none; it must be below CheckpointInterval.
	CheckpointSpread time.Duration

	// CheckpointRetries is how many times a failing commit is retried before its slice is left
	// for the next trigger. Zero means DefaultCheckpointRetries; NoRetries means none.
	CheckpointRetries int

	// RetryBackoff is the first retry's delay; each further retry doubles it, up to
	// MaxRetryBackoff, and each is jittered over the upper half of its step. Real time, not the
	// Clock. Defaults to DefaultRetryBackoff.
	RetryBackoff time.Duration

	// CommitTimeout bounds each commit attempt, so a hung store costs a retry, not a wedged
	// stream. Defaults to DefaultCommitTimeout.
	CommitTimeout time.Duration

	// RetainChars is the slack kept below the durable offset so a reader whose durable view lags
	// a checkpoint can still join without a stale round trip. Text at or above the durable
	// offset is never trimmed. Only for a Committer that does not need the whole body: New
	// refuses it with a WholeBodyCommitter (compaction writes the whole text at close).
	// Defaults to DefaultRetainChars for other committers; RetainNone keeps nothing below the
	// durable offset.
	RetainChars Seq

	// Linger is how long a sealed stream stays joinable, so a subscribe that races the last token
	// still gets the tail and end rather than absent. Defaults to DefaultLinger.
	Linger time.Duration

	// IdleTimeout seals a stream interrupted, with everything it took, once nothing was pushed
	// to it for this long: a producer that went away without closing (a crashed app, an HTTP
	// producer that stopped calling) does not leave a stream streaming, holding memory and its
	// readers, for the life of the host. Measured on Clock. Defaults to DefaultIdleTimeout;
	// NoIdleTimeout turns it off.
	IdleTimeout time.Duration

	// MaxQueuedFrames caps each reader's queue; overflow drops that reader with stale. Relayed
	// readers share the bound. Defaults to DefaultMaxQueuedFrames.
	MaxQueuedFrames int

	// Relay carries the live plane across processes. Nil means none: a reader of a stream hosted
	// elsewhere gets absent and reads the durable plane.
	Relay *Relay

	// RelayAttachTimeout bounds Relay.Attach: a hung adapter yields absent, not a hung request.
	// Defaults to DefaultRelayAttachTimeout; refused without a Relay.
	RelayAttachTimeout time.Duration

	// RelayFirstFrame bounds the wait for an attached source's first frame: a source that
	// yields nothing by then (a broker that restarted just after the attach) ends the reader
	// with stale, which a join turns into the durable view, not a reader waiting on it for
	// ever. Defaults to DefaultRelayFirstFrame; refused without a Relay.
	RelayFirstFrame time.Duration

	// RelayQueue is how many frames may wait for Relay.Publish. Past it, frames are dropped
	// rather than stall a producer on a sick broker; relayed readers then see a hole, go stale,
	// and follow the durable view. Defaults to DefaultRelayQueue; refused without a Relay.
	RelayQueue int

	// OnCheckpointFunc, if set, observes every confirmed checkpoint (metrics, traces). It runs in
	// the stream's checkpoint goroutine and must not block.
	OnCheckpointFunc func(info CheckpointInfo)

	// CommitContextFunc, if set, wraps the context of each checkpoint's commit (all its
	// retries): tracing starts a span there, and a Committer that records trace context (the
	// checkpoint.Store's traceparent column) writes it with the rows. The returned function is
	// called once the commit settled, with its error. It must not block.
	CommitContextFunc func(ctx context.Context, info CheckpointInfo) (context.Context, func(err error))

	// OnStreamFunc, if set, hears a stream join this plane (+1, a successful Open) and leave it
	// (-1: it ended, sealed or fenced, or the plane's Close tore it down): a live-streams gauge.
	// A sealed stream lingering for late joins is not counted. It runs with
	// plane state locked and must not block or call back into the plane.
	OnStreamFunc func(delta int)

	// OnSubscriberFunc, if set, hears a local reader attach to a live stream (+1) and leave it
	// (-1); stale is true when it left dropped for not draining its queue. Same rules as
	// OnStreamFunc.
	OnSubscriberFunc func(delta int, stale bool)

	// OnCheckpointErrorFunc hears a checkpoint that exhausted its retries. The stream keeps
	// streaming (a durability stall, not a stream stall), so the error must not vanish. Defaults
	// to logging at error level.
	OnCheckpointErrorFunc func(err error, info CheckpointInfo)

	// OnRelayErrorFunc hears relay failures: a failing Publish, a failed or timed-out Attach, a
	// conform violation. A diagnostic, never a control path. Defaults to logging at warn level;
	// refused without a Relay.
	OnRelayErrorFunc func(err error, streamID string, phase RelayPhase)

	// Logger receives the default error reports. Defaults to slog.Default().
	Logger *slog.Logger

	// Clock drives cadence (checkpoint interval, linger). Nil means real time.
	Clock Clock
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Committer == nil {
		return out, &ConfigError{"Committer", "is required"}
	}
	if out.Authorize == nil {
		return out, &ConfigError{"Authorize", "is required: there is no default-allow for reading a stream"}
	}
	positive := func(field string, v, def int64) (int64, error) {
		switch {
		case v < 0:
			return 0, &ConfigError{field, "must not be negative"}
		case v == 0:
			return def, nil
		}
		return v, nil
	}
	var err error
	var v int64
	if v, err = positive("CheckpointChars", int64(out.CheckpointChars), DefaultCheckpointChars); err != nil {
		return out, err
	}
	out.CheckpointChars = int(v)
	if v, err = positive("CheckpointInterval", int64(out.CheckpointInterval), int64(DefaultCheckpointInterval)); err != nil {
		return out, err
	}
	out.CheckpointInterval = time.Duration(v)
	if out.CheckpointSpread < 0 || out.CheckpointSpread >= out.CheckpointInterval {
		return out, &ConfigError{"CheckpointSpread", "must be at least zero and below CheckpointInterval"}
	}
	switch {
	case out.CheckpointRetries == NoRetries:
		out.CheckpointRetries = 0
	case out.CheckpointRetries == 0:
		out.CheckpointRetries = DefaultCheckpointRetries
	case out.CheckpointRetries < 0:
		return out, &ConfigError{"CheckpointRetries", "must be positive, zero for the default, or NoRetries"}
	}
	if v, err = positive("RetryBackoff", int64(out.RetryBackoff), int64(DefaultRetryBackoff)); err != nil {
		return out, err
	}
	out.RetryBackoff = time.Duration(v)
	if v, err = positive("CommitTimeout", int64(out.CommitTimeout), int64(DefaultCommitTimeout)); err != nil {
		return out, err
	}
	out.CommitTimeout = time.Duration(v)
	if v, err = positive("Linger", int64(out.Linger), int64(DefaultLinger)); err != nil {
		return out, err
	}
	out.Linger = time.Duration(v)
	switch {
	case out.IdleTimeout == NoIdleTimeout:
		out.IdleTimeout = 0
	case out.IdleTimeout == 0:
		out.IdleTimeout = DefaultIdleTimeout
	case out.IdleTimeout < 0:
		return out, &ConfigError{"IdleTimeout", "must be positive, zero for the default, or NoIdleTimeout"}
	}
	if v, err = positive("MaxQueuedFrames", int64(out.MaxQueuedFrames), DefaultMaxQueuedFrames); err != nil {
		return out, err
	}
	out.MaxQueuedFrames = int(v)

	if _, whole := out.Committer.(WholeBodyCommitter); whole {
		if out.RetainChars != 0 {
			return out, &ConfigError{"RetainChars", "is for commit-callback mode only: this committer compacts the whole text at close, so the plane retains all of it"}
		}
		out.RetainChars = retainAll
	} else if out.RetainChars == RetainNone {
		out.RetainChars = 0
	} else if v, err = positive("RetainChars", int64(out.RetainChars), int64(DefaultRetainChars)); err != nil {
		return out, err
	} else {
		out.RetainChars = Seq(v)
	}

	if out.Relay == nil {
		if out.RelayAttachTimeout != 0 {
			return out, &ConfigError{"RelayAttachTimeout", "does nothing without a Relay"}
		}
		if out.RelayFirstFrame != 0 {
			return out, &ConfigError{"RelayFirstFrame", "does nothing without a Relay"}
		}
		if out.OnRelayErrorFunc != nil {
			return out, &ConfigError{"OnRelayErrorFunc", "does nothing without a Relay"}
		}
		if out.RelayQueue != 0 {
			return out, &ConfigError{"RelayQueue", "does nothing without a Relay"}
		}
	} else {
		if out.Relay.Publish == nil && out.Relay.Attach == nil {
			return out, &ConfigError{"Relay", "implements neither Publish nor Attach: which topology is this?"}
		}
		if v, err = positive("RelayAttachTimeout", int64(out.RelayAttachTimeout), int64(DefaultRelayAttachTimeout)); err != nil {
			return out, err
		}
		out.RelayAttachTimeout = time.Duration(v)
		if v, err = positive("RelayFirstFrame", int64(out.RelayFirstFrame), int64(DefaultRelayFirstFrame)); err != nil {
			return out, err
		}
		out.RelayFirstFrame = time.Duration(v)
		if v, err = positive("RelayQueue", int64(out.RelayQueue), DefaultRelayQueue); err != nil {
			return out, err
		}
		out.RelayQueue = int(v)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	out.Clock = clockOrReal(out.Clock)
	return out, nil
}
