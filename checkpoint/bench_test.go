package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/demo"
	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// BenchmarkCheckpointLoad runs 1000 concurrent streams of 4-character deltas at 100 deltas/s
// each against real Postgres (fsync on: pgtest turns it on for benchmark runs), with the default
// policy, then seals them all. It reports the durability lag of each checkpoint's oldest
// character (p50, p99; lag-with-seals-p99 counts the seals' too), how long opening the streams
// took (16 at a time), the Postgres transactions per stream-second, and the bytes written per
// byte produced: WAL bytes, and the text bytes the plane sent. Two answer lengths show the bytes
// per byte stay constant as answers grow (O(n) writes, not O(n²)).
func BenchmarkCheckpointLoad(b *testing.B) {
	if testing.Short() {
		b.Skip("a load run of several seconds")
	}
	for _, answer := range []time.Duration{2 * time.Second, 8 * time.Second} {
		b.Run(fmt.Sprintf("streams=1000/answer=%s", answer), func(b *testing.B) {
			for b.Loop() {
				runLoad(b, 1000, answer, 0)
			}
		})
	}
}

// BenchmarkCheckpointLoadInterval is CheckpointLoad's 2 s answers under longer checkpoint
// intervals: what the WAL per produced byte and the durability lag trade against each other on
// a workload where the interval, not the size, fires the checkpoints. Each checkpoint of the
// default 750 ms carries about 300 bytes here and pays about as much again in records (the
// message row's compare-and-swap, the chunk row's header, its B-tree entry), and the seal's
// compaction writes the text a second time; a longer interval means fewer, larger checkpoints,
// and an answer shorter than the interval is written once, as its body.
func BenchmarkCheckpointLoadInterval(b *testing.B) {
	if testing.Short() {
		b.Skip("a load run of several seconds")
	}
	for _, interval := range []time.Duration{750 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond} {
		b.Run(fmt.Sprintf("streams=1000/answer=2s/interval=%s", interval), func(b *testing.B) {
			for b.Loop() {
				runLoad(b, 1000, 2*time.Second, interval)
			}
		})
	}
}

