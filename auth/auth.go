package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Scopes the HTTP layer grants.
const (
	// ProducerScope: a backend that produces answers. Within its tenant it creates, opens,
	// appends to and closes streams, and reads any of them.
	ProducerScope = "producer"
	// AdminScope: administration. Deletes protocol streams and may act in another tenant.
	AdminScope = "admin"
)

// Defaults of Issuer.
const (
	DefaultLeeway             = 30 * time.Second
	DefaultRefreshInterval    = time.Hour
	DefaultUnknownKIDInterval = time.Minute
	DefaultFetchTimeout       = 10 * time.Second
	DefaultStreamClaim        = "rindle_stream"
	// MaxTokenBytes bounds a token's text.
	MaxTokenBytes = 16 << 10
	// MaxTenantBytes bounds a tenant's name.
	MaxTenantBytes = 128
)

// Principal is a verified caller.
type Principal struct {
	// Issuer is the Name of the issuer that signed the token.
	Issuer string
	// Subject names the caller: a reader reads what it owns.
	Subject string
	// Tenant is the caller's tenant; "" is the default tenant, which a single-tenant
	// deployment uses without knowing it.
	Tenant string
	// Scopes are the rindle scopes the token grants (ProducerScope, AdminScope).
	Scopes []string
	// Stream, when set, is the one stream id (or protocol path) the token may touch.
	Stream string

	expires   time.Time
	notBefore time.Time
}

// Has reports whether p holds scope.
func (p *Principal) Has(scope string) bool { return slices.Contains(p.Scopes, scope) }

// ClaimNames say which claims carry what. A name is a top-level claim ("org_id",
// "https://example.com/tenant"), or else a dotted path into nested objects
// ("realm_access.roles").
type ClaimNames struct {
	// Subject defaults to "sub".
	Subject string `json:"subject,omitempty"`
	// Tenant names the claim holding the tenant. Empty: the issuer's Tenant, or the default
	// tenant.
	Tenant string `json:"tenant,omitempty"`
	// Scopes names a claim holding a space-separated string or an array of strings.
	// Defaults to "scope".
	Scopes string `json:"scopes,omitempty"`
	// Stream names the claim that narrows a token to one stream. Defaults to
	// DefaultStreamClaim.
	Stream string `json:"stream,omitempty"`
}

// Issuer is one trusted token issuer. Exactly one of JWKSURL, KeySet and Secret is set.
type Issuer struct {
	// Name names the issuer in errors, logs and metrics. Defaults to Issuer, or "local".
	Name string `json:"name,omitempty"`
	// Issuer is the iss a token must carry. Only a Secret issuer may leave it empty: it then
	// takes tokens that carry no iss (what `rindled token` signs).
	Issuer string `json:"issuer,omitempty"`
	// Audience: a token must name one of these in aud. Empty: aud is not checked.
	Audience []string `json:"audience,omitempty"`
	// JWKSURL is the provider's published key set.
	JWKSURL string `json:"jwks_url,omitempty"`
	// KeySet is a static JWK Set (the JSON document).
	KeySet json.RawMessage `json:"key_set,omitempty"`
	// Secret is a shared HMAC secret, at least 32 bytes.
	Secret []byte `json:"-"`
	// Algorithms pins the signature algorithms (RS256, ES256, EdDSA, ...). Required with
	// JWKSURL or KeySet; defaults to HS256 with Secret.
	Algorithms []string `json:"algorithms,omitempty"`
	// Claims map claim names.
	Claims ClaimNames `json:"claims"`
	// Tenant puts every token of this issuer in one tenant (one issuer per app), instead of
	// reading it from a claim. Not with Claims.Tenant.
	Tenant string `json:"tenant,omitempty"`
	// TenantOptional lets a token without the tenant claim in, in the default tenant. Without
	// it such a token is refused.
	TenantOptional bool `json:"tenant_optional,omitempty"`
	// ScopeMap maps the provider's scope or permission values to rindle scopes
	// ("write:answers": "producer"). When set, values it does not name grant nothing; when
	// empty, values are taken as they are.
	ScopeMap map[string]string `json:"scope_map,omitempty"`
	// Leeway is how far exp and nbf may be off. Defaults to DefaultLeeway.
	Leeway time.Duration `json:"-"`
	// RefreshInterval is how often a JWKS is fetched again. Defaults to DefaultRefreshInterval.
	RefreshInterval time.Duration `json:"-"`
	// UnknownKIDInterval bounds how often a token naming an unknown key id may make the
	// verifier fetch the JWKS again (rotation). Defaults to DefaultUnknownKIDInterval.
	UnknownKIDInterval time.Duration `json:"-"`
	// FetchTimeout bounds one JWKS fetch. Defaults to DefaultFetchTimeout.
	FetchTimeout time.Duration `json:"-"`
}

