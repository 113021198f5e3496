-- Durable Streams forks and byte streams (issue 22).
--
-- Byte streams. A stream's unit is chosen at creation from its content type: UTF-16 code units
-- for text and JSON (a messages row and message_chunks, as before, so the view shows it), bytes
-- for every other type. A byte stream is a protocol stream, not an answer: it has no messages
-- row, its tail and closure live here, and its appends are ds_bytes rows keyed, like chunks, by
-- the offset each one ends at.
--
-- Forks. A fork copies its source's rows up to the fork point (copy-on-fork: the same offsets,
-- no sharing between rows), so reading one never touches its source. What the protocol still
-- observes is the lifecycle: a source deleted while forks of it exist is soft-deleted (its data
-- goes, its row stays with deleted_at set, and the path answers 410 and cannot be created again)
-- until its last fork goes. forked_from is a foreign key, so no row can name a source that is
-- gone.
ALTER TABLE ds_streams
    ALTER COLUMN message_id DROP NOT NULL,
    ADD COLUMN owner text,
    ADD COLUMN unit text NOT NULL DEFAULT 'utf16' CHECK (unit IN ('utf16', 'byte')),
    ADD COLUMN byte_tail bigint NOT NULL DEFAULT 0,
    ADD COLUMN byte_closed boolean NOT NULL DEFAULT false,
    ADD COLUMN forked_from text REFERENCES ds_streams (path),
    ADD COLUMN fork_offset bigint,
    ADD COLUMN fork_sub_offset bigint,
    ADD COLUMN deleted_at timestamptz;

-- A live stream of either unit has its data where its unit says; a soft-deleted one has none.
ALTER TABLE ds_streams ADD CONSTRAINT ds_streams_unit_data
    CHECK (deleted_at IS NOT NULL OR (unit = 'utf16') = (message_id IS NOT NULL));

CREATE INDEX ds_streams_forked_from ON ds_streams (forked_from) WHERE forked_from IS NOT NULL;

-- The reaper's scan: streams that can expire.
CREATE INDEX ds_streams_expiring ON ds_streams (path) WHERE ttl_seconds IS NOT NULL OR expires_at IS NOT NULL;

CREATE TABLE ds_bytes (
    path text   NOT NULL REFERENCES ds_streams (path) ON DELETE CASCADE,
    seq  bigint NOT NULL,
    data bytea  NOT NULL,
    PRIMARY KEY (path, seq)
);

-- Retention: an idempotent producer's state is pruned once idle past the server's window (the
-- reaper), so a long-lived stream does not keep every producer that ever wrote to it.
ALTER TABLE ds_producers ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX ds_producers_updated_at ON ds_producers (updated_at);
