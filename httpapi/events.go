package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/producer"
)

// The event stream is a raw handler (huma's sse package writes no id for offset 0, no
// keep-alive comments, and cannot fail once streaming), documented in the same OpenAPI
// document: every frame a schema of its own, one union discriminated on type.

// frameSchemas registers one schema per frame type and the discriminated union, and returns a
// reference to the union.
func (s *Server) frameSchemas() *huma.Schema {
	schemas := s.api.OpenAPI().Components.Schemas
	integer := offsetSchema
	frame := func(name, typ, doc string, props map[string]*huma.Schema, required ...string) string {
		p := map[string]*huma.Schema{"type": {Type: "string", Enum: []any{typ}}}
		for k, v := range props {
			p[k] = v
		}
		schemas.Map()[name] = &huma.Schema{Type: "object", Description: doc, Properties: p, Required: append([]string{"type"}, required...), AdditionalProperties: false}
		return "#/components/schemas/" + name
	}
	status := &huma.Schema{Type: "string", Enum: []any{"complete", "cancelled", "error", "interrupted"}, Description: "What the store holds."}
	refs := map[string]string{
		"open": frame("OpenFrame", "open", "The join was accepted at from (floored to a character, clamped to [0, seq]).", map[string]*huma.Schema{
			"streamId": {Type: "string"}, "from": integer("Where this reader's text starts."), "seq": integer("Produced length."),
			"durableSeq": integer("Durable length."), "ended": {Type: "boolean", Description: "Already sealed."},
		}, "streamId", "from", "seq", "durableSeq", "ended"),
		"chunk": frame("ChunkFrame", "chunk", "Produced text: it starts at from, and its length in UTF-16 code units is seq - from. Apply it at from.", map[string]*huma.Schema{
			"from": integer("Start offset."), "seq": integer("End offset."), "text": {Type: "string"},
		}, "from", "seq", "text"),
		"durable": frame("DurableFrame", "durable", "The store holds the text through seq.", map[string]*huma.Schema{"seq": integer("Durable length.")}, "seq"),
		"end": frame("EndFrame", "end", "Sealed: seq is the durable length and status what the store holds. The last frame.", map[string]*huma.Schema{
			"seq": integer("The durable length at the seal."), "status": status, "error": {Type: "string"},
		}, "seq", "status"),
		"stale": frame("StaleFrame", "stale", "This reader must read the durable view (GET /v1/streams/{id}) instead. The last frame.", map[string]*huma.Schema{
			"floorSeq": integer("The lowest offset the live plane still serves."), "durableSeq": integer("Durable length."),
		}, "floorSeq", "durableSeq"),
		"absent": frame("AbsentFrame", "absent", "Nothing to serve here. The last frame.", nil),
	}
	union := &huma.Schema{Description: "One event stream frame, as each event's data.", Discriminator: &huma.Discriminator{PropertyName: "type", Mapping: refs}}
	for _, typ := range []string{"open", "chunk", "durable", "end", "stale", "absent"} {
		union.OneOf = append(union.OneOf, &huma.Schema{Ref: refs[typ]})
	}
	schemas.Map()["Frame"] = union
	return &huma.Schema{Ref: "#/components/schemas/Frame"}
}

// problem is a reference to the problem details schema, registered if no route did yet.
func (s *Server) problem() *huma.Schema {
	return s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[huma.ErrorModel](), true, "")
}

// offsetSchema documents an offset in UTF-16 code units.
func offsetSchema(doc string) *huma.Schema {
	return &huma.Schema{Type: "integer", Format: "int64", Minimum: ptr(0.0), Description: doc}
}

// streamIDParam is the raw routes' {id}, constrained as StreamPath's.
func streamIDParam() *huma.Param {
	return &huma.Param{Name: "id", In: "path", Required: true, Schema: &huma.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(200)}}
}

func (s *Server) problemResponse(doc string) *huma.Response {
	return &huma.Response{Description: doc, Content: map[string]*huma.MediaType{"application/problem+json": {Schema: s.problem()}}}
}

// conflictResponse is a producer route's 409: the problem with the stream's seq and cancelled,
// which a producer reads to resume or to stop (ConflictError in the document; ErrorModel
// admits no extra properties, so a generated client could not read them there).
func (s *Server) conflictResponse(doc string) *huma.Response {
	schema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[conflictError](), true, "")
	return &huma.Response{Description: doc, Content: map[string]*huma.MediaType{"application/problem+json": {Schema: schema}}}
}

