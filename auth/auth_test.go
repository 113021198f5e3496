package auth_test

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/auth/authtest"
)

var secret = []byte("0123456789abcdef0123456789abcdef") //nolint:gochecknoglobals // test key

func verifier(t *testing.T, cfg auth.Config) *auth.Verifier {
	t.Helper()
	v, err := auth.New(t.Context(), cfg)
	require.NoError(t, err)
	return v
}

func refusal(t *testing.T, v *auth.Verifier, tok string) string {
	t.Helper()
	_, err := v.Verify(tok)
	var ae *auth.Error
	require.ErrorAs(t, err, &ae, "refused as a token error")
	return ae.Reason
}

// Tokens of an identity provider verify with the keys its JWKS publishes, for each algorithm
// providers use; keys rotate without a restart: a token naming a key id the verifier has not
// seen makes it fetch the set again, and a retired key's new tokens are refused.
func TestJWKSKeysRotate(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			idp := authtest.New(alg)
			t.Cleanup(idp.Close)
			var mu sync.Mutex
			var fetchErrs []string
			v := verifier(t, auth.Config{Issuers: []auth.Issuer{{
				Issuer: idp.Issuer, Audience: []string{"rindle"}, JWKSURL: idp.JWKSURL(), Algorithms: []string{alg},
				Claims: auth.ClaimNames{Tenant: "org_id", Scopes: "permissions"}, UnknownKIDInterval: time.Nanosecond,
			}}, OnFetchError: func(issuer string, err error) {
				mu.Lock()
				fetchErrs = append(fetchErrs, issuer+": "+err.Error())
				mu.Unlock()
			}})
			require.EqualValues(t, 1, idp.Fetches(), "the key set is fetched at start")

			p, err := v.Verify(idp.Sign(jwt.MapClaims{"sub": "svc", "aud": "rindle", "org_id": "acme", "permissions": []string{"producer"}}))
			require.NoError(t, err)
			require.Equal(t, "svc", p.Subject)
			require.Equal(t, "acme", p.Tenant)
			require.True(t, p.Has(auth.ProducerScope))

			idp.Rotate(true)
			fresh := idp.Sign(jwt.MapClaims{"sub": "svc2", "aud": "rindle", "org_id": "acme"})
			p, err = v.Verify(fresh)
			require.NoError(t, err, "the new key is fetched on its first token")
			require.Equal(t, "svc2", p.Subject)
			require.EqualValues(t, 2, idp.Fetches())

			// A retired key cannot sign new tokens that verify. (Build one by rotating a
			// provider whose old key we keep: sign with key-2, retire it, and verify a token
			// with key-2's kid that the verifier has never seen.)
			signedByOld := idp.Sign(jwt.MapClaims{"sub": "svc3", "aud": "rindle", "org_id": "acme"})
			idp.Rotate(true)
			_, err = v.Verify(idp.Sign(jwt.MapClaims{"sub": "svc4", "aud": "rindle", "org_id": "acme"}))
			require.NoError(t, err)
			require.Contains(t, refusal(t, v, signedByOld), "key", "key-2 left the set with the refresh for key-3")

			// The provider goes down: a token naming an unknown key is refused, saying the fetch
			// failed, and the failure is counted, while tokens of the key already held keep
			// verifying; once it is back, the next such token verifies.
			held := idp.Sign(jwt.MapClaims{"sub": "svc6", "aud": "rindle", "org_id": "acme"})
			idp.Fail(true)
			idp.Rotate(true)
			down := idp.Sign(jwt.MapClaims{"sub": "svc5", "aud": "rindle", "org_id": "acme"})
			require.Contains(t, refusal(t, v, down), "the last fetch of issuer")
			mu.Lock()
			require.NotEmpty(t, fetchErrs)
			require.Contains(t, fetchErrs[0], idp.Issuer)
			mu.Unlock()
			_, err = v.Verify(held)
			require.NoError(t, err, "a failed fetch keeps the keys held")
			idp.Fail(false)
			_, err = v.Verify(down)
			require.NoError(t, err)
		})
	}
}