// Config configures a Verifier.
type Config struct {
	// Issuers are the trusted issuers. At least one; iss values are distinct.
	Issuers []Issuer
	// OnFetchError hears every failed JWKS fetch, by issuer name (a metric).
	OnFetchError func(issuer string, err error)
	// HTTPClient fetches JWKS. Defaults to a client with no redirects to other schemes.
	HTTPClient *http.Client
	// Now is the clock tokens are checked against. Defaults to time.Now.
	Now func() time.Time
	// Logger hears failed fetches. Defaults to slog.Default().
	Logger *slog.Logger
}

// ConfigError names the Config field New refused, and why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "auth: Config." + e.Field + ": " + e.Reason }

// Error is a refused token. Reason says why, for the caller (it names no key material).
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

func refuse(format string, args ...any) error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Verifier verifies bearer tokens. It is safe for concurrent use.
type Verifier struct {
	byIss  map[string]*issuer
	noIss  *issuer // the Secret issuer that takes tokens with no iss
	now    func() time.Time
	tokens *lru.Cache[string, *Principal]
}

type issuer struct {
	cfg    Issuer
	parser *jwt.Parser
	keys   jwt.Keyfunc

	mu        sync.Mutex
	lastFetch error // the last failed JWKS fetch, for the errors of tokens it left unverifiable
}

// tokenCacheSize bounds the verified tokens a Verifier remembers.
const tokenCacheSize = 4096

// New checks cfg and builds a Verifier. JWKS issuers start fetching their keys at once and
// refresh them until ctx ends; a JWKS that cannot be fetched yet is not an error here (the
// provider may be down at boot): its tokens are refused, with the fetch's error, until it can.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if len(cfg.Issuers) == 0 {
		return nil, &ConfigError{Field: "Issuers", Reason: "at least one issuer is required"}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	tokens, err := lru.New[string, *Principal](tokenCacheSize)
	if err != nil {
		return nil, err
	}
	v := &Verifier{byIss: map[string]*issuer{}, now: cfg.Now, tokens: tokens}
	for i, ic := range cfg.Issuers {
		field := fmt.Sprintf("Issuers[%d]", i)
		is, err := newIssuer(ctx, ic, cfg, field)
		if err != nil {
			return nil, err
		}
		if is.cfg.Issuer == "" {
			if v.noIss != nil {
				return nil, &ConfigError{Field: field + ".Issuer", Reason: "only one issuer may take tokens with no iss"}
			}
			v.noIss = is
			continue
		}
		if _, dup := v.byIss[is.cfg.Issuer]; dup {
			return nil, &ConfigError{Field: field + ".Issuer", Reason: fmt.Sprintf("%q is configured twice", is.cfg.Issuer)}
		}
		v.byIss[is.cfg.Issuer] = is
	}
	return v, nil
}

// Check validates issuers as New does, without fetching any key set: a program checks its
// configuration at start, before it opens anything else.
func Check(issuers []Issuer) error {
	if len(issuers) == 0 {
		return &ConfigError{Field: "Issuers", Reason: "at least one issuer is required"}
	}
	seen := map[string]bool{}
	for i, ic := range issuers {
		field := fmt.Sprintf("Issuers[%d]", i)
		ic, err := prepare(ic, field)
		if err != nil {
			return err
		}
		if seen[ic.Issuer] {
			if ic.Issuer == "" {
				return &ConfigError{Field: field + ".Issuer", Reason: "only one issuer may take tokens with no iss"}
			}
			return &ConfigError{Field: field + ".Issuer", Reason: fmt.Sprintf("%q is configured twice", ic.Issuer)}
		}
		seen[ic.Issuer] = true
	}
	return nil
}

