// Package producer owns the live plane of a streamed model answer: every delta fanned out in
// memory to every reader at once, and the driving of coarse checkpoints into a durable store.
//
// It does not own the store. It talks to a Committer (checkpoint.Store on Postgres, or an app's
// CommitFunc) and never emits SQL. It does not own the durable view readers fall back to (ivm),
// nor HTTP routing and auth (httpapi); it provides the SSE encoder they use, and DirectWriter,
// which writes live frames to readers' sockets (hijacked HTTP/1.x connections the HTTP layer
// hands it) from a few writer goroutines instead of one goroutine per reader; on Linux it sends
// a writer's turn through an io_uring (the small part of one it needs, in uring_linux.go).
//
// # The contract
//
// Both planes share one coordinate, Seq, in UTF-16 code units of the produced text. Every other
// package names these three and keeps them:
//
//   - S (splice): the durable text at offset f, followed by every chunk frame delivered to a
//     reader that joined at f, equals the produced text, for every f and every join time.
//   - P (prefix): the durable text is always a prefix of the produced text; DurableSeq never
//     decreases and never exceeds Seq.
//   - Honesty: a chunk frame says "produced", a durable frame says "committed", an end frame says
//     "sealed". Nothing claims more durability than the store confirmed: DurableSeq advances
//     only on the store's read-back (or, for a CommitFunc without one, its success).
//
// # Frames
//
// A subscription yields open, then the replay from the join offset as one chunk, then durable if
// the store is past the join, then the live tail, and ends with exactly one of end, stale or
// absent. Chunks are contiguous per reader and never start or end inside a surrogate pair.
//
// # Checkpoints
//
// A checkpoint fires at the first of: CheckpointChars pending units, CheckpointInterval since
// the last one, a Flush, or the seal. Rounds are serialized per stream and coalesce: a slow store
// gets fewer, larger checkpoints. A failed round is retried with backoff, then left for the next
// trigger; after a failure the store's own word (Committer.DurableSeq) is adopted, so an append
// that committed while its reply was lost is absorbed, not re-sent. The seal goes straight to
// the committer's Close, which with checkpoint.Store compacts the whole body and so repairs
// any failed slice. A seal that fails is retried by its host every CheckpointInterval until it
// commits: readers get their end frame only then, and it says what the store holds.
//
// # Leases and fences
//
// A host proves it still holds its streams with a lease (checkpoint.Lease). When it cannot, the
// lease calls Suspend before the TTL other hosts wait on can lapse: pushes and opens are refused
// with ErrSuspended, while checkpoints and seals go on (the store's guard fences them). When the
// lease is held again, Resume asks the committer (Reclaimer) whether each stream is still this
// host's. One that another writer sealed meanwhile, or whose write the store refuses as sealed,
// ends at once with a *FencedError: pushes are refused, and readers' end frame carries the row's
// status and length. An Open whose outcome is unknown is released in the background with an
// interrupted Close at 0.
//
// # Concurrency and lifecycle
//
// A Plane owns a checkpoint goroutine per stream while checkpoints are due, and a pump goroutine
// per relayed reader. Readers pull; a reader whose bounded queue fills is dropped with stale.
// Drain seals every stream interrupted; Close tears down without writing and returns once every
// goroutine has. Relay frames leave through a bounded outbox drained by one goroutine, so a
// sick broker never stalls a producer (overflow is dropped; relayed readers go stale and read
// the durable plane). The stream state diagram:
//
//	open ──Push/checkpoints──▶ streaming ──Close/Fail/Drain──▶ sealing ──Committer.Close ok──▶ ended (end at Seq)
//	            ▲      │                                         │  ▲
//	     Resume │      │ Suspend (lease lost)        error: retry │  │ after CheckpointInterval
//	            │      ▼                                         └──┘
//	          suspended (pushes refused)
//	streaming, suspended or sealing ──FencedError (another writer sealed the row)──▶ ended (end = the row)
//	ended ──Linger──▶ evicted (subscribe answers absent)
//
// # Errors
//
// Callers branch on ErrOpenRefused (*OpenRefusedError), ErrForbidden (*ForbiddenError),
// ErrClosed, ErrInvalidText, ErrNotDurable (*NotDurableError, which says how much is durable),
// ErrSuspended (temporary: retry) and ErrFenced (*FencedError, which says what the row holds).
// New returns a *ConfigError naming the refused field; ParseResume a *ResumeError.
package producer
