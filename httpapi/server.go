package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/cors"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxWait        = 60 * time.Second
	DefaultMaxIngestBytes = 64 << 20
	// ProducerScope grants, within the token's tenant, creating, opening, appending to and
	// closing streams, and reading any of them.
	ProducerScope = auth.ProducerScope
	// AdminScope grants what ProducerScope does, deleting protocol streams, and acting in
	// another tenant (TenantHeader).
	AdminScope = auth.AdminScope
	// TenantHeader names the tenant an admin token acts in; other tokens may not send it.
	TenantHeader = "Rindle-Tenant"
)

// Config configures a Server.
type Config struct {
	// Plane hosts this instance's live streams. Required.
	Plane *producer.Plane
	// View is the durable view. Required.
	View ViewReader
	// Messages creates message rows, reads their owners and sets cancel flags, in the app's
	// table mapping: a *checkpoint.Catalog. Required.
	Messages Messages
	// Verifier verifies bearer tokens (an *auth.Verifier with the deployment's issuers).
	// Optional: without it, Secret's tokens (auth.LocalIssuer) are the only ones taken.
	Verifier TokenVerifier
	// Secret verifies HS256 bearer tokens when Verifier is nil. At least 32 bytes then.
	Secret []byte
	// MaxBodyBytes bounds a request body. Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxWait bounds a long-poll's wait. Defaults to DefaultMaxWait.
	MaxWait time.Duration
	// MaxIngestBytes bounds one streaming ingest request. Defaults to DefaultMaxIngestBytes.
	MaxIngestBytes int64
	// SSE configures event streams.
	SSE producer.SSEConfig
	// Direct, if set, writes the live tail of an event stream read over HTTP/1.x without TLS
	// straight to its socket (producer.DirectWriter): the connection is hijacked once the
	// join is on this instance's live tail, and the response ends with the connection. Nil
	// (and any other reader) writes through net/http from the request's goroutine. The
	// caller closes it after the server.
	Direct *producer.DirectWriter
	// Ready reports readiness for /readyz (the database reachable, CDC caught up). Nil means
	// always ready.
	Ready func(context.Context) error
	// Metrics, if set, is served at /metrics (otel.Telemetry.MetricsHandler).
	Metrics http.Handler
	// HostID names this instance in the Rindle-Host header of the streams it produces. Optional.
	HostID string
	// AllowedOrigins are the browser origins allowed to call the API cross-origin (CORS):
	// "https://app.example.com", or "*" for any. Empty allows none: same-origin only.
	AllowedOrigins []string
	// Streams, if set, serves the Durable Streams protocol under StreamsPrefix on this store
	// (checkpoint.Protocol). Writes need the producer scope; reads, the stream's creator or the
	// producer scope.
	Streams Streams
	// StreamsLongPoll bounds a protocol long-poll's wait. Defaults to DefaultStreamsLongPoll.
	StreamsLongPoll time.Duration
	// StreamsSSELifetime is how long a protocol SSE response lives before the server ends it
	// (the protocol asks for about a minute). Defaults to DefaultStreamsSSELifetime.
	StreamsSSELifetime time.Duration
	// StreamsPollInterval is how often a waiting protocol reader re-reads the store even when
	// nothing woke it: another instance's appends arrive through the view (text streams) or
	// through StreamChanged (byte streams, when fed by checkpoint.Protocol.Watch), and this
	// bounds how late they can be if either lags. Defaults to DefaultStreamsPollInterval.
	StreamsPollInterval time.Duration
	// BodyTimeout bounds reading a whole request body, on every route but ingest: a body that
	// has not arrived by then fails the request. Defaults to DefaultBodyTimeout.
	BodyTimeout time.Duration
	// IngestIdleTimeout bounds the pause between two reads of a streaming ingest body (a
	// rolling deadline: a model may stream for as long as it keeps sending). Defaults to
	// DefaultIngestIdleTimeout.
	IngestIdleTimeout time.Duration
	// MaxEventStreams bounds the waiting reads (event streams, protocol SSE reads and
	// long-polls) this instance holds at once; past it a new one gets 429 with Retry-After.
	// Defaults to DefaultMaxEventStreams.
	MaxEventStreams int
	// MaxEventStreamsPerSubject bounds the waiting reads one token subject holds on this
	// instance. Defaults to DefaultMaxEventStreamsPerSubject.
	MaxEventStreamsPerSubject int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Messages is what the HTTP layer asks of the app's message table. checkpoint.Catalog
// implements it in the configured table mapping, so the durable plane's SQL has one owner.
type Messages interface {
	// Create inserts a message row; false means the id exists.
	Create(ctx context.Context, m checkpoint.NewMessage) (created bool, err error)
	// Lookup reads the row's owner, status and host, or checkpoint.ErrNoMessage.
	Lookup(ctx context.Context, id string) (checkpoint.MessageInfo, error)
	// RequestCancel sets the cancel flag of a pending or streaming row: false means it is
	// sealed; checkpoint.ErrNoMessage and checkpoint.ErrNoCancelColumn as they say.
	RequestCancel(ctx context.Context, id string) (requested bool, err error)
}

var _ Messages = (*checkpoint.Catalog)(nil)

// TokenVerifier verifies a bearer token's text: *auth.Verifier.
type TokenVerifier interface {
	Verify(token string) (*auth.Principal, error)
}

var _ TokenVerifier = (*auth.Verifier)(nil)

// Server is the HTTP API.
type Server struct {
	cfg           Config
	now           func() time.Time // token validity's clock (tests set it), for the Secret's verifier
	streamChanges changes
	waiting       *waiters
	api           huma.API
	mux           *http.ServeMux
	handler       http.Handler
}

// Claims are the claims of a token signed with the Secret (NewToken).
type Claims = auth.TokenClaims

// NewToken signs an HS256 bearer token for subject with scope (space-separated, may be empty),
// valid for ttl, in the default tenant: what `rindled token` prints and what the demo hands
// its page. auth.Sign makes tokens for a tenant or narrowed to one stream.
func NewToken(secret []byte, subject, scope string, ttl time.Duration) (string, error) {
	return auth.Sign(secret, Claims{Scope: scope, RegisteredClaims: jwt.RegisteredClaims{Subject: subject}}, ttl)
}

// New validates cfg and registers the routes.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Plane == nil:
		return nil, &ConfigError{Field: "Plane", Reason: "is required"}
	case cfg.View == nil:
		return nil, &ConfigError{Field: "View", Reason: "is required"}
	case cfg.Messages == nil:
		return nil, &ConfigError{Field: "Messages", Reason: "is required (a *checkpoint.Catalog)"}
	case cfg.MaxBodyBytes < 0:
		return nil, &ConfigError{Field: "MaxBodyBytes", Reason: "must not be negative"}
	case cfg.MaxIngestBytes < 0:
		return nil, &ConfigError{Field: "MaxIngestBytes", Reason: "must not be negative"}
	case cfg.MaxWait < 0:
		return nil, &ConfigError{Field: "MaxWait", Reason: "must not be negative"}
	case cfg.BodyTimeout < 0:
		return nil, &ConfigError{Field: "BodyTimeout", Reason: "must not be negative"}
	case cfg.IngestIdleTimeout < 0:
		return nil, &ConfigError{Field: "IngestIdleTimeout", Reason: "must not be negative"}
	case cfg.MaxEventStreams < 0:
		return nil, &ConfigError{Field: "MaxEventStreams", Reason: "must not be negative"}
	case cfg.MaxEventStreamsPerSubject < 0:
		return nil, &ConfigError{Field: "MaxEventStreamsPerSubject", Reason: "must not be negative"}
	}
	for _, o := range cfg.AllowedOrigins {
		if o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			return nil, &ConfigError{Field: "AllowedOrigins", Reason: fmt.Sprintf("%q is not an origin such as https://app.example.com (or *)", o)}
		}
	}
	if cfg.MaxIngestBytes == 0 {
		cfg.MaxIngestBytes = DefaultMaxIngestBytes
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.IngestIdleTimeout == 0 {
		cfg.IngestIdleTimeout = DefaultIngestIdleTimeout
	}
	if cfg.MaxEventStreams == 0 {
		cfg.MaxEventStreams = DefaultMaxEventStreams
	}
	if cfg.MaxEventStreamsPerSubject == 0 {
		cfg.MaxEventStreamsPerSubject = DefaultMaxEventStreamsPerSubject
	}
	if cfg.SSE.Retry == 0 {
		cfg.SSE.Retry = DefaultSSERetry
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.StreamsLongPoll, DefaultStreamsLongPoll}, {&cfg.StreamsSSELifetime, DefaultStreamsSSELifetime}, {&cfg.StreamsPollInterval, DefaultStreamsPollInterval}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), now: time.Now,
		waiting: &waiters{perSubject: map[string]int{}, max: cfg.MaxEventStreams, each: cfg.MaxEventStreamsPerSubject}}
	v, err := verifierOf(cfg.Verifier, cfg.Secret, func() time.Time { return s.now() })
	if err != nil {
		return nil, err
	}
	s.cfg.Verifier = v
	hc := huma.DefaultConfig("Rindle streams", "1.0.0")
	hc.Info.Description = "Durable, resumable language-model answers: every delta fanned out live, checkpointed into Postgres, one offset (`seq`, in UTF-16 code units) across both."
	hc.Info.License = &huma.License{Name: "Apache-2.0", URL: "https://www.apache.org/licenses/LICENSE-2.0"}
	hc.Servers = []*huma.Server{{URL: "/", Description: "This server (the document is served by the API it describes)."}}
	hc.OpenAPIPath = "/openapi"
	hc.DocsPath = ""     // served from the binary by serveDocs: no CDN
	hc.CreateHooks = nil // no $schema links in bodies: clients see exactly the documented shapes
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", BearerFormat: "JWT"},
	}
	s.api = humago.New(s.mux, hc)
	s.registerProducerRoutes()
	s.registerReaderRoutes()
	s.registerEvents()
	s.registerIngest()
	if s.cfg.Streams != nil {
		s.registerStreamsDoc()
	}
	s.registerDocs()
	s.problemsNeverNull()
	if s.cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	if s.cfg.Streams != nil {
		s.mux.HandleFunc(StreamsPrefix, s.serveStreams)
	}
	var h http.Handler = http.HandlerFunc(s.serve)
	if len(cfg.AllowedOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: cfg.AllowedOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut, http.MethodDelete},
			AllowedHeaders: []string{"Authorization", TenantHeader, "Content-Type", "Last-Event-ID", hSeq, hTTL, hExpiresAt, hClosed,
				hProducerID, hProducerEpoch, hProducerSeq, hForkedFrom, hForkOffset, hForkSubOffset, "If-None-Match"},
			// What clients read from answers: the producing instance, when to retry, why a
			// token was refused, and the Durable Streams protocol's headers.
			ExposedHeaders: []string{HostHeader, "Retry-After", "WWW-Authenticate", hNextOffset, hUpToDate, hClosed, hCursor,
				hTTL, hExpiresAt, hProducerEpoch, hProducerSeq, "Producer-Expected-Seq", "Producer-Received-Seq", "ETag", "Location", "Stream-SSE-Data-Encoding"},
			MaxAge: 600,
		}).Handler(h)
	}
	s.handler = h
	return s, nil
}