// prepare checks one issuer and fills its defaults.
func prepare(ic Issuer, field string) (Issuer, error) {
	sources := 0
	for _, set := range []bool{ic.JWKSURL != "", len(ic.KeySet) > 0, len(ic.Secret) > 0} {
		if set {
			sources++
		}
	}
	switch {
	case sources != 1:
		return ic, &ConfigError{Field: field, Reason: "set exactly one of jwks_url, key_set and a secret"}
	case ic.Issuer == "" && len(ic.Secret) == 0:
		return ic, &ConfigError{Field: field + ".Issuer", Reason: "is required (only a shared-secret issuer may take tokens with no iss)"}
	case len(ic.Secret) > 0 && len(ic.Secret) < 32:
		return ic, &ConfigError{Field: field + ".Secret", Reason: "must be at least 32 bytes"}
	case ic.Tenant != "" && ic.Claims.Tenant != "":
		return ic, &ConfigError{Field: field + ".Tenant", Reason: "a fixed tenant and a tenant claim exclude each other"}
	case ic.Leeway < 0 || ic.RefreshInterval < 0 || ic.UnknownKIDInterval < 0 || ic.FetchTimeout < 0:
		return ic, &ConfigError{Field: field, Reason: "durations must not be negative"}
	}
	if ic.Tenant != "" {
		if err := CheckTenant(ic.Tenant); err != nil {
			return ic, &ConfigError{Field: field + ".Tenant", Reason: err.Error()}
		}
	}
	if ic.Name == "" {
		ic.Name = ic.Issuer
		if ic.Name == "" {
			ic.Name = "local"
		}
	}
	if ic.Claims.Subject == "" {
		ic.Claims.Subject = "sub"
	}
	if ic.Claims.Scopes == "" {
		ic.Claims.Scopes = "scope"
	}
	if ic.Claims.Stream == "" {
		ic.Claims.Stream = DefaultStreamClaim
	}
	for d, def := range map[*time.Duration]time.Duration{&ic.Leeway: DefaultLeeway, &ic.RefreshInterval: DefaultRefreshInterval,
		&ic.UnknownKIDInterval: DefaultUnknownKIDInterval, &ic.FetchTimeout: DefaultFetchTimeout} {
		if *d == 0 {
			*d = def
		}
	}
	if len(ic.Algorithms) == 0 {
		if len(ic.Secret) == 0 {
			return ic, &ConfigError{Field: field + ".Algorithms", Reason: "pin the algorithms a key set signs with (RS256, ES256, EdDSA, ...)"}
		}
		ic.Algorithms = []string{"HS256"}
	}
	for _, alg := range ic.Algorithms {
		m := jwt.GetSigningMethod(alg)
		_, hmac := m.(*jwt.SigningMethodHMAC)
		switch {
		case m == nil || alg == "none":
			return ic, &ConfigError{Field: field + ".Algorithms", Reason: fmt.Sprintf("%q is not a signature algorithm", alg)}
		case hmac != (len(ic.Secret) > 0):
			// A public key taken as an HMAC secret is the classic algorithm confusion.
			return ic, &ConfigError{Field: field + ".Algorithms", Reason: fmt.Sprintf("%q does not go with this issuer's kind of key (HS* only with a secret)", alg)}
		}
	}
	return ic, nil
}

func newIssuer(ctx context.Context, ic Issuer, cfg Config, field string) (*issuer, error) {
	ic, err := prepare(ic, field)
	if err != nil {
		return nil, err
	}
	is := &issuer{cfg: ic}
	opts := []jwt.ParserOption{jwt.WithValidMethods(ic.Algorithms), jwt.WithExpirationRequired(), jwt.WithLeeway(ic.Leeway),
		jwt.WithStrictDecoding(), jwt.WithTimeFunc(cfg.Now)}
	if ic.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(ic.Issuer))
	}
	if len(ic.Audience) > 0 {
		opts = append(opts, jwt.WithAudience(ic.Audience...))
	}
	is.parser = jwt.NewParser(opts...)
	switch {
	case len(ic.Secret) > 0:
		secret := ic.Secret
		is.keys = func(*jwt.Token) (any, error) { return secret, nil }
	case len(ic.KeySet) > 0:
		kf, err := keyfunc.NewJWKSetJSON(ic.KeySet)
		if err != nil {
			return nil, &ConfigError{Field: field + ".KeySet", Reason: err.Error()}
		}
		is.keys = kf.Keyfunc
	default:
		if !strings.HasPrefix(ic.JWKSURL, "https://") && !strings.HasPrefix(ic.JWKSURL, "http://") {
			return nil, &ConfigError{Field: field + ".JWKSURL", Reason: fmt.Sprintf("%q is not an http(s) URL", ic.JWKSURL)}
		}
		name := ic.Name
		onErr := func(_ context.Context, err error) {
			is.mu.Lock()
			is.lastFetch = err
			is.mu.Unlock()
			cfg.Logger.Warn("auth: the issuer's key set could not be fetched", "issuer", name, "url", ic.JWKSURL, "err", err)
			if cfg.OnFetchError != nil {
				cfg.OnFetchError(name, err)
			}
		}
		noErr := true
		client := *cfg.HTTPClient
		client.Transport = fetchRecorder{base: client.Transport, is: is}
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{ic.JWKSURL}, keyfunc.Override{
			Client:                    &client,
			HTTPTimeout:               ic.FetchTimeout,
			NoErrorReturnFirstHTTPReq: &noErr,
			// The wait for the limiter and the fetch share this bound. A token with an
			// unknown kid past the rate is refused at once: the limiter's wait would pass it.
			RateLimitWaitMax:        ic.FetchTimeout,
			RefreshErrorHandlerFunc: func(string) func(context.Context, error) { return onErr },
			RefreshInterval:         ic.RefreshInterval,
			RefreshUnknownKID:       rate.NewLimiter(rate.Every(ic.UnknownKIDInterval), 1),
		})
		if err != nil {
			return nil, &ConfigError{Field: field + ".JWKSURL", Reason: err.Error()}
		}
		is.keys = kf.Keyfunc
	}
	return is, nil
}

