package httpapi

import (
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
)

// The Durable Streams protocol in the OpenAPI document. Its handler is serveStreams, outside
// huma (the protocol's bodies are whatever the stream holds, and its answers are headers), so
// these operations describe it without registering it: /openapi.json and /docs show the whole
// surface rindled serves.

const streamsTag = "Durable Streams protocol"

func strSchema(desc string) *huma.Schema { return &huma.Schema{Type: "string", Description: desc} }

func streamHeader(desc string) *huma.Param {
	return &huma.Param{Description: desc, Schema: &huma.Schema{Type: "string"}}
}

// streamsDocResponse is an answer with the protocol's headers named in hs.
func streamsDocResponse(desc string, content map[string]*huma.MediaType, hs ...string) *huma.Response {
	all := map[string]string{
		hNextOffset:                "The offset after this answer's data (the stream's incarnation and the position, 16 digits each, joined by a hyphen): where the next read starts.",
		hUpToDate:                  "true when the answer reaches the stream's current end.",
		hClosed:                    "true when the stream is closed and the answer reaches its end.",
		hCursor:                    "A cursor for the next live read (CDN request collapsing).",
		hTTL:                       "The stream's sliding time-to-live in seconds, when it has one.",
		hExpiresAt:                 "The stream's absolute expiry (RFC 3339), when it has one.",
		"ETag":                     "The answer's range and the stream's incarnation; send it as If-None-Match.",
		"Location":                 "The created stream's URL.",
		hProducerEpoch:             "The idempotent producer's current epoch (on a 403: the epoch that fenced this one).",
		hProducerSeq:               "The highest sequence number the store holds for this producer.",
		"Stream-SSE-Data-Encoding": "base64 when the stream is a byte stream: each data event's payload is base64.",
	}
	r := &huma.Response{Description: desc, Content: content, Headers: map[string]*huma.Param{}}
	for _, h := range hs {
		r.Headers[h] = streamHeader(all[h])
	}
	return r
}

func problemResponses(r map[string]*huma.Response, codes map[int]string) map[string]*huma.Response {
	for code, desc := range codes {
		r[strconv.Itoa(code)] = &huma.Response{Description: desc,
			Content: map[string]*huma.MediaType{"application/problem+json": {Schema: &huma.Schema{Ref: "#/components/schemas/ErrorModel"}}}}
	}
	return r
}