// iss, aud, exp and nbf hold with a small leeway; algorithms are pinned per issuer.
func TestRegisteredClaimsAndPinnedAlgorithms(t *testing.T) {
	t.Parallel()
	idp := authtest.New("RS256")
	t.Cleanup(idp.Close)
	v := verifier(t, auth.Config{Issuers: []auth.Issuer{
		{Issuer: idp.Issuer, Audience: []string{"rindle"}, JWKSURL: idp.JWKSURL(), Algorithms: []string{"RS256"}, Leeway: 5 * time.Second},
		auth.LocalIssuer(secret),
	}})
	ok := func(c jwt.MapClaims) {
		t.Helper()
		_, err := v.Verify(idp.Sign(c))
		require.NoError(t, err, "%v", c)
	}
	now := time.Now()
	ok(jwt.MapClaims{"sub": "a", "aud": "rindle"})
	ok(jwt.MapClaims{"sub": "a", "aud": []string{"other", "rindle"}})
	ok(jwt.MapClaims{"sub": "a", "aud": "rindle", "exp": now.Add(-2 * time.Second).Unix()}) // within the leeway
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"sub": "a", "aud": "rindle", "exp": now.Add(-time.Minute).Unix()})), "expired")
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"sub": "a", "aud": "rindle", "nbf": now.Add(time.Minute).Unix()})), "not valid yet")
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"sub": "a", "aud": "someone else"})), "aud")
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"sub": "a"})), "aud")
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"sub": "a", "aud": "rindle", "exp": nil})), "exp")
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"sub": "a", "aud": "rindle", "iss": "https://elsewhere/"})), "not trusted")
	require.Contains(t, refusal(t, v, idp.Sign(jwt.MapClaims{"aud": "rindle"})), "no subject")

	// The provider's issuer signed with HS256 over its public key's text, or with the local
	// secret: refused, whatever the signature, because RS256 is the issuer's only algorithm.
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": idp.Issuer, "sub": "a", "aud": "rindle",
		"exp": now.Add(time.Hour).Unix()}).SignedString(secret)
	require.NoError(t, err)
	require.Contains(t, refusal(t, v, hs), "signing method HS256 is invalid")
	// "none" is never an algorithm.
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "a", "exp": now.Add(time.Hour).Unix()}).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	require.NotEmpty(t, refusal(t, v, none))

	// The local issuer takes tokens with no iss: its own, with an optional tenant.
	tok, err := auth.Sign(secret, auth.TokenClaims{Scope: "producer admin", Tenant: "acme", Stream: "s1",
		RegisteredClaims: jwt.RegisteredClaims{Subject: "ops"}}, time.Hour)
	require.NoError(t, err)
	p, err := v.Verify(tok)
	require.NoError(t, err)
	require.Equal(t, auth.Principal{Issuer: "local", Subject: "ops", Tenant: "acme", Scopes: []string{"producer", "admin"}, Stream: "s1"},
		withoutTimes(p))
	tok, err = auth.Sign(secret, auth.TokenClaims{RegisteredClaims: jwt.RegisteredClaims{Subject: "alice"}}, time.Hour)
	require.NoError(t, err)
	p, err = v.Verify(tok)
	require.NoError(t, err)
	require.Empty(t, p.Tenant, "no tenant claim: the default tenant")
}

func withoutTimes(p *auth.Principal) auth.Principal {
	return auth.Principal{Issuer: p.Issuer, Subject: p.Subject, Tenant: p.Tenant, Scopes: p.Scopes, Stream: p.Stream}
}

// Claim names differ between providers: nested roles, namespaced claims, permissions arrays, a
// scope map, and a tenant fixed per issuer.
func TestClaimMapping(t *testing.T) {
	t.Parallel()
	kc := authtest.New("ES256")
	t.Cleanup(kc.Close)
	a0 := authtest.New("RS256")
	t.Cleanup(a0.Close)
	v := verifier(t, auth.Config{Issuers: []auth.Issuer{
		{Issuer: kc.Issuer, JWKSURL: kc.JWKSURL(), Algorithms: []string{"ES256"}, Claims: auth.ClaimNames{
			Subject: "preferred_username", Tenant: "tenant", Scopes: "realm_access.roles", Stream: "doc"},
			ScopeMap: map[string]string{"rindle-writer": auth.ProducerScope}},
		{Issuer: a0.Issuer, JWKSURL: a0.JWKSURL(), Algorithms: []string{"RS256"}, Tenant: "app-one",
			Claims: auth.ClaimNames{Scopes: "https://rindle.example/scopes"}},
	}})
	p, err := v.Verify(kc.Sign(jwt.MapClaims{"preferred_username": "bob", "tenant": "t1", "doc": "notes/1",
		"realm_access": map[string]any{"roles": []string{"offline_access", "rindle-writer"}}}))
	require.NoError(t, err)
	require.Equal(t, auth.Principal{Issuer: kc.Issuer, Subject: "bob", Tenant: "t1", Scopes: []string{"producer"}, Stream: "notes/1"}, withoutTimes(p))
	require.Contains(t, refusal(t, v, kc.Sign(jwt.MapClaims{"preferred_username": "bob"})), "no tenant")
	require.Contains(t, refusal(t, v, kc.Sign(jwt.MapClaims{"preferred_username": "bob", "tenant": "t\x01"})), "control character")
	require.Contains(t, refusal(t, v, kc.Sign(jwt.MapClaims{"preferred_username": "b\x1fob", "tenant": "t"})), "U+001F")
	require.Contains(t, refusal(t, v, kc.Sign(jwt.MapClaims{"preferred_username": 7, "tenant": "t"})), "not a string")

	p, err = v.Verify(a0.Sign(jwt.MapClaims{"sub": "auth0|1", "https://rindle.example/scopes": "producer admin"}))
	require.NoError(t, err)
	require.Equal(t, auth.Principal{Issuer: a0.Issuer, Subject: "auth0|1", Tenant: "app-one", Scopes: []string{"producer", "admin"}}, withoutTimes(p))
}

