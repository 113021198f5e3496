// Package migrations owns the versioned SQL of the default schema (docs/DESIGN.md §5), embedded in the
// binary, and Migrate, which applies what a database lacks.
//
// It does not own app schemas: an app that maps its own tables migrates them itself
// (checkpoint.ChunkTableDDL helps with the chunk table).
//
// Migrate is idempotent and safe when several processes start at once: it holds a session
// advisory lock while it reads and extends its table (Table), and each migration
// runs in its own transaction together with its version row.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed *.up.sql
var files embed.FS

// LockKey is the advisory lock that serializes concurrent Migrate calls ("rindle" in ASCII).
// A start-up that waits on it shows in pg_locks as an advisory lock with objid 1852075109
// (the key's low 32 bits) and classid 29289 (its high bits).
const LockKey = 0x72696e646c65

// Migration is one embedded schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migrations: %s: name must be NNN_name.up.sql", name)
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(rest, ".up.sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Table records the applied versions. It is named for this project: schema_migrations, the
// name it had before, is also golang-migrate's, dbmate's and Rails', whose tables have other
// columns, so a database one of them manages refused ours.
const Table = "rindle_schema_migrations"

// Migrate applies every embedded migration the database lacks and returns the versions it
// applied. A database migrated before Table was renamed has its schema_migrations rows moved
// (and that table dropped) if, and only if, it has exactly the columns this package created;
// another tool's schema_migrations is left alone.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]int, error) {
	return migrateTo(ctx, conn, math.MaxInt)
}

func migrateTo(ctx context.Context, conn *pgx.Conn, upto int) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(LockKey)); err != nil {
		return nil, fmt.Errorf("migrations: take the advisory lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(LockKey))
	}()
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+Table+` (
			version integer PRIMARY KEY,
			name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		return moveLegacy(ctx, tx)
	}); err != nil {
		return nil, fmt.Errorf("migrations: create %s: %w", Table, err)
	}
	rows, err := conn.Query(ctx, "SELECT version FROM "+Table)
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", Table, err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", Table, err)
	}
	applied := map[int]bool{}
	for _, v := range have {
		applied[int(v)] = true
	}
	var done []int
	for _, m := range all {
		if applied[m.Version] || m.Version > upto {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+Table+" (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrations: apply %03d_%s: %w", m.Version, m.Name, err)
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// moveLegacy moves the rows of the schema_migrations table this package created before Table
// was renamed, recognised by its exact columns, and drops it.
func moveLegacy(ctx context.Context, tx pgx.Tx) error {
	var cols []string
	rows, err := tx.Query(ctx, `SELECT column_name::text FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'schema_migrations' ORDER BY column_name`)
	if err != nil {
		return err
	}
	if cols, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return err
	}
	if !slices.Equal(cols, []string{"applied_at", "name", "version"}) {
		return nil // absent, or another tool's
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+Table+` (version, name, applied_at)
		SELECT version, name, applied_at FROM schema_migrations ON CONFLICT (version) DO NOTHING`); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "DROP TABLE schema_migrations")
	return err
}