// DefaultSSERetry is the reconnect delay event streams ask browsers for.
const DefaultSSERetry = 2 * time.Second

// Handler serves the API, its OpenAPI document (/openapi.json) and docs (/docs).
func (s *Server) Handler() http.Handler { return s.handler }

// StreamChanged wakes the protocol readers waiting on the stream at path, which another
// instance changed; "" wakes every one (anything may have changed). Each re-reads the store.
// Feed it checkpoint.Protocol.Watch, so byte streams, which have no view, reach readers here
// at once rather than at their next poll.
func (s *Server) StreamChanged(path string) {
	if path == "" {
		s.streamChanges.notifyAll()
		return
	}
	s.streamChanges.notify(path)
}

// API exposes the huma API (its OpenAPI document) for generators and tests.
func (s *Server) API() huma.API { return s.api }

// serve answers unknown routes and methods with problem details, like every other error.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	w, r = s.guard(w, r)
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	rec := &statusRecorder{header: http.Header{}}
	s.mux.ServeHTTP(rec, r) // the mux's own 404 or 405, with its Allow header
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	status := rec.status
	if status == 0 || status == http.StatusOK {
		status = http.StatusNotFound
	}
	writeProblem(w, huma.NewError(status, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)))
}

// statusRecorder keeps what the mux would have answered an unknown route.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// ---- auth

