-- Durable Streams protocol streams (issue 12). A protocol stream's text lives where every
-- stream's does: a messages row (id "ds/" || path, status pending while open, complete once
-- closed) and one message_chunks row per append, so the CDC reader and the view see it like
-- any other message. What only the protocol has lives here: the path, the content type, the
-- expiry, the closure's producer, the writer sequence, and the idempotent producers' state.
CREATE TABLE ds_streams (
    path          text PRIMARY KEY,
    message_id    text NOT NULL UNIQUE REFERENCES messages (id) ON DELETE CASCADE,
    content_type  text NOT NULL,
    ttl_seconds   bigint CHECK (ttl_seconds >= 0),
    expires_at    timestamptz,
    accessed_at   timestamptz NOT NULL DEFAULT now(),
    stream_seq    text,
    -- The (producer, epoch, seq) of the append that closed the stream, for a retried close.
    closed_by     text,
    closed_epoch  bigint,
    closed_seq    bigint,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ds_producers (
    path        text NOT NULL REFERENCES ds_streams (path) ON DELETE CASCADE,
    producer_id text NOT NULL,
    epoch       bigint NOT NULL,
    last_seq    bigint NOT NULL,
    PRIMARY KEY (path, producer_id)
);
