package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxWait        = 60 * time.Second
	DefaultMaxIngestBytes = 64 << 20
	ProducerScope         = "producer"
)

// Config configures a Server.
type Config struct {
	// Plane hosts this instance's live streams. Required.
	Plane *producer.Plane
	// View is the durable view. Required.
	View ViewReader
	// Pool reads owners and writes message rows and cancel flags. Required.
	Pool *pgxpool.Pool
	// Secret verifies HS256 bearer tokens. Required, at least 32 bytes.
	Secret []byte
	// MaxBodyBytes bounds a request body. Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxWait bounds a long-poll's wait. Defaults to DefaultMaxWait.
	MaxWait time.Duration
	// MaxIngestBytes bounds one streaming ingest request. Defaults to DefaultMaxIngestBytes.
	MaxIngestBytes int64
	// SSE configures event streams.
	SSE producer.SSEConfig
	// Ready reports readiness for /readyz (the database reachable, CDC caught up). Nil means
	// always ready.
	Ready func(context.Context) error
	// Metrics, if set, is served at /metrics (otel.Telemetry.MetricsHandler).
	Metrics http.Handler
	// HostID names this instance in the Rindle-Host header of the streams it produces. Optional.
	HostID string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is the HTTP API.
type Server struct {
	cfg Config
	api huma.API
	mux *http.ServeMux
}

// Claims are the bearer token's claims: the subject (a reader reads only messages whose owner it
// is) and a space-separated scope (ProducerScope grants the producer routes).
type Claims struct {
	Scope string `json:"scope,omitempty"`
	jwt.RegisteredClaims
}

// NewToken signs an HS256 bearer token for subject with scope (space-separated, may be empty),
// valid for ttl: what `rindled token` prints and what the demo hands its page.
func NewToken(secret []byte, subject, scope string, ttl time.Duration) (string, error) {
	if subject == "" {
		return "", errors.New("httpapi: a token needs a subject")
	}
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{Scope: scope, RegisteredClaims: jwt.RegisteredClaims{
		Subject: subject, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}).SignedString(secret)
}

func (c *Claims) has(scope string) bool {
	for _, s := range strings.Fields(c.Scope) {
		if s == scope {
			return true
		}
	}
	return false
}

// New validates cfg and registers the routes.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Plane == nil:
		return nil, errors.New("httpapi: Config.Plane is required")
	case cfg.View == nil:
		return nil, errors.New("httpapi: Config.View is required")
	case cfg.Pool == nil:
		return nil, errors.New("httpapi: Config.Pool is required")
	case len(cfg.Secret) < 32:
		return nil, errors.New("httpapi: Config.Secret must be at least 32 bytes")
	case cfg.MaxBodyBytes < 0 || cfg.MaxWait < 0 || cfg.MaxIngestBytes < 0:
		return nil, errors.New("httpapi: Config.MaxBodyBytes, MaxIngestBytes and MaxWait must not be negative")
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	hc := huma.DefaultConfig("Rindle streams", "1.0.0")
	hc.OpenAPIPath = "/openapi"
	hc.CreateHooks = nil // no $schema links in bodies: clients see exactly the documented shapes
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", BearerFormat: "JWT"},
	}
	s.api = humago.New(s.mux, hc)
	s.register()
	return s, nil
}

// Handler serves the API, its OpenAPI document (/openapi.json) and docs (/docs).
func (s *Server) Handler() http.Handler { return s.mux }

// API exposes the huma API (its OpenAPI document) for generators and tests.
func (s *Server) API() huma.API { return s.api }

// ---- auth

func (s *Server) claims(header string) (*Claims, error) {
	raw, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || raw == "" {
		return nil, huma.Error401Unauthorized("a bearer token is required")
	}
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return s.cfg.Secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	if err != nil {
		return nil, huma.Error401Unauthorized("the bearer token is invalid: " + err.Error())
	}
	if c.Subject == "" {
		return nil, huma.Error401Unauthorized("the bearer token has no subject")
	}
	return &c, nil
}

func (s *Server) producer(header string) (*Claims, error) {
	c, err := s.claims(header)
	if err != nil {
		return nil, err
	}
	if !c.has(ProducerScope) {
		return nil, huma.Error403Forbidden("this route needs the producer scope")
	}
	return c, nil
}

