// Package cdc owns the logical-replication reader: it keeps a publication and a replication
// slot on the message and chunk tables, streams pgoutput (protocol version 1) through pglogrepl,
// decodes the row changes into typed events, and publishes each committed transaction whole, as
// one watermill message, to a topic.
//
// It does not own what the events mean to readers (ivm builds the view), nor the tables'
// writes (checkpoint), nor the broker (any watermill Publisher; GoChannel in one process).
//
// It keeps contract P downstream by never losing, reordering or tearing a transaction:
//
//   - At least once: a transaction's end LSN is acknowledged to the server (standby status
//     update) only after its message was published. A keep-alive's position is acknowledged
//     only between transactions, so a quiet publication does not pin WAL. After a restart or a
//     dropped connection the server re-sends from the acknowledged point, so consumers must be
//     idempotent (ivm is).
//   - In commit order: protocol version 1 sends only committed transactions, in commit order,
//     and the reader publishes them one at a time.
//   - Whole: a compaction (the body update and its chunk deletes) is one message.
//   - A message's delete is one event: the chunk deletes its cascade makes in the same
//     transaction are left out (MessageDeleted implies them), so deleting a long stream does
//     not cost every consumer an event per chunk.
//   - A TOASTed body that did not change arrives as 'u' with no value; its event carries a nil
//     Body, which means "unchanged", never "empty".
//   - A chunk DELETE carries only the primary key (REPLICA IDENTITY DEFAULT): (stream_id, seq)
//     in the project's schema, or a mapped text chunk key "<streamId>:<seq>", split at the last
//     colon.
//
// Concurrency and lifecycle: Start runs Setup, then one goroutine that owns the replication
// connection; Stop ends it. Receives are bounded by the status interval, a server that goes
// silent past ServerTimeout counts as a dead connection (after half of it in silence, status
// updates ask the server for a reply, so an idle healthy connection always answers in time),
// and every failure reconnects with backoff. A broker that refuses a publish stalls the reader (reported through
// OnPublishErrorFunc and Stats.Stalled) while the slot keeps the WAL; it catches up when the
// broker is back.
//
// One reader per slot: the slot is the leader lock. A second reader gets ErrSlotInUse
// (SQLSTATE 55006) and retries every StandbyInterval, so it takes over within about that long
// once the leader's walsender is gone (a killed process's connection closes at once).
// Stats().Leader tells which one streams.
//
//	Start ─▶ Setup ─▶ session ─(error, backoff)─▶ session ─ … ─▶ Stop
//	          │          │
//	          │          └─ receive ─▶ decode ─▶ commit? ─▶ publish (retry while refused) ─▶ ack
//	          └─ ErrWALLevel, config errors: returned from Start
//
// Errors a caller can act on: ErrWALLevel from Start; IsSlotInUse for a held slot.
package cdc
