package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/ivm"
	"github.com/rindle-sh/rindle-go/producer"
)

// The reader routes: cancel, the durable view with its long-poll, and the probes.

type viewOutput struct {
	Body struct {
		ID        string          `json:"id"`
		Text      string          `json:"text" doc:"The durable text."`
		Seq       int64           `json:"seq" doc:"Its length in UTF-16 code units."`
		Status    producer.Status `json:"status" enum:"pending,streaming,complete,cancelled,error,interrupted"`
		Error     string          `json:"error,omitempty"`
		UpdatedAt time.Time       `json:"updatedAt"`
	}
}

type healthOutput struct {
	Body struct {
		Status string `json:"status"`
	}
}

type cancelOutput struct {
	Status int
}

func (s *Server) registerReaderRoutes() {
	api := s.api
	huma.Register(api, huma.Operation{OperationID: "cancelStream", Method: http.MethodPost, Path: "/v1/streams/{id}/cancel",
		Summary:     "Ask the producer to stop",
		Description: "The producer instance sees it at once when the reader's request lands there, else at its next checkpoint; from then on its answers say `cancelled` and it takes no more text. A sealed stream cannot be cancelled: 409.",
		Security:    security(), DefaultStatus: http.StatusAccepted,
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict, http.StatusServiceUnavailable}},
		func(ctx context.Context, in *StreamPath) (*cancelOutput, error) {
			a, err := s.reader(ctx, in.AuthHeader, in.ID)
			if err != nil {
				return nil, err
			}
			st, local := s.cfg.Plane.Stream(a.key)
			if local && st.Ended() {
				return nil, huma.Error409Conflict(fmt.Sprintf("stream %s is sealed: there is nothing to cancel", in.ID))
			}
			requested, err := s.cfg.Messages.RequestCancel(ctx, a.key)
			switch {
			case err == nil && !requested, errors.Is(err, checkpoint.ErrNoMessage):
				return nil, huma.Error409Conflict(fmt.Sprintf("stream %s is sealed: there is nothing to cancel", in.ID))
			case errors.Is(err, checkpoint.ErrNoCancelColumn) && !local:
				return nil, huma.Error409Conflict(fmt.Sprintf("stream %s is produced by another instance and this deployment maps no cancel column: cancel it there", in.ID))
			case errors.Is(err, checkpoint.ErrNoCancelColumn):
				// The producer is here; it needs no flag.
			case err != nil && !local:
				return nil, s.unavailable("cancel", err)
			case err != nil:
				// The flag could not be written, but the producer is here: it stops now and its
				// seal records the cancel as its status.
				s.cfg.Logger.Warn("cancel: the flag could not be written; the live stream here is cancelled", "stream", in.ID, "err", err)
			}
			if local {
				st.Cancel()
			}
			return &cancelOutput{Status: http.StatusAccepted}, nil
		})

	huma.Register(api, huma.Operation{OperationID: "getStream", Method: http.MethodGet, Path: "/v1/streams/{id}",
		Summary:     "The durable view; with wait, a long-poll until seq passes after or the stream ends",
		Description: "Without `wait`, answers at once. With it, waits (up to the server's cap) until the durable length passes `after` or the status is terminal, then answers; at the deadline it answers the view unchanged.",
		Security:    security(),
		Errors:      []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable}},
		func(ctx context.Context, in *struct {
			StreamPath
			After producer.Seq `query:"after" minimum:"0" doc:"Wait until the durable length passes this offset (UTF-16 code units)."`
			Wait  string       `query:"wait" pattern:"^[0-9]+(\\.[0-9]+)?(ms|s|m)$" example:"30s" doc:"How long to wait, as a duration such as 30s or 500ms; capped by the server."`
		}) (*viewOutput, error) {
			a, err := s.reader(ctx, in.AuthHeader, in.ID)
			if err != nil {
				return nil, err
			}
			m, err := s.longPoll(ctx, a.key, in.After, in.Wait)
			if err != nil {
				return nil, err
			}
			out := &viewOutput{}
			out.Body.ID, out.Body.Text, out.Body.Seq = in.ID, m.Text, int64(m.Seq)
			out.Body.Status, out.Body.Error, out.Body.UpdatedAt = m.Status, m.Error, m.UpdatedAt
			return out, nil
		})

	// The probes are open: one empty security requirement says so.
	huma.Register(api, huma.Operation{OperationID: "healthz", Method: http.MethodGet, Path: "/healthz", Summary: "Liveness", Security: []map[string][]string{{}}},
		func(context.Context, *struct{}) (*healthOutput, error) {
			out := &healthOutput{}
			out.Body.Status = "ok"
			return out, nil
		})

	huma.Register(api, huma.Operation{OperationID: "readyz", Method: http.MethodGet, Path: "/readyz", Summary: "Readiness: the database reachable, the lease held, CDC caught up", Security: []map[string][]string{{}},
		Errors: []int{http.StatusServiceUnavailable}},
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
}

func (s *Server) longPoll(ctx context.Context, id string, after producer.Seq, waitRaw string) (ivm.Message, error) {
	if waitRaw == "" {
		m, err := s.cfg.View.Get(ctx, id)
		if err != nil {
			return ivm.Message{}, s.viewError(err)
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
		return ivm.Message{}, s.viewError(err)
	}
	return m, nil // at the deadline: the latest view, unchanged
}

func (s *Server) viewError(err error) error {
	if errors.Is(err, ivm.ErrNotFound) {
		return errNoAccess()
	}
	return s.unavailable("read the view", err)
}