// errNoAccess is the one answer to a read that is denied and to a read of an id that does not
// exist, so ids cannot be probed.
func errNoAccess() error { return huma.Error403Forbidden("you may not read this stream") }

// HostHeader names the instance that hosts a live stream (the message's host column) on the
// event stream's response: the alternative to the relay (DESIGN §8), for a proxy that routes
// readers to the producing instance, or a client that reconnects there.
const HostHeader = "Rindle-Host"

// access is an authorized read: where the stream is live, if it is.
type access struct {
	host string // set while the message is streaming on a known host
}

// streamMeta is what the open route keeps with a live stream: its owner, so reads of a stream
// hosted here are authorized from memory (and keep working while the database is away).
type streamMeta struct {
	owner *string
}

// reader authorizes a read of id: the owner must be the token's subject (or the token has the
// producer scope). The owner is looked up before anything reveals whether id exists: in memory
// for a stream opened here, else in the database.
func (s *Server) reader(ctx context.Context, header, id string) (*access, error) {
	c, err := s.claims(header)
	if err != nil {
		return nil, err
	}
	if st, ok := s.cfg.Plane.Stream(id); ok {
		if m, ok := st.Meta().(*streamMeta); ok {
			if !c.has(ProducerScope) && (m.owner == nil || *m.owner != c.Subject) {
				return nil, errNoAccess()
			}
			a := &access{}
			if !st.Ended() {
				a.host = s.cfg.HostID
			}
			return a, nil
		}
	}
	var owner, host, status *string
	err = s.cfg.Pool.QueryRow(ctx, "SELECT owner, host, status FROM messages WHERE id = $1", id).Scan(&owner, &host, &status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, errNoAccess()
	case err != nil:
		return nil, huma.Error503ServiceUnavailable("the database is unavailable", err)
	case c.has(ProducerScope) || (owner != nil && *owner == c.Subject):
		a := &access{}
		if host != nil && status != nil && *status == string(producer.StatusStreaming) {
			a.host = *host
		}
		return a, nil
	}
	return nil, errNoAccess()
}

// ---- routes

// AuthHeader is the bearer token every protected route reads.
type AuthHeader struct {
	Authorization string `header:"Authorization" doc:"Bearer token (HS256 JWT)."`
}

// StreamPath is a route on one stream.
type StreamPath struct {
	AuthHeader
	ID string `path:"id" minLength:"1" maxLength:"200" doc:"The message id, which is the stream id."`
}

type createBody struct {
	ID     string `json:"id,omitempty" maxLength:"200" doc:"The message id; generated when empty."`
	ChatID string `json:"chatId,omitempty"`
	Role   string `json:"role,omitempty"`
	Owner  string `json:"owner" minLength:"1" doc:"The subject allowed to read the message."`
}

type createOutput struct {
	Status int
	Body   struct {
		ID string `json:"id"`
	}
}

type seqOutput struct {
	Body struct {
		Seq        producer.Seq `json:"seq" doc:"Produced UTF-16 code units."`
		DurableSeq producer.Seq `json:"durableSeq" doc:"UTF-16 code units the store confirmed."`
	}
}

type viewOutput struct {
	Body struct {
		ID        string    `json:"id"`
		Text      string    `json:"text"`
		Seq       int64     `json:"seq"`
		Status    string    `json:"status"`
		Error     string    `json:"error,omitempty"`
		UpdatedAt time.Time `json:"updatedAt"`
	}
}

type healthOutput struct {
	Body struct {
		Status string `json:"status"`
	}
}

func security() []map[string][]string { return []map[string][]string{{"bearer": {}}} }

