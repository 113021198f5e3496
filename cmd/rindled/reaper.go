package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/retry"
	"github.com/rindle-sh/rindle-go/otel"
)

// Defaults of the Durable Streams reaper.
const (
	DefaultStreamsReapInterval       = time.Minute
	DefaultStreamsProducerRetention  = 7 * 24 * time.Hour
	streamsReapBatch                 = 100
	streamsReapMaxBatchesPerInterval = 50
)

// reapStreams removes expired protocol streams and idle producer state until ctx ends: every
// interval, jittered by up to 20% either way so instances started together do not reap in step,
// in batches of streamsReapBatch while batches come back full (bounded per round, so one round
// never holds the pool for long). A failed round is logged and retried at the next.
func reapStreams(ctx context.Context, p *checkpoint.Protocol, interval, producerIdle time.Duration, tel *otel.Instruments, logger *slog.Logger) {
	for {
		wait := time.Duration(float64(interval) * (0.8 + 0.4*rand.Float64()))
		if retry.Sleep(ctx, wait) != nil {
			return
		}
		for range streamsReapMaxBatchesPerInterval {
			got, err := p.Reap(ctx, streamsReapBatch, producerIdle)
			if err != nil {
				if ctx.Err() == nil {
					logger.Warn("durable streams reaper: a round failed; the next retries", "err", err)
				}
				break
			}
			tel.ObserveReaped(got.Streams, got.Producers)
			if got.Streams < streamsReapBatch && got.Producers < streamsReapBatch {
				break
			}
		}
	}
}
