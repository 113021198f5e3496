package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/auth/authtest"
	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// rindled with an issuers file takes an identity provider's tokens beside its own: the
// provider's keys rotate without a restart, a provider that cannot be reached is a clear 401
// and a counted failure, and a tenant is the same tenant whichever issuer names it.
func TestIdentityProviderTokens(t *testing.T) {
	idp := authtest.New("RS256")
	t.Cleanup(idp.Close)
	dir := t.TempDir()
	file := filepath.Join(dir, "issuers.json")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, `{"issuers": [{"name": "idp", "issuer": %q, "audience": ["rindle"],
		"jwks_url": %q, "algorithms": ["RS256"], "claims": {"tenant": "org_id", "scopes": "permissions"},
		"scope_map": {"write:answers": "producer"}, "unknown_kid_interval": "1ns"}]}`, idp.Issuer, idp.JWKSURL()), 0o600))

	db := pgtest.NewDB(t)
	srv := startRindled(t, db, "-issuers", file)
	call := func(method, path, tok, body string) (int, string) {
		st, b := request(t, http.DefaultClient, srv.base+path, method, tok, body)
		require.NotZero(t, st, "%s %s: %s", method, path, b)
		return st, string(b)
	}
	sign := func(claims jwt.MapClaims) string {
		claims["aud"] = "rindle"
		return idp.Sign(claims)
	}
	backend := sign(jwt.MapClaims{"sub": "svc", "org_id": "acme", "permissions": []string{"write:answers"}})
	st, body := call("POST", "/v1/messages", backend, `{"id":"m1","owner":"alice"}`)
	require.Equal(t, http.StatusCreated, st, body)
	st, body = call("POST", "/v1/streams/m1/open", backend, "")
	require.Equal(t, http.StatusOK, st, body)
	alice := sign(jwt.MapClaims{"sub": "alice", "org_id": "acme"})
	st, body = call("GET", "/v1/streams/m1", alice, "")
	require.Equal(t, http.StatusOK, st, body)
	st, _ = call("GET", "/v1/streams/m1", sign(jwt.MapClaims{"sub": "alice", "org_id": "globex"}), "")
	require.Equal(t, http.StatusForbidden, st, "another tenant's alice")
	st, body = call("POST", "/v1/messages", sign(jwt.MapClaims{"sub": "svc", "org_id": "acme", "permissions": []string{"read:answers"}}), `{"owner":"alice"}`)
	require.Equal(t, http.StatusForbidden, st, "an unmapped permission grants nothing: %s", body)

	// The local issuer's token for tenant acme reads the same row.
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"token", "-sub", "alice", "-tenant", "acme"}, srv.env, &out, io.Discard))
	st, body = call("GET", "/v1/streams/m1", strings.TrimSpace(out.String()), "")
	require.Equal(t, http.StatusOK, st, body)
	require.Error(t, run(t.Context(), []string{"token", "-sub", "alice", "-tenant", strings.Repeat("t", 200)}, srv.env, io.Discard, io.Discard))

	// Rotation: the provider retires its key; the next token names a new one, fetched then.
	idp.Rotate(true)
	st, body = call("POST", "/v1/streams/m1/append", sign(jwt.MapClaims{"sub": "svc", "org_id": "acme", "permissions": "write:answers"}), `{"text":"hi"}`)
	require.Equal(t, http.StatusOK, st, body)

	// The provider is down when the next rotation lands: refused, saying why, and counted.
	idp.Fail(true)
	idp.Rotate(true)
	down := sign(jwt.MapClaims{"sub": "svc", "org_id": "acme", "permissions": "write:answers"})
	st, body = call("POST", "/v1/streams/m1/append", down, `{"text":"!"}`)
	require.Equal(t, http.StatusUnauthorized, st)
	require.Contains(t, body, "the last fetch of issuer idp's key set failed")
	_, metrics := call("GET", "/metrics", "", "")
	require.Regexp(t, regexp.MustCompile(`rindle_auth_key_fetch_failures_total\{[^}]*issuer="idp"[^}]*\} [1-9]`), metrics)
	idp.Fail(false)
	st, body = call("POST", "/v1/streams/m1/append", down, `{"text":"!"}`)
	require.Equal(t, http.StatusOK, st, body)
}

// A broken issuers file stops rindled at start with the reason, before it serves anything.
func TestABrokenIssuersFileIsRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	env := envOf(map[string]string{"RINDLE_JWT_SECRET": testSecret, "DATABASE_URL": "postgres://127.0.0.1:1/none"})
	for body, want := range map[string]string{
		`{"issuers": [{"issuer": "https://x/", "jwks_url": "https://x/jwks"}]}`: "pin the algorithms",
		`{"issuers": [{"issuer": "https://x/", "jwks": "https://x/jwks"}]}`:     `unknown field "jwks"`,
		`{"issuers": []}`: "names no issuer",
		`{"issuers": [{"issuer": "https://x/", "secret_env": "NOPE"}]}`:                                 "$NOPE is empty",
		`{"issuers": [{"issuer": "https://x/", "key_set_file": "nope.json", "algorithms": ["RS256"]}]}`: "key_set_file",
	} {
		file := filepath.Join(dir, "issuers.json")
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
		err := run(t.Context(), []string{"-addr", "127.0.0.1:0", "-issuers", file}, env, io.Discard, io.Discard)
		require.ErrorContains(t, err, want, body)
	}
}
