// Package httpapi owns the HTTP surface of docs/DESIGN.md §6: a huma server (OpenAPI 3.1 at
// /openapi.json, docs at /docs) with bearer-token auth and RFC 9457 problem details, and the
// SSE join.
//
// Routes: create a message, open / append (JSON, or a streamed text/plain body to .../ingest) /
// flush / close a stream, cancel, the durable view with long-poll, the event stream, /healthz,
// /readyz and /metrics; and, with Config.Streams, the Durable Streams protocol under
// StreamsPrefix (streams.go: raw routes, outside the OpenAPI document, which the protocol's own
// specification describes).
//
// Auth: HS256 JWTs in the Authorization header; the event stream also takes ?access_token=,
// since a browser's EventSource cannot set headers (RFC 6750 §2.3). A reader may read only
// messages whose owner is its subject; producer routes need the producer scope. A read's owner
// is looked up before anything reveals whether the id exists, and a denied read and a read of a
// missing id get the same 403, byte for byte. The owner of a stream opened on this instance is
// kept with it, so its readers are authorized from memory and can join while the database is
// away.
//
// Errors map to statuses here and nowhere else: 400 for a malformed offset or wait and for
// invalid UTF-8, 401 without a valid token, 403 as above, 404 for a producer route on a stream
// not open on this instance (existence is no secret to producers), 409 for a refused open, a
// push to a sealed stream, or any producer route on a stream another writer sealed (this
// instance's lease lapsed: the detail says what the row holds), 413 for an oversized body (the
// status RFC 9110 gives it), 503 when the database or view is unavailable. A 503 with
// Retry-After tells a producer that nothing was taken and the same request may succeed shortly:
// this instance cannot confirm its lease (pushes and opens are refused until it can), or the
// text is not durable yet (a flush, or a close whose seal this instance keeps retrying until it
// commits; POST close again to wait for it).
//
// The SSE join: Join answers a reader at offset from with the durable prefix the incremental
// view holds past from, then the live plane's tail, as one frame sequence that keeps contract
// S with no gap, no overlap and no split surrogate pair. When no live stream is hosted here,
// the view is followed to the end instead of a bare absent, so a reader on any instance gets
// the whole text and its end. A tail relayed from another instance falls back to the view when
// the relay breaks (stale, or its source ends) and when the view shows the stream sealed (its
// producer died: no end will be relayed); an end served from the view claims the durable
// length, so a reader that was relayed text never made durable learns where the durable text
// ends. While a stream is live, the event stream's Rindle-Host header names its instance.
//
// It does not own the frames or the SSE encoding (producer), the view (ivm), the database
// schema (migrations) or any SQL: the message table is asked through Messages, which
// checkpoint.Catalog implements in the app's table mapping. A Server starts no goroutines; a Joined is pulled by the one that
// serves its request.
package httpapi