func (s *Server) register() {
	api := s.api
	huma.Register(api, huma.Operation{OperationID: "createMessage", Method: http.MethodPost, Path: "/v1/messages",
		Summary: "Create a message row (the app-side step before a stream opens)", Security: security(), DefaultStatus: http.StatusCreated},
		func(ctx context.Context, in *struct {
			AuthHeader
			Body createBody
		}) (*createOutput, error) {
			if _, err := s.producer(in.Authorization); err != nil {
				return nil, err
			}
			id := in.Body.ID
			if id == "" {
				id = fmt.Sprintf("msg-%d", time.Now().UnixNano())
			}
			tag, err := s.cfg.Pool.Exec(ctx, "INSERT INTO messages (id, chat_id, role, owner) VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4) ON CONFLICT (id) DO NOTHING",
				id, in.Body.ChatID, in.Body.Role, in.Body.Owner)
			if err != nil {
				return nil, huma.Error503ServiceUnavailable("the database is unavailable", err)
			}
			if tag.RowsAffected() == 0 {
				return nil, huma.Error409Conflict(fmt.Sprintf("message %s already exists", id))
			}
			out := &createOutput{Status: http.StatusCreated}
			out.Body.ID = id
			return out, nil
		})

	huma.Register(api, huma.Operation{OperationID: "openStream", Method: http.MethodPost, Path: "/v1/streams/{id}/open",
		Summary: "Open a stream on this instance", Security: security()},
		func(ctx context.Context, in *StreamPath) (*seqOutput, error) {
			if _, err := s.producer(in.Authorization); err != nil {
				return nil, err
			}
			// The owner travels with the live stream, so its readers are authorized from memory.
			meta := &streamMeta{}
			if err := s.cfg.Pool.QueryRow(ctx, "SELECT owner FROM messages WHERE id = $1", in.ID).Scan(&meta.owner); errors.Is(err, pgx.ErrNoRows) {
				return nil, huma.Error409Conflict(fmt.Sprintf("stream %s: open refused: no message row: create it first", in.ID))
			} else if err != nil {
				return nil, huma.Error503ServiceUnavailable("the database is unavailable", err)
			}
			st, err := s.cfg.Plane.Open(ctx, producer.OpenStreamInput{StreamID: in.ID, Meta: meta})
			if errors.Is(err, producer.ErrOpenRefused) {
				return nil, huma.Error409Conflict(err.Error())
			}
			if err != nil {
				return nil, producerError(in.ID, "the stream could not be opened", err)
			}
			return seqOf(st), nil
		})

	huma.Register(api, huma.Operation{OperationID: "appendStream", Method: http.MethodPost, Path: "/v1/streams/{id}/append",
		Summary: "Push text into a stream", Security: security(), MaxBodyBytes: s.cfg.MaxBodyBytes},
		func(ctx context.Context, in *struct {
			StreamPath
			Body struct {
				Text string `json:"text" doc:"The delta to push."`
			}
			RawBody []byte
		}) (*seqOutput, error) {
			if _, err := s.producer(in.Authorization); err != nil {
				return nil, err
			}
			// Checked on the raw bytes: encoding/json quietly turns invalid UTF-8 into U+FFFD,
			// which would push text the client never sent.
			if !utf8.Valid(in.RawBody) {
				return nil, huma.Error400BadRequest("the request body is not valid UTF-8")
			}
			st, err := s.hosted(in.ID)
			if err != nil {
				return nil, err
			}
			if err := st.Push(in.Body.Text); err != nil {
				return nil, pushError(in.ID, err)
			}
			return seqOf(st), nil
		})

	huma.Register(api, huma.Operation{OperationID: "flushStream", Method: http.MethodPost, Path: "/v1/streams/{id}/flush",
		Summary: "Return once everything produced is durable", Security: security()},
		func(ctx context.Context, in *StreamPath) (*seqOutput, error) {
			if _, err := s.producer(in.Authorization); err != nil {
				return nil, err
			}
			st, err := s.hosted(in.ID)
			if err != nil {
				return nil, err
			}
			if _, err := st.Flush(ctx); err != nil {
				return nil, producerError(in.ID, "the produced text is not durable", err)
			}
			return seqOf(st), nil
		})

	huma.Register(api, huma.Operation{OperationID: "closeStream", Method: http.MethodPost, Path: "/v1/streams/{id}/close",
		Summary: "Seal a stream complete, or error with a message", Security: security()},
		func(ctx context.Context, in *struct {
			StreamPath
			Body struct {
				Error string `json:"error,omitempty" doc:"Seal with status error and this message."`
			}
		}) (*seqOutput, error) {
			if _, err := s.producer(in.Authorization); err != nil {
				return nil, err
			}
			st, err := s.hosted(in.ID)
			if err != nil {
				return nil, err
			}
			if in.Body.Error != "" {
				err = st.Fail(ctx, errors.New(in.Body.Error))
			} else {
				err = st.Close(ctx)
			}
			if err != nil {
				return nil, producerError(in.ID, "the seal has not committed yet; this instance retries it until it does (POST close again to wait for it)", err)
			}
			return seqOf(st), nil
		})

	huma.Register(api, huma.Operation{OperationID: "cancelStream", Method: http.MethodPost, Path: "/v1/streams/{id}/cancel",
		Summary: "Ask the producer to stop (seen at its next checkpoint)", Security: security(), DefaultStatus: http.StatusAccepted},
		func(ctx context.Context, in *StreamPath) (*struct{}, error) {
			if _, err := s.reader(ctx, in.Authorization, in.ID); err != nil {
				return nil, err
			}
			if _, err := s.cfg.Pool.Exec(ctx, "UPDATE messages SET cancel_requested = true WHERE id = $1", in.ID); err != nil {
				return nil, huma.Error503ServiceUnavailable("the database is unavailable", err)
			}
			return &struct{}{}, nil
		})

	huma.Register(api, huma.Operation{OperationID: "getStream", Method: http.MethodGet, Path: "/v1/streams/{id}",
		Summary: "The durable view; with after and wait, a long-poll until seq passes after or the stream ends", Security: security()},
		func(ctx context.Context, in *struct {
			StreamPath
			After string `query:"after" doc:"Wait until seq passes this offset (UTF-16 code units)."`
			Wait  string `query:"wait" doc:"How long to wait, as a Go duration (30s); capped by the server."`
		}) (*viewOutput, error) {
			if _, err := s.reader(ctx, in.Authorization, in.ID); err != nil {
				return nil, err
			}
			m, err := s.longPoll(ctx, in.ID, in.After, in.Wait)
			if err != nil {
				return nil, err
			}
			out := &viewOutput{}
			out.Body.ID, out.Body.Text, out.Body.Seq = m.ID, m.Text, int64(m.Seq)
			out.Body.Status, out.Body.Error, out.Body.UpdatedAt = string(m.Status), m.Error, m.UpdatedAt
			return out, nil
		})

	huma.Register(api, huma.Operation{OperationID: "healthz", Method: http.MethodGet, Path: "/healthz", Summary: "Liveness"},
		func(context.Context, *struct{}) (*healthOutput, error) {
			out := &healthOutput{}
			out.Body.Status = "ok"
			return out, nil
		})

	huma.Register(api, huma.Operation{OperationID: "readyz", Method: http.MethodGet, Path: "/readyz", Summary: "Readiness: the database reachable, CDC caught up"},
		func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
			if s.cfg.Ready != nil {
				if err := s.cfg.Ready(ctx); err != nil {
					return nil, huma.Error503ServiceUnavailable("not ready: " + err.Error())
				}
			}
			out := &healthOutput{}
			out.Body.Status = "ready"
			return out, nil
		})
	if s.cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", s.cfg.Metrics)
	}

	s.registerEvents()
	s.registerIngest()
}