// problemsNeverNull documents the problems' errors list as an array, not ["array","null"]
// (huma's default for a Go slice): it is omitted when empty, never null, and oapi-codegen
// refuses the 3.1 document's type list.
func (s *Server) problemsNeverNull() {
	for _, schema := range s.api.OpenAPI().Components.Schemas.Map() {
		if e := schema.Properties["errors"]; e != nil && e.Type == huma.TypeArray {
			e.Nullable = false
		}
	}
}

// withConflict documents op's 409 as conflictResponse rather than the plain problem.
func (s *Server) withConflict(op huma.Operation) huma.Operation {
	op.Errors = slices.DeleteFunc(slices.Clone(op.Errors), func(c int) bool { return c == http.StatusConflict })
	if op.Responses == nil {
		op.Responses = map[string]*huma.Response{}
	}
	op.Responses[strconv.Itoa(http.StatusConflict)] = s.conflictResponse("The stream cannot take this: sealed, sealed by another writer, cancelled by a reader (`cancelled`), or the text cannot start at expectedSeq. `seq` is the stream's length: where to resume.")
	return op
}

func (s *Server) registerEvents() {
	const path = "/v1/streams/{id}/events"
	s.api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "streamEvents", Method: http.MethodGet, Path: path, Security: security(),
		Summary: "Server-sent events: the durable prefix from the view, then the live tail",
		Description: "One event per frame: `id:` is the resume point (none for stale and absent), `data:` the frame JSON. `Last-Event-ID` wins over `from`. " +
			"A `retry:` field comes first, and a `: ping` comment every 15 s. A reconnect whose `Last-Event-ID` is at or past the end of a sealed stream gets 204, which stops a browser's EventSource. " +
			"While the stream is live, the `Rindle-Host` response header names the instance producing it.",
		Parameters: []*huma.Param{
			streamIDParam(),
			{Name: "from", In: "query", Description: "How much of the text the reader holds (UTF-16 code units).", Schema: offsetSchema("")},
			{Name: "Last-Event-ID", In: "header", Description: "Sent by EventSource on a reconnect: the last event's id.", Schema: &huma.Schema{Type: "string"}},
			{Name: "access_token", In: "query", Schema: &huma.Schema{Type: "string"},
				Description: "The bearer token, for clients that cannot set headers (a browser's EventSource; RFC 6750 §2.3). The Authorization header wins. URLs end up in logs: prefer short-lived tokens here."},
		},
		Responses: map[string]*huma.Response{
			"200": {Description: "A stream of frames, one per event, ending with exactly one of end, stale or absent.",
				Headers: map[string]*huma.Param{HostHeader: {Description: "The instance producing the stream, while it is live.", Schema: &huma.Schema{Type: "string"}}},
				Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{Type: "array", Items: s.frameSchemas()}}}},
			"204": {Description: "The reconnect is at or past the end of a sealed stream: nothing more will come."},
			"400": s.problemResponse("Malformed offset, or an id PostgreSQL cannot store (U+0000, invalid UTF-8)"),
			"401": s.problemResponse("No valid bearer token"),
			"403": s.problemResponse("Denied, or no such stream"),
			"429": s.problemResponse("Too many waiting reads on this instance, for this token's subject or in all (Retry-After says when to try again)"),
			"503": s.problemResponse("The database or the view is unavailable"),
		},
	})
	s.mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := unstorable("the stream id", id); err != nil {
			writeProblem(w, err)
			return
		}
		// Everything that can fail does so before the first byte, while a status is possible.
		a, err := s.reader(r.Context(), eventsAuth(r), id)
		if err != nil {
			writeProblem(w, err)
			return
		}
		from, err := producer.ResumeFromRequest(r)
		if err != nil {
			writeProblem(w, huma.Error400BadRequest(err.Error()))
			return
		}
		if r.Header.Get("Last-Event-ID") != "" && s.sealedBy(r, a.key, from) {
			// The HTML spec: a 204 stops an EventSource from reconnecting.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		release, err := s.waiting.acquire(a.subject())
		if err != nil {
			writeProblem(w, err)
			return
		}
		handedOver := false // the direct writer releases the slot when the reader ends
		defer func() {
			if !handedOver {
				release()
			}
		}()
		if a.host != "" {
			w.Header().Set(HostHeader, a.host)
		}
		j, err := Join(r.Context(), s.cfg.View, s.cfg.Plane, nil, a.key, from)
		if err != nil {
			writeProblem(w, s.viewError(err))
			return
		}
		if s.cfg.Direct != nil && r.ProtoMajor == 1 && r.TLS == nil && j.onLocalTail() {
			if handedOver = s.serveDirect(w, r, j, id, release); handedOver {
				return
			}
		}
		var src producer.FrameReader = j
		if a.key != id {
			src = renamed{FrameReader: j, id: id}
		}
		if err := producer.WriteSSE(r.Context(), w, src, s.cfg.SSE); err != nil && r.Context().Err() == nil {
			s.cfg.Logger.Debug("sse: stream ended", "stream", id, "err", err)
		}
	})
}

