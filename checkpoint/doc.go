// Package checkpoint owns the durable plane on Postgres through pgx, and every SQL statement
// against the app's message and chunk tables: the mapping (Tables) and its check against the
// database (CheckSchema), identifier quoting, the chunk-table DDL, the open probe and host
// compare-and-swap, the guarded append with its read-back, compaction at close, leases and
// sweeps, and the message catalog the HTTP layer asks (Catalog: create a row, look up its owner
// and host, set the cancel flag).
//
// It does not own the live plane (producer, whose Committer interface Store satisfies), the
// schema migrations of the default tables (migrations), or reading the rows back out to readers
// (cdc and ivm, which decode and apply them in the same mapping).
//
// It keeps contract P and honesty as producer states them: the text in the store (body, then the
// chunks in seq order) is always a prefix of the produced text, because every append is guarded
// by seq = from, and a checkpoint counts as durable only once the row confirms it.
//
// A checkpoint is one statement (the length compare-and-swap, and the chunk insert its RETURNING
// admits) whose committed, returned row confirms it; a read-back of the row runs only when no
// row or no reply came, so a lost reply is settled by what the row holds. The seal is one
// transaction that writes the whole body and deletes the chunks. Every statement is idempotent
// under replay, so the plane's "retry until it sticks" needs no dedup ledger.
//
// Checkpoints are group-committed (Config.Writers, Config.MaxGroup): while Writers transactions
// run, the checkpoints that arrive wait and go together in the next transaction, one round trip
// and one WAL flush for all, each still confirmed by its own returned row once that transaction
// committed. This departs from docs/DESIGN.md §5's "Append = ONE transaction" in letter: an append is
// still all-or-nothing, but it may share its transaction with other streams' appends. A statement
// the server refuses fails only its own checkpoint (the others go again without it); any other
// failure reaches every checkpoint of the transaction, each settled by its own read-back. It is
// what lets one small pool keep up with a thousand streams (BenchmarkCheckpointSaturation).
//
// Appends and the seal apply only to a row that is still streaming under this Store's host token
// (a departure from docs/DESIGN.md §5's SQL, made for the sweeper): once the Sweeper has sealed the row
// of a host whose lease lapsed, that host's producer, should it still be running, is fenced out
// with a *producer.FencedError carrying what the row holds, instead of writing into a sealed row
// or into a row another host opened since.
//
// Leases (Lease) are real leases: the database's clock decides expiry for every host, and the
// holder fences itself (Lease.Config.OnLostFunc, wired to producer.Plane.Suspend) a guard
// before its own conservative estimate of that expiry; Store.Reclaim then re-confirms each
// stream once the lease is held again. The Sweeper never seals its own host's rows, and seals
// a lapsed host's rows with body ++ chunks, so nothing a read-back confirmed is lost.
//
//	held ──renewals fail until TTL-Guard──▶ lost: Suspend ──a renewal commits──▶ held: Resume → Reclaim
//
// Protocol stores the Durable Streams protocol's streams: its own tables (ds_streams,
// ds_producers, ds_bytes; ProtocolTablesDDL for an app whose message table is mapped), and a
// text stream's message row and chunks in the app's mapping (ProtocolConfig.Tables). Its Watch listens for byte-stream appends committed anywhere, the
// only protocol change that reaches other instances without the CDC reader.
//
// Store (beyond its group-commit queue) and Sweeper hold no state beyond their configuration and
// are safe for concurrent use;
// Lease and Sweeper each own one goroutine between Start and Stop. Errors a caller can act on:
// *producer.OpenRefusedError (errors.Is ErrOpenRefused) from CheckOpenable and Open;
// *producer.FencedError (errors.Is ErrFenced) from Append, Close and Reclaim; *ConfigError from
// the constructors; *SchemaError from CheckSchema; ErrNoMessage and ErrNoCancelColumn from
// Catalog. Other errors name the stream and offsets.
package checkpoint
