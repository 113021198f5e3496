// Command stream shows both planes end to end on a real PostgreSQL: it streams a synthetic
// model answer, fans every delta out to a live reader, checkpoints chunk rows, follows them
// through logical replication (cdc) into the incremental view (ivm), lets a late reader join
// from the durable text the view holds, seals the answer with compaction, and checks contract S
// for both readers and the view.
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
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/internal/pgcluster"
	"github.com/rindle-sh/rindle-go/ivm"
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
		cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(*dir, "pg")})
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

	// The durable plane as readers see it: the reader publishes committed transactions on an
	// in-process broker, and the view applies them. The view subscribes before the reader starts.
	broker := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer broker.Close()
	view, err := ivm.New(ivm.Config{Subscriber: broker, Pool: pool})
	if err != nil {
		return err
	}
	if err := view.Start(ctx); err != nil {
		return err
	}
	defer view.Stop()
	reader, err := cdc.New(cdc.Config{ConnString: url, Slot: "rindle_example", Publisher: broker, StatusInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := reader.Start(ctx); err != nil {
		return err
	}
	defer func() {
		reader.Stop()
		// The example's slot would otherwise hold WAL in the kept cluster between runs.
		_ = reader.DropSlot(context.WithoutCancel(ctx))
	}()

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
			// A reader that joins late reads the durable text from the view first, then
			// subscribes at its length: the live plane serves the rest.
			m, err := view.Get(ctx, id)
			if err != nil {
				return err
			}
			lateHeld = m.Text
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
	fmt.Fprintf(stdout, "late reader joined at %d from the view's durable text\n", producer.Len16(lateHeld))
	// The view follows the seal through replication.
	final, err := view.Wait(ctx, id, 0)
	for err == nil && !final.Status.Terminal() {
		final, err = view.Wait(ctx, id, final.Seq)
	}
	if err != nil {
		return err
	}
	ok := liveText == produced.String() && lateText == produced.String() && body == produced.String() && final.Text == produced.String()
	fmt.Fprintf(stdout, "live reader, late reader, stored body and view (%s) equal the produced text: %t\n", final.Status, ok)
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
