// Package httpapi owns the HTTP surface of DESIGN §6. So far it holds the SSE join: Join
// answers a reader at offset from with the durable prefix the incremental view holds past from,
// then the live plane's tail, as one frame sequence that keeps contract S with no gap, no
// overlap and no split surrogate pair. When no live stream is hosted here, the view is followed
// to the end instead of a bare absent, so a reader on any instance gets the whole text and its
// end.
//
// It does not own the frames or the SSE encoding (producer), the view (ivm) or authorization
// decisions: its caller authorizes first, and answers a missing id exactly like a denied one.
//
// A Joined is pulled by one goroutine (the SSE writer) and starts none of its own.
package httpapi
