// Package ivm owns the incremental view of message text: for every message it holds the
// durable text (body, then chunks), seq, status, error and the time of the last change, driven
// by the cdc reader's transactions through a watermill Router, and answers reads and long-polls
// from memory.
//
// It does not own the writes (checkpoint), the replication (cdc), or HTTP (httpapi, which
// calls Get and Wait).
//
// It keeps contract P for durable-plane readers: an entry mirrors its rows (the body and the
// set of chunk rows), and exposes only the body followed by the chunks contiguous after it, so
// whatever it shows is the durable text as of some commit, a prefix of the produced text.
//
// Consistency of the bootstrap: the view subscribes first, then reads every streaming message
// in one REPEATABLE READ transaction together with that transaction's snapshot
// (pg_current_snapshot()). A replicated transaction whose xid is visible in that snapshot is
// already reflected in what was read and is skipped; every other one is applied. After that,
// each entry remembers the end LSN of the last transaction it applied and skips anything at or
// below it, which absorbs the reader's re-sends after a restart (delivery is in commit order).
// A message read on a miss is loaded the same way, with events that arrive during the load held
// and filtered by that load's snapshot: nothing is missed, nothing is applied twice.
//
// The one residual window: with a broker that keeps no history (GoChannel), a transaction
// published before this view subscribed and still in progress in the snapshot taken just
// after is lost to this view. Publication follows WAL flush, decoding and a network hop, by
// which time the committing backend has left the proc array. Starting the view before the
// reader, as rindled does in one process, closes it; a broker with replay (JetStream) closes it
// across processes.
//
// Memory is bounded: settled (not streaming) messages beyond MaxEntries are evicted least
// recently used first and re-read from the database on their next access.
//
// Lifecycle: Start runs the router in a goroutine it owns and returns once bootstrapped; Stop
// closes it. Errors a caller can act on: ErrNotFound.
package ivm
