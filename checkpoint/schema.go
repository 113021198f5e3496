package checkpoint

import (
	"context"
	"fmt"
	"slices"
)

// SchemaError names what a table mapping refers to that the database does not have.
type SchemaError struct {
	// Field is the mapping's field ("Tables.Columns.Status").
	Field string
	// Table is the table named; Column is empty when the table itself is missing.
	Table, Column string
}

func (e *SchemaError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("checkpoint: %s: table %q does not exist (in the search path)", e.Field, e.Table)
	}
	return fmt.Sprintf("checkpoint: %s: table %q has no column %q", e.Field, e.Table, e.Column)
}

// CheckSchema checks every table and column the mapping names against the database, so a typo
// fails at start-up with the missing name instead of as an SQL error at the first open. It
// checks names, not types. A zero t is DefaultTables().
func CheckSchema(ctx context.Context, db DB, t Tables) error {
	t, err := resolvedTables(t)
	if err != nil {
		return err
	}
	c := t.Columns
	for _, table := range []struct {
		name, field string
		cols        [][2]string // field, column
	}{
		{t.Message, "Tables.Message", [][2]string{
			{"Key", c.Key}, {"Body", c.Body}, {"Status", c.Status}, {"Seq", c.Seq}, {"Cancel", c.Cancel},
			{"Error", c.Error}, {"Host", c.Host}, {"Owner", c.Owner}, {"Chat", c.Chat}, {"Role", c.Role},
		}},
		{t.Chunks, "Tables.Chunks", [][2]string{
			{"ChunkKey", c.ChunkKey}, {"ChunkStream", c.ChunkStream}, {"ChunkSeq", c.ChunkSeq},
			{"ChunkText", c.ChunkText}, {"ChunkTraceparent", c.ChunkTraceparent},
		}},
	} {
		var exists bool
		var have []string
		err := db.QueryRow(ctx, `SELECT to_regclass(quote_ident($1)) IS NOT NULL,
			coalesce((SELECT array_agg(attname::text) FROM pg_attribute
			          WHERE attrelid = to_regclass(quote_ident($1)) AND attnum > 0 AND NOT attisdropped), '{}')`,
			[]any{table.name}, &exists, &have)
		if err != nil {
			return fmt.Errorf("checkpoint: read the schema of %q: %w", table.name, err)
		}
		if !exists {
			return &SchemaError{Field: table.field, Table: table.name}
		}
		for _, col := range table.cols {
			if col[1] != "" && !slices.Contains(have, col[1]) {
				return &SchemaError{Field: "Tables.Columns." + col[0], Table: table.name, Column: col[1]}
			}
		}
	}
	return nil
}