// fetchRecorder forgets an issuer's failed fetch once a fetch succeeds, so a refusal names a
// fetch failure only while the key set is still stale.
type fetchRecorder struct {
	base http.RoundTripper
	is   *issuer
}

func (f fetchRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	base := f.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		f.is.mu.Lock()
		f.is.lastFetch = nil
		f.is.mu.Unlock()
	}
	return resp, err
}

// Verify verifies a token (without "Bearer ") and maps its claims. A token verified once is
// remembered by its whole text until it expires or is evicted; its exp and nbf are checked
// again on every use.
func (v *Verifier) Verify(raw string) (*Principal, error) {
	now := v.now()
	if p, ok := v.tokens.Get(raw); ok {
		if now.Before(p.expires) && !now.Before(p.notBefore) {
			return p, nil
		}
		v.tokens.Remove(raw)
	}
	p, err := v.verify(raw)
	if err != nil {
		return nil, err
	}
	v.tokens.Add(raw, p)
	return p, nil
}

func (v *Verifier) verify(raw string) (*Principal, error) {
	if len(raw) > MaxTokenBytes {
		return nil, refuse("the token is longer than %d bytes", MaxTokenBytes)
	}
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return nil, refuse("the token is not a signed JWT (three base64url parts)")
	}
	header, err := strictObject("header", parts[0])
	if err != nil {
		return nil, err
	}
	if _, ok := header["crit"]; ok {
		return nil, refuse("the token's header has crit: no extension is understood here")
	}
	claims, err := strictObject("claims", parts[1])
	if err != nil {
		return nil, err
	}
	is := v.noIss
	if iss, ok := claims["iss"]; ok {
		var name string
		if json.Unmarshal(iss, &name) != nil {
			return nil, refuse("the token's iss is not a string")
		}
		if is = v.byIss[name]; is == nil {
			return nil, refuse("tokens of issuer %q are not trusted here", name)
		}
	} else if is == nil {
		return nil, refuse("the token has no iss")
	}
	mc := jwt.MapClaims{}
	if _, err := is.parser.ParseWithClaims(raw, mc, is.keys); err != nil {
		return nil, is.explain(err)
	}
	return is.principal(mc)
}

// explain words a parse failure, adding why keys may be missing.
func (is *issuer) explain(err error) error {
	msg := err.Error()
	if errors.Is(err, jwt.ErrTokenUnverifiable) {
		is.mu.Lock()
		last := is.lastFetch
		is.mu.Unlock()
		if last != nil {
			msg += fmt.Sprintf(" (the last fetch of issuer %s's key set failed: %v)", is.cfg.Name, last)
		}
	}
	return &Error{Reason: msg}
}

