package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

// The producer routes: create, open, append, flush, close. Every answer carries the stream's
// state as this instance knows it, the cancel flag included, so an HTTP producer learns of a
// reader's cancel on its next request.

// StreamState is what every producer answer says about the stream.
type StreamState struct {
	Seq        producer.Seq `json:"seq" doc:"Produced UTF-16 code units."`
	DurableSeq producer.Seq `json:"durableSeq" doc:"UTF-16 code units the store confirmed."`
	Cancelled  bool         `json:"cancelled" doc:"A reader asked the producer to stop, and this instance has seen it: push nothing more, and close the stream (it seals as cancelled)."`
}

func stateOf(st *producer.LiveStream) StreamState {
	return StreamState{Seq: st.Seq(), DurableSeq: st.DurableSeq(), Cancelled: st.Cancelled()}
}

type stateOutput struct {
	Body StreamState
}

// AppendResult is append's and ingest's answer.
type AppendResult struct {
	StreamState
	Applied producer.Seq `json:"applied" doc:"UTF-16 code units of this request that were new: less than its length when a retry with expectedSeq found some of it already there (0: all of it)."`
}

type appendOutput struct {
	Body AppendResult
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

type appendBody struct {
	Text        jsonText      `json:"text" doc:"The delta to push: valid UTF-8, no unpaired surrogate escapes."`
	ExpectedSeq *producer.Seq `json:"expectedSeq,omitempty" minimum:"0" doc:"The offset this text starts at, as the producer believes: with it the append is idempotent. Text the stream already holds there is absorbed (a retry after a lost reply); text that cannot start there is refused with 409 and the stream's seq."`
}

type closeBody struct {
	Error string `json:"error,omitempty" doc:"Seal with status error and this message."`
}

func (s *Server) registerProducerRoutes() {
	api := s.api
	huma.Register(api, huma.Operation{OperationID: "createMessage", Method: http.MethodPost, Path: "/v1/messages",
		Summary: "Create a message row (the app-side step before a stream opens)", Security: security(), DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict, http.StatusServiceUnavailable}},
		func(ctx context.Context, in *struct {
			AuthHeader
			Body createBody
		}) (*createOutput, error) {
			w, err := s.producer(in.AuthHeader, in.Body.ID)
			if err != nil {
				return nil, err
			}
			for field, v := range map[string]string{"id": in.Body.ID, "owner": in.Body.Owner, "chatId": in.Body.ChatID, "role": in.Body.Role} {
				if err := unstorable(field, v); err != nil {
					return nil, err
				}
			}
			id := in.Body.ID
			if id == "" {
				id = fmt.Sprintf("msg-%d", time.Now().UnixNano())
			}
			created, err := s.cfg.Messages.Create(ctx, checkpoint.NewMessage{ID: w.key(id), Owner: in.Body.Owner, Chat: in.Body.ChatID, Role: in.Body.Role})
			if err != nil {
				return nil, s.unavailable("create message", err)
			}
			if !created {
				return nil, huma.Error409Conflict(fmt.Sprintf("message %s already exists", id))
			}
			out := &createOutput{Status: http.StatusCreated}
			out.Body.ID = id
			return out, nil
		})

	huma.Register(api, huma.Operation{OperationID: "openStream", Method: http.MethodPost, Path: "/v1/streams/{id}/open",
		Summary: "Open a stream on this instance", Security: security(),
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict, http.StatusServiceUnavailable}},
		func(ctx context.Context, in *StreamPath) (*stateOutput, error) {
			w, err := s.producer(in.AuthHeader, in.ID)
			if err != nil {
				return nil, err
			}
			key := w.key(in.ID)
			// The owner travels with the live stream, so its readers are authorized from memory.
			m, err := s.cfg.Messages.Lookup(ctx, key)
			if errors.Is(err, checkpoint.ErrNoMessage) {
				return nil, huma.Error409Conflict(fmt.Sprintf("stream %s: open refused: no message row: create it first", in.ID))
			} else if err != nil {
				return nil, s.unavailable("open", err)
			}
			meta := &streamMeta{owner: m.Owner}
			st, err := s.cfg.Plane.Open(ctx, producer.OpenStreamInput{StreamID: key, Meta: meta})
			if errors.Is(err, producer.ErrOpenRefused) {
				return nil, huma.Error409Conflict(tellable(err, key, in.ID))
			}
			if err != nil {
				return nil, s.producerError(key, in.ID, "the stream could not be opened", err)
			}
			return &stateOutput{Body: stateOf(st)}, nil
		})

	huma.Register(api, s.withConflict(huma.Operation{OperationID: "appendStream", Method: http.MethodPost, Path: "/v1/streams/{id}/append",
		Summary:     "Push text into a stream",
		Description: "With `expectedSeq` the append is idempotent: retry a request whose answer was lost with the same body, and text already taken is absorbed rather than doubled. A 409 carries the stream's `seq`, where to resume.",
		Security:    security(), MaxBodyBytes: s.cfg.MaxBodyBytes,
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict,
			http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable}}),
		func(ctx context.Context, in *struct {
			StreamPath
			Body appendBody
		}) (*appendOutput, error) {
			w, err := s.producer(in.AuthHeader, in.ID)
			if err != nil {
				return nil, err
			}
			if in.Body.Text.bad != "" {
				return nil, huma.Error400BadRequest(in.Body.Text.bad + ": nothing was pushed")
			}
			key := w.key(in.ID)
			st, err := s.hosted(key, in.ID)
			if err != nil {
				return nil, err
			}
			applied, err := push(ctx, st, in.Body.ExpectedSeq, in.Body.Text.s)
			if err != nil {
				return nil, s.producerError(key, in.ID, "the text could not be pushed", err)
			}
			return &appendOutput{Body: AppendResult{StreamState: stateOf(st), Applied: applied}}, nil
		})

	huma.Register(api, s.withConflict(huma.Operation{OperationID: "flushStream", Method: http.MethodPost, Path: "/v1/streams/{id}/flush",
		Summary: "Return once everything produced is durable", Security: security(),
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusServiceUnavailable}}),
		func(ctx context.Context, in *StreamPath) (*stateOutput, error) {
			w, err := s.producer(in.AuthHeader, in.ID)
			if err != nil {
				return nil, err
			}
			key := w.key(in.ID)
			st, err := s.hosted(key, in.ID)
			if err != nil {
				return nil, err
			}
			if _, err := st.Flush(ctx); err != nil {
				return nil, s.producerError(key, in.ID, "the produced text is not durable", err)
			}
			return &stateOutput{Body: stateOf(st)}, nil
		})

	huma.Register(api, s.withConflict(huma.Operation{OperationID: "closeStream", Method: http.MethodPost, Path: "/v1/streams/{id}/close",
		Summary:     "Seal a stream: complete (cancelled after a reader's cancel), or error with a message",
		Description: "The body is optional. A 503 means the seal has not committed yet: this instance retries it until it does, and readers get their end frame only then; POST close again to wait for it.",
		Security:    security(),
		Errors:      []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusServiceUnavailable}}),
		func(ctx context.Context, in *struct {
			StreamPath
			Body *closeBody `required:"false"`
		}) (*stateOutput, error) {
			w, err := s.producer(in.AuthHeader, in.ID)
			if err != nil {
				return nil, err
			}
			key := w.key(in.ID)
			st, err := s.hosted(key, in.ID)
			if err != nil {
				return nil, err
			}
			st.Cause(ctx) // the seal's span links to this request
			if in.Body != nil && in.Body.Error != "" {
				err = st.Fail(ctx, errors.New(in.Body.Error))
			} else {
				err = st.Close(ctx)
			}
			if err != nil {
				return nil, s.producerError(key, in.ID, "the seal has not committed yet; this instance retries it until it does (POST close again to wait for it)", err)
			}
			return &stateOutput{Body: stateOf(st)}, nil
		})
}