// unauthorized is a 401 with the challenge RFC 6750 asks for.
func unauthorized(detail, code string) error {
	challenge := `Bearer realm="rindle"`
	if code != "" {
		challenge += fmt.Sprintf(`, error=%q, error_description=%q`, code, detail)
	}
	return huma.ErrorWithHeaders(huma.Error401Unauthorized(detail), http.Header{"WWW-Authenticate": {challenge}})
}

// who is a verified caller and the tenant it acts in.
type who struct {
	p      *auth.Principal
	tenant string
}

// key is the stores' key for the caller's id (auth.Key).
func (w *who) key(id string) string { return auth.Key(w.tenant, id) }

// subject keys per-subject limits: a subject is unique within its tenant only.
func (w *who) subject() string { return auth.Key(w.tenant, w.p.Subject) }

func (w *who) producer() bool { return w.p.Has(ProducerScope) || w.p.Has(AdminScope) }

// mayTouch: a token narrowed to one stream touches only that one.
func (w *who) mayTouch(id string) bool { return w.p.Stream == "" || w.p.Stream == id }

// caller verifies the Authorization header ("Bearer" in any case, as RFC 6750 allows) and
// settles the tenant: the token's, or TenantHeader's for an admin.
func (s *Server) caller(authorization, tenant string) (*who, error) {
	return verifyCaller(s.cfg.Verifier, authorization, tenant)
}