// runLoad runs the load; interval is the producer's CheckpointInterval (0: the default).
func runLoad(b *testing.B, streams int, answer, interval time.Duration) {
	ctx := context.Background()
	db := pgtest.NewDBWith(b, 32)
	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: checkpoint.DefaultTables()})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var lags, durations, allLags []time.Duration // allLags: the seals' too
	var appends, seals, appendUnits atomic.Int64
	var bodyBytes int64
	var failures atomic.Int64
	plane, err := producer.New(producer.Config{
		Committer:          store,
		CheckpointInterval: interval,
		Authorize:          func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		OnCheckpointFunc: func(info producer.CheckpointInfo) {
			mu.Lock()
			allLags = append(allLags, info.Lag)
			mu.Unlock()
			if info.Seal {
				seals.Add(1)
				return
			}
			appends.Add(1)
			appendUnits.Add(int64(info.Seq - info.From)) // ASCII deltas: units are bytes
			mu.Lock()
			lags = append(lags, info.Lag)
			durations = append(durations, info.Duration)
			mu.Unlock()
		},
		OnCheckpointErrorFunc: func(error, producer.CheckpointInfo) { failures.Add(1) },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer plane.Close()
	if _, err := db.Pool.Exec(ctx, "INSERT INTO messages (id) SELECT 'm' || g FROM generate_series(1, $1) g", streams); err != nil {
		b.Fatal(err)
	}
	handles := make([]*producer.LiveStream, streams)
	var wg sync.WaitGroup
	opening := time.Now()
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < streams; i += 16 {
				s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: fmt.Sprintf("m%d", i+1)})
				if err != nil {
					b.Error(err)
					return
				}
				handles[i] = s
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	b.ReportMetric(float64(time.Since(opening).Microseconds())/1000, "open-all-ms")
	var wal0 string
	if err := db.Pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&wal0); err != nil {
		b.Fatal(err)
	}

	const delta = "tok "
	tick := 10 * time.Millisecond // 100 deltas/s per stream
	start := time.Now()
	pushes := 0
	for next := start; time.Since(start) < answer; next = next.Add(tick) {
		time.Sleep(time.Until(next))
		for _, s := range handles {
			if err := s.Push(delta); err != nil {
				b.Fatal(err)
			}
		}
		pushes++
	}
	elapsed := time.Since(start)
	for _, s := range handles {
		wg.Go(func() {
			if err := s.Close(ctx); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	var walBytes int64
	if err := db.Pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", wal0).Scan(&walBytes); err != nil {
		b.Fatal(err)
	}
	// What the plane sent: every chunk's text, plus each compacted body once.
	if err := db.Pool.QueryRow(ctx, "SELECT coalesce(sum(octet_length(body)), 0) FROM messages").Scan(&bodyBytes); err != nil {
		b.Fatal(err)
	}
	produced := int64(pushes) * int64(len(delta)) * int64(streams)
	chunkBytes := appendUnits.Load()
	mu.Lock()
	slices.Sort(lags)
	p50, p99 := pct(lags, 0.50), pct(lags, 0.99)
	slices.Sort(durations)
	c50, c99 := pct(durations, 0.50), pct(durations, 0.99)
	slices.Sort(allLags)
	all99 := pct(allLags, 0.99)
	mu.Unlock()
	streamSeconds := float64(streams) * elapsed.Seconds()
	b.ReportMetric(float64(pushes*streams)/elapsed.Seconds(), "deltas/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64(all99.Microseconds())/1000, "lag-with-seals-p99-ms")
	b.ReportMetric(float64(c50.Microseconds())/1000, "commit-p50-ms")
	b.ReportMetric(float64(c99.Microseconds())/1000, "commit-p99-ms")
	b.ReportMetric(float64(appends.Load()+seals.Load())/streamSeconds, "tx/stream-s")
	b.ReportMetric(float64(walBytes)/float64(produced), "wal-bytes/byte")
	b.ReportMetric(float64(chunkBytes+bodyBytes)/float64(produced), "sent-bytes/byte")
	if f := failures.Load(); f > 0 {
		b.ReportMetric(float64(f), "failed-checkpoints")
	}
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkStoreAppend is one stream's checkpoints back to back, through the Store on the real
// server (fsync on in benchmark runs): the cost of committing and confirming one checkpoint.
func BenchmarkStoreAppend(b *testing.B) {
	db := pgtest.NewDB(b)
	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: checkpoint.DefaultTables(), HostID: "bench"})
	require.NoError(b, err)
	_, err = db.Pool.Exec(b.Context(), "INSERT INTO messages (id, owner) VALUES ('m', 'bench')")
	require.NoError(b, err)
	require.NoError(b, store.CheckOpenable(b.Context(), "m"))
	require.NoError(b, store.Open(b.Context(), producer.OpenInput{StreamID: "m"}))
	text := strings.Repeat("a checkpoint ", 24)[:300] // about one checkpoint of realistic text
	var at producer.Seq
	b.ReportAllocs()
	for b.Loop() {
		res, err := store.Append(b.Context(), producer.AppendInput{StreamID: "m", From: at, Seq: at + 300, Text: text})
		if err != nil || res.Durable != at+300 {
			b.Fatalf("append at %d: %v (durable %d)", at, err, res.Durable)
		}
		at += 300
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checkpoints/s")
}

// BenchmarkWALPerByte is the WAL a realistic answer costs per produced byte under the default
// policy (512-unit or 750 ms checkpoints, then the compacting seal): multilingual text from the
// demo's generator at a model's pace (200 pieces a second), 20 streams at once. "Default" maps the traceparent column,
// as rindled does, and commits inside sampled spans (rindled with a trace exporter); "NoTraceparent"
// shows what that column costs; "Chars1024" is Default with checkpoints forced at 1,024 units
// instead of the seed's 512 (the interval unchanged), the policy lever that the WAL figure
// answers to most; "Chars1024Unsampled" is rindled's default: 1,024 units, no exporter, so its
// spans are unsampled and write no traceparent.
func BenchmarkWALPerByte(b *testing.B) {
	for _, mode := range []string{"Default", "NoTraceparent", "Chars1024", "Chars1024Unsampled"} {
		b.Run(mode, func(b *testing.B) {
			db := pgtest.NewDB(b)
			tables := checkpoint.DefaultTables()
			if mode == "NoTraceparent" {
				tables.Columns.ChunkTraceparent = ""
			}
			store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(db.Pool), Tables: tables, HostID: "bench"})
			require.NoError(b, err)
			cfg := producer.Config{Committer: store,
				Authorize: func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil }}
			if strings.HasPrefix(mode, "Chars1024") {
				cfg.CheckpointChars = 1024
			}
			if mode != "NoTraceparent" {
				// rindled commits inside a span: a sampled one's traceparent goes into every chunk row.
				flags := trace.FlagsSampled
				if mode == "Chars1024Unsampled" {
					flags = 0
				}
				sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: flags})
				cfg.CommitContextFunc = func(ctx context.Context, _ producer.CheckpointInfo) (context.Context, func(error)) {
					return trace.ContextWithSpanContext(ctx, sc), func(error) {}
				}
			}
			plane, err := producer.New(cfg)
			require.NoError(b, err)
			defer plane.Close()
			ctx := b.Context()
			var produced, wal int64
			run := 0
			for b.Loop() {
				run++
				var before, after string
				require.NoError(b, db.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&before))
				var wg sync.WaitGroup
				var bytes atomic.Int64
				for i := range 20 {
					id := fmt.Sprintf("w%d-%d", run, i)
					_, err := db.Pool.Exec(ctx, "INSERT INTO messages (id, owner) VALUES ($1, 'bench')", id)
					require.NoError(b, err)
					s, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: id})
					require.NoError(b, err)
					wg.Go(func() {
						for d, err := range demo.Answer(ctx, uint64(run*100+i), 600, 5*time.Millisecond) {
							if err != nil {
								return // the run's context ended
							}
							if s.Push(d) == nil {
								bytes.Add(int64(len(d)))
							}
						}
						if err := s.Close(ctx); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				require.NoError(b, db.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&after))
				var diff int64
				require.NoError(b, db.Pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", after, before).Scan(&diff))
				produced += bytes.Load()
				wal += diff
			}
			b.ReportMetric(float64(wal)/float64(produced), "walbytes/byte")
		})
	}
}

