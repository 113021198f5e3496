package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/auth"
)

// EdgeAuth answers an HTTP cache in front of rindled (nginx's auth_request) for every request
// the cache serves, from its cache or not: is the bearer token good, and which readers may share
// the answer. It verifies tokens as the Server does and never touches the database, so the edge
// checks every request while the origin sees only the requests the cache lets through.
//
// The cache sends the original request's URI in X-Original-URI and its method in
// X-Original-Method, with its Authorization (or access_token query parameter) and Rindle-Tenant
// headers. EdgeAuth answers:
//   - 401, with the Server's WWW-Authenticate challenge, when the token is missing or invalid,
//     and 403 when a non-admin names a tenant: the edge refuses the request without asking the
//     origin (an admin naming a malformed tenant gets 204 with no key: the origin's 400 says why);
//   - 204 with EdgeKeyHeader otherwise. The key names who may share a cached answer: the
//     tenant ("t=", escaped), and either "&p" (producer and admin tokens, which may read every
//     stream of the tenant) or "&s=" and the subject, escaped (any other token reads only the
//     streams its subject owns).
//     The origin authorized the request that filled the entry, and every request given the same
//     key would be authorized the same way, so a cached body never reaches a reader the origin
//     would refuse, nor another tenant. The key is empty when the answer must not be shared (a
//     write, anything but a protocol read, or a token narrowed to another stream, which the
//     origin answers with its 404): the cache passes the request to the origin as it is.
type EdgeAuth struct {
	verifier TokenVerifier
}

// EdgeKeyHeader carries EdgeAuth's cache key class to the edge.
const EdgeKeyHeader = "Rindle-Edge-Key"

// EdgeAuthConfig configures an EdgeAuth: the Server's token settings.
type EdgeAuthConfig struct {
	// Verifier verifies bearer tokens. Optional: without it, Secret's tokens are the only ones
	// taken.
	Verifier TokenVerifier
	// Secret verifies HS256 bearer tokens when Verifier is nil. At least 32 bytes then.
	Secret []byte
}

// NewEdgeAuth checks cfg.
func NewEdgeAuth(cfg EdgeAuthConfig) (*EdgeAuth, error) {
	v, err := verifierOf(cfg.Verifier, cfg.Secret, time.Now)
	if err != nil {
		return nil, err
	}
	return &EdgeAuth{verifier: v}, nil
}

func (e *EdgeAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	method := r.Header.Get("X-Original-Method")
	u, err := url.ParseRequestURI(r.Header.Get("X-Original-URI"))
	if err != nil || method == "" {
		// A misconfigured edge, not a client's fault: nginx turns this into a 500.
		http.Error(w, "EdgeAuth needs X-Original-URI and X-Original-Method", http.StatusBadRequest)
		return
	}
	original := &http.Request{Method: method, URL: u, Header: r.Header}
	ah := eventsAuth(original)
	c, err := verifyCaller(e.verifier, ah.Authorization, ah.Tenant)
	var se huma.StatusError
	if errors.As(err, &se) && se.GetStatus() == http.StatusBadRequest {
		// A malformed Rindle-Tenant from an admin: the origin says what is wrong (nginx would
		// turn a 400 from here into a 500). Not shared.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	if key, ok := edgeKey(c, method, u); ok {
		w.Header().Set(EdgeKeyHeader, key)
	}
	w.WriteHeader(http.StatusNoContent)
}

// edgeKey is the class of callers that may share the answer to a protocol read of u, which c
// may ask for; false for a request the edge must not answer from its cache.
func edgeKey(c *who, method string, u *url.URL) (string, bool) {
	path, isStream := strings.CutPrefix(u.Path, StreamsPrefix)
	if !isStream || (method != http.MethodGet && method != http.MethodHead) || !c.mayTouch(path) {
		return "", false
	}
	key := "t=" + url.QueryEscape(c.tenant)
	if c.producer() {
		return key + "&p", true
	}
	return key + "&s=" + url.QueryEscape(c.p.Subject), true
}

// verifierOf is the token verifier of a Server's or an EdgeAuth's settings: v when set, else one
// taking the HS256 tokens of secret (at least 32 bytes), checked against now.
func verifierOf(v TokenVerifier, secret []byte, now func() time.Time) (TokenVerifier, error) {
	if v != nil {
		return v, nil
	}
	if len(secret) < 32 {
		return nil, &ConfigError{Field: "Secret", Reason: "must be at least 32 bytes (or set Verifier)"}
	}
	local, err := auth.New(context.Background(), auth.Config{Issuers: []auth.Issuer{auth.LocalIssuer(secret)}, Now: now})
	if err != nil {
		return nil, err
	}
	return local, nil
}
