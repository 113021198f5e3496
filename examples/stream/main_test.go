package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRunStreamsAndChecksSplice(t *testing.T) {
	db := pgtest.NewDB(t)
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return db.URL
		}
		return ""
	}
	err := run(t.Context(), []string{"-tokens", "60", "-token-interval", "1ms"}, env, &out, &errOut)
	require.NoError(t, err, errOut.String())
	require.Contains(t, out.String(), "status complete")
	require.Contains(t, out.String(), "equal the produced text: true")
}

func TestRunRefusesBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Error(t, run(t.Context(), []string{"-tokens", "0"}, func(string) string { return "" }, &out, &errOut))
	require.Error(t, run(t.Context(), []string{"-bogus"}, func(string) string { return "" }, &out, &errOut))
}
