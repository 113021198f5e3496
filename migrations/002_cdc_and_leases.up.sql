-- Producer host leases: a host renews its row while it runs; the sweeper seals the streaming
-- messages of hosts whose lease expired.
CREATE TABLE rindle_hosts (
    host        text PRIMARY KEY,
    lease_until timestamptz NOT NULL
);

-- The CDC reader's publication. REPLICA IDENTITY stays DEFAULT (the primary key): a chunk
-- DELETE then carries the chunk id "<stream_id>:<seq>", which names its stream, so FULL (the
-- whole old row in WAL for every delete) buys nothing.
CREATE PUBLICATION rindle_cdc FOR TABLE messages, message_chunks;