func seqOf(st *producer.LiveStream) *seqOutput {
	out := &seqOutput{}
	out.Body.Seq, out.Body.DurableSeq = st.Seq(), st.DurableSeq()
	return out
}

// hosted finds a stream open on this instance. For producers existence is not a secret: 404.
func (s *Server) hosted(id string) (*producer.LiveStream, error) {
	st, ok := s.cfg.Plane.Stream(id)
	if !ok {
		return nil, huma.Error404NotFound(fmt.Sprintf("stream %s is not open on this instance", id))
	}
	return st, nil
}

// retryAfter is the Retry-After of a 503 that a producer should retry: a suspended host is
// usually back within a lease interval.
const retryAfter = "1"

// producerError maps a producer-route failure to its status. A fence (another writer sealed the
// stream) and a sealed stream are 409: retrying cannot help. A suspended host (its lease could
// not be renewed) is 503 with Retry-After: nothing was taken, and the same request may succeed
// shortly. A durability shortfall is 503 with what the store holds.
func producerError(id, what string, err error) error {
	var fence *producer.FencedError
	switch {
	case errors.As(err, &fence):
		return huma.Error409Conflict(fmt.Sprintf("stream %s was sealed by another writer: the store holds %d characters, status %s (this instance's lease lapsed); no more text is taken", id, fence.Seq, fence.Status))
	case errors.Is(err, producer.ErrInvalidText):
		return huma.Error400BadRequest("the text is not valid UTF-8")
	case errors.Is(err, producer.ErrSuspended):
		return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(fmt.Sprintf("stream %s: this instance cannot confirm its lease on the database right now, so it takes no text; nothing of this request was taken: retry", id)),
			http.Header{"Retry-After": {retryAfter}})
	case errors.Is(err, producer.ErrNotDurable):
		var nd *producer.NotDurableError
		if errors.As(err, &nd) {
			return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(fmt.Sprintf("%s: %d of %d characters are durable", what, nd.DurableSeq, nd.Seq)),
				http.Header{"Retry-After": {retryAfter}})
		}
	case errors.Is(err, producer.ErrClosed):
		return huma.Error409Conflict(fmt.Sprintf("stream %s is sealed", id))
	}
	return huma.Error503ServiceUnavailable(what)
}

