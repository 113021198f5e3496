package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNoMessage is what Catalog answers for an id that has no message row.
var ErrNoMessage = errors.New("checkpoint: no such message")

// ErrNoCancelColumn is what Catalog.RequestCancel answers when the mapping names no cancel
// column: the request can only reach a producer in the same process.
var ErrNoCancelColumn = errors.New("checkpoint: the table mapping names no cancel column")

// NewMessage is a message row to create: the app-side step before a stream opens on it. Empty
// optional fields are stored as NULL.
type NewMessage struct {
	ID    string
	Owner string
	// Chat and Role are written only when the mapping names their columns.
	Chat, Role string
}

// MessageInfo is what a reader's authorization and routing need of a message row.
type MessageInfo struct {
	// Owner is the owner column (nil when NULL).
	Owner *string
	// Status is the row's status: pending, streaming or a terminal one.
	Status string
	// Host is the host column (nil when NULL or not mapped).
	Host *string
}

// CatalogConfig configures a Catalog.
type CatalogConfig struct {
	// DB runs the SQL. Required.
	DB DB
	// Tables maps the app's tables; the zero value is DefaultTables(). Columns.Owner is
	// required: the catalog authorizes by it.
	Tables Tables
}

// Catalog is the message table as the HTTP layer sees it: create a row, look up who owns it and
// where it streams, and ask its producer to stop. It writes only what a Store does not (the row
// before the open, the cancel flag), in the same mapping, so the durable plane's SQL lives here.
type Catalog struct {
	db                            DB
	create, lookup, requestCancel string
	deleteSealed                  string
}

// NewCatalog validates cfg and builds the catalog's statements.
func NewCatalog(cfg CatalogConfig) (*Catalog, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "is required"}
	}
	t, err := resolvedTables(cfg.Tables)
	if err != nil {
		return nil, err
	}
	c := t.Columns
	if c.Owner == "" {
		return nil, &ConfigError{Field: "Tables.Columns.Owner", Reason: "is required: the catalog authorizes readers by it"}
	}
	msg := q(t.Message)
	cols, vals := q(c.Key)+", "+q(c.Owner), "a1, NULLIF(a2, '')"
	if c.Chat != "" {
		cols, vals = cols+", "+q(c.Chat), vals+", NULLIF(a3, '')"
	}
	if c.Role != "" {
		cols, vals = cols+", "+q(c.Role), vals+", NULLIF(a4, '')"
	}
	host := "NULL::text"
	if c.Host != "" {
		host = q(c.Host)
	}
	cat := &Catalog{
		db: cfg.DB,
		// Every argument travels whatever the mapping uses, so each is named and typed once.
		create: fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM (SELECT $1::text, $2::text, $3::text, $4::text) AS a(a1, a2, a3, a4) ON CONFLICT (%s) DO NOTHING RETURNING %s",
			msg, cols, vals, q(c.Key), q(c.Key)),
		lookup: fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = $1", q(c.Owner), q(c.Status), host, msg, q(c.Key)),
		deleteSealed: fmt.Sprintf("DELETE FROM %s WHERE %s = ANY($1) AND %s IN ('complete', 'cancelled', 'error', 'interrupted')",
			msg, q(c.Key), q(c.Status)),
	}
	if c.Cancel != "" {
		// A pending row can be cancelled before its stream opens; a sealed one cannot.
		cat.requestCancel = fmt.Sprintf("UPDATE %s SET %s = true WHERE %s = $1 AND %s IN ('pending', 'streaming') RETURNING %s",
			msg, q(c.Cancel), q(c.Key), q(c.Status), q(c.Status))
	}
	return cat, nil
}

// Create inserts the row. It reports false, and changes nothing, when a row with that id exists.
func (c *Catalog) Create(ctx context.Context, m NewMessage) (created bool, err error) {
	var id string
	err = c.db.WriteRow(ctx, c.create, []any{m.ID, m.Owner, m.Chat, m.Role}, &id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("checkpoint: create message %s: %w", m.ID, err)
	}
	return true, nil
}

// Lookup reads the row's owner, status and host, or ErrNoMessage.
func (c *Catalog) Lookup(ctx context.Context, id string) (MessageInfo, error) {
	var m MessageInfo
	err := c.db.QueryRow(ctx, c.lookup, []any{id}, &m.Owner, &m.Status, &m.Host)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return MessageInfo{}, ErrNoMessage
	case err != nil:
		return MessageInfo{}, fmt.Errorf("checkpoint: look up message %s: %w", id, err)
	}
	return m, nil
}

// RequestCancel sets the cancel flag of a row that is pending or streaming; the producer reads
// it at its next checkpoint. It reports false when the row is sealed, ErrNoMessage when there is
// none, and ErrNoCancelColumn when the mapping names no cancel column.
func (c *Catalog) RequestCancel(ctx context.Context, id string) (requested bool, err error) {
	if c.requestCancel == "" {
		return false, ErrNoCancelColumn
	}
	var status string
	err = c.db.WriteRow(ctx, c.requestCancel, []any{id}, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := c.Lookup(ctx, id); err != nil {
			return false, err
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checkpoint: cancel message %s: %w", id, err)
	}
	return true, nil
}

// DeleteSealed deletes the rows among ids that are sealed (their chunks go with them); a row
// still pending or streaming is left alone.
func (c *Catalog) DeleteSealed(ctx context.Context, ids []string) error {
	if err := c.db.Batch(ctx, Statement{SQL: c.deleteSealed, Args: []any{ids}}); err != nil {
		return fmt.Errorf("checkpoint: delete %d sealed messages: %w", len(ids), err)
	}
	return nil
}