// push is append's and ingest's push: idempotent with an expected offset. The request that
// pushed new text is a cause of the checkpoint that makes it durable (its span links to it).
func push(ctx context.Context, st *producer.LiveStream, at *producer.Seq, text string) (took producer.Seq, err error) {
	if at != nil {
		took, err = st.PushAt(*at, text)
	} else if err = st.Push(text); err == nil {
		took = producer.Len16(text)
	}
	if took > 0 {
		st.Cause(ctx)
	}
	return took, err
}

// hosted finds a stream open on this instance. For producers existence is not a secret: 404.
func (s *Server) hosted(key, id string) (*producer.LiveStream, error) {
	st, ok := s.cfg.Plane.Stream(key)
	if !ok {
		return nil, huma.Error404NotFound(fmt.Sprintf("stream %s is not open on this instance", id))
	}
	return st, nil
}

// retryAfter is the Retry-After of a 503 that a producer should retry: a suspended host is
// usually back within a lease interval.
const retryAfter = "1"

// conflictError is a 409 problem that says where the stream is, so a producer can resume.
type conflictError struct {
	huma.ErrorModel
	Seq       producer.Seq `json:"seq" doc:"The stream's length: where to resume."`
	Cancelled bool         `json:"cancelled,omitempty" required:"false" doc:"A reader cancelled the stream: close it."`
}

