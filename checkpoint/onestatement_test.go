package checkpoint

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// oneStatement keeps the merged text of each shape it has seen: a shape seen again gets the
// same text, made afresh, and its own arguments; a shape that differs only in an argument
// count (so in how the later statements are renumbered) gets its own text.
func TestOneStatementMergesEachShapeOnce(t *testing.T) {
	q := func(sql string, args ...any) *pgx.QueuedQuery { return &pgx.QueuedQuery{SQL: sql, Arguments: args} }
	shape := func(a, b, c any) []*pgx.QueuedQuery {
		return []*pgx.QueuedQuery{
			q(`INSERT INTO "t$1" (a, b) VALUES ($1, $2)`, a, b),
			q(`UPDATE u SET c = $2 WHERE k = $1 AND s = '$1'`, c, a),
			q(`SELECT pg_notify($1, $2)`, "ch", b),
		}
	}
	var mt mergedTexts
	first := mt.oneStatement(shape("x", 1, 2))
	want := mergeStatements(shape("x", 1, 2))
	require.Equal(t, want, first.SQL)
	require.Equal(t, `WITH w0 AS (INSERT INTO "t$1" (a, b) VALUES ($1, $2)), w1 AS (UPDATE u SET c = $4 WHERE k = $3 AND s = '$1')
SELECT pg_notify($5, $6)`, first.SQL)
	require.Equal(t, []any{"x", 1, 2, "x", "ch", 1}, first.Arguments)

	again := mt.oneStatement(shape("y", 3, 4))
	require.Equal(t, first.SQL, again.SQL, "the same shape, the same text")
	require.Equal(t, []any{"y", 3, 4, "y", "ch", 3}, again.Arguments, "its own arguments")

	// The first statement with a third argument (a statement that took one more): the rest
	// are numbered from $4.
	wider := []*pgx.QueuedQuery{
		q(`INSERT INTO "t$1" (a, b) VALUES ($1, $2)`, "z", 5, 6),
		q(`UPDATE u SET c = $2 WHERE k = $1 AND s = '$1'`, 7, "z"),
		q(`SELECT pg_notify($1, $2)`, "ch", 5),
	}
	require.Contains(t, mt.oneStatement(wider).SQL, "SET c = $5 WHERE k = $4")

	// More shapes than it keeps: every text is still right.
	for i := range maxMerged + 10 {
		qs := []*pgx.QueuedQuery{q(fmt.Sprintf("UPDATE t%d SET a = $1", i), i), q("SELECT $1", i)}
		require.Equal(t, fmt.Sprintf("WITH w0 AS (UPDATE t%d SET a = $1)\nSELECT $2", i), mt.oneStatement(qs).SQL)
	}
}