// serveDirect hands an event stream on this instance's live tail to the DirectWriter: it
// hijacks the connection, writes the head (the headers set so far, the SSE ones, Connection:
// close) and the join's own frames, and lets the writers take the tail. The handler returns
// then, and its goroutine ends: a waiting reader holds none. release runs when the reader
// ends. False means the connection cannot be hijacked and nothing was taken (release is still
// the caller's): the caller writes the stream itself.
//
// The reader ends with its stream (a drain seals every stream on this instance, so every
// reader here gets its end), the client's hang-up, a failed write, or the DirectWriter's
// Close: not with the request's context, which net/http cancels when the handler returns.
func (s *Server) serveDirect(w http.ResponseWriter, r *http.Request, j *Joined, id string, release func()) bool {
	h := w.Header().Clone()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	prefix, tail, pos := j.handOver()
	producer.SetSSEHeaders(h)
	h.Set("Connection", "close") // the response ends with the connection: no chunked framing
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	_ = h.Write(&head)
	head.WriteString("\r\n")
	if retry := s.cfg.SSE.Retry; retry > 0 {
		fmt.Fprintf(&head, "retry: %d\n\n", retry.Milliseconds())
	}
	b := head.Bytes()
	for _, q := range prefix {
		if q.f.Type == producer.FrameOpen {
			q.f.StreamID, q.enc = id, nil // the id the reader asked for (a tenant's key is internal)
		}
		if q.enc != nil {
			b = append(b, q.enc...)
		} else {
			b = producer.AppendSSE(b, q.f)
		}
	}
	logger := s.cfg.Logger
	s.cfg.Direct.Start(conn, tail, pos, b, func(err error) {
		release()
		if err != nil {
			logger.Debug("sse: stream ended", "stream", id, "err", err)
		}
	})
	return true
}

// sealedBy reports whether the stream is sealed with nothing past from: the view says so, or
// the live stream here ended there.
func (s *Server) sealedBy(r *http.Request, id string, from producer.Seq) bool {
	if st, ok := s.cfg.Plane.Stream(id); ok {
		if st.Ended() && from >= st.DurableSeq() {
			return true
		}
	}
	m, err := s.cfg.View.Get(r.Context(), id)
	return err == nil && m.Status.Terminal() && from >= m.Seq
}

// headerAuth is a request's Authorization and TenantHeader.
func headerAuth(r *http.Request) AuthHeader {
	return AuthHeader{Authorization: r.Header.Get("Authorization"), Tenant: r.Header.Get(TenantHeader)}
}

// eventsAuth is headerAuth, or else, on GET and HEAD only, the access_token query parameter: a
// browser's EventSource cannot set headers. A token in a URL ends up in logs and histories, so
// no write takes one. The event stream and the protocol's reads use it.
func eventsAuth(r *http.Request) AuthHeader {
	h := headerAuth(r)
	if h.Authorization != "" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return h
	}
	if tok := r.URL.Query().Get("access_token"); tok != "" {
		h.Authorization = "Bearer " + tok
	}
	return h
}

// renamed gives a tenant's reader its own id in the open frame, not the stores' key.
type renamed struct {
	producer.FrameReader
	id string
}

func (r renamed) Next(ctx context.Context) (producer.Frame, error) {
	f, err := r.FrameReader.Next(ctx)
	if f.Type == producer.FrameOpen {
		f.StreamID = r.id
	}
	return f, err
}