func pushError(id string, err error) error {
	return producerError(id, "the text could not be pushed", err)
}

func (s *Server) longPoll(ctx context.Context, id, afterRaw, waitRaw string) (ivm.Message, error) {
	after, err := producer.ParseOffset("after", afterRaw)
	if err != nil {
		return ivm.Message{}, huma.Error400BadRequest(err.Error())
	}
	if waitRaw == "" || afterRaw == "" {
		m, err := s.cfg.View.Get(ctx, id)
		if err != nil {
			return ivm.Message{}, viewError(err)
		}
		return m, nil
	}
	wait, err := time.ParseDuration(waitRaw)
	if err != nil || wait < 0 {
		return ivm.Message{}, huma.Error400BadRequest(fmt.Sprintf("wait %q is not a duration such as 30s", waitRaw))
	}
	wctx, cancel := context.WithTimeout(ctx, min(wait, s.cfg.MaxWait))
	defer cancel()
	m, err := s.cfg.View.Wait(wctx, id, after)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return ivm.Message{}, viewError(err)
	}
	return m, nil // at the deadline: the latest view, unchanged
}

func viewError(err error) error {
	if errors.Is(err, ivm.ErrNotFound) {
		return errNoAccess()
	}
	return huma.Error503ServiceUnavailable("the view is unavailable", err)
}

// ---- SSE

// registerEvents serves the event stream with a raw handler (huma's sse package writes no id
// for offset 0, no keep-alive comments, and cannot fail once streaming), documented in the
// same OpenAPI document.
func (s *Server) registerEvents() {
	const path = "/v1/streams/{id}/events"
	s.api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "streamEvents", Method: http.MethodGet, Path: path, Security: security(),
		Summary:     "Server-sent events: the durable prefix from the view, then the live tail",
		Description: "One event per frame; `id:` is the resume point. `Last-Event-ID` wins over `from`. A `: ping` comment every 15 s. While the stream is live, the `Rindle-Host` response header names the instance producing it.",
		Parameters: []*huma.Param{
			{Name: "id", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}},
			{Name: "from", In: "query", Schema: &huma.Schema{Type: "integer", Minimum: ptr(0.0)}},
			{Name: "Last-Event-ID", In: "header", Schema: &huma.Schema{Type: "string"}},
			{Name: "access_token", In: "query", Schema: &huma.Schema{Type: "string"},
				Description: "The bearer token, for clients that cannot set headers (a browser's EventSource; RFC 6750 §2.3). The Authorization header wins. URLs end up in logs: prefer short-lived tokens here."},
		},
		Responses: map[string]*huma.Response{
			"200": {Description: "A stream of frames", Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{Type: "string"}}}},
			"400": {Description: "Malformed offset"}, "401": {Description: "No valid bearer token"}, "403": {Description: "Denied, or no such stream"},
		},
	})
	s.mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		// Everything that can fail does so before the first byte, while a status is possible.
		a, err := s.reader(r.Context(), eventsAuth(r), id)
		if err != nil {
			writeProblem(w, err)
			return
		}
		if a.host != "" {
			w.Header().Set(HostHeader, a.host)
		}
		from, err := producer.ResumeFromRequest(r)
		if err != nil {
			writeProblem(w, huma.Error400BadRequest(err.Error()))
			return
		}
		j, err := Join(r.Context(), s.cfg.View, s.cfg.Plane, nil, id, from)
		if err != nil {
			writeProblem(w, viewError(err))
			return
		}
		if err := producer.WriteSSE(r.Context(), w, j, s.cfg.SSE); err != nil && r.Context().Err() == nil {
			s.cfg.Logger.Debug("sse: stream ended", "stream", id, "err", err)
		}
	})
}

