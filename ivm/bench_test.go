package ivm_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkCommitToViewLag paces 1000 checkpoints a second (the store's own guarded append, over
// 200 streams, 8 writers; the store's group commit puts some in one transaction) through the
// reader into the view, for 5 s, and reports the commit-to-apply lag of each transaction (p50,
// p99), the appends and applied transactions per second, and the slot lag the reader left
// behind (max sampled). It fails if the view has not applied every append 30 s after the last.
func BenchmarkCommitToViewLag(b *testing.B) {
	if testing.Short() {
		b.Skip("a 5 s load run")
	}
	for b.Loop() {
		w := &world{db: pgtest.NewDBWith(b, 16)}
		w.broker = gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		w.pub = &flakyPublisher{Publisher: w.broker}
		ctx := context.Background()
		const streams, rate, seconds = 200, 1000, 5
		if _, err := w.db.Pool.Exec(ctx, "INSERT INTO messages (id) SELECT 'm' || g FROM generate_series(1, $1) g", streams); err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var lags []time.Duration
		var applied atomic.Int64 // the chunk rows the view applied
		v, err := ivm.New(ivm.Config{Subscriber: w.broker, Pool: w.db.Pool, OnApplyFunc: func(tx *cdc.Tx, lag time.Duration) {
			for _, e := range tx.Events {
				if e.Kind == cdc.ChunkAppended {
					applied.Add(1)
				}
			}
			mu.Lock()
			lags = append(lags, lag)
			mu.Unlock()
		}})
		if err != nil {
			b.Fatal(err)
		}
		if err := v.Start(ctx); err != nil {
			b.Fatal(err)
		}
		w.reader = w.newReader(b)
		if err := w.reader.Start(ctx); err != nil {
			b.Fatal(err)
		}
		store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(w.db.Pool), Tables: checkpoint.DefaultTables()})
		if err != nil {
			b.Fatal(err)
		}
		// Each stream opened by this store, as a producer does: the guarded append writes only a
		// streaming row whose host column is the store's.
		for s := 1; s <= streams; s++ {
			if err := store.Open(ctx, producer.OpenInput{StreamID: fmt.Sprint("m", s)}); err != nil {
				b.Fatal(err)
			}
		}
		var maxSlotLag atomic.Int64
		stopSampling := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-t.C:
					if lag, err := w.reader.SlotLag(ctx); err == nil && lag > maxSlotLag.Load() {
						maxSlotLag.Store(lag)
					}
				}
			}
		})
		const workers = 8
		var sent atomic.Int64
		start := time.Now()
		var load sync.WaitGroup
		for k := range workers {
			load.Go(func() {
				seq := map[int]producer.Seq{}
				tick := time.Second * workers / rate
				for next := time.Now(); time.Since(start) < seconds*time.Second; next = next.Add(tick) {
					time.Sleep(time.Until(next))
					s := k + workers*int(sent.Load()%int64(streams/workers)) + 1
					id := fmt.Sprint("m", s)
					from := seq[s]
					if _, err := store.Append(ctx, producer.AppendInput{StreamID: id, From: from, Seq: from + 16, Text: "tok tok tok tok "}); err != nil {
						b.Error(err)
						return
					}
					seq[s] = from + 16
					sent.Add(1)
				}
			})
		}
		load.Wait()
		elapsed := time.Since(start)
		// Drain: every append applied. (The Store group-commits appends, so the view applies
		// fewer transactions than there were appends: count the chunk rows, not the
		// transactions. Counting transactions never finished and waited out the deadline.)
		for deadline := time.Now().Add(30 * time.Second); applied.Load() < sent.Load(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the view applied %d of %d appends in 30 s", applied.Load(), sent.Load())
			}
		}
		close(stopSampling)
		wg.Wait()
		w.reader.Stop()
		v.Stop()
		_ = w.broker.Close()
		_ = w.reader.DropSlot(ctx)
		mu.Lock()
		slices.Sort(lags)
		b.ReportMetric(float64(sent.Load())/elapsed.Seconds(), "appends/s")
		b.ReportMetric(float64(len(lags))/elapsed.Seconds(), "applied-tx/s")
		b.ReportMetric(float64(percentile(lags, 0.50).Microseconds())/1000, "lag-p50-ms")
		b.ReportMetric(float64(percentile(lags, 0.99).Microseconds())/1000, "lag-p99-ms")
		b.ReportMetric(float64(maxSlotLag.Load()), "slot-lag-max-bytes")
		mu.Unlock()
	}
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// BenchmarkReaderThroughput has pgbench write checkpoint-shaped transactions (a chunk insert and
// a message update) for 5 s while the slot holds them, then lets the reader drain them into the
// view as fast as it can. It reports both rates from the same run and their ratio.
func BenchmarkReaderThroughput(b *testing.B) {
	if testing.Short() {
		b.Skip("a pgbench run")
	}
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgbench not installed")
	}
	for b.Loop() {
		w := &world{db: pgtest.NewDBWith(b, 8)}
		w.broker = gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		w.pub = &flakyPublisher{Publisher: w.broker}
		ctx := context.Background()
		if _, err := w.db.Pool.Exec(ctx, `INSERT INTO messages (id, status) SELECT 'm' || g, 'streaming' FROM generate_series(1, 100) g;
			CREATE SEQUENCE bench_seq`); err != nil {
			b.Fatal(err)
		}
		w.reader = w.newReader(b)
		if err := w.reader.Setup(ctx); err != nil { // the slot holds what pgbench writes
			b.Fatal(err)
		}
		script := filepath.Join(b.TempDir(), "checkpoint.sql")
		if err := os.WriteFile(script, []byte(`\set s random(1, 100)
BEGIN;
SELECT nextval('bench_seq') AS n \gset
INSERT INTO message_chunks (stream_id, seq, text) VALUES ('m' || :s, :n, 'tok tok tok tok ');
UPDATE messages SET seq = :n WHERE id = 'm' || :s;
END;
`), 0o644); err != nil {
			b.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(w.db.URL)
		if err != nil {
			b.Fatal(err)
		}
		out, err := exec.Command(pgbench, "-h", cfg.Host, "-U", cfg.User, "-n", "-c", "8", "-j", "2", "-T", "5", "-f", script, cfg.Database).CombinedOutput()
		if err != nil {
			b.Fatalf("pgbench: %v\n%s", err, out)
		}
		m := tpsLine.FindSubmatch(out)
		if m == nil {
			b.Fatalf("no tps in pgbench output:\n%s", out)
		}
		pgbenchTPS, _ := strconv.ParseFloat(string(m[1]), 64)
		var total int64
		if err := w.db.Pool.QueryRow(ctx, "SELECT count(*) FROM message_chunks").Scan(&total); err != nil {
			b.Fatal(err)
		}
		var applied atomic.Int64
		v, err := ivm.New(ivm.Config{Subscriber: w.broker, Pool: w.db.Pool, OnApplyFunc: func(*cdc.Tx, time.Duration) { applied.Add(1) }})
		if err != nil {
			b.Fatal(err)
		}
		if err := v.Start(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := w.reader.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for applied.Load() < total {
			time.Sleep(5 * time.Millisecond)
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("drained %d of %d", applied.Load(), total)
			}
		}
		elapsed := time.Since(start)
		w.reader.Stop()
		v.Stop()
		_ = w.broker.Close()
		_ = w.reader.DropSlot(ctx)
		readerTPS := float64(total) / elapsed.Seconds()
		b.ReportMetric(pgbenchTPS, "pgbench-tx/s")
		b.ReportMetric(readerTPS, "reader-tx/s")
		b.ReportMetric(2*readerTPS, "reader-events/s")
		b.ReportMetric(readerTPS/pgbenchTPS, "reader/pgbench")
	}
}
