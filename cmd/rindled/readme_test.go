package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// TestREADMERecipesRunInOrder runs the README's shell recipes against a real rindled, as
// written and in order (issue 21: the producer recipe appended to a stream the recipe before it
// had just closed). Only the server's address and `go run ./cmd/rindled` (the binary built here)
// are substituted; every answer must be a success, and the streams end as the recipes say.
func TestREADMERecipesRunInOrder(t *testing.T) {
	body := readmeRecipes(t)
	db := pgtest.NewDB(t)
	t.Cleanup(func() { dropSlot(t, db) })
	bin := buildRindled(t)
	env := []string{"DATABASE_URL=" + db.URL, "RINDLE_JWT_SECRET=" + testSecret}
	in := spawn(t, "readme", bin, []string{"-addr", "127.0.0.1:0", "-slot", db.Slot(), "-demo", "false"}, env)
	body = strings.ReplaceAll(body, "go run ./cmd/rindled", bin)
	body = strings.ReplaceAll(body, "localhost:8080", strings.TrimPrefix(in.base, "http://"))
	// The recipe's watcher runs in the background; it ends with the stream, or at the exit.
	sh := "set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body + "\nwait\n"
	cmd := exec.CommandContext(t.Context(), "bash", "-c", sh)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("recipes:\n%s\nanswered:\n%s", sh, out)
	require.NotRegexp(t, `"status":\s*[45]\d\d`, string(out), "every answer is a success")
	require.Contains(t, string(out), `"type":"end"`, "the watcher saw the stream end")
	for _, id := range []string{"m1", "m2"} {
		text, status := db.DurableText(t, id)
		require.Equal(t, "hello 😀", text, id)
		require.Equal(t, "complete", status, id)
	}
}

// readmeRecipes is the README's API recipes (its sh blocks that call localhost:8080/v1/), in
// order, as one script.
func readmeRecipes(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var script []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(m[1], "localhost:8080/v1/") {
			script = append(script, m[1])
		}
	}
	require.GreaterOrEqual(t, len(script), 2, "the README's API recipes")
	return strings.Join(script, "\n")
}

// TestREADMEIssuersFilesAreValid reads every issuers file the README shows, as rindled would
// (auth.ReadIssuersFile, then auth.Check), so a documented provider setting cannot drift from
// what the server takes.
func TestREADMEIssuersFilesAreValid(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var files []string
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(m[1], `"issuers"`) {
			files = append(files, m[1])
		}
	}
	require.GreaterOrEqual(t, len(files), 7, "the general example and six providers")
	for i, body := range files {
		path := filepath.Join(t.TempDir(), "issuers.json")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		issuers, err := auth.ReadIssuersFile(path, func(string) string { return "" })
		require.NoError(t, err, "README issuers file %d:\n%s", i, body)
		require.NoError(t, auth.Check(issuers), "README issuers file %d:\n%s", i, body)
		for _, is := range issuers {
			require.NotEmpty(t, is.Issuer, "file %d", i)
			require.NotEmpty(t, is.JWKSURL, "file %d", i)
		}
	}
}