// eventsAuth is the Authorization header, or else the access_token query parameter: a
// browser's EventSource cannot set headers.
func eventsAuth(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		return h
	}
	if tok := r.URL.Query().Get("access_token"); tok != "" {
		return "Bearer " + tok
	}
	return ""
}

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

// ---- streaming ingest

type ingestResult struct {
	Seq        producer.Seq `json:"seq"`
	DurableSeq producer.Seq `json:"durableSeq"`
}

// registerIngest serves the streaming append: every piece of a (chunked) text/plain body is
// pushed as it arrives, so a pipe (curl -T -) streams tokens through. huma reads a body whole,
// so this is a raw handler, documented in the same OpenAPI document.
func (s *Server) registerIngest() {
	const path = "/v1/streams/{id}/ingest"
	s.api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "ingestStream", Method: http.MethodPost, Path: path, Security: security(),
		Summary:     "Push a streamed text/plain body, each piece as it arrives",
		Description: "Every complete UTF-8 sequence read is pushed at once. Invalid UTF-8 stops the ingest with 400; what came before it stays pushed.",
		Parameters:  []*huma.Param{{Name: "id", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}}},
		RequestBody: &huma.RequestBody{Content: map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{Type: "string"}}}},
		Responses: map[string]*huma.Response{
			"200": {Description: "Everything was pushed", Content: map[string]*huma.MediaType{"application/json": {Schema: &huma.Schema{Type: "object"}}}},
			"400": {Description: "Invalid UTF-8"}, "401": {Description: "No valid bearer token"}, "403": {Description: "No producer scope"},
			"404": {Description: "Not open on this instance"}, "409": {Description: "Sealed"}, "413": {Description: "Over MaxIngestBytes"},
		},
	})
	s.mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.producer(r.Header.Get("Authorization")); err != nil {
			writeProblem(w, err)
			return
		}
		st, err := s.hosted(r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		body := http.MaxBytesReader(w, r.Body, s.cfg.MaxIngestBytes)
		buf := make([]byte, 32<<10)
		var carry []byte // an incomplete UTF-8 sequence split across reads
		for {
			n, rerr := body.Read(buf)
			chunk := append(carry, buf[:n]...)
			cut := len(chunk)
			// Hold back a trailing incomplete sequence (at most 3 bytes) for the next read.
			for i := len(chunk) - 1; i >= 0 && i >= len(chunk)-3; i-- {
				if utf8.RuneStart(chunk[i]) {
					if !utf8.FullRune(chunk[i:]) {
						cut = i
					}
					break
				}
			}
			if rerr != nil {
				cut = len(chunk) // nothing more will complete it
			}
			carry = append([]byte(nil), chunk[cut:]...)
			valid := validPrefix(chunk[:cut])
			if valid > 0 {
				if err := st.Push(string(chunk[:valid])); err != nil {
					writeProblem(w, pushError(st.ID(), err))
					return
				}
			}
			if valid < cut {
				writeProblem(w, huma.Error400BadRequest(fmt.Sprintf("the body is not valid UTF-8 after %d code units; what came before was pushed", st.Seq())))
				return
			}
			var tooBig *http.MaxBytesError
			switch {
			case errors.As(rerr, &tooBig):
				writeProblem(w, huma.Error413RequestEntityTooLarge(fmt.Sprintf("the ingest passed %d bytes; what came before was pushed", s.cfg.MaxIngestBytes)))
				return
			case errors.Is(rerr, io.EOF):
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(ingestResult{Seq: st.Seq(), DurableSeq: st.DurableSeq()})
				return
			case rerr != nil:
				writeProblem(w, huma.Error400BadRequest("reading the body: "+rerr.Error()))
				return
			}
		}
	})
}

// validPrefix is the length of b's longest valid UTF-8 prefix.
func validPrefix(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}