func (s *Server) registerStreamsDoc() {
	o := s.api.OpenAPI()
	path := StreamsPrefix + "{path}"
	pathParam := &huma.Param{Name: "path", In: "path", Required: true, Schema: strSchema(""),
		Description: "The stream's path (its name). Nested paths (a/b) are served as written; an encoded slash (%2F) is refused, so generated clients, which escape /, reach single-segment names."}
	hdr := func(name, desc string) *huma.Param {
		return &huma.Param{Name: name, In: "header", Description: desc, Schema: strSchema("")}
	}
	security := []map[string][]string{{"bearer": {}}}
	anyBody := map[string]*huma.MediaType{"*/*": {Schema: &huma.Schema{Type: "string", Description: "The stream's bytes, as they are."}}}
	common := map[int]string{
		http.StatusBadRequest:         "A malformed header, offset or body (the problem says which).",
		http.StatusUnauthorized:       "No valid bearer token.",
		http.StatusNotFound:           "No such stream (also what a token that may not see the path gets).",
		http.StatusGone:               "The stream was deleted while forks of it exist.",
		http.StatusServiceUnavailable: "The database is unreachable; retry.",
	}
	with := func(extra map[int]string) map[int]string {
		m := map[int]string{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	o.AddOperation(&huma.Operation{
		OperationID: "streamRead", Method: http.MethodGet, Path: path, Tags: []string{streamsTag}, Security: security,
		Summary: "Read a stream: catch-up, long-poll or SSE",
		Description: "Reads from `offset` (-1 or absent: the start; `now`: the end). Without `live` the answer is what the stream holds past the offset (a page of at most 1 MiB). " +
			"`live=long-poll` waits for data (204 with Stream-Up-To-Date when none came before the timeout); `live=sse` streams `data` and `control` events " +
			"(a byte stream's data in base64; in a text stream each CRLF or CR arrives as LF, since SSE cannot carry a CR inside a line) until the stream closes or the connection's lifetime ends. A text or JSON stream's offsets count UTF-16 units, a byte stream's bytes.",
		Parameters: []*huma.Param{pathParam,
			{Name: "offset", In: "query", Description: "Where to read from: an offset this stream (or, up to the fork point, a stream it forked from) handed out, -1, or now.", Schema: strSchema("")},
			{Name: "live", In: "query", Description: "long-poll or sse.", Schema: &huma.Schema{Type: "string", Enum: []any{"long-poll", "sse"}}},
			{Name: "cursor", In: "query", Description: "The last Stream-Cursor this client saw.", Schema: strSchema("")},
			hdr("If-None-Match", "An ETag from an earlier answer for the same range: 304 when nothing changed."),
		},
		Responses: problemResponses(map[string]*huma.Response{
			"200": streamsDocResponse("The stream's data past the offset (JSON streams: an array of messages), or an SSE event stream.",
				map[string]*huma.MediaType{"*/*": {Schema: &huma.Schema{Type: "string", Description: "The stream's bytes, as they are."}}, "text/event-stream": {Schema: &huma.Schema{Type: "string"}}},
				hNextOffset, hUpToDate, hClosed, hCursor, hTTL, hExpiresAt, "ETag", "Stream-SSE-Data-Encoding"),
			"204": streamsDocResponse("A long-poll that timed out at the end (or found the stream closed there).", nil, hNextOffset, hUpToDate, hClosed, hCursor),
			"304": {Description: "Not modified (If-None-Match matched)."},
		}, with(map[int]string{
			http.StatusTooManyRequests: "This instance (or this token's subject) holds its most waiting reads.",
			http.StatusGone:            "The stream was deleted while forks of it exist; or the offset is another stream's, such as the one this path named before it was deleted and created again (also when that happened during a long-poll).",
		})),
	})
	o.AddOperation(&huma.Operation{
		OperationID: "streamHead", Method: http.MethodHead, Path: path, Tags: []string{streamsTag}, Security: security,
		Summary: "A stream's metadata", Parameters: []*huma.Param{pathParam},
		Responses: problemResponses(map[string]*huma.Response{
			"200": streamsDocResponse("The stream exists.", nil, hNextOffset, hClosed, hTTL, hExpiresAt),
		}, common),
	})
	o.AddOperation(&huma.Operation{
		OperationID: "streamCreate", Method: http.MethodPut, Path: path, Tags: []string{streamsTag}, Security: security,
		Summary: "Create a stream, or fork one",
		Description: "Creates the stream (201), or confirms one with the same configuration (200). The content type fixes the unit: text/* and application/json make a text stream " +
			"(UTF-8, offsets in UTF-16 units, shown by the view), any other type a byte stream (offsets in bytes, no view row). " +
			"With Stream-Forked-From the stream is a fork: a copy of the source up to Stream-Fork-Offset (default: its end) plus Stream-Fork-Sub-Offset bytes " +
			"(JSON: messages) of the append there; it inherits the source's type and expiry unless given. Needs the producer scope.",
		Parameters: []*huma.Param{pathParam,
			hdr("Content-Type", "The stream's content type (default application/octet-stream; a fork's default is its source's)."),
			hdr(hTTL, "A sliding time-to-live in seconds, 1 or more (excludes Stream-Expires-At)."),
			hdr(hExpiresAt, "An absolute expiry, RFC 3339, in the future (excludes Stream-TTL)."),
			hdr(hClosed, "true creates the stream closed."),
			hdr(hForkedFrom, "The source stream's path (with or without /v1/stream/)."),
			hdr(hForkOffset, "An offset of the source this server handed out (an append's boundary)."),
			hdr(hForkSubOffset, "Bytes (whole UTF-8 characters in a text stream) or JSON messages into the append at the fork offset."),
		},
		RequestBody: &huma.RequestBody{Description: "The initial content (optional).", Content: anyBody},
		Responses: problemResponses(map[string]*huma.Response{
			"201": streamsDocResponse("Created.", nil, hNextOffset, hClosed, "Location"),
			"200": streamsDocResponse("A stream with this configuration exists.", nil, hNextOffset, hClosed),
		}, with(map[int]string{
			http.StatusConflict:              "Another configuration exists at the path, the path is held by a deleted stream's forks, the fork's type is not its source's, or the source was deleted.",
			http.StatusForbidden:             "The token lacks the producer scope.",
			http.StatusRequestEntityTooLarge: "The body exceeds 8 MiB.",
		})),
	})
	o.AddOperation(&huma.Operation{
		OperationID: "streamAppend", Method: http.MethodPost, Path: path, Tags: []string{streamsTag}, Security: security,
		Summary: "Append to a stream (or close it)",
		Description: "Appends the body, committed before the answer. Producer-Id, Producer-Epoch and Producer-Seq make the append idempotent (exactly once across retries and restarts); " +
			"Stream-Seq must increase; Stream-Closed: true closes the stream (with or without a body). Needs the producer scope.",
		Parameters: []*huma.Param{pathParam,
			hdr("Content-Type", "The stream's content type (required with a body)."),
			hdr(hSeq, "A writer sequence that must sort above the last one (at most 256 bytes)."),
			hdr(hClosed, "true closes the stream after this append."),
			hdr(hProducerID, "An idempotent producer's id."), hdr(hProducerEpoch, "Its epoch."), hdr(hProducerSeq, "Its sequence number."),
		},
		RequestBody: &huma.RequestBody{Description: "The data to append (JSON streams: a value, or an array of messages).", Content: anyBody},
		Responses: problemResponses(map[string]*huma.Response{
			"204": streamsDocResponse("Appended (or closed).", nil, hNextOffset, hClosed),
			"200": streamsDocResponse("An idempotent producer's append was stored.", nil, hNextOffset, hClosed, hProducerEpoch, hProducerSeq),
		}, with(map[int]string{
			http.StatusConflict:              "The stream is closed, the type is not the stream's, Stream-Seq did not increase, or the producer's seq skipped ahead (Producer-Expected-Seq says which).",
			http.StatusForbidden:             "The token lacks the producer scope, or the producer's epoch is stale.",
			http.StatusRequestEntityTooLarge: "The body exceeds 8 MiB.",
		})),
	})
	o.AddOperation(&huma.Operation{
		OperationID: "streamDelete", Method: http.MethodDelete, Path: path, Tags: []string{streamsTag}, Security: security,
		Summary:     "Delete a stream",
		Description: "Deletes the stream and its data. A stream that forks of it still exist is soft-deleted: 410 from then on, until its last fork goes. Needs the admin scope.",
		Parameters:  []*huma.Param{pathParam},
		Responses: problemResponses(map[string]*huma.Response{"204": {Description: "Deleted."}},
			with(map[int]string{http.StatusForbidden: "The token lacks the admin scope."})),
	})
}
