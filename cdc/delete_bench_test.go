package cdc_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
)

// sizingPublisher counts the payload bytes published through it.
type sizingPublisher struct {
	message.Publisher
	bytes int
}

func (s *sizingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		s.bytes += len(m.Payload)
	}
	return s.Publisher.Publish(topic, msgs...)
}

// BenchmarkDeleteLongMessage deletes a message of 200,000 chunks (a Durable Streams text stream
// of 200,000 appends; the schema's trigger deletes the chunks in the same transaction) and
// reports what its transaction cost to publish: events, payload bytes, the time from the
// DELETE to the transaction arriving at a subscriber, and the bytes this process allocated
// meanwhile (the reader's decoding and the subscriber's).
//
//	go test ./cdc -run '^$' -bench DeleteLongMessage -benchtime 1x -count 3
func BenchmarkDeleteLongMessage(b *testing.B) {
	const n = 200000
	for b.Loop() {
		b.StopTimer()
		var pub *sizingPublisher
		db, col := startReader(b, func(p message.Publisher) message.Publisher {
			pub = &sizingPublisher{Publisher: p}
			return pub
		}, func(c *cdc.Config) {
			c.StatusInterval = 0 // the default, as rindled runs it
			c.MaxEventBytes = 1 << 30
		})
		ctx := b.Context()
		_, err := db.Pool.Exec(ctx, `INSERT INTO messages (id, seq) VALUES ('ds/a/stream', $1)`, n)
		require.NoError(b, err)
		col.next(b)
		_, err = db.Pool.Exec(ctx, `INSERT INTO message_chunks (stream_id, seq, text) SELECT 'ds/a/stream', g, 'x' FROM generate_series(1, $1) g`, n)
		require.NoError(b, err)
		col.next(b)
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		before := pub.bytes
		b.StartTimer()
		start := time.Now()
		_, err = db.Pool.Exec(ctx, `DELETE FROM messages WHERE id = 'ds/a/stream'`)
		require.NoError(b, err)
		tx := col.next(b)
		took := time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(len(tx.Events)), "events")
		b.ReportMetric(float64(pub.bytes-before), "payload-bytes")
		b.ReportMetric(took.Seconds(), "s-to-subscriber")
		b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/(1<<20), "MiB-allocated")
		b.StartTimer()
	}
}