func (is *issuer) principal(mc jwt.MapClaims) (*Principal, error) {
	c := is.cfg.Claims
	p := &Principal{Issuer: is.cfg.Name, Tenant: is.cfg.Tenant}
	var err error
	if p.Subject, err = stringClaim(mc, c.Subject); err != nil {
		return nil, err
	}
	if p.Subject == "" {
		return nil, refuse("the token has no subject (claim %s)", c.Subject)
	}
	if err := CheckText(p.Subject); err != nil {
		return nil, refuse("the token's subject %v", err)
	}
	if c.Tenant != "" {
		if p.Tenant, err = stringClaim(mc, c.Tenant); err != nil {
			return nil, err
		}
		switch {
		case p.Tenant == "" && !is.cfg.TenantOptional:
			return nil, refuse("the token names no tenant (claim %s)", c.Tenant)
		case p.Tenant == "":
		case CheckTenant(p.Tenant) != nil:
			err := CheckTenant(p.Tenant)
			return nil, refuse("the token's tenant %v", err)
		}
	}
	if p.Stream, err = stringClaim(mc, c.Stream); err != nil {
		return nil, err
	}
	if err := CheckText(p.Stream); err != nil {
		return nil, refuse("the token's stream %v", err)
	}
	if p.Scopes, err = is.scopes(mc); err != nil {
		return nil, err
	}
	if exp, err := mc.GetExpirationTime(); err == nil && exp != nil {
		p.expires = exp.Add(is.cfg.Leeway)
	}
	if nbf, err := mc.GetNotBefore(); err == nil && nbf != nil {
		p.notBefore = nbf.Add(-is.cfg.Leeway)
	}
	return p, nil
}

func (is *issuer) scopes(mc jwt.MapClaims) ([]string, error) {
	name := is.cfg.Claims.Scopes
	var values []string
	switch v := lookup(mc, name).(type) {
	case nil:
	case string:
		values = strings.Fields(v)
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, refuse("the token's %s claim holds something other than strings", name)
			}
			values = append(values, s)
		}
	default:
		return nil, refuse("the token's %s claim is neither a string nor an array of strings", name)
	}
	if len(is.cfg.ScopeMap) == 0 {
		return values, nil
	}
	var out []string
	for _, s := range values {
		if m, ok := is.cfg.ScopeMap[s]; ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// lookup finds a claim by its whole name, or else by a dotted path.
func lookup(mc jwt.MapClaims, name string) any {
	if v, ok := mc[name]; ok {
		return v
	}
	var cur any = map[string]any(mc)
	for _, part := range strings.Split(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

func stringClaim(mc jwt.MapClaims, name string) (string, error) {
	switch v := lookup(mc, name).(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", refuse("the token's %s claim is not a string", name)
	}
}

// strictObject decodes one base64url part of a token into its members, refusing padding,
// non-canonical encodings and duplicate members (which parsers resolve differently: a
// duplicate "sub" could mean one thing here and another to a proxy in front).
func strictObject(what, part string) (map[string]json.RawMessage, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(part)
	if err != nil {
		return nil, refuse("the token's %s is not strict base64url: %v", what, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, refuse("the token's %s is not a JSON object", what)
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, refuse("the token's %s is not valid JSON: %v", what, err)
		}
		key, _ := t.(string)
		if _, dup := out[key]; dup {
			return nil, refuse("the token's %s has %q twice", what, key)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, refuse("the token's %s is not valid JSON: %v", what, err)
		}
		out[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, refuse("the token's %s is not valid JSON: %v", what, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, refuse("the token's %s has data after its object", what)
	}
	return out, nil
}

// TenantSeparator joins a tenant and an id into the key the stores use (see Key). It may
// appear in neither.
const TenantSeparator = "\x1f"

// Key is the store's key for id in tenant: id itself in the default tenant (so a
// single-tenant deployment's rows read as before), else tenant, TenantSeparator, id. Because
// neither part may hold the separator, two (tenant, id) pairs never share a key.
func Key(tenant, id string) string {
	if tenant == "" {
		return id
	}
	return tenant + TenantSeparator + id
}

// CheckText refuses text the stores cannot hold or that could forge a tenant key: U+0000,
// invalid UTF-8, and the TenantSeparator.
func CheckText(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("holds U+0000")
	case strings.Contains(s, TenantSeparator):
		return errors.New("holds U+001F (it separates tenants)")
	}
	return nil
}

// CheckTenant refuses a tenant name that is empty, longer than MaxTenantBytes, or holds a
// control character or invalid UTF-8.
func CheckTenant(t string) error {
	switch {
	case t == "":
		return errors.New("is empty")
	case len(t) > MaxTenantBytes:
		return fmt.Errorf("is longer than %d bytes", MaxTenantBytes)
	case !utf8.ValidString(t):
		return errors.New("is not valid UTF-8")
	case strings.IndexFunc(t, unicode.IsControl) >= 0:
		return errors.New("holds a control character")
	}
	return nil
}
