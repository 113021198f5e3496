// Command stream shows both planes end to end on a real PostgreSQL: it streams a synthetic
// model answer, fans every delta out to a live reader, checkpoints chunk rows, lets a late reader
// join from the durable text it finds in the database, seals the answer with compaction, and
// checks contract S for both readers.
//
// With no DATABASE_URL it runs a private cluster from the machine's PostgreSQL binaries in
// ./.rindle (kept between runs; -dir moves it). With DATABASE_URL it uses that database.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/migrations"
	"github.com/rindle-sh/rindle-go/producer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stream:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".rindle", "where the private PostgreSQL cluster lives when DATABASE_URL is unset")
	rate := fs.Duration("token-interval", 20*time.Millisecond, "time between synthetic tokens")
	tokens := fs.Int("tokens", 150, "how many synthetic tokens the answer has")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokens <= 0 || *rate < 0 {
		return errors.New("-tokens must be positive and -token-interval not negative")
	}

	url := getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintf(stdout, "starting a private PostgreSQL in %s ...\n", *dir)
		cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: *dir})
		if err != nil {
			return err
		}
		defer func() { _ = cluster.Stop(context.WithoutCancel(ctx)) }()
		if url, err = ensureDatabase(ctx, cluster.URL, "rindle"); err != nil {
			return err
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	applied, err := migrations.Migrate(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		fmt.Fprintf(stdout, "applied migrations %v\n", applied)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()

	store, err := checkpoint.New(checkpoint.Config{DB: checkpoint.PoolDB(pool), Tables: checkpoint.DefaultTables()})
	if err != nil {
		return err
	}
	var checkpoints atomic.Int64
	plane, err := producer.New(producer.Config{
		Committer:          store,
		Authorize:          func(context.Context, producer.AuthorizeInput) (bool, error) { return true, nil },
		CheckpointChars:    64,
		CheckpointInterval: 250 * time.Millisecond,
		OnCheckpointFunc:   func(producer.CheckpointInfo) { checkpoints.Add(1) },
	})
	if err != nil {
		return err
	}
	defer plane.Close()

	id := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "INSERT INTO messages (id, role, owner) VALUES ($1, 'assistant', 'demo')", id); err != nil {
		return err
	}
	stream, err := plane.Open(ctx, producer.OpenStreamInput{StreamID: id})
	if err != nil {
		return err
	}
	live, err := plane.Subscribe(ctx, producer.SubscribeInput{StreamID: id})
	if err != nil {
		return err
	}
	liveDone := make(chan string, 1)
	go func() { liveDone <- read(ctx, live, "", stdout) }()

	words := strings.Fields("The answer streams token by token — naïve café, 日本語, and emoji 😀🚀👋🏽 count as two UTF-16 units each, so offsets agree with every browser.")
	var produced strings.Builder
	var late *producer.Subscription
	var lateHeld string
	for i := range *tokens {
		tok := words[i%len(words)] + " "
		if err := stream.Push(tok); err != nil {
			return err
		}
		produced.WriteString(tok)
		if i == *tokens/2 {
			// A reader that joins late reads the durable text from the database first, then
			// subscribes at its length: the live plane serves the rest.
			if lateHeld, err = durableText(ctx, pool, id); err != nil {
				return err
			}
			if late, err = plane.Subscribe(ctx, producer.SubscribeInput{StreamID: id, From: producer.Len16(lateHeld)}); err != nil {
				return err
			}
		}
		select {
		case <-time.After(*rate):
		case <-ctx.Done():
			_ = stream.Fail(context.WithoutCancel(ctx), ctx.Err())
			return ctx.Err()
		}
	}
	if err := stream.Close(ctx); err != nil {
		return err
	}
	liveText := <-liveDone
	lateText := read(ctx, late, lateHeld, io.Discard)

	var body, status string
	var seq int64
	if err := pool.QueryRow(ctx, "SELECT body, seq, status FROM messages WHERE id = $1", id).Scan(&body, &seq, &status); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n\nmessage %s: status %s, %d UTF-16 units, %d checkpoints before the seal\n", id, status, seq, checkpoints.Load())
	fmt.Fprintf(stdout, "late reader joined at %d from the database's durable text\n", producer.Len16(lateHeld))
	ok := liveText == produced.String() && lateText == produced.String() && body == produced.String()
	fmt.Fprintf(stdout, "live reader, late reader and stored body equal the produced text: %t\n", ok)
	if !ok {
		return errors.New("contract S failed")
	}
	return nil
}

// read applies a subscription's frames to held, printing chunks as they arrive.
func read(ctx context.Context, sub *producer.Subscription, held string, out io.Writer) string {
	text := held
	for f, err := range sub.Frames(ctx) {
		if err != nil {
			break
		}
		if f.Type == producer.FrameOpen {
			text = producer.Slice16(text, 0, f.From)
		}
		if f.Type == producer.FrameChunk {
			fmt.Fprint(out, f.Text)
		}
		text, _ = producer.Splice(text, f)
	}
	return text
}

// durableText is what a durable-plane reader sees: the body, then the chunks in seq order.
func durableText(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
	var text string
	err := pool.QueryRow(ctx, `SELECT m.body || coalesce(string_agg(c.text, '' ORDER BY c.seq), '')
		FROM messages m LEFT JOIN message_chunks c ON c.stream_id = m.id WHERE m.id = $1 GROUP BY m.body`, id).Scan(&text)
	return text, err
}

// ensureDatabase creates db on the server if it is missing and returns a URL for it.
func ensureDatabase(ctx context.Context, adminURL, db string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
			return "", err
		}
	}
	return strings.Replace(adminURL, "dbname=postgres", "dbname="+db, 1), nil
}