// Tokens are read strictly: padding, duplicate members and crit are refused.
func TestStrictTokens(t *testing.T) {
	t.Parallel()
	v := verifier(t, auth.Config{Issuers: []auth.Issuer{auth.LocalIssuer(secret)}})
	exp := time.Now().Add(time.Hour).Unix()
	sign := func(header, claims string) string {
		enc := base64.RawURLEncoding
		signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
		sig, err := jwt.SigningMethodHS256.Sign(signing, secret)
		require.NoError(t, err)
		return signing + "." + enc.EncodeToString(sig)
	}
	good := sign(`{"alg":"HS256","typ":"JWT"}`, `{"sub":"a","exp":`+itoa(exp)+`}`)
	_, err := auth.New(context.Background(), auth.Config{})
	require.Error(t, err)
	_, err = v.Verify(good)
	require.NoError(t, err)
	require.Contains(t, refusal(t, v, sign(`{"alg":"HS256"}`, `{"sub":"a","sub":"root","exp":`+itoa(exp)+`}`)), `"sub" twice`)
	require.Contains(t, refusal(t, v, sign(`{"alg":"HS256","alg":"none"}`, `{"sub":"a","exp":`+itoa(exp)+`}`)), `"alg" twice`)
	require.Contains(t, refusal(t, v, sign(`{"alg":"HS256","crit":["exp"]}`, `{"sub":"a","exp":`+itoa(exp)+`}`)), "crit")
	parts := strings.Split(good, ".")
	require.Contains(t, refusal(t, v, parts[0]+"=."+parts[1]+"."+parts[2]), "strict base64url")
	require.Contains(t, refusal(t, v, parts[0]+"."+parts[1]), "three")
	require.Contains(t, refusal(t, v, sign(`{"alg":"HS256"}`, `["sub"]`)), "not a JSON object")
	require.Contains(t, refusal(t, v, strings.Repeat("a", auth.MaxTokenBytes+1)), "longer")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// What New refuses, field by field.
func TestConfigRefusals(t *testing.T) {
	t.Parallel()
	field := func(is auth.Issuer) string {
		t.Helper()
		_, err := auth.New(t.Context(), auth.Config{Issuers: []auth.Issuer{is}})
		var ce *auth.ConfigError
		require.ErrorAs(t, err, &ce)
		return ce.Field
	}
	require.Equal(t, "Issuers[0]", field(auth.Issuer{Issuer: "x"}))
	require.Equal(t, "Issuers[0]", field(auth.Issuer{Issuer: "x", Secret: secret, JWKSURL: "https://x/"}))
	require.Equal(t, "Issuers[0].Issuer", field(auth.Issuer{JWKSURL: "https://x/", Algorithms: []string{"RS256"}}))
	require.Equal(t, "Issuers[0].Algorithms", field(auth.Issuer{Issuer: "x", JWKSURL: "https://x/"}))
	require.Equal(t, "Issuers[0].Algorithms", field(auth.Issuer{Issuer: "x", JWKSURL: "https://x/", Algorithms: []string{"HS256"}}))
	require.Equal(t, "Issuers[0].Algorithms", field(auth.Issuer{Secret: secret, Algorithms: []string{"RS256"}}))
	require.Equal(t, "Issuers[0].Algorithms", field(auth.Issuer{Secret: secret, Algorithms: []string{"none"}}))
	require.Equal(t, "Issuers[0].Secret", field(auth.Issuer{Secret: []byte("short")}))
	require.Equal(t, "Issuers[0].JWKSURL", field(auth.Issuer{Issuer: "x", JWKSURL: "file:///etc/passwd", Algorithms: []string{"RS256"}}))
	require.Equal(t, "Issuers[0].Tenant", field(auth.Issuer{Secret: secret, Tenant: "a", Claims: auth.ClaimNames{Tenant: "t"}}))
	require.Equal(t, "Issuers[0].Tenant", field(auth.Issuer{Secret: secret, Tenant: "a\x1fb"}))
}
