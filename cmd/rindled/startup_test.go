package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/internal/faultnet"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// refusedURL is a database URL whose port refuses connections: a listener taken and closed.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	require.NoError(t, ln.Close())
	return fmt.Sprintf("postgres://rindle@127.0.0.1:%d/rindle?connect_timeout=5", addr.Port)
}

// Start-up tries an unreachable database again (a name that does not resolve yet, a refused
// port: a container network a moment after the database reported healthy), and connects once
// it answers; it stops at once on an answer (a missing database), and after its bound.
func TestStartupRetriesAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db := pgtest.NewDB(t)
	refused := refusedURL(t)

	t.Run("refused, then reachable", func(t *testing.T) {
		calls := 0
		err := untilReachable(ctx, quiet, "connect", time.Minute, time.Millisecond, func() error {
			calls++
			url := refused
			if calls == 3 {
				url = db.URL
			}
			conn, err := pgx.Connect(ctx, url)
			if err == nil {
				return conn.Close(ctx)
			}
			return err
		})
		require.NoError(t, err)
		require.Equal(t, 3, calls, "two refused connections, then the database")
	})

	t.Run("an answer is not retried", func(t *testing.T) {
		cfg, err := pgx.ParseConfig(db.URL)
		require.NoError(t, err)
		cfg.Database = "no_such_database"
		calls := 0
		err = untilReachable(ctx, quiet, "connect", time.Minute, time.Millisecond, func() error {
			calls++
			_, err := pgx.ConnectConfig(ctx, cfg)
			return err
		})
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "3D000", pe.Code, "the server's answer: the database does not exist")
		require.Equal(t, 1, calls)
	})

	t.Run("the CDC setup's connection too", func(t *testing.T) {
		r, err := cdc.New(cdc.Config{ConnString: refused, Slot: "s", Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), Topic: "t", Logger: quiet})
		require.NoError(t, err)
		err = r.Setup(ctx)
		require.True(t, unreachable(err), "a refused connection is unreachable: %v", err)
		require.False(t, unreachable(fmt.Errorf("cdc: %w", cdc.ErrWALLevel)), "wal_level is an answer")
		require.False(t, unreachable(errors.New("anything else")))
		require.True(t, unreachable(fmt.Errorf("connect: %w", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"})),
			"a server still starting up is tried again")
		require.False(t, unreachable(fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01"})), "bad credentials are an answer")
	})

	t.Run("a server that accepts and never answers is not retried", func(t *testing.T) {
		// Issue 9: start-up against such an address fails within the connect timeout. A
		// timeout is not a name that does not resolve yet or a port that refuses: trying it
		// again for reachableWithin would hang start-up for half a minute.
		hole, err := faultnet.New(faultnet.TCP("127.0.0.1:1"))
		require.NoError(t, err)
		t.Cleanup(hole.Close)
		hole.Blackhole()
		url := "postgres://rindle@" + hole.Addr() + "/rindle?sslmode=disable&connect_timeout=1"
		calls := 0
		err = untilReachable(ctx, quiet, "connect", time.Minute, time.Millisecond, func() error {
			calls++
			_, err := pgx.Connect(ctx, url)
			return err
		})
		require.ErrorContains(t, err, "timeout")
		require.False(t, unreachable(err), "a timed-out connection is not retried: %v", err)
		require.Equal(t, 1, calls)
	})

	t.Run("gives up after its bound", func(t *testing.T) {
		calls := 0
		err := untilReachable(ctx, quiet, "connect", 0, time.Millisecond, func() error {
			calls++
			_, err := pgx.Connect(ctx, refused)
			return err
		})
		require.True(t, unreachable(err))
		require.Contains(t, err.Error(), "unreachable for")
		require.Equal(t, 1, calls)
	})

	t.Run("a cancelled start stops trying", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		calls := 0
		err := untilReachable(cctx, quiet, "connect", 2*time.Hour, time.Hour, func() error {
			calls++
			cancel()
			_, err := pgx.Connect(ctx, refused)
			return err
		})
		require.True(t, unreachable(err))
		require.False(t, strings.Contains(err.Error(), "unreachable for"))
		require.Equal(t, 1, calls)
	})
}
