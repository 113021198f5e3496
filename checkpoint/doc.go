// Package checkpoint owns the durable plane on Postgres through pgx: the mapping of the app's
// message and chunk tables, identifier quoting, the chunk-table DDL, the open probe and host
// compare-and-swap, the guarded append with its read-back, and compaction at close.
//
// It does not own the live plane (producer, whose Committer interface Store satisfies), the
// schema migrations of the default tables (migrations), or reading the rows back out to readers
// (cdc and ivm).
//
// It keeps contract P and honesty as producer states them: the text in the store (body, then the
// chunks in seq order) is always a prefix of the produced text, because every append is guarded
// by seq = from, and a checkpoint counts as durable only once a read-back of the row confirms it.
//
// A checkpoint is one transaction of two statements (a guarded chunk insert and a length
// compare-and-swap) and one read-back; the seal is one transaction that writes the whole body
// and deletes the chunks. Every statement is idempotent under replay, so the plane's "retry until
// it sticks" needs no dedup ledger.
//
// A Store holds no goroutines and no state beyond its configuration; it is safe for concurrent
// use. Errors a caller can act on: *producer.OpenRefusedError (errors.Is ErrOpenRefused) from
// CheckOpenable and Open; *ConfigError from New. Other errors name the stream and offsets.
package checkpoint