func (e *conflictError) Error() string  { return e.Detail }
func (e *conflictError) GetStatus() int { return e.Status }
func (e *conflictError) ContentType(string) string {
	return "application/problem+json"
}

func conflict(detail string, seq producer.Seq, cancelled bool) error {
	return &conflictError{ErrorModel: huma.ErrorModel{Status: http.StatusConflict, Title: http.StatusText(http.StatusConflict), Detail: detail}, Seq: seq, Cancelled: cancelled}
}

// seqOf is the length of a stream this instance hosts (0 when it hosts none).
func seqOf(p *producer.Plane, id string) producer.Seq {
	if st, _ := p.Stream(id); st != nil {
		return st.Seq()
	}
	return 0
}

// producerError maps a producer-route failure to its status. A fence (another writer sealed the
// stream), a sealed or cancelled stream and an offset conflict are 409: retrying the same
// request cannot help. A suspended host (its lease could not be renewed) is 503 with
// Retry-After: nothing was taken, and the same request may succeed shortly. A durability
// shortfall is 503 with what the store holds.
// tellable is err's text with the stores' key put back as the caller's id.
func tellable(err error, key, id string) string {
	if key == id {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), key, id)
}

// producerError answers a producer route's failure on the stream key (the caller's id).
func (s *Server) producerError(key, id, what string, err error) error {
	var fence *producer.FencedError
	var oc *producer.OffsetConflictError
	var nd *producer.NotDurableError
	switch {
	case errors.As(err, &fence):
		return conflict(fmt.Sprintf("stream %s was sealed by another writer: the store holds %d characters, status %s (this instance's lease lapsed); no more text is taken", id, fence.Seq, fence.Status), fence.Seq, false)
	case errors.As(err, &oc):
		return conflict(fmt.Sprintf("stream %s: this text cannot start at %d: %s; nothing was pushed", id, oc.At, oc.Reason), oc.Seq, false)
	case errors.Is(err, producer.ErrInvalidText):
		return huma.Error400BadRequest(tellable(err, key, id) + ": nothing was pushed")
	case errors.Is(err, producer.ErrPermanent):
		return conflict(fmt.Sprintf("stream %s ended in error: the database refused its text for good (%s); it was sealed with what was durable", id, tellable(err, key, id)), seqOf(s.cfg.Plane, key), false)
	case errors.Is(err, producer.ErrCancelled):
		return conflict(fmt.Sprintf("stream %s was cancelled by a reader: nothing more is taken; close it", id), seqOf(s.cfg.Plane, key), true)
	case errors.Is(err, producer.ErrSuspended):
		return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(fmt.Sprintf("stream %s: this instance cannot confirm its lease on the database right now, so it takes no text; nothing of this request was taken: retry", id)),
			http.Header{"Retry-After": {retryAfter}})
	case errors.As(err, &nd):
		return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(fmt.Sprintf("%s: %d of %d characters are durable", what, nd.DurableSeq, nd.Seq)),
			http.Header{"Retry-After": {retryAfter}})
	case errors.Is(err, producer.ErrClosed):
		return conflict(fmt.Sprintf("stream %s is sealed", id), seqOf(s.cfg.Plane, key), false)
	}
	s.cfg.Logger.Warn("producer route failed", "stream", key, "err", err)
	return huma.Error503ServiceUnavailable(what)
}