// BenchmarkCheckpointSaturation is the durable plane's ceiling beside PostgreSQL's own: 16
// streams (rindled's default pool on this machine) checkpoint back to back through the Store
// (its default group commit), and pgbench runs the same checkpoint statements against the same
// database in transactions of the same size as the grouped Store's: G checkpoints of G
// different streams, sent as one pipeline closed by one Sync (one implicit transaction, one
// round trip), as WriteRows sends them. G is the Store's checkpoints per transaction, counted
// by the DB the Store writes through in a first, unmeasured second; it is seldom whole, so
// pgbench mixes transactions of ⌊G⌋ and ⌊G⌋+1 checkpoints in the proportion that averages G
// (both reported: store- and pgbench-checkpoints/tx). Every side commits with fsync on.
//
// The two take turns: three rounds of the Store for 2 s, then pgbench with as many clients as
// the Store has transactions in flight (checkpoint.DefaultWriters) for 2 s. "ratio" is the
// Store's checkpoints over pgbench's in those rounds. On a shared machine a neighbour's burst
// lands on both sides instead of on whichever ran when it came: one 5 s run of each, one after
// the other, gave single ratios from 0.64 to 1.01 within an hour.
//
// After the rounds, once each for 5 s: a Store with group commit off ("ungrouped-ratio"), and
// pgbench with 16 clients, PostgreSQL's ceiling with four times the Store's connections
// ("ratio16").
//
// Both sides share the machine's cores with their server, so it also reports each side's CPU per
// checkpoint in the rounds, read per process: the client's (this process's own while the Store
// runs; pgbench's from its exit status) and the server's (every PostgreSQL process, from /proc).
//
// Two more sides take their turn in each round, running pgbench's transactions (the same
// statements and sizes, the stream and the text as parameters) from as many goroutines in this
// process, with none of the Store: a bare pgx client ("pgx-ratio", over pgbench's), and a
// wire-level one on pgconn, its statement prepared once and its parameters encoded once
// ("pgconn-ratio"). They say how much of the gap is the Store's and how much is a Go client's.
func BenchmarkCheckpointSaturation(b *testing.B) {
	pgbench, err := pgcluster.Binary("pgbench")
	if err != nil {
		b.Skip("pgbench not installed:", err)
	}
	const clients, rounds, turn, single = 16, 3, 2 * time.Second, 5 * time.Second
	text := strings.Repeat("a checkpoint ", 24)[:300]
	for b.Loop() {
		db := pgtest.NewDBWith(b, clients)
		ctx := b.Context()
		_, err := db.Pool.Exec(ctx, `INSERT INTO messages (id, owner) SELECT p || g, 'bench' FROM generate_series(1, $1) g, unnest(ARRAY['s', 'u']) p`, clients)
		require.NoError(b, err)
		// A storeSide is a Store whose clients (one per stream) checkpoint back to back.
		type storeSide struct {
			counted *countingDB
			store   *checkpoint.Store
			ids     []string
			at      []producer.Seq
		}
		open := func(prefix string, cfg checkpoint.Config) *storeSide {
			s := &storeSide{counted: &countingDB{DB: checkpoint.PoolDB(db.Pool)}}
			cfg.DB, cfg.HostID = s.counted, "bench"
			s.store, err = checkpoint.New(cfg)
			require.NoError(b, err)
			for i := range clients {
				id := fmt.Sprintf("%s%d", prefix, i+1)
				require.NoError(b, s.store.Open(ctx, producer.OpenInput{StreamID: id}))
				s.ids = append(s.ids, id)
			}
			s.at = make([]producer.Seq, clients)
			return s
		}
		// run checkpoints for d: the checkpoints and transactions it made, and the CPU this
		// process and the server used meanwhile.
		run := func(s *storeSide, d time.Duration) (done, txs int64, self, server time.Duration) {
			var n atomic.Int64
			var wg sync.WaitGroup
			txs0, self0, server0 := s.counted.txs.Load(), selfCPU(b), clusterCPU(b, db.Pool)
			deadline := time.Now().Add(d)
			for i, id := range s.ids {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						at := s.at[i]
						if _, err := s.store.Append(ctx, producer.AppendInput{StreamID: id, From: at, Seq: at + 300, Text: text}); err != nil {
							b.Error(err)
							return
						}
						s.at[i] = at + 300
						n.Add(1)
					}
				})
			}
			wg.Wait()
			return n.Load(), s.counted.txs.Load() - txs0, selfCPU(b) - self0, clusterCPU(b, db.Pool) - server0
		}
		grouped := open("s", checkpoint.Config{})
		warm, warmTxs, _, _ := run(grouped, time.Second)
		perTx := float64(warm) / float64(max(1, warmTxs))

		// pgbench client c writes streams 'p<c>-1' … 'p<c>-<k>', one statement each per
		// transaction: the statement Store.Append sends (the length CAS driving the chunk
		// insert), its offsets computed in SQL because a pgbench client keeps no state between
		// transactions. The Store's transactions carry perTx checkpoints on average, rarely a
		// whole number, so pgbench runs two scripts, of lo and lo+1 statements, weighted so its
		// transactions carry perTx on average too (rounding to one size would hand one side
		// bigger transactions), and its checkpoints are counted per script from its report.
		lo := max(1, int(perTx))
		hiWeight := int((perTx - float64(lo)) * 1000)
		sizes := map[int]int{lo: 1000 - hiWeight}
		if hiWeight > 0 {
			sizes[lo+1] = hiWeight
		}
		most := lo + min(1, hiWeight)
		for _, p := range []string{"p", "x"} { // pgbench's streams, and the bare pgx client's
			_, err = db.Pool.Exec(ctx, `INSERT INTO messages (id, owner, status, host) SELECT $3 || c || '-' || k, 'bench', 'streaming', 'bench' FROM generate_series(0, $1 - 1) c, generate_series(1, $2) k`, clients, most, p) // pgbench numbers its clients from 0
			require.NoError(b, err)
		}
		args := []string{"-n", "-M", "prepared"}
		var scriptSizes []int // each script's checkpoints per transaction, in pgbench's order
		for _, size := range []int{lo, lo + 1} {
			weight, ok := sizes[size]
			if !ok || weight == 0 {
				continue
			}
			var script strings.Builder
			script.WriteString("\\startpipeline\n")
			for k := 1; k <= size; k++ {
				script.WriteString(checkpointSQL(fmt.Sprintf("'p' || :client_id || '-%d'", k), "'"+text+"'") + ";\n")
			}
			script.WriteString("\\endpipeline\n")
			path := filepath.Join(b.TempDir(), fmt.Sprintf("checkpoint%d.sql", size))
			require.NoError(b, os.WriteFile(path, []byte(script.String()), 0o644))
			args = append(args, "-f", fmt.Sprintf("%s@%d", path, weight))
			scriptSizes = append(scriptSizes, size)
		}
		// runPgbench runs the scripts from c clients for d: the checkpoints and transactions
		// they made, pgbench's CPU, and the server's meanwhile.
		total := regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
		perScript := regexp.MustCompile(`(?m)^ - ([0-9]+) transactions`)
		count := func(m []byte) float64 {
			n, err := strconv.ParseFloat(string(m), 64)
			require.NoError(b, err)
			return n
		}
		runPgbench := func(c int, d time.Duration) (checkpoints, txs float64, self, server time.Duration) {
			cmd := exec.CommandContext(ctx, pgbench, append(slices.Clone(args), "-c", fmt.Sprint(c), "-j", "2",
				"-T", fmt.Sprint(int(d.Seconds())), db.URL)...)
			server0 := clusterCPU(b, db.Pool)
			out, err := cmd.CombinedOutput()
			require.NoError(b, err, "%s", out)
			server = clusterCPU(b, db.Pool) - server0
			self = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			if len(scriptSizes) == 1 { // one script: pgbench prints no per-script counts
				m := total.FindSubmatch(out)
				require.NotNil(b, m, "%s", out)
				txs = count(m[1])
				return txs * float64(scriptSizes[0]), txs, self, server
			}
			counts := perScript.FindAllSubmatch(out, -1)
			require.Len(b, counts, len(scriptSizes), "%s", out)
			for i, m := range counts {
				n := count(m[1])
				txs += n
				checkpoints += n * float64(scriptSizes[i])
			}
			return checkpoints, txs, self, server
		}

		// bare is the scripts' statement with the stream and the text as parameters. Two clients
		// in this process run pgbench's transactions of it (runPgx, runPgconn): what a Go client
		// costs with none of the Store's machinery (a goroutine per stream, the group commit's
		// hand-offs, the checkpoint's bookkeeping).
		bare := checkpointSQL("$1", "$2")
		// clientTurn runs pgbench's transactions from c goroutines of this process for d, in the
		// scripts' proportion of sizes: tx sends client's transaction of size checkpoints. It
		// returns the checkpoints and transactions made, and this process's CPU meanwhile.
		clientTurn := func(c int, d time.Duration, tx func(client, size int) error) (checkpoints, txs int64, self time.Duration) {
			var n, t atomic.Int64
			var wg sync.WaitGroup
			self0 := selfCPU(b)
			deadline := time.Now().Add(d)
			for client := range c {
				wg.Go(func() {
					for k := 0; time.Now().Before(deadline); k++ {
						size := lo + sizeStep(k, hiWeight)
						if err := tx(client, size); err != nil {
							b.Error(err)
							return
						}
						n.Add(int64(size))
						t.Add(1)
					}
				})
			}
			wg.Wait()
			return n.Load(), t.Load(), selfCPU(b) - self0
		}
		// runPgx: each transaction one pgx.Batch through the pool, as the Store's WriteRows.
		runPgx := func(c int, d time.Duration) (checkpoints, txs int64, self time.Duration) {
			return clientTurn(c, d, func(client, size int) error {
				batch := &pgx.Batch{}
				for s := 1; s <= size; s++ {
					batch.Queue(bare, fmt.Sprintf("x%d-%d", client, s), text)
				}
				br := db.Pool.SendBatch(ctx, batch)
				var seq int64
				var cancel bool
				for range size {
					if err := br.QueryRow().Scan(&seq, &cancel); err != nil {
						_ = br.Close()
						return err
					}
				}
				return br.Close()
			})
		}
		// runPgconn is runPgx one layer down, on pgconn (the wire protocol under pgx): the
		// statement prepared once per connection, its parameters encoded once, each transaction
		// one pgconn.Batch, its rows read raw. What is left is Go's runtime and the socket.
		runPgconn := func(c int, d time.Duration) (checkpoints, txs int64, self time.Duration) {
			conns := make([]*pgxpool.Conn, c)
			sds := make([]*pgconn.StatementDescription, c)
			ids := make([][][]byte, c) // client's stream ids, encoded
			for i := range c {
				conns[i], err = db.Pool.Acquire(ctx)
				require.NoError(b, err)
				defer conns[i].Release()
				sds[i], err = conns[i].Conn().PgConn().Prepare(ctx, "", bare, nil)
				require.NoError(b, err)
				for s := 1; s <= lo+1; s++ {
					ids[i] = append(ids[i], fmt.Appendf(nil, "x%d-%d", i, s))
				}
			}
			body := []byte(text)
			return clientTurn(c, d, func(client, size int) error {
				batch := &pgconn.Batch{}
				for s := range size {
					batch.ExecStatement(sds[client], [][]byte{ids[client][s], body}, nil, nil)
				}
				results, err := conns[client].Conn().PgConn().ExecBatch(ctx, batch).ReadAll()
				if err == nil && len(results) != size {
					err = fmt.Errorf("%d results for %d statements", len(results), size)
				}
				for _, r := range results {
					switch {
					case err != nil:
					case r.Err != nil:
						err = r.Err
					case len(r.Rows) != 1:
						err = errors.New("a checkpoint's compare-and-swap returned no row")
					}
				}
				return err
			})
		}

		var ours, theirs, bares, ourTxs, theirTxs, bareTxs float64
		var wires, wireTxs float64
		var ourSelf, ourServer, theirSelf, theirServer, bareSelf, wireSelf time.Duration
		for range rounds {
			n, t, self, server := run(grouped, turn)
			ours, ourTxs, ourSelf, ourServer = ours+float64(n), ourTxs+float64(t), ourSelf+self, ourServer+server
			c, t2, self, server := runPgbench(checkpoint.DefaultWriters, turn)
			theirs, theirTxs, theirSelf, theirServer = theirs+c, theirTxs+t2, theirSelf+self, theirServer+server
			x, t3, self := runPgx(checkpoint.DefaultWriters, turn)
			bares, bareTxs, bareSelf = bares+float64(x), bareTxs+float64(t3), bareSelf+self
			w, t4, self := runPgconn(checkpoint.DefaultWriters, turn)
			wires, wireTxs, wireSelf = wires+float64(w), wireTxs+float64(t4), wireSelf+self
		}
		require.Positive(b, ours)
		require.Positive(b, theirs)
		var moved int64
		require.NoError(b, db.Pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE id LIKE 'p%' AND seq > 0`).Scan(&moved))
		require.Equal(b, int64(checkpoint.DefaultWriters*most), moved, "every pgbench stream took checkpoints: the scripts wrote what they claim")
		alone, _, _, _ := run(open("u", checkpoint.Config{MaxGroup: 1}), single) // group commit off: one transaction per checkpoint
		ceiling, _, _, _ := runPgbench(clients, single)

		measured := (rounds * turn).Seconds()
		micros := func(d time.Duration, n float64) float64 { return d.Seconds() * 1e6 / n }
		b.ReportMetric(ours/measured, "store-checkpoints/s")
		b.ReportMetric(ours/ourTxs, "store-checkpoints/tx")
		b.ReportMetric(micros(ourSelf, ours), "store-client-µs/checkpoint")
		b.ReportMetric(micros(ourServer, ours), "store-server-µs/checkpoint")
		b.ReportMetric(theirs/measured, "pgbench-checkpoints/s")
		b.ReportMetric(theirs/theirTxs, "pgbench-checkpoints/tx")
		b.ReportMetric(micros(theirSelf, theirs), "pgbench-client-µs/checkpoint")
		b.ReportMetric(micros(theirServer, theirs), "pgbench-server-µs/checkpoint")
		b.ReportMetric(ceiling/single.Seconds(), "pgbench16-checkpoints/s")
		b.ReportMetric(float64(alone)/single.Seconds(), "ungrouped-checkpoints/s")
		b.ReportMetric(bares/measured, "pgx-checkpoints/s")
		b.ReportMetric(bares/bareTxs, "pgx-checkpoints/tx")
		b.ReportMetric(micros(bareSelf, bares), "pgx-client-µs/checkpoint")
		b.ReportMetric(wires/measured, "pgconn-checkpoints/s")
		b.ReportMetric(wires/wireTxs, "pgconn-checkpoints/tx")
		b.ReportMetric(micros(wireSelf, wires), "pgconn-client-µs/checkpoint")
		b.ReportMetric(ours/theirs, "ratio")
		b.ReportMetric(bares/theirs, "pgx-ratio")
		b.ReportMetric(wires/theirs, "pgconn-ratio")
		b.ReportMetric((ours/measured)/(ceiling/single.Seconds()), "ratio16")
		b.ReportMetric((float64(alone)/single.Seconds())/(theirs/measured), "ungrouped-ratio")
	}
}

// checkpointSQL is the statement of one checkpoint of 300 units as pgbench and the bare clients
// run it (the Store's compare-and-swap and chunk insert, in one statement): id and text are SQL
// expressions, a pgbench script's literals or a prepared statement's parameters.
func checkpointSQL(id, text string) string {
	return `WITH cas AS (
  UPDATE messages SET seq = seq + 300 WHERE id = ` + id + ` AND status = 'streaming' AND host = 'bench'
  RETURNING seq, cancel_requested
), ins AS (
  INSERT INTO message_chunks (stream_id, seq, text, traceparent)
  SELECT ` + id + `, seq, ` + text + `, NULL FROM cas
)
SELECT * FROM cas`
}

// sizeStep is 1 for hiWeight of every 1000 transactions, spread evenly (the k-th transaction's
// share of a line of slope hiWeight/1000), and 0 for the others: transactions of lo+sizeStep
// checkpoints average lo + hiWeight/1000, as pgbench's weighted scripts do.
func sizeStep(k, hiWeight int) int {
	return (k+1)*hiWeight/1000 - k*hiWeight/1000
}

// countingDB counts the transactions a Store commits through it: each WriteRow is one, each
// WriteRows (a group) is one.
type countingDB struct {
	checkpoint.DB
	txs atomic.Int64
}

func (d *countingDB) WriteRow(ctx context.Context, sql string, args []any, dest ...any) error {
	d.txs.Add(1)
	return d.DB.WriteRow(ctx, sql, args, dest...)
}

func (d *countingDB) WriteRows(ctx context.Context, writes []checkpoint.RowWrite) error {
	d.txs.Add(1)
	return d.DB.(checkpoint.RowsWriter).WriteRows(ctx, writes)
}

// BenchmarkProtocolAppend is the Durable Streams store's append with W writers, each appending
// to its own text stream with one append in flight (bench.mjs's appends workload without HTTP),
// on the real server with fsync on: acknowledged appends per second.
func BenchmarkProtocolAppend(b *testing.B) {
	for _, bc := range []struct {
		writers, maxGroup int
	}{{1, 0}, {8, 0}, {8, 1}, {32, 0}, {32, 1}} {
		name := fmt.Sprintf("W%d", bc.writers)
		if bc.maxGroup == 1 {
			name += "/alone" // group commit off: a transaction per append, as before it
		}
		b.Run(name, func(b *testing.B) {
			db := pgtest.NewDB(b)
			p, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: db.Pool, MaxGroup: bc.maxGroup})
			require.NoError(b, err)
			writers := bc.writers
			same := func(a, b string) bool { return a == b }
			for w := range writers {
				_, _, err := p.Create(b.Context(), checkpoint.CreateStream{Path: fmt.Sprintf("w%d", w), ContentType: "text/plain", SameType: same})
				require.NoError(b, err)
			}
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					path := fmt.Sprintf("w%d", w)
					for next.Add(1) <= int64(b.N) {
						if _, err := p.Append(context.Background(), checkpoint.AppendStream{Path: path, ContentType: "text/plain", Text: "delta é😀 ", SameType: same}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		})
	}
}

// selfCPU is this process's user and system CPU so far.
func selfCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clusterCPU is the CPU so far of the PostgreSQL server pool talks to (pgcluster.ServerCPU).
func clusterCPU(tb testing.TB, pool *pgxpool.Pool) time.Duration {
	var backend int
	require.NoError(tb, pool.QueryRow(tb.Context(), "SELECT pg_backend_pid()").Scan(&backend))
	used, err := pgcluster.ServerCPU(backend)
	require.NoError(tb, err)
	return used
}