// verifyCaller is Server.caller with the verifier given: what EdgeAuth asks too.
func verifyCaller(v TokenVerifier, authorization, tenant string) (*who, error) {
	scheme, raw, _ := strings.Cut(authorization, " ")
	if !strings.EqualFold(scheme, "Bearer") || raw == "" {
		return nil, unauthorized("a bearer token is required", "")
	}
	p, err := v.Verify(strings.TrimSpace(raw))
	if err != nil {
		return nil, unauthorized("the bearer token is invalid: "+err.Error(), "invalid_token")
	}
	w := &who{p: p, tenant: p.Tenant}
	if tenant != "" {
		if !p.Has(AdminScope) {
			return nil, huma.Error403Forbidden("only an admin token may name a tenant (" + TenantHeader + ")")
		}
		if err := auth.CheckTenant(tenant); err != nil {
			return nil, huma.Error400BadRequest(TenantHeader + " " + err.Error())
		}
		w.tenant = tenant
	}
	return w, nil
}

// producer authorizes a producer route on id ("" for none yet).
func (s *Server) producer(h AuthHeader, id string) (*who, error) {
	w, err := s.caller(h.Authorization, h.Tenant)
	if err != nil {
		return nil, err
	}
	if !w.producer() {
		return nil, huma.Error403Forbidden("this route needs the producer scope")
	}
	if !w.mayTouch(id) {
		return nil, huma.Error403Forbidden(fmt.Sprintf("this token may touch only stream %q", w.p.Stream))
	}
	return w, nil
}

// unavailable is the 503 for a database failure. The cause is logged here and never sent: it
// names the database's user, host and port.
func (s *Server) unavailable(op string, err error) error {
	var pe *pgconn.PgError
	if checkpoint.IsPermanent(err) && errors.As(err, &pe) {
		// The database refused the request's own data: an input error, which no retry fixes.
		return huma.Error400BadRequest(fmt.Sprintf("%s: the database refused the request's data (SQLSTATE %s)", op, pe.Code))
	}
	s.cfg.Logger.Warn("database unavailable", "op", op, "err", err)
	return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable("the database is unavailable: retry"),
		http.Header{"Retry-After": {retryAfter}})
}

