package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/producer"
)

// registerIngest serves the streaming append: every piece of a (chunked) text/plain body is
// pushed as it arrives, so a pipe (curl -T -) streams tokens through. huma reads a body whole,
// so this is a raw handler, documented in the same OpenAPI document.
func (s *Server) registerIngest() {
	const path = "/v1/streams/{id}/ingest"
	result := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[AppendResult](), true, "")
	s.api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "ingestStream", Method: http.MethodPost, Path: path, Security: security(),
		Summary: "Push a streamed text/plain body, each piece as it arrives",
		Description: "Every complete UTF-8 sequence read is pushed at once. Invalid UTF-8 or U+0000 (which PostgreSQL cannot store) stops the ingest with 400; what came before it stays pushed. A missing Content-Type is refused with 415. " +
			"With `expectedSeq` the ingest is idempotent: a retry that resends the same body from the start absorbs what was already taken and pushes the rest. " +
			"When a reader cancels the stream, the ingest stops reading and answers 200 with `cancelled`: close the stream.",
		Parameters: []*huma.Param{
			streamIDParam(),
			{Name: "expectedSeq", In: "query", Description: "The offset the body starts at, as the producer believes (see append).", Schema: offsetSchema("")},
		},
		RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{Type: "string"}}}},
		Responses: map[string]*huma.Response{
			"200": {Description: "The body was pushed, or the ingest stopped because a reader cancelled (`cancelled`).", Content: map[string]*huma.MediaType{"application/json": {Schema: result}}},
			"400": s.problemResponse("Invalid UTF-8, U+0000 or a malformed expectedSeq (what came before the refused bytes was pushed)"),
			"401": s.problemResponse("No valid bearer token"),
			"403": s.problemResponse("No producer scope"),
			"404": s.problemResponse("Not open on this instance"),
			"409": s.conflictResponse("Sealed, sealed by another writer, cancelled (`cancelled`), or the body cannot start at expectedSeq (`seq` says where the stream is)"),
			"413": s.problemResponse("Over MaxIngestBytes (what came before was pushed)"),
			"408": s.problemResponse("The body paused for longer than the ingest idle timeout (what came before was pushed)"),
			"415": s.problemResponse("Not text/plain"),
			"503": s.problemResponse("This instance cannot confirm its lease: nothing more was taken; retry"),
		},
	})
	s.mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
		who, err := s.producer(headerAuth(r), r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		ct := r.Header.Get("Content-Type")
		mt, params, err := mime.ParseMediaType(ct)
		if cs := strings.ToLower(params["charset"]); err != nil || mt != "text/plain" || (cs != "" && cs != "utf-8") {
			writeProblem(w, huma.Error415UnsupportedMediaType(fmt.Sprintf("ingest takes text/plain (UTF-8), not %q: nothing was pushed", ct)))
			return
		}
		if err := unstorable("the stream id", r.PathValue("id")); err != nil {
			writeProblem(w, err)
			return
		}
		st, err := s.hosted(who.key(r.PathValue("id")), r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		var at *producer.Seq
		if raw := r.URL.Query().Get("expectedSeq"); raw != "" {
			v, err := producer.ParseOffset("expectedSeq", raw)
			if err != nil {
				writeProblem(w, huma.Error400BadRequest(err.Error()))
				return
			}
			at = &v
		}
		s.ingest(w, r, st, r.PathValue("id"), at)
	})
}

func (s *Server) ingest(w http.ResponseWriter, r *http.Request, st *producer.LiveStream, id string, at *producer.Seq) {
	// A reader's cancel ends the request: the read in progress is cut short by a deadline. Until
	// then the deadline rolls: each read may wait IngestIdleTimeout for the client's next bytes,
	// so a stream lasts as long as its producer keeps sending, and a stalled client lets go.
	rc := http.NewResponseController(w)
	var deadlineMu sync.Mutex
	interrupted := false
	interrupt := func() {
		deadlineMu.Lock()
		defer deadlineMu.Unlock()
		interrupted = true
		_ = rc.SetReadDeadline(time.Now())
	}
	roll := func() {
		deadlineMu.Lock()
		defer deadlineMu.Unlock()
		if !interrupted {
			_ = rc.SetReadDeadline(time.Now().Add(s.cfg.IngestIdleTimeout))
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-st.CancelRequested():
			interrupt()
		case <-st.Done():
			interrupt()
		case <-stop:
		}
	}()
	answer := func(res AppendResult) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}
	var applied producer.Seq
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxIngestBytes)
	buf := make([]byte, 32<<10)
	var carry []byte // an incomplete UTF-8 sequence split across reads
	for {
		roll()
		n, rerr := body.Read(buf)
		if st.Cancelled() {
			answer(AppendResult{StreamState: stateOf(st), Applied: applied})
			return
		}
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			if err := st.Refusal(); err != nil {
				writeProblem(w, s.producerError(st.ID(), id, "the text could not be pushed", err))
				return
			}
		}
		chunk := append(carry, buf[:n]...) //nolint:gocritic // carry is the held-back tail of the last chunk, which is not read again
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
		valid := storablePrefix(chunk[:cut])
		if valid > 0 {
			text := string(chunk[:valid])
			took, err := push(r.Context(), st, at, text)
			if errors.Is(err, producer.ErrCancelled) {
				answer(AppendResult{StreamState: stateOf(st), Applied: applied})
				return
			}
			if err != nil {
				writeProblem(w, s.producerError(st.ID(), id, "the text could not be pushed", err))
				return
			}
			applied += took
			if at != nil {
				*at += producer.Len16(text)
			}
		}
		if valid < cut {
			writeProblem(w, huma.Error400BadRequest(fmt.Sprintf("the body is not storable text after %d code units (invalid UTF-8, or U+0000, which PostgreSQL cannot store); what came before was pushed", st.Seq())))
			return
		}
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(rerr, &tooBig):
			writeProblem(w, huma.Error413RequestEntityTooLarge(fmt.Sprintf("the ingest passed %d bytes; what came before was pushed", s.cfg.MaxIngestBytes)))
			return
		case errors.Is(rerr, io.EOF):
			answer(AppendResult{StreamState: stateOf(st), Applied: applied})
			return
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			writeProblem(w, huma.NewError(http.StatusRequestTimeout, fmt.Sprintf("the body paused for more than %s; what came before was pushed", s.cfg.IngestIdleTimeout)))
			return
		case rerr != nil:
			writeProblem(w, huma.Error400BadRequest("reading the body: "+rerr.Error()))
			return
		}
	}
}

// storablePrefix is the length of b's longest prefix that is storable text: valid UTF-8 without
// U+0000 (producer.ErrInvalidText says why).
func storablePrefix(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && size == 1) || r == 0 {
			return i
		}
		i += size
	}
	return len(b)
}