// errNoAccess is the one answer to a read that is denied and to a read of an id that does not
// exist, in this tenant or at all, so ids cannot be probed.
func errNoAccess() error { return huma.Error403Forbidden("you may not read this stream") }

// HostHeader names the instance that hosts a live stream (the message's host column) on the
// event stream's response: the alternative to the relay (docs/DESIGN.md §8), for a proxy that routes
// readers to the producing instance, or a client that reconnects there.
const HostHeader = "Rindle-Host"

// access is an authorized read: the stores' key, and where the stream is live, if it is.
type access struct {
	*who
	key  string
	host string // set while the message is streaming on a known host
}

// streamMeta is what the open route keeps with a live stream: its owner, so reads of a stream
// hosted here are authorized from memory (and keep working while the database is away).
type streamMeta struct {
	owner *string
}

// reader authorizes a read of id: the owner must be the token's subject (or the token may
// produce), in the caller's tenant. Another tenant's id is another key, which this tenant does
// not hold: it is answered as a missing id is, by the same path. A granted read of a stream
// hosted here is decided from memory; every denial reads the row, so a denied live stream and a
// missing id take the same time.
func (s *Server) reader(ctx context.Context, h AuthHeader, id string) (*access, error) {
	w, err := s.caller(h.Authorization, h.Tenant)
	if err != nil {
		return nil, err
	}
	if !w.mayTouch(id) {
		return nil, errNoAccess()
	}
	a := &access{who: w, key: w.key(id)}
	mine := func(owner *string) bool { return w.producer() || (owner != nil && *owner == w.p.Subject) }
	if st, ok := s.cfg.Plane.Stream(a.key); ok {
		if m, ok := st.Meta().(*streamMeta); ok && mine(m.owner) {
			if !st.Ended() {
				a.host = s.cfg.HostID
			}
			return a, nil
		}
	}
	m, err := s.cfg.Messages.Lookup(ctx, a.key)
	switch {
	case errors.Is(err, checkpoint.ErrNoMessage):
		return nil, errNoAccess()
	case err != nil:
		return nil, s.unavailable("authorize read", err)
	case mine(m.Owner):
		if m.Host != nil && m.Status == string(producer.StatusStreaming) {
			a.host = *m.Host
		}
		return a, nil
	}
	return nil, errNoAccess()
}

// AuthHeader is the bearer token every protected route reads. It is hidden from the OpenAPI
// document, where the bearer security scheme already says it.
type AuthHeader struct {
	Authorization string `header:"Authorization" hidden:"true"`
	Tenant        string `header:"Rindle-Tenant" hidden:"true"`
}

// StreamPath is a route on one stream.
type StreamPath struct {
	AuthHeader
	ID string `path:"id" minLength:"1" maxLength:"200" doc:"The message id, which is the stream id."`
}

// Resolve refuses an id PostgreSQL cannot store, or holding the tenant separator, with 400,
// before any route reads the database.
func (p *StreamPath) Resolve(huma.Context) []error {
	if err := unstorable("the stream id", p.ID); err != nil {
		return []error{err}
	}
	return nil
}

func security() []map[string][]string { return []map[string][]string{{"bearer": {}}} }

// writeProblem writes an error as RFC 9457 problem details, for the raw handlers.
func writeProblem(w http.ResponseWriter, err error) {
	var se huma.StatusError
	if !errors.As(err, &se) {
		se = huma.Error500InternalServerError(err.Error())
	}
	var he huma.HeadersError
	if errors.As(err, &he) {
		for k, vs := range he.GetHeaders() {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(se.GetStatus())
	_ = json.NewEncoder(w).Encode(se)
}

func ptr[T any](v T) *T { return &v }

// ConfigError names the Config field that New refused, and why. It is the convention of every
// package here (producer, checkpoint, cdc, ivm, broker, httpapi, otel): match it with errors.As.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "httpapi: Config." + e.Field + ": " + e.Reason
}
